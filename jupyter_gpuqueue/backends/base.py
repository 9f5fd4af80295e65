"""The backend protocol: where admitted work runs (DESIGN.md "Layers": start, stop with a reason,
observe status). The engine never knows which backend runs; the service drives one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional, Protocol, runtime_checkable

SUCCEEDED = "Succeeded"
FAILED = "Failed"


@dataclass
class LaunchSpec:
    """What to run for one admitted workload.

    ``key`` is ``"namespace/name"``; ``argv`` an argument list (never a shell string; ``argv[0]`` is
    looked up on PATH, or relative to ``cwd`` when it contains '/'); ``cwd`` an existing folder;
    ``env`` variables added to a copy of the server's ``os.environ`` (e.g. CUDA_VISIBLE_DEVICES);
    ``log_path`` the file stdout and stderr are appended to (its folder is created).
    """

    uid: str
    key: str
    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    log_path: str = ""
    # Cluster backends (backends/kubernetes.py, kueue.py): {"namespace", "name", "localQueue",
    # "clusterQueue", "priorityClass", "spec" (the workload spec), "admission" (dict or None), "owner"}.
    workload: Optional[dict] = None


@dataclass
class RunInfo:
    """How to find a started run again, also after a server restart (stored in the ledger's ``run``).

    ``pid``/``pgid``: the wrapper process and its process group (= its session); ``start_ticks``:
    its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), which tells a live run
    from an unrelated process that reuses the pid; ``exit_path``: the file the wrapper writes the exit
    code to; ``started_at``: seconds since the epoch.
    """

    pid: int
    pgid: int
    start_ticks: int
    log_path: str
    exit_path: str
    started_at: float

    def to_json(self) -> dict:
        """``{"pid", "pgid", "startTicks", "logPath", "exitPath", "startedAt"}``."""
        d = asdict(self)
        return {
            "pid": d["pid"], "pgid": d["pgid"], "startTicks": d["start_ticks"],
            "logPath": d["log_path"], "exitPath": d["exit_path"], "startedAt": d["started_at"],
        }

    @classmethod
    def from_json(cls, d: dict) -> "RunInfo":
        """Inverse of :meth:`to_json` (snake_case keys are accepted too). Raises ValueError naming
        the missing key."""

        def get(camel: str, snake: str):
            if camel in d:
                return d[camel]
            if snake in d:
                return d[snake]
            raise ValueError(f"run info lacks {camel!r}")

        return cls(
            pid=int(get("pid", "pid")),
            pgid=int(get("pgid", "pgid")),
            start_ticks=int(get("startTicks", "start_ticks")),
            log_path=str(get("logPath", "log_path")),
            exit_path=str(get("exitPath", "exit_path")),
            started_at=float(get("startedAt", "started_at")),
        )


@dataclass
class RunStatus:
    """A finished run: ``state`` "Succeeded" (exit 0) or "Failed"; ``exit_code`` the job's exit code
    (128+N when killed by signal N; None when unknown); ``finished_at`` seconds since the epoch;
    ``message`` a human-readable reason."""

    uid: str
    state: str
    exit_code: Optional[int]
    finished_at: float
    message: str
    # Cluster backends also report non-final observations ("Running", "Waiting", and with Kueue
    # "Admitted", "Evicted", "Pending"; finished_at is then the time observed) with details.
    details: Optional[dict] = None


@runtime_checkable
class Backend(Protocol):
    def start(self, spec: LaunchSpec) -> RunInfo:
        """Start a run. Raises ValidationError(field="command") if argv[0] is not found or not
        executable, (field="workingDir") if ``cwd`` is not a folder."""
        ...

    def stop(self, uid: str, reason: str, grace_seconds: float = 10.0) -> None:
        """Ask a run to stop: SIGTERM now, SIGKILL after ``grace_seconds`` (escalated by poll()).
        Returns at once."""
        ...

    def poll(self) -> list[RunStatus]:
        """Runs that finished since the last poll, each reported once."""
        ...

    def adopt(self, uid: str, info: RunInfo) -> bool:
        """After a server restart: True if the run is still alive and ours (now tracked)."""
        ...

    def finished_status(self, uid: str, info: RunInfo) -> RunStatus:
        """The outcome of a run that is no longer alive (from its exit file, else Failed)."""
        ...

    def running(self) -> list[str]:
        """uids being tracked."""
        ...
