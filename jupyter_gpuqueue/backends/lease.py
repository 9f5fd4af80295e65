"""Notebook GPU leases: admitted work that holds GPUs / MIG slices and runs no process.

A JupyterHub spawner (``jupyter_gpuqueue.hub``) submits a user's notebook server as a Workload of
kind ``NotebookLease``. Once admitted the lease is "Running": its devices and quota are held and it
is billed from admission until it is released (``DELETE``, as a cancel), its maximum run time is
over, or it is preempted. The notebook server itself is started and stopped by the spawner, not by
the queue.

:class:`LeaseBackend` wraps any other backend (``LeaseBackend(LocalBackend())``): a
:class:`~jupyter_gpuqueue.backends.base.LaunchSpec` with an **empty argv** is a lease and is handled
here; everything else is delegated to the inner backend. A lease's
:class:`~jupyter_gpuqueue.backends.base.RunInfo` has ``pid == 0`` and ``exit_path``
"lease:<uid>" (never a real process; the inner backend is never asked about it), so that after a
restart :meth:`LeaseBackend.adopt` takes it back: a lease lives in the ledger, not in a process.

``stop(uid, reason, grace_seconds)`` on a lease does not cut it at once: it is released when
``grace_seconds`` have passed (the service passes the lease preemption grace period for a
preemption, 0 for a release by its owner). A second ``stop`` can bring the release forward, never
push it back. :meth:`poll` reports the release as a finished run (``finished_at`` = the release
time, so usage intervals close exactly then).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from .base import SUCCEEDED, Backend, LaunchSpec, RunInfo, RunStatus

LEASE_KIND = "NotebookLease"
"""The ``kind`` of a SubmitRequest / Workload spec that is a lease (docs/rest-api.md)."""


LEASE_RUN_PREFIX = "lease:"

NOTEBOOK_SERVER_NAME_MAX = 255
"""The longest notebook server name a lease may carry (JupyterHub's own limit for a server name)."""


def parse_notebook_server(value: object) -> Optional[dict]:
    """The ``notebookServer`` of a lease's SubmitRequest, validated: ``{"name": str,
    "goesOnWithoutGpus": bool}`` (None when absent). ``name`` is the JupyterHub server it is for
    ("" the user's default server, else the named server's name: at most 255 characters, no "/"
    and no control characters); ``goesOnWithoutGpus`` whether its spawner can keep the server
    running once the lease ends (a local process spawner: yes; a Kubernetes pod cannot give back
    an extended resource: no; default false). Raises ValidationError naming the field."""
    from ..errors import ValidationError

    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError(f"must be an object {{\"name\", \"goesOnWithoutGpus\"}}, got {type(value).__name__}",
                              "notebookServer")
    unknown = sorted(set(value) - {"name", "goesOnWithoutGpus"})
    if unknown:
        raise ValidationError("unknown field; expected name, goesOnWithoutGpus", f"notebookServer.{unknown[0]}")
    name = value.get("name", "")
    if not isinstance(name, str):
        raise ValidationError(f"must be a string (\"\" for the default server), got {name!r}", "notebookServer.name")
    if len(name) > NOTEBOOK_SERVER_NAME_MAX or "/" in name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ValidationError(f"must be a JupyterHub server name: at most {NOTEBOOK_SERVER_NAME_MAX} characters, "
                              "no '/' or control characters", "notebookServer.name")
    goes_on = value.get("goesOnWithoutGpus", False)
    if not isinstance(goes_on, bool):
        raise ValidationError(f"must be true or false, got {goes_on!r}", "notebookServer.goesOnWithoutGpus")
    return {"name": name, "goesOnWithoutGpus": goes_on}


def is_lease_run(info: RunInfo) -> bool:
    """Whether a stored run is a lease: ``pid == 0`` (no process) and ``exit_path`` "lease:<uid>"
    (other backends use their own markers, e.g. the Kubernetes backend pid -1 and
    "kubernetes:jobs/...")."""
    return info.pid == 0 and info.exit_path.startswith(LEASE_RUN_PREFIX)


@dataclass
class _Lease:
    info: RunInfo
    release_at: Optional[float] = None  # seconds since the epoch; None: held until stopped
    reason: str = ""


class LeaseBackend:
    """A backend wrapper that holds leases itself and delegates every other run to ``inner``.

    ``inner``: any :class:`~jupyter_gpuqueue.backends.base.Backend`. ``clock``: seconds since the
    epoch (injectable for tests). Attributes it does not define are read from ``inner``.
    """

    def __init__(self, inner: Backend, clock: Callable[[], float] = time.time):
        self.inner = inner
        self.clock = clock
        self._leases: dict[str, _Lease] = {}

    def __getattr__(self, name: str):
        # Only called for attributes not found here: the inner backend's extras (e.g. its
        # python_executable) stay reachable through the wrapper.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- the Backend protocol -------------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> RunInfo:
        """A lease (empty ``spec.argv``) is held at once and returns a ``pid == 0`` RunInfo; any
        other spec is started by the inner backend (whose errors pass through)."""
        if spec.argv:
            return self.inner.start(spec)
        info = RunInfo(pid=0, pgid=0, start_ticks=0, log_path="", exit_path=LEASE_RUN_PREFIX + spec.uid,
                       started_at=self.clock())
        self._leases[spec.uid] = _Lease(info)
        return info

    def stop(self, uid: str, reason: str, grace_seconds: float = 10.0) -> None:
        """Release a lease ``grace_seconds`` (≥ 0) from now, or earlier if already due earlier;
        other runs: the inner backend's stop. Returns at once."""
        lease = self._leases.get(uid)
        if lease is None:
            self.inner.stop(uid, reason, grace_seconds)
            return
        at = self.clock() + max(0.0, float(grace_seconds))
        if lease.release_at is None or at < lease.release_at:
            lease.release_at = at
            lease.reason = reason

    def poll(self) -> list[RunStatus]:
        """The inner backend's finished runs plus the leases whose release time has come (state
        Succeeded, exit code None, ``finished_at`` = the release time), each reported once."""
        out = list(self.inner.poll())
        now = self.clock()
        for uid, lease in list(self._leases.items()):
            if lease.release_at is not None and lease.release_at <= now:
                del self._leases[uid]
                out.append(RunStatus(uid, SUCCEEDED, None, lease.release_at,
                                     f"lease released: {lease.reason}" if lease.reason else "lease released"))
        return out

    def adopt(self, uid: str, info: RunInfo) -> bool:
        """A lease is always taken back (it has no process that could have died); other runs are
        the inner backend's."""
        if is_lease_run(info):
            self._leases[uid] = _Lease(info)
            return True
        return self.inner.adopt(uid, info)

    def finished_status(self, uid: str, info: RunInfo) -> RunStatus:
        if is_lease_run(info):
            return RunStatus(uid, SUCCEEDED, None, self.clock(), "lease released")
        return self.inner.finished_status(uid, info)

    def running(self) -> list[str]:
        """uids tracked: the inner backend's runs and the held leases."""
        return list(self.inner.running()) + list(self._leases)

    # -- lease-specific ---------------------------------------------------------------------------

    def release_at(self, uid: str) -> Optional[float]:
        """When a held lease will be released (seconds since the epoch), None if not scheduled
        or not a lease."""
        lease = self._leases.get(uid)
        return lease.release_at if lease else None
