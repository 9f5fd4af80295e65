"""Extending a notebook lease's maximum time, where a hub admin allows it.

With ``c.GpuQueueApp.lease_extension_seconds`` > 0 the owner of a Running ``NotebookLease`` may
extend its maximum time (``maxRuntimeSeconds``) by that many seconds, at most
``c.GpuQueueApp.lease_max_extensions`` times per lease (``POST
workloads/{namespace}/{name}/extend``; JupyterLab offers it in the warning before the maximum
time, labextension/src/leaseWarning.ts). Not while a preemption's warning runs (its deadline is
not moved). The workload view carries ``leaseExtensionSeconds`` and ``leaseExtensionsLeft``
(null where no extension is possible). The extension count is kept in the lease's run (ledger),
so a restart keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..errors import Conflict, Forbidden, ValidationError
from .states import RUNNING, is_lease

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .events import EventHub
    from .live import LiveState


class LeaseExtensions:
    """``seconds``: one extension (0: none allowed); ``max_extensions``: per lease."""

    def __init__(self, live: "LiveState", ledger: "Ledger", events: "EventHub"):
        self.live = live
        self.ledger = ledger
        self.events = events
        self.seconds = 0.0
        self.max_extensions = 0
        self.runtime_caps = None  # the teams' caps (service/runtime_caps.py): no extension past one

    def configure(self, seconds: float, max_extensions: int) -> None:
        """Allow extensions of ``seconds`` (≥ 0; 0 turns them off), ``max_extensions`` (≥ 0) per
        lease. Raises ValidationError naming the setting."""
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise ValidationError(f"must be a number of seconds ≥ 0, got {seconds!r}", "lease_extension_seconds")
        if not isinstance(max_extensions, int) or isinstance(max_extensions, bool) or max_extensions < 0:
            raise ValidationError(f"must be a whole number ≥ 0, got {max_extensions!r}", "lease_max_extensions")
        self.seconds = float(seconds)
        self.max_extensions = max_extensions

    def _left(self, rec: dict) -> int:
        if self._over_cap(rec):
            return 0
        used = int((rec.get("run") or {}).get("extensions") or 0)
        return max(0, self.max_extensions - used)

    def _over_cap(self, rec: dict) -> Optional[int]:
        """The team's cap (seconds) when one more extension would take the lease past it, else None."""
        cap = self.runtime_caps.cap(rec["namespace"]) if self.runtime_caps is not None else None
        limit = (rec.get("spec") or {}).get("maxRuntimeSeconds") or 0
        return cap if cap is not None and limit + self.seconds > cap else None

    def fields(self, rec: dict) -> dict:
        """``leaseExtensionSeconds`` and ``leaseExtensionsLeft`` of a running lease with a maximum
        time where extensions are allowed; both None otherwise."""
        allowed = (self.seconds > 0 and is_lease(rec) and rec.get("state") == RUNNING
                   and (rec.get("spec") or {}).get("maxRuntimeSeconds"))
        if not allowed:
            return {"leaseExtensionSeconds": None, "leaseExtensionsLeft": None}
        return {"leaseExtensionSeconds": self.seconds, "leaseExtensionsLeft": self._left(rec)}

    def extend(self, namespace: str, name: str, *, user: str) -> dict:
        """Extend the lease ``namespace/name`` of ``user`` by :attr:`seconds`; returns its record.
        Raises NotFound (field ``name``), Forbidden (``name``: not the owner), Conflict (``name``:
        not a running lease with a maximum time, extensions not allowed or none left, or a
        preemption's warning runs)."""
        rec = self.live.record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"only {rec['owner']}, its owner, may extend {namespace}/{name}", "name")
        spec = dict(rec.get("spec") or {})
        if not is_lease(rec) or rec.get("state") != RUNNING or not spec.get("maxRuntimeSeconds"):
            raise Conflict(f"{namespace}/{name} is not a running notebook lease with a maximum time", "name")
        if self.seconds <= 0:
            raise Conflict("extending a notebook lease is not allowed here (c.GpuQueueApp.lease_extension_seconds "
                           "is 0): ask a hub admin", "name")
        cap = self._over_cap(rec)
        if cap is not None:
            raise Conflict(f"{namespace}/{name} may run at most {cap} s, the maximum run time an admin set for "
                           f"team {namespace}: an extension would take it past that", "name")
        if self._left(rec) <= 0:
            raise Conflict(f"{namespace}/{name} was extended {self.max_extensions} times already, "
                           "the most allowed", "name")
        run = dict(rec.get("run") or {})
        if run.get("evictionDeadline"):
            raise Conflict(f"{namespace}/{name} is being preempted: its GPU goes to higher-priority work at "
                           "its deadline, which an extension does not move", "name")
        spec["maxRuntimeSeconds"] = int(spec["maxRuntimeSeconds"] + self.seconds)
        run["extensions"] = int(run.get("extensions") or 0) + 1
        self.ledger.update_workload(rec["uid"], spec=spec, run=run)
        rec.update(spec=spec, run=run)
        self.events.emit_workload(rec["uid"])
        return rec
