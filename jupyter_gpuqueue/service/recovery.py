"""Recovery: live state rebuilt from the ledger at start (QueueService's module docstring, point 4).

Pending work is queued again; admitted work is adopted if its process still runs (finished from its
exit record if it ended, requeued if it was being preempted); a job started just before a crash but
not yet recorded is found and adopted, not started twice; a job cancelled while it still ran keeps
its devices until its process is gone (tests/test_crash.py kills a real server to check these).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..backends.base import RunInfo
from ..engine import serialize
from .live import engine_workload
from .states import ACTIVE_STATES, ADMITTED, CANCELLED, PENDING, RUNNING, is_lease

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..ledger import Ledger
    from .admission import Admission
    from .costs import Costs
    from .live import LiveConfig, LiveState
    from .logs import Logs


class Recovery:
    """Rebuilds the live state from the ledger and the backend.

    Collaborators: ``conf`` (LiveConfig: Scheduler, clock), ``live`` (LiveState: what it rebuilds),
    the ``ledger``, the ``backend`` (adopts, finishes, stops), ``costs`` (budget holds, spot
    stops), ``admission`` (launches, finishes and requeues what it finds), ``logs`` (log paths) and
    ``log``. Setting: ``stop_grace_seconds``."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 costs: "Costs", admission: "Admission", logs: "Logs", log: logging.Logger, *,
                 stop_grace_seconds: float):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.costs = costs
        self.admission = admission
        self.logs = logs
        self.log = log
        self.stop_grace_seconds = stop_grace_seconds

    def restore(self) -> None:
        """Rebuild live state from the ledger (see the module docstring, point 4)."""
        now = self.conf.clock()
        rows = self.ledger.list_workloads(states=ACTIVE_STATES)
        # Admitted work first, so that quota and devices are held before anything pending is placed.
        rows.sort(key=lambda r: (r["state"] == PENDING, r["created_at"]))
        for row in rows:
            uid = row["uid"]
            wl = engine_workload(row)
            if row["state"] == PENDING:
                self.live.track(row, wl)
                if row.get("reason") == "BudgetExceeded":  # held by a hard budget (service/costs.py)
                    self.costs.budget_holds[uid] = row["created_at"]
                elif float((row["spec"].get("requeueState") or {}).get("requeueAt") or 0) > now:
                    # evicted for PodsReadyTimeout: back in the queue when its backoff is over
                    self.live.requeue_at[uid] = float(row["spec"]["requeueState"]["requeueAt"])
                else:
                    self.conf.scheduler.add_workload(wl)
                continue
            wl.admission = serialize.admission_from_dict(row.get("admission"))
            run = row.get("run")
            if row["state"] in (RUNNING, ADMITTED) and run:
                info = RunInfo.from_json(run)
                if self.backend.adopt(uid, info):
                    self.live.track(row, wl)
                    self.conf.scheduler.add_workload(wl)
                    self.log.info("gpuqueue: adopted running job %s (pid %s)", row["name"], info.pid)
                    if is_lease(row) and run.get("evictionDeadline"):
                        # A lease warned before the restart keeps its deadline (evictions are final).
                        self.live.stopping[uid] = "Preempted:" + str(run.get("evictionReason") or "Preempted")
                        self.backend.stop(uid, row.get("message") or "preempted",
                                          max(0.0, float(run["evictionDeadline"]) - self.conf.clock()))
                    elif run.get("evictionReason") and not is_lease(row):
                        # Being preempted when the server stopped: finish the stop (a noticed spot
                        # job at its evictionDeadline, see service/costs.py); it is requeued once its
                        # process is gone (_finish).
                        self.live.stopping[uid] = "Preempted:" + str(run["evictionReason"])
                        if run.get("evictionDeadline"):
                            self.costs.costs_state()["spot_stops"][uid] = (
                                float(run["evictionDeadline"]), row.get("message") or "preempted")
                        else:
                            getattr(self.backend, "suspend", self.backend.stop)(
                                uid, row.get("message") or "preempted", self.stop_grace_seconds)
                elif run.get("evictionReason") and not is_lease(row):
                    # Preempted, and its process ended while the server was down: back to the queue.
                    st = self.backend.finished_status(uid, info)
                    self.live.track(row, wl)
                    self.conf.scheduler.add_workload(wl)
                    self.admission.requeue_evicted(uid, st.finished_at or now, str(run["evictionReason"]),
                                          row.get("message") or "preempted")
                else:
                    st = self.backend.finished_status(uid, info)
                    self.live.track(row, wl)
                    self.admission.finish(uid, st.state, st.exit_code, st.finished_at or now, st.message, in_scheduler=False)
                continue
            # Admitted, but no run on record: the server stopped before starting it (the decision
            # is on record, so apply it now), or died between starting it and recording the run
            # (then the job runs, or ran, already: take that run instead of starting a second one).
            self.live.track(row, wl)
            self.conf.scheduler.add_workload(wl)
            if not self.recover_unrecorded_start(uid, now):
                self.admission.launch(uid)
        self.restore_cancelled_still_stopping(now)
        self.live.dirty = True

    def recover_unrecorded_start(self, uid: str, now: float) -> bool:
        """restore(): an Admitted workload without a run on record whose job was started all the
        same (the server was killed between ``backend.start`` and the ledger write of ``_launch``)
        is adopted, or finished from its exit record, and True is returned; False when the
        backend knows of no such run (or cannot tell: backends without ``find_started``).
        Starting it again would run the job twice on the same devices. Found by
        tests/test_crash.py."""
        rec = self.live.records[uid]
        find = getattr(self.backend, "find_started", None)
        if find is None or is_lease(rec):
            return False
        info = find(uid, self.logs.log_path(rec))
        if info is None:
            return False
        started_at = info.started_at or rec.get("admitted_at") or now  # 0.0: it ended, start unknown
        self.ledger.update_workload(uid, state=RUNNING, run=info.to_json(), started_at=started_at)
        rec.update(state=RUNNING, run=info.to_json(), started_at=started_at)
        if self.backend.adopt(uid, info):
            self.log.info("gpuqueue: adopted job %s (pid %s), started before the restart but not recorded",
                          rec["name"], info.pid)
        else:
            st = self.backend.finished_status(uid, info)
            self.admission.finish(uid, st.state, st.exit_code, st.finished_at or now, st.message)
        return True

    def restore_cancelled_still_stopping(self, now: float) -> None:
        """restore(): a job cancelled while it ran is Cancelled in the ledger at once, but its
        process gets ``stop_grace_seconds`` after SIGTERM (and may ignore SIGTERM). If the server
        stopped in that window the process may still run: it keeps its devices and quota until it
        is gone (as it would have without the restart), and the stop is finished (SIGKILL once
        the rest of the grace period is over). Without this its devices would be handed to
        another workload while it still used them. Found by tests/test_crash.py. Local processes
        only (a cluster backend deletes a cancelled Job; its quota is not held meanwhile)."""
        if not getattr(self.backend, "local_commands", True):
            return
        for row in self.ledger.list_workloads(states=[CANCELLED]):
            run, uid = row.get("run"), row["uid"]
            if not run or not row.get("admission") or is_lease(row) or uid in self.live.records:
                continue
            info = RunInfo.from_json(run)
            if not self.backend.adopt(uid, info):
                continue  # its process has ended: nothing is held
            wl = engine_workload(row)
            wl.admission = serialize.admission_from_dict(row["admission"])
            self.live.track(row, wl)
            self.conf.scheduler.add_workload(wl)
            self.live.stopping[uid] = "Cancelled"
            grace = max(0.0, float(row.get("finished_at") or now) + self.stop_grace_seconds - now)
            self.backend.stop(uid, row.get("message") or "cancelled", grace)
            self.log.info("gpuqueue: cancelled job %s still runs after the restart: stopping it", row["name"])
