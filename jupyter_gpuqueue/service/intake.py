"""Intake: accepted submissions made durable, then acknowledged and queued. A row is written to the
ledger before the submission is acknowledged: one commit each (``accept``), or, with the service's
loop running, the ledger's group commit (``accept_grouped``: one transaction and one fsync for every
submission of the moment, all or nothing per request; a generated name that clashes with a finished
workload is drawn again)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Optional

from ..engine.model import Workload
from ..errors import Conflict
from . import names
from .states import PENDING, is_lease

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..ledger import Ledger
    from .costs import Costs
    from .events import EventHub
    from .live import LiveConfig, LiveState
    from .views import Views


class Intake:
    """Persists accepted submissions in the ledger, then tracks and queues them.

    Collaborators: ``conf`` (LiveConfig: clock, Scheduler), ``live`` (LiveState: tracked records,
    names being committed, the group committer), the ``ledger``, the ``backend`` (its server-side
    dry run, Kubernetes), ``costs`` (budget holds), ``events`` and ``views`` (the acknowledgement
    and the workload event), and ``wake`` (the service loop's wake-up)."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 costs: "Costs", events: "EventHub", views: "Views", wake: Callable[[], None]):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.costs = costs
        self.events = events
        self.views = views
        self.wake = wake

    def accept(self, spec: dict, wl: Workload, user: str) -> dict:
        row, hold = self.new_row(spec, wl, user)
        self.ledger.add_workload(row)  # durable before it is acknowledged; Conflict if the name is taken
        self.accepted(row, wl, hold)
        return self.views.view(self.live.records[row["uid"]], cost=0.0)

    def needs_dry_run(self, spec: dict) -> bool:
        """Kubernetes: the API server validates the Job before the submission is acknowledged."""
        return hasattr(self.backend, "dry_run") and spec.get("source") in ("form", "manifest") \
            and not is_lease({"spec": spec})

    def dry_run(self, uid: str, spec: dict, wl: Workload, user: str) -> None:
        """The backend's server-side dry run of the workload's Job (errors as ``dry_run`` raises)."""
        self.backend.dry_run(uid, {"namespace": wl.namespace, "name": wl.name, "localQueue": wl.queue_name,
                                       "priorityClass": wl.priority_class, "spec": spec, "owner": user})

    async def dry_run_all(self, prepared: list[tuple[dict, Workload]], user: str) -> None:
        """The dry runs of a group, off the event loop and side by side (each is a request to the
        API server: the loop serves others meanwhile). Raises the first item's error, in order."""
        loop = asyncio.get_running_loop()
        futures = [loop.run_in_executor(None, self.dry_run, names.new_uid(), spec, wl, user)
                   for spec, wl in prepared if self.needs_dry_run(spec)]
        for result in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    def new_row(self, spec: dict, wl: Workload, user: str, checked: bool = False) -> tuple[dict, Optional[str]]:
        """The ledger row of a new submission (uid and creation time set on ``wl`` too), and the
        budget-hold message if it is held. ``checked``: its dry run was done (``dry_run_all``)."""
        now = self.conf.clock()
        uid = names.new_uid()
        wl.uid = uid
        wl.creation_time = now
        if not checked and self.needs_dry_run(spec):
            self.dry_run(uid, spec, wl, user)
        hold = self.costs.budget_hold_message(wl.namespace, now)  # a hard budget is spent: held (service/costs.py)
        row = {
            "uid": uid,
            "namespace": wl.namespace,
            "name": wl.name,
            "owner": user,
            "local_queue": wl.queue_name,
            "cluster_queue": self.conf.scheduler.cluster_queue_name(wl),
            "priority_class": wl.priority_class,
            "priority": wl.priority,
            "state": PENDING,
            "reason": "BudgetExceeded" if hold else "Pending",
            "message": hold,
            "spec": spec,
            "admission": None,
            "run": None,
            "created_at": now,
            "admitted_at": None,
            "started_at": None,
            "finished_at": None,
            "exit_code": None,
            "evictions": 0,
        }
        return row, hold

    def accepted(self, row: dict, wl: Workload, hold: Optional[str]) -> None:
        """A submission's row is durable: track it and queue it (or hold it)."""
        uid = row["uid"]
        self.live.track(dict(row), wl)
        if hold:
            self.costs.budget_holds[uid] = row["created_at"]
        else:
            self.conf.scheduler.add_workload(wl)
        self.wake()
        self.events.emit_workload(uid)
        self.events.emit_coalesced("queues")

    async def accept_grouped(self, prepared: list[tuple[dict, Workload]], user: str, *,
                              redraw_name: "bool | list[bool]" = False) -> list[dict]:
        """Commit ``prepared`` as one group; on a name clash found by the commit, draw the
        generated names again (``redraw_name``: all, or per item) and retry."""
        redraw = redraw_name if isinstance(redraw_name, list) else [redraw_name] * len(prepared)
        if self.live.committer is None:  # not started (a service used without its loop): one commit each
            return [self.accept(spec, wl, user) for spec, wl in prepared]
        await self.dry_run_all(prepared, user)
        for attempt in range(5):
            made = [(self.new_row(spec, wl, user, checked=True), wl) for spec, wl in prepared]
            keys = [f"{wl.namespace}/{wl.name}" for _, wl in prepared]
            self.live.inflight.update(keys)
            loop = asyncio.get_running_loop()
            done: asyncio.Future = loop.create_future()
            commit = self.live.committer.submit([row for (row, _hold), _wl in made])
            # Runs on the loop once the commit returned, whether or not the request still waits (a
            # client that went away does not keep a committed workload out of the queue).
            commit.add_done_callback(
                lambda f, made=made, keys=keys, done=done: loop.call_soon_threadsafe(self.committed, f, made, keys, done))
            try:
                return await asyncio.shield(done)
            except Conflict as exc:
                # A generated name that a finished workload (in the ledger only) already has:
                # draw another one (a name the user chose is their 409).
                if not any(redraw) or exc.field != "name" or attempt == 4:
                    raise
                for (_spec, wl), again in zip(prepared, redraw):
                    if not again:
                        continue
                    base = wl.name.rsplit("-", 1)[0]
                    wl.name = f"{base}-{names.random_hex(6)}"
        raise AssertionError("unreachable")  # pragma: no cover

    def committed(self, commit, made: list, keys: list[str], done: asyncio.Future) -> None:
        self.live.inflight.difference_update(keys)
        exc = commit.exception()
        if exc is not None:
            if not done.done():
                done.set_exception(exc)
            return
        views = []
        for (row, hold), wl in made:
            self.accepted(row, wl, hold)
            views.append(self.views.view(self.live.records[row["uid"]], cost=0.0))
        if not done.done():
            done.set_result(views)
