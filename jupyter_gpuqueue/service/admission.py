"""Admission: a scheduling cycle's decisions applied to live work (Kueue's scheduler and workload
controller). Admit (recorded in the ledger, then started), launch, preempt (stop, then requeue once
the process is gone), requeue, finish, the maximum execution time, and cancel; with Kueue
delegation, Kueue's own decisions mirrored (``observe``).

A decision is persisted before it is applied: admissions of a tick are written in one transaction
before any job starts (``apply_admissions``); an eviction is recorded before the job is stopped.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Callable, Optional

from ..backends.base import LaunchSpec
from ..engine import serialize
from ..engine.model import Workload
from ..engine.preemption import HUMAN_REASONS
from ..errors import Forbidden, GpuQueueError
from ..ledger.failpoints import failpoint
from .devices import device_environment
from .states import ADMITTED, CANCELLED, FAILED, FINISHED_STATES, PENDING, RUNNING, SUCCEEDED, is_lease

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..ledger import Ledger
    from .billing import Billing
    from .costs import Costs
    from .events import EventHub
    from .live import LiveConfig, LiveState
    from .logs import Logs
    from .views import Views


LEASE_TIME_REACHED = "MaxRuntimeReached"
"""The ``reason`` of a notebook lease that ended at its maximum time (state Succeeded)."""


def lease_max_end(rec: dict) -> Optional[float]:
    """When a running notebook lease reaches its maximum time (seconds since the epoch):
    ``started_at`` + ``spec.maxRuntimeSeconds``; None for other work or without either."""
    if not is_lease(rec):
        return None
    limit = (rec.get("spec") or {}).get("maxRuntimeSeconds")
    started = rec.get("started_at")
    return float(started) + float(limit) if limit and started else None


def format_seconds(seconds) -> str:
    """``240`` → "4 min", ``90`` → "1 min 30 s", ``7200`` → "2 h"."""
    s = int(round(float(seconds or 0)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{h} h" if h else "", f"{m} min" if m else "", f"{sec} s" if sec else ""]
    return " ".join(p for p in parts if p) or "0 s"


class Admission:
    """Applies scheduling decisions to the live state.

    Collaborators: ``conf`` (LiveConfig: Scheduler, prices, clock), ``live`` (LiveState: records,
    engine Workloads, what is being stopped, Kueue's positions, the loop's flags), the ``ledger``,
    the ``backend`` (starts, stops, suspends), ``billing`` (usage intervals), ``costs`` (spot
    notices and environment, budget holds), ``events``, ``views`` (a cancelled workload's view),
    ``logs`` (log paths) and ``wake`` (the loop's wake-up). Settings: ``delegated`` (Kueue admits),
    ``stop_grace_seconds`` and ``lease_preemption_grace_seconds``.

    A little over 400 lines: admit, launch, preempt, requeue, finish, the run-time limit, cancel and
    Kueue's decisions mirrored are the steps of one workload's life, each recorded before it is
    applied and each handing the workload to the next; split, every piece would need the same ten
    collaborators and the others' steps."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 billing: "Billing", costs: "Costs", events: "EventHub", views: "Views", logs: "Logs",
                 wake: Callable[[], None], *, delegated: bool, stop_grace_seconds: float,
                 lease_preemption_grace_seconds: float):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.billing = billing
        self.costs = costs
        self.events = events
        self.views = views
        self.logs = logs
        self.wake = wake
        self.delegated = delegated
        self.stop_grace_seconds = stop_grace_seconds
        self.lease_preemption_grace_seconds = lease_preemption_grace_seconds
        self._to_launch: list[str] = []  # admitted, to be started (launch_some)
        self._launch_scheduled = False
        self._reasons_to_write: dict[str, None] = {}  # uids whose new pending reason is not written yet
        self._reasons_written_at = 0.0

    # Seconds of scheduling cycles per tick before the loop serves others again (see _schedule):
    # a cycle costs 20-60 µs; 5 ms slices left position queries' p99 at 78 ms under 100 panels,
    # 1 ms brought it under 50 ms, with the same makespan (BENCHMARKS.md, "The live service").
    schedule_slice_seconds = 0.001

    # Seconds between writes of pending workloads' new reasons to the ledger (see _write_reasons).
    reason_write_interval = 1.0

    # Jobs started per event-loop turn (see _launch_some).
    launch_chunk = 1

    # Called with (record, engine Workload or None) when a workload ends (QueueService wires the
    # start-time estimates' run-time history here).
    on_finished = None

    def schedule(self, now: float) -> None:
        if self.delegated:
            return self.schedule_delegated(now)
        # O(what changed) per tick, not O(pending) (BENCHMARKS.md, "The live service"): a cycle
        # gives new reasons only to the heads it considered (CycleResult.requeued), so only those
        # are compared; the positions of the others shift, which one coalesced "queues" event
        # says (clients read positions on demand: GET workloads/…, GET queues).
        #
        # Cycles run for at most schedule_slice_seconds per tick: when quota is released the
        # parked heads come back and are walked cycle by cycle (Kueue's requeue), and a long walk
        # would hold the event loop (requests, events) for its whole length. What is left runs in
        # the next tick, after the loop has served what waits; the cycles and their order are the
        # same, only what arrives meanwhile (a submission, a job's end) enters between them, as
        # it does between Kueue's cycles.
        considered: dict[str, None] = {}
        admitted: list[Workload] = []
        changed = False
        # (Only in the service's own loop: a tick() called directly schedules to the end.)
        deadline = time.perf_counter() + self.schedule_slice_seconds if self.live.slicing else math.inf
        for _ in range(10_000):
            if changed and time.perf_counter() > deadline:
                self.wake()  # not done: go on in the next tick
                break
            result = self.conf.scheduler.schedule(now)
            if result.heads == 0 or not result.changed:
                break
            changed = True
            if result.preempted and admitted:
                self.apply_admissions(admitted, now)  # victims may be among them: apply them first
                admitted = []
            for p in result.preempted:
                self.preempt(p, now)
            admitted.extend(result.admitted)
            considered.update(dict.fromkeys(result.requeued))
        self.apply_admissions(admitted, now)
        updates = []
        for key in considered:
            uid = self.live.by_key.get(key)
            rec = self.live.records.get(uid) if uid is not None else None
            if rec is None or rec["state"] != PENDING:
                continue
            reason, message = self.conf.scheduler.reason(key) or ("Pending", "")
            if (rec.get("reason"), rec.get("message")) != (reason, message):
                rec["reason"], rec["message"] = reason, message
                updates.append(uid)
        for uid in updates:
            self._reasons_to_write[uid] = None
            self.events.emit_workload(uid)
        if changed:
            self.events.emit_coalesced("queues")
            self.events.emit_coalesced("inventory")

    def write_reasons(self, now: float) -> None:
        """Write the reasons that scheduling cycles gave pending workloads since the last call, in
        one statement. A pending reason is derived state (the view reads the live one, and a
        restart recomputes it), so it is written at most every ``reason_write_interval`` seconds
        rather than with its own commit (one fsync) in every tick: under a burst of submissions
        every new workload gets one as it becomes a head."""
        items = []
        for uid in self._reasons_to_write:
            rec = self.live.records.get(uid)
            if rec is not None and rec["state"] == PENDING:  # admitted meanwhile: its row is newer
                items.append((uid, rec.get("reason"), rec.get("message")))
        self._reasons_to_write = {}
        self._reasons_written_at = now
        if items:
            self.ledger.set_reasons(items)

    def apply_admissions(self, admitted: list[Workload], now: float) -> None:
        """Apply the admissions of this tick's cycles: all recorded in one transaction (a decision
        is persisted before it is applied), then all started, their runs recorded in one more."""
        if not admitted:
            return
        uids = [self.live.by_key[wl.key] for wl in admitted]
        with self.events.batch():
            self.admit_many(list(zip(uids, admitted)), now)
        self._to_launch.extend(uids)
        if self.live.slicing and not self._launch_scheduled:
            # In the service's loop: started from the next loop turn on, after the tick has let go.
            self._launch_scheduled = True
            asyncio.get_running_loop().call_soon(self.launch_some)
        elif not self.live.slicing:
            self.launch_some()

    def launch_some(self) -> None:
        """Start admitted jobs, ``launch_chunk`` per loop turn in the service's loop (all at once
        otherwise), their runs recorded in one transaction per turn. Starting a local job costs a
        fork and exec (≈ 2-3 ms here): a tick that admits 30 jobs would otherwise hold the loop
        for 100 ms. A job that left Admitted meanwhile (cancelled, preempted) is skipped; one not
        started when the server dies is started at restart (restore)."""
        if self._launch_scheduled and not self.live.started:
            return  # stopped meanwhile: the rest is Admitted in the ledger, started at the next start
        chunk = self.launch_chunk if self.live.slicing or self._launch_scheduled else len(self._to_launch)
        if getattr(self.backend, "starts_async", False):
            chunk = len(self._to_launch)  # a start only hands the Job to a worker: all of them, one commit
        self._launch_scheduled = False
        batch, self._to_launch = self._to_launch[:chunk], self._to_launch[chunk:]
        with self.events.batch():
            for uid in batch:
                rec = self.live.records.get(uid)
                if rec is not None and rec["state"] == ADMITTED and not rec.get("run"):
                    self.launch(uid)
        if self._to_launch:
            self._launch_scheduled = True
            asyncio.get_running_loop().call_soon(self.launch_some)

    def admit_many(self, items: list[tuple[str, Workload]], now: float) -> None:
        """:meth:`_admit` (without starting) for every ``(uid, Workload)`` of a tick, written to
        the ledger in two statements (Ledger.admit_workloads) instead of two per workload."""
        admissions, intervals, opened = [], [], []
        for uid, wl in items:
            rec = self.live.records[uid]
            admission = serialize.admission_to_dict(wl.admission)
            admissions.append({"uid": uid, "admission": admission, "admitted_at": now,
                               "cluster_queue": wl.admission.cluster_queue})
            first = uid in self.billing._billing or not rec.get("evictions")  # every interval of it seen here
            rates = []
            for flavor, resource, qty in self.billing.billable(wl):  # GPUs / MIG slices held (service/costs.py)
                gpu_eq = self.conf.prices.gpu_equivalent(resource, qty)
                if gpu_eq <= 0:
                    continue
                rate = self.conf.prices.usd_per_hour(flavor, resource, qty)
                intervals.append({"workload_uid": uid, "flavor": flavor, "resource": resource, "quantity": qty,
                                  "gpu_equivalent": gpu_eq, "usd_per_hour": rate, "start": now})
                rates.append(rate)
            opened.append((uid, rec, admission, wl, first, rates))
        failpoint("admit", "before")  # crash tests (ledger/failpoints.py)
        self.ledger.admit_workloads(admissions, intervals)
        failpoint("admit", "after")
        for uid, rec, admission, wl, first, rates in opened:
            self.billing.billing_opened(uid, now, rates, first)
            rec.update(state=ADMITTED, admission=admission, admitted_at=now,
                       cluster_queue=wl.admission.cluster_queue, reason=None, message=None)

    def admit(self, uid: str, wl: Workload, now: float, launch: bool = True) -> None:
        self.admit_many([(uid, wl)], now)
        if launch:
            self.launch(uid)

    def launch(self, uid: str) -> None:
        rec = self.live.records[uid]
        wl = self.live.engine_workloads[uid]
        spec = rec["spec"]
        env = dict(spec.get("env") or {})
        env.update(
            {
                # GPU / MIG UUIDs where NVML found the GPUs, else indices in PCI bus order
                # (service/devices.py): the device the job sees is the one it is billed for.
                **device_environment(wl.admission.placements, self.costs.inventory),
                "GPUQUEUE_WORKLOAD_NAME": rec["name"],
                "GPUQUEUE_NAMESPACE": rec["namespace"],
                "GPUQUEUE_WORKLOAD_UID": uid,
                "GPUQUEUE_LOCAL_QUEUE": rec["local_queue"],
                "GPUQUEUE_CLUSTER_QUEUE": wl.admission.cluster_queue,
                "GPUQUEUE_FLAVOR": ",".join(sorted({f for p in wl.admission.pod_set_assignments for f in p.flavors.values()})),
                "GPUQUEUE_MAX_RUNTIME_SECONDS": str(spec.get("maxRuntimeSeconds") or ""),
                **self.costs.spot_env(rec),  # GPUQUEUE_SPOT, GPUQUEUE_PREEMPTION_* (service/costs.py)
            }
        )
        log_path = self.logs.log_path(rec)
        launch = LaunchSpec(uid=uid, key=f"{rec['namespace']}/{rec['name']}", argv=list(spec["command"]),
                            cwd=spec["workingDir"], env=env, log_path=log_path, workload=self.cluster_context(rec))
        now = self.conf.clock()
        try:
            info = self.backend.start(launch)
        except GpuQueueError as exc:
            self.finish(uid, FAILED, None, now, f"could not start: {exc.message}")
            return
        except OSError as exc:
            self.finish(uid, FAILED, None, now, f"could not start: {exc}")
            return
        # A cluster backend reports Running itself once a Pod runs (see _observe).
        started_at = None if getattr(self.backend, "reports_running", False) and not is_lease(rec) else info.started_at
        if is_lease(rec) and started_at is not None and rec.get("admitted_at"):
            # A lease's time starts at its admission, when its billing does: its maximum time
            # (startedAt + maxRuntimeSeconds) is then the most it is billed for.
            started_at = min(float(started_at), float(rec["admitted_at"]))
        state = RUNNING if started_at is not None else ADMITTED
        if getattr(self.backend, "starts_async", False) and not is_lease(rec):
            # The backend starts it in a worker (Kubernetes: start_concurrency); the run is on
            # record once it reports Started (observe), so that a restart before that starts it
            # again (idempotently) instead of looking for a Job that was never created.
            self.ledger.update_workload(uid, state=state, started_at=started_at)
        else:
            self.ledger.update_workload(uid, state=state, run=info.to_json(), started_at=started_at)
        rec.update(state=state, run=info.to_json(), started_at=started_at)
        self.events.emit_workload(uid)

    def preempt(self, p, now: float) -> None:
        """A victim was chosen: stop its process; it goes back to the queue once it is gone
        (``_requeue_evicted``), and only then are its quota and devices released."""
        uid = self.live.by_key.get(p.victim)
        if uid is None:
            return
        rec = self.live.records[uid]
        if rec["state"] in FINISHED_STATES:
            # Cancelled while running and still stopping: its end frees the quota (finish); it is
            # never requeued (an acknowledged cancel stays one).
            return
        preemptor = self.live.records.get(self.live.by_key.get(p.preemptor, ""), {})
        message = (f"Preempted to accommodate {p.preemptor} (UID: {preemptor.get('uid', '?')}) due to "
                   f"{HUMAN_REASONS.get(p.reason, p.reason)}")
        rec["message"] = message
        self.ledger.update_workload(uid, message=message)
        if rec["state"] == RUNNING and uid in self.backend.running() and is_lease(rec):
            # A notebook lease is warned, not cut: it keeps its quota and devices until its
            # evictionDeadline (persisted in its run, so a restart keeps the same deadline).
            run = dict(rec.get("run") or {})
            deadline = run.get("evictionDeadline") or now + self.lease_preemption_grace_seconds
            end = lease_max_end(rec)
            if end is not None:
                deadline = min(deadline, max(now, end))  # never held (nor billed) past its maximum time
            run["evictionDeadline"] = deadline
            run.setdefault("evictionReason", p.reason)
            run.setdefault("evictedBy", p.preemptor)
            self.ledger.update_workload(uid, run=run)
            rec["run"] = run
            self.live.stopping[uid] = "Preempted:" + p.reason
            self.backend.stop(uid, message, max(0.0, deadline - self.conf.clock()))  # released at the deadline
        elif rec["state"] == RUNNING and self.costs.spot_notice(uid, p.reason, message, now):
            # a spot job is told first (notice file + SIGUSR1); SIGTERM follows (service/costs.py)
            rec["run"] = {**(rec.get("run") or {}), "evictedBy": p.preemptor}
        elif rec["state"] in (ADMITTED, RUNNING) and uid in self.backend.running():
            # The eviction is recorded before the job is stopped: a server killed before it saw
            # the job end requeues it at restart (restore) instead of marking it Failed.
            run = {**(rec.get("run") or {}), "evictionReason": p.reason, "evictedBy": p.preemptor}
            failpoint("preempt", "before")
            self.ledger.update_workload(uid, run=run)
            failpoint("preempt", "after")
            rec["run"] = run
            self.live.stopping[uid] = "Preempted:" + p.reason
            # Kubernetes suspends the Job (as Kueue does); the local backend stops the process.
            getattr(self.backend, "suspend", self.backend.stop)(uid, message, self.stop_grace_seconds)
        else:
            self.requeue_evicted(uid, now, p.reason, message, by=p.preemptor)
        self.events.emit_workload(uid)

    # Preemptions kept in a workload's record (spec["preemptions"]), the most recent.
    preemptions_kept = 20

    def requeue_evicted(self, uid: str, when: float, reason: str, message: str, *, by: Optional[str] = None,
                        wl_reason: str = "Preempted", requeue_at: Optional[float] = None,
                        requeue_state: Optional[dict] = None) -> None:
        """A preempted workload has stopped: close its usage, release its quota, queue it again.
        The preemption is kept in its record (``spec["preemptions"]``: at, by (the preemptor's
        key, None when unknown), reason (Kueue's), lostCostUsd (USD of all its runs so far, every
        one of them lost), message), for the view's ``preemptions`` and the job's timeline.
        ``wl_reason``: the workload's reason from now on (Kueue's Evicted reason); with
        ``requeue_at`` (seconds since the epoch) it waits out of the queue until then (Kueue's
        ``requeuingStrategy`` backoff, ``requeue_state`` = ``{"count", "requeueAt"}`` kept in its
        spec as Kueue keeps ``status.requeueState``)."""
        rec = self.live.records[uid]
        key = f"{rec['namespace']}/{rec['name']}"
        evictions = int(rec.get("evictions") or 0) + 1
        by = by or (rec.get("run") or {}).get("evictedBy")
        lost = self.billing.cost_usd(rec, when)
        spec = dict(rec["spec"])
        spec["preemptions"] = list(spec.get("preemptions") or [])[-(self.preemptions_kept - 1):] + [
            {"at": when, "by": by, "reason": reason, "lostCostUsd": round(lost, 6), "message": message}]
        if requeue_state is not None:
            spec["requeueState"] = dict(requeue_state)
        failpoint("requeue", "before")
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, when)
            self.billing.billing_closed(uid, when)
            self.ledger.update_workload(uid, state=PENDING, admission=None, run=None, admitted_at=None,
                                        started_at=None, evictions=evictions, reason=wl_reason,
                                        message=message, spec=spec)
        failpoint("requeue", "after")
        rec.update(state=PENDING, admission=None, run=None, admitted_at=None, started_at=None,
                   evictions=evictions, reason=wl_reason, message=message, spec=spec)
        if key in self.conf.scheduler.admitted:
            # requeuingStrategy.timestamp Eviction (Kueue's default) for a PodsReady timeout.
            self.conf.scheduler.evict(key, when, reset_order=requeue_at is not None)
        if requeue_at is not None:
            self.conf.scheduler.remove_workload(key)  # back in the queue at requeue_at (requeue_due)
            self.live.requeue_at[uid] = requeue_at
        self.live.dirty = True
        self.events.emit_workload(uid)
        self.events.emit_coalesced("queues")  # one per moment, however many jobs end or are evicted
        self.events.emit_coalesced("inventory")

    def evicted_by_timeout(self, uid: str, at: float, now: float, reason: str, message: str) -> None:
        """Kueue's ``waitForPodsReady.requeuingStrategy``: the n-th eviction for ``PodsReadyTimeout``
        requeues the workload ``backoff_base * 2**(n-1)`` seconds later (at most ``backoff_max``);
        past ``backoff_limit`` evictions it ends Failed, reason ``RequeuingLimitExceeded``
        (Kueue deactivates it), and its Job is deleted. The settings are the backend's
        ``requeuing_strategy()`` (``{"backoffBaseSeconds", "backoffMaxSeconds",
        "backoffLimitCount"}``; None: requeued at once, without limit). Billing ended at ``at``."""
        rec = self.live.records[uid]
        strategy = getattr(self.backend, "requeuing_strategy", lambda: None)() or {}
        count = int((rec["spec"].get("requeueState") or {}).get("count") or 0) + 1
        limit = strategy.get("backoffLimitCount")
        if limit is not None and count > int(limit):
            msg = (f"evicted {count} times for {reason}, more than requeuingStrategy.backoffLimitCount "
                   f"({limit}): {message}")
            self.live.stopping.pop(uid, None)
            self.finish(uid, FAILED, None, at, msg)
            self.ledger.update_workload(uid, reason="RequeuingLimitExceeded")
            discard = getattr(self.backend, "discard", None)
            if discard is not None:
                discard(uid, rec["namespace"], rec["name"])
            return
        base = float(strategy.get("backoffBaseSeconds") or 0.0)
        delay = min(float(strategy.get("backoffMaxSeconds") or 3600.0), base * 2 ** (count - 1)) if base else 0.0
        requeue_at = now + delay
        note = f" (requeued at {time.strftime('%H:%M:%S', time.localtime(requeue_at))}, backoff {delay:.0f} s)" \
            if delay else ""
        self.requeue_evicted(uid, at, reason, message + note, wl_reason=reason,
                             requeue_at=requeue_at if delay else None,
                             requeue_state={"count": count, "requeueAt": requeue_at})

    def requeue_due(self, now: float) -> None:
        """Workloads whose requeuing backoff is over go back into their queue."""
        for uid, at in list(self.live.requeue_at.items()):
            if at > now:
                continue
            del self.live.requeue_at[uid]
            rec, wl = self.live.records.get(uid), self.live.engine_workloads.get(uid)
            if rec is None or wl is None or rec["state"] != PENDING or wl.key in self.conf.scheduler.workloads:
                continue
            self.conf.scheduler.add_workload(wl)
            self.live.dirty = True
            self.events.emit_workload(uid)

    def cluster_context(self, rec: dict) -> dict:
        """What a cluster backend needs to build the workload's Job (LaunchSpec.workload)."""
        return {"namespace": rec["namespace"], "name": rec["name"], "localQueue": rec["local_queue"],
                "clusterQueue": rec.get("cluster_queue"), "priorityClass": rec.get("priority_class"),
                "spec": rec["spec"], "admission": rec.get("admission"), "owner": rec.get("owner")}

    def schedule_delegated(self, now: float) -> None:
        """Kueue admits: every pending workload gets its (suspended, queue-labelled) Job now."""
        for uid, rec in list(self.live.records.items()):
            if rec["state"] != PENDING or uid in self.backend.running():
                continue
            launch = LaunchSpec(uid=uid, key=f"{rec['namespace']}/{rec['name']}", argv=list(rec["spec"]["command"]),
                                cwd=rec["spec"]["workingDir"], workload=self.cluster_context(rec))
            try:
                info = self.backend.start(launch)
            except GpuQueueError as exc:
                self.finish(uid, FAILED, None, now, f"could not create the Job: {exc.message}")
                continue
            self.ledger.update_workload(uid, run=info.to_json())
            rec["run"] = info.to_json()

    def observe(self, st, now: float) -> None:
        """A non-final report of a cluster backend: ``Running`` (a Pod runs), ``Waiting`` (a Pod
        cannot start: message), and from Kueue ``Admitted`` (details: admission, billed from
        Kueue's admission time), ``Evicted`` (requeued), ``Pending`` (reason, message, positions)."""
        uid, rec = st.uid, self.live.records[st.uid]
        d = st.details or {}
        at = st.finished_at or now
        if st.state == "Admitted" and rec["state"] == PENDING:
            wl = self.live.engine_workloads[uid]
            key = wl.key
            self.conf.scheduler.remove_workload(key)
            wl.admission = serialize.admission_from_dict(d["admission"])
            self.conf.scheduler.add_workload(wl)  # the engine mirrors Kueue's usage
            self.live.kueue_positions.pop(uid, None)
            self.admit(uid, wl, at, launch=False)
        elif st.state == "Running" and rec["state"] == ADMITTED:
            self.ledger.update_workload(uid, state=RUNNING, started_at=at, message=None)
            rec.update(state=RUNNING, started_at=at, message=None)
        elif st.state == "Evicted" and rec["state"] in (ADMITTED, RUNNING):
            reason = d.get("reason") or "Evicted"
            if reason == "PodsReadyTimeout" and not getattr(self.backend, "delegates_admission", False):
                self.evicted_by_timeout(uid, at, now, reason, st.message)
            else:
                self.requeue_evicted(uid, at, reason, st.message)
            return
        elif st.state == "Pending" and rec["state"] == PENDING:
            pos = (d.get("positionInClusterQueue"), d.get("positionInLocalQueue"))
            changed = self.live.kueue_positions.get(uid) != pos
            self.live.kueue_positions[uid] = pos
            reason, message = d.get("reason") or "Pending", st.message or None
            if (rec.get("reason"), rec.get("message")) != (reason, message):
                changed = True
                rec.update(reason=reason, message=message)
                self.ledger.update_workload(uid, reason=reason, message=message)
            if not changed:
                return
        elif st.state == "Started":  # a start done by a backend's worker: its run goes on record
            self.ledger.update_workload(uid, run=d.get("run") or rec.get("run"))
            return
        elif st.state == "Waiting" and st.message and rec.get("message") != st.message:
            rec["message"] = st.message
            self.ledger.update_workload(uid, message=st.message)
        else:
            return
        self.events.emit_workload(uid)
        self.events.emit({"type": "queues"})

    def finish(self, uid: str, state: str, exit_code: Optional[int], when: float, message: str,
                *, in_scheduler: bool = True) -> None:
        rec = self.live.records.get(uid)
        if rec is None:
            return
        stop_reason = self.live.stopping.pop(uid, None)
        if stop_reason and stop_reason.startswith("Preempted:") and rec["state"] != CANCELLED:
            if not is_lease(rec):
                self.requeue_evicted(uid, when, stop_reason.split(":", 1)[1], rec.get("message") or message)
                return
        reason = None
        max_end = lease_max_end(rec)
        if max_end is not None and rec["state"] != CANCELLED and when >= max_end - 1e-6:
            # A notebook lease that reached its maximum time ran its full time: Succeeded, billed
            # up to that time exactly, never past it (the tick that sees it may come later).
            when = min(when, max_end)
            state, reason = SUCCEEDED, LEASE_TIME_REACHED
            message = f"reached its maximum time ({format_seconds(rec['spec'].get('maxRuntimeSeconds'))})"
        elif stop_reason and stop_reason.startswith("Preempted:") and rec["state"] != CANCELLED:
            # A preempted notebook lease ends (its server is stopped by the spawner), not requeued.
            state, reason, message = FAILED, "Preempted", rec.get("message") or message
        elif rec["state"] == CANCELLED:
            # Cancelled by the user earlier: the row is final; only release what the process held.
            state = CANCELLED
        elif stop_reason == "IdleReclaimed" and rec["state"] != CANCELLED:
            # An idle notebook lease released (service/idle.py): it ends as at its end, reason kept.
            reason, message = stop_reason, rec.get("message") or message
        elif stop_reason == "MaximumExecutionTimeExceeded":
            state, reason = FAILED, stop_reason
            message = f"exceeded its maximum run time of {rec['spec'].get('maxRuntimeSeconds')} s"
        if rec["state"] != CANCELLED:
            failpoint("finish", "before")
            with self.ledger.transaction():
                self.ledger.close_intervals(uid, when)
                self.billing.billing_closed(uid, when)
                self.ledger.update_workload(uid, state=state, exit_code=exit_code, finished_at=when,
                                            reason=reason, message=message or None)
            failpoint("finish", "after")
            rec.update(state=state, exit_code=exit_code, finished_at=when, reason=reason, message=message or None)
        key = f"{rec['namespace']}/{rec['name']}"
        if in_scheduler:
            self.conf.scheduler.remove_workload(key)
        wl = self.live.engine_workloads.pop(uid, None)
        if self.on_finished is not None:
            self.on_finished(rec, wl)  # run times for the start-time estimates (service/estimates.py)
        self.live.dirty = True
        self.events.emit_workload(uid)
        self.events.emit_coalesced("queues")  # one per moment, however many jobs end or are evicted
        self.events.emit_coalesced("inventory")
        # Finished work lives on in the ledger only.
        self.live.records.pop(uid, None)
        self.billing._billing.pop(uid, None)
        self.live.by_key.pop(key, None)

    def enforce_max_runtime(self, now: float) -> None:
        for uid in self.backend.running():  # O(running) per tick, not O(every active workload)
            rec = self.live.records.get(uid)
            if rec is None or rec["state"] != RUNNING or uid in self.live.stopping:
                continue
            limit = rec["spec"].get("maxRuntimeSeconds")
            started = rec.get("started_at")
            if limit and started and now - started >= limit:
                self.live.stopping[uid] = "MaximumExecutionTimeExceeded"
                grace = 0.0 if is_lease(rec) else self.stop_grace_seconds  # a lease ends on time
                self.backend.stop(uid, "exceeded maximum run time", grace)

    def cancel(self, namespace: str, name: str, *, user: str, admin: bool = False) -> dict:
        """Cancel a workload of ``user`` (or any workload, with ``admin``: an operator's ``scancel``,
        a Kueue admin deleting a Workload; audited as ``cancel-workload`` when not the owner's):
        pending ones leave the queue, running ones get SIGTERM (then SIGKILL after the grace period).
        Billing stops now; the devices are released once the process is gone. Finished workloads are
        returned unchanged. Raises NotFound, Forbidden (field ``name``: neither owner nor admin)."""
        rec = self.live.record(namespace, name)
        if rec["owner"] != user and not admin:
            raise Forbidden(f"workload {namespace}/{name} belongs to {rec['owner']}", "name")
        if rec["state"] in FINISHED_STATES:
            return self.views.view(rec)
        uid = rec["uid"]
        now = self.conf.clock()
        prev = rec["state"]
        message = f"cancelled by {user}" if rec["owner"] == user else f"cancelled by {user} (admin)"
        failpoint("cancel", "before")
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, now)
            self.billing.billing_closed(uid, now)
            self.ledger.update_workload(uid, state=CANCELLED, finished_at=now, reason="Cancelled",
                                        message=message)
            if rec["owner"] != user:
                self.ledger.add_audit(actor=user, operation="cancel-workload", target=f"workload/{namespace}/{name}",
                                      before={"state": prev, "owner": rec["owner"]},
                                      after={"state": CANCELLED, "owner": rec["owner"]}, at=now)
        failpoint("cancel", "after")
        rec.update(state=CANCELLED, finished_at=now, reason="Cancelled", message=message)
        if uid in self.backend.running() and (prev in (ADMITTED, RUNNING) or self.delegated):
            self.live.stopping[uid] = "Cancelled"
            grace = 0.0 if is_lease(rec) else self.stop_grace_seconds  # a lease has no process to wait for
            self.backend.stop(uid, f"cancelled by {user}", grace)
        else:
            self.costs.budget_holds.pop(uid, None)
            self.conf.scheduler.remove_workload(f"{namespace}/{name}")
            self.live.engine_workloads.pop(uid, None)
            self.live.dirty = True
        self.wake()
        self.events.emit_workload(uid)
        self.events.emit({"type": "queues"})
        return self.views.view(rec)
