"""The truth about devices: which live processes of a test's jobs hold which GPU or MIG device.

Every other "no device twice" check reads the queue's view (the ledger, the API, the inventory).
This one reads the processes: each live process whose environment (``/proc/<pid>/environ``) has
``GPUQUEUE_WORKLOAD_UID`` and matches the test's filter, with the devices of its
``CUDA_VISIBLE_DEVICES`` (and of any ``GPUQUEUE_*DEVICES`` variable the job environment may carry):
identifiers split on commas and compared as strings, so indices ("0,1"), GPU UUIDs ("GPU-…") and
MIG UUIDs ("MIG-…") all work. A workload's run is its process session (the local backend starts
each job's wrapper with ``start_new_session``; the job's processes stay in it).

The invariant (:func:`conflicts`): no device is held by live processes of two different runs at
once (two workloads, or one workload running twice). A preemptor started while its victim's
process still runs on the device is such a conflict, for as long as both live.

- :func:`job_processes` / :func:`check`: one look, now (an AssertionError naming both holders).
- :class:`DeviceWatch`: a background thread that looks every ``interval`` seconds for the whole
  test, so that an overlap between two checks (a preemptor starting while the victim stops) is
  seen too (a look costs about 4 ms of CPU with 200 processes on the machine: every 50 ms by
  default); :meth:`DeviceWatch.check` raises the first conflict seen so far, :meth:`DeviceWatch.stop`
  at the end. ``looks`` and ``processes_seen`` say that it looked at something.

A conflict is reported only when confirmed: after the look that found it, every process involved
is read again and still alive with the same start time (a scan of /proc is not atomic; a victim
read alive just before it died and a preemptor read just after it started are not both alive).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Union

Match = Union[Mapping[str, str], Callable[[dict], bool], None]


@dataclass(frozen=True)
class JobProcess:
    pid: int
    start_ticks: int
    session: int
    uid: str  # GPUQUEUE_WORKLOAD_UID
    name: str  # GPUQUEUE_NAMESPACE/GPUQUEUE_WORKLOAD_NAME
    devices: frozenset  # device identifiers (strings)

    @property
    def run(self) -> tuple[str, int]:
        """The run this process belongs to: (workload uid, session)."""
        return self.uid, self.session


def _stat(pid: int) -> Optional[tuple[str, int, int]]:
    """(state, session, start ticks) of a live process; None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    state = fields[0].decode()
    if state in ("Z", "X"):
        return None
    return state, int(fields[3]), int(fields[19])


def _environ(pid: int) -> Optional[dict]:
    """The process's environment, or None when it is gone or not a job's (no
    ``GPUQUEUE_WORKLOAD_UID``: told from the raw bytes, without parsing the environment of every
    process on the machine at every look: Chromium's and node's are large)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if b"GPUQUEUE_WORKLOAD_UID=" not in raw:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def device_ids(env: Mapping[str, str]) -> frozenset:
    """The devices a job's environment names: ``CUDA_VISIBLE_DEVICES`` and any ``GPUQUEUE_*DEVICES``
    variable, split on commas, blanks and "void"/"none" dropped."""
    out = set()
    for k, v in env.items():
        if k == "CUDA_VISIBLE_DEVICES" or (k.startswith("GPUQUEUE_") and k.endswith("DEVICES")):
            out.update(d.strip() for d in v.split(","))
    return frozenset(d for d in out if d and d.lower() not in ("void", "none", "nodevfiles"))


def _matches(env: dict, match: Match) -> bool:
    if match is None:
        return True
    if callable(match):
        return bool(match(env))
    return all(env.get(k) == v for k, v in match.items())


def job_processes(match: Match = None) -> list[JobProcess]:
    """Live (not zombie) processes of jobs: those whose environment has ``GPUQUEUE_WORKLOAD_UID``
    and matches ``match`` (a mapping of variables that must have these values, or a predicate on
    the environment; None: all). Processes this user cannot read are skipped."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        env = _environ(pid)
        if not env or "GPUQUEUE_WORKLOAD_UID" not in env or not _matches(env, match):
            continue
        st = _stat(pid)
        if st is None:
            continue
        found.append(JobProcess(pid, st[2], st[1], env["GPUQUEUE_WORKLOAD_UID"],
                                f"{env.get('GPUQUEUE_NAMESPACE', '?')}/{env.get('GPUQUEUE_WORKLOAD_NAME', '?')}",
                                device_ids(env)))
    return found


def _still_alive(p: JobProcess) -> bool:
    st = _stat(p.pid)
    return st is not None and st[2] == p.start_ticks


def conflicts(procs: Iterable[JobProcess]) -> list[str]:
    """Devices held by live processes of two different runs, confirmed (every process involved
    re-read alive, with its start time, after the look). One line per conflict."""
    holder: dict[str, JobProcess] = {}
    found: list[tuple[str, JobProcess, JobProcess]] = []
    for p in sorted(procs, key=lambda p: p.start_ticks):
        for d in sorted(p.devices):
            h = holder.setdefault(d, p)
            if h.run != p.run:
                found.append((d, h, p))
    out = []
    for d, a, b in found:
        if _still_alive(a) and _still_alive(b):
            what = "ran twice at once" if a.uid == b.uid else "held by two workloads at once"
            out.append(f"device {d} {what}: {a.name} (pid {a.pid}, uid {a.uid}) and "
                       f"{b.name} (pid {b.pid}, uid {b.uid}, started later)")
    return out


def check(match: Match = None, where: str = "") -> list[JobProcess]:
    """One look: AssertionError naming the holders if a device is held by two runs; returns the
    processes seen."""
    procs = job_processes(match)
    bad = conflicts(procs)
    assert not bad, f"{where}: " + "; ".join(bad)
    return procs


class DeviceWatch:
    """Looks at the test's job processes every ``interval`` seconds in a thread (see the module
    docstring). Use as a context manager, or :meth:`start` / :meth:`stop`."""

    def __init__(self, match: Match = None, interval: float = 0.05):
        self.match = match
        self.interval = interval
        self.violations: list[str] = []
        self.looks = 0
        self.processes_seen = 0
        self.runs_seen: set = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def start(self) -> "DeviceWatch":
        self._thread = threading.Thread(target=self._run, name="device-watch", daemon=True)
        self._thread.start()
        return self

    def look(self) -> None:
        """One look now (also from the test's thread: a job too short for the thread's looks at a
        high load is seen by a look the test makes while it knows the job runs)."""
        with self._lock:
            procs = job_processes(self.match)
            bad = conflicts(procs)
            self.looks += 1
            self.processes_seen += len(procs)
            self.runs_seen.update(p.run for p in procs)
            for line in bad:
                if line not in self.violations:
                    self.violations.append(line)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.look()
                self._stop.wait(self.interval)
        except BaseException as exc:  # noqa: BLE001 - re-raised by check()
            self._error = exc

    def check(self, where: str = "") -> None:
        """AssertionError with the conflicts seen so far (none: returns)."""
        if self._error is not None:
            raise self._error
        assert not self.violations, f"{where}: " + "; ".join(self.violations)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "the device watch did not stop"
        self.check("device watch")

    def __enter__(self) -> "DeviceWatch":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if exc_type is None:
            self.stop()


def wait_gone(pids: Iterable[int], timeout: float = 60.0) -> None:
    """Wait until none of ``pids`` is alive (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    pids = list(pids)
    while any(_stat(p) is not None for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} still alive after {timeout} s"
        time.sleep(0.05)
