"""QueueService: the single owner of live state.

Every change goes through here, in this order (DESIGN.md, "One submission, end to end"):

1. A submission is validated, turned into an engine ``Workload``, **written to the ledger**, and only
   then acknowledged and queued.
2. A background loop polls the backend, enforces maximum run times, and runs scheduling cycles
   whenever something changed. An admission decision is **written to the ledger** (state, admission,
   usage intervals: one transaction) before the backend is told to start the job.
3. Finished, failed and cancelled jobs close their usage intervals and release quota and devices.
4. On start, state is rebuilt from the ledger: pending work is queued again, admitted work is adopted
   if its process still runs (and finished from its exit record if it ended), so nothing acknowledged
   is lost and quota is never over-committed. A job started just before a crash but not yet recorded
   is found and adopted, not started twice; a job being preempted is requeued, not failed; a job
   cancelled while it still ran keeps its devices until its process is gone (tests/test_crash.py
   kills a real server with SIGKILL to check these).

All public methods run on the event-loop thread of the Jupyter server (the loop itself, the REST
handlers and the event stream share it), so no locks are needed. They return JSON-ready dicts shaped
as in ``docs/rest-api.md`` and raise ``jupyter_gpuqueue.errors`` exceptions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import re
import secrets
import shlex
import shutil
import sys
import time
import uuid as uuidlib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Optional

from .backends.base import Backend, LaunchSpec, RunInfo
from .backends.lease import LEASE_KIND
from .engine import serialize
from .engine.errors import ManifestError
from .engine.flavors import flavor_eligible
from .engine.model import apply_transformations
from .engine.manifests import (
    dns1123_label_errors,
    load_text,
    parse_duration,
    parse_workload_document,
    parse_yaml_documents,
)
from .engine.model import (
    GPU,
    MIG_PREFIX,
    ClusterConfig,
    Inventory,
    PodSet,
    Workload,
)
from .engine.quantity import format_quantity
from .engine.preemption import HUMAN_REASONS
from .engine.scheduler import Scheduler, SchedulerOptions
from .errors import Conflict, Forbidden, GpuQueueError, NotFound, TooManyRequests, ValidationError
from .ledger import Ledger, Prices
from .service_costs import CostsMixin

log = logging.getLogger("jupyter_gpuqueue")

PENDING, ADMITTED, RUNNING = "Pending", "Admitted", "Running"
SUCCEEDED, FAILED, CANCELLED = "Succeeded", "Failed", "Cancelled"
ACTIVE_STATES = (PENDING, ADMITTED, RUNNING)
FINISHED_STATES = (SUCCEEDED, FAILED, CANCELLED)

DEFAULT_MAX_RUNTIME = 3600  # seconds, when a submission gives none
MAX_RUNTIME_LIMIT = 2**31 - 1  # seconds: Kueue's maximumExecutionTimeSeconds is an int32
DEMO_DIR = Path(__file__).parent / "demo"
_MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb$")


def _dns_label(value: str, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError("must be a string", field)
    errors = dns1123_label_errors(value)
    if errors:
        raise ValidationError(f"Invalid value: {value!r}: " + "; ".join(errors), field)
    return value


_rng = random.Random(secrets.randbits(128))
if hasattr(os, "register_at_fork"):  # a forked server must not repeat its parent's uids
    os.register_at_fork(after_in_child=lambda: _rng.seed(secrets.randbits(128)))
_WHICH_TTL = 5.0  # seconds a found executable is remembered (submission validation only)
_which_cache: dict[tuple[str, str], tuple[float, str]] = {}


def _new_uid() -> str:
    """A random (version 4) UUID. Identifiers are not secrets: drawn from a PRNG seeded from the
    OS, since os.urandom costs ~70 µs per call on the benchmark VM and a submission drew three."""
    return str(uuidlib.UUID(int=_rng.getrandbits(128), version=4))


def _random_hex(digits: int) -> str:
    return f"{_rng.getrandbits(4 * digits):0{digits}x}"


def _which(exe: str) -> Optional[str]:
    """``shutil.which(exe)``, remembered for a few seconds per PATH (a burst of submissions of the
    same command stats every PATH entry once, not once each; the backend resolves it again when
    the job starts)."""
    key = (exe, os.environ.get("PATH", ""))
    now = time.monotonic()
    hit = _which_cache.get(key)
    if hit is not None and now - hit[0] < _WHICH_TTL:
        return hit[1]
    found = shutil.which(exe)
    if found is not None:
        _which_cache[key] = (now, found)
    return found


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-+", "-", s)[:40].strip("-")
    return s or "job"


class QueueService(CostsMixin):
    """See the module docstring. Build it with ``create_service``. Budgets, spot notices, utilization
    samples and reports: ``service_costs.CostsMixin``."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        inventory: Inventory,
        ledger: Ledger,
        backend: Backend,
        prices: Prices,
        root_dir: str,
        data_dir: str,
        default_local_queue: Optional[str] = None,
        default_priority_class: Optional[str] = None,
        user_local_queues: Optional[dict[str, list[str]]] = None,
        cycle_interval: float = 0.5,
        stop_grace_seconds: float = 10.0,
        lease_preemption_grace_seconds: float = 300.0,
        lease_priority_class: Optional[str] = None,
        python_executable: str = sys.executable,
        options: Optional[SchedulerOptions] = None,
        clock: Callable[[], float] = time.time,
        logger: Optional[logging.Logger] = None,
    ):
        self.config = config
        self.inventory = inventory
        self.ledger = ledger
        self.backend = backend
        # Kueue delegation (backends/kueue.py): an installed Kueue admits; the engine only mirrors.
        self.delegated = bool(getattr(backend, "delegates_admission", False))
        self.kueue_positions: dict[str, tuple] = {}  # uid -> (positionInClusterQueue, positionInLocalQueue)
        self.prices = prices
        self.root_dir = os.path.abspath(root_dir)
        self.data_dir = os.path.abspath(data_dir)
        self.log_dir = os.path.join(self.data_dir, "logs")
        self.default_local_queue = default_local_queue
        self.default_priority_class = default_priority_class
        self.user_local_queues = user_local_queues
        self.cycle_interval = cycle_interval
        self.stop_grace_seconds = stop_grace_seconds
        # Notebook GPU leases (backends/lease.py): warned this many seconds before a preemption
        # releases them; submitted at this priority class when they name none.
        self.lease_preemption_grace_seconds = max(0.0, float(lease_preemption_grace_seconds))
        self.lease_priority_class = lease_priority_class
        self.python_executable = python_executable
        self.clock = clock
        self.log = logger or log
        # The live service requeues parked workloads as soon as quota frees (no 1 s batching): a
        # researcher's job should start the moment it can. And a preemptor gets the quota its
        # victims freed before anyone else, so that real jobs are never preempted in a loop
        # (SchedulerOptions.preemptor_first, docs/engine.md).
        self.scheduler = Scheduler(config, inventory, options or SchedulerOptions(
            requeue_batch_seconds=0.0, preemptor_first=True))
        self.records: dict[str, dict] = {}  # uid -> ledger row (active and recently finished)
        self.by_key: dict[str, str] = {}  # "namespace/name" -> uid
        self.engine_workloads: dict[str, Workload] = {}  # uid -> engine Workload (active only)
        self.stopping: dict[str, str] = {}  # uid -> why we stopped it (cancel / max runtime)
        self._subscribers: list[Callable[[dict], None]] = []
        self._billing: dict[str, list[list]] = {}  # uid -> [[start, end, usd_per_hour]] (service_costs.py)
        self._dirty = True
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        self._started = False
        # Performance (BENCHMARKS.md, "The live service"): submissions through the REST API are
        # committed in groups (ledger/group_commit.py, set up by start()); names of submissions
        # whose commit is under way are reserved here. Events of a kind that only say "refetch"
        # (queues, inventory) are sent once per event-loop turn (_emit_coalesced).
        self._committer = None
        self.tick_settle_seconds = 0.002  # see _loop
        self._slicing = False  # in _loop's tick: scheduling yields after schedule_slice_seconds
        self._to_launch: list[str] = []  # admitted, to be started (_launch_some)
        self._launch_scheduled = False
        self._inflight: set[str] = set()  # "namespace/name" of submissions being committed
        self._coalesced: dict[str, None] = {}
        self._last_coalesced_flush = float("-inf")
        self._reasons_to_write: dict[str, None] = {}  # uids whose new pending reason is not written yet
        self._reasons_written_at = 0.0
        self._batch_events: Optional[list[dict]] = None  # events held until a _batch commits

    # ------------------------------------------------------------------------------------------
    # lifecycle

    async def start(self) -> None:
        """Restore from the ledger, adopt live jobs, and start the background loop."""
        if self._started:
            return
        self.restore()
        from .ledger.group_commit import GroupCommitter

        self._committer = GroupCommitter(self.ledger)
        self._committer.start()
        self._wake = asyncio.Event()
        if hasattr(self.backend, "set_wakeup"):
            self.backend.set_wakeup(self.wake)  # local backend: reap a job the moment it ends
        self._task = asyncio.create_task(self._loop(), name="gpuqueue-loop")
        self._started = True

    async def stop(self) -> None:
        """Stop the loop. Running jobs keep running; the next start adopts them."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        self._started = False
        if self._committer is not None:
            self._committer.close()  # commits what is queued (those rows are restored at the next start)
            self._committer = None
        if self._reasons_to_write:
            try:
                self._write_reasons(self.clock())
            except Exception:  # pragma: no cover - derived state; recomputed at the next start
                self.log.warning("gpuqueue: could not write pending reasons at stop", exc_info=True)
        if hasattr(self.backend, "set_wakeup"):
            self.backend.set_wakeup(None)
        if hasattr(self.backend, "close"):
            self.backend.close()  # cluster backends: end their watch threads
        self.ledger.close()

    def restore(self) -> None:
        """Rebuild live state from the ledger (see the module docstring, point 4)."""
        now = self.clock()
        rows = self.ledger.list_workloads(states=ACTIVE_STATES)
        # Admitted work first, so that quota and devices are held before anything pending is placed.
        rows.sort(key=lambda r: (r["state"] == PENDING, r["created_at"]))
        for row in rows:
            uid = row["uid"]
            wl = self._engine_workload(row)
            if row["state"] == PENDING:
                self._track(row, wl)
                if row.get("reason") == "BudgetExceeded":  # held by a hard budget (service_costs.py)
                    self.budget_holds[uid] = row["created_at"]
                else:
                    self.scheduler.add_workload(wl)
                continue
            wl.admission = serialize.admission_from_dict(row.get("admission"))
            run = row.get("run")
            if row["state"] in (RUNNING, ADMITTED) and run:
                info = RunInfo.from_json(run)
                if self.backend.adopt(uid, info):
                    self._track(row, wl)
                    self.scheduler.add_workload(wl)
                    self.log.info("gpuqueue: adopted running job %s (pid %s)", row["name"], info.pid)
                    if _is_lease(row) and run.get("evictionDeadline"):
                        # A lease warned before the restart keeps its deadline (evictions are final).
                        self.stopping[uid] = "Preempted:" + str(run.get("evictionReason") or "Preempted")
                        self.backend.stop(uid, row.get("message") or "preempted",
                                          max(0.0, float(run["evictionDeadline"]) - self.clock()))
                    elif run.get("evictionReason") and not _is_lease(row):
                        # Being preempted when the server stopped: finish the stop (a noticed spot
                        # job at its evictionDeadline, see service_costs.py); it is requeued once its
                        # process is gone (_finish).
                        self.stopping[uid] = "Preempted:" + str(run["evictionReason"])
                        if run.get("evictionDeadline"):
                            self._costs_state()["spot_stops"][uid] = (
                                float(run["evictionDeadline"]), row.get("message") or "preempted")
                        else:
                            getattr(self.backend, "suspend", self.backend.stop)(
                                uid, row.get("message") or "preempted", self.stop_grace_seconds)
                elif run.get("evictionReason") and not _is_lease(row):
                    # Preempted, and its process ended while the server was down: back to the queue.
                    st = self.backend.finished_status(uid, info)
                    self._track(row, wl)
                    self.scheduler.add_workload(wl)
                    self._requeue_evicted(uid, st.finished_at or now, str(run["evictionReason"]),
                                          row.get("message") or "preempted")
                else:
                    st = self.backend.finished_status(uid, info)
                    self._track(row, wl)
                    self._finish(uid, st.state, st.exit_code, st.finished_at or now, st.message, in_scheduler=False)
                continue
            # Admitted, but no run on record: the server stopped before starting it (the decision
            # is on record, so apply it now), or died between starting it and recording the run
            # (then the job runs, or ran, already: take that run instead of starting a second one).
            self._track(row, wl)
            self.scheduler.add_workload(wl)
            if not self._recover_unrecorded_start(uid, now):
                self._launch(uid)
        self._restore_cancelled_still_stopping(now)
        self._dirty = True

    def _log_path(self, rec: dict) -> str:
        return os.path.join(self.log_dir, rec["namespace"], f"{rec['name']}-{rec['uid'][:8]}.log")

    def _recover_unrecorded_start(self, uid: str, now: float) -> bool:
        """restore(): an Admitted workload without a run on record whose job was started all the
        same (the server was killed between ``backend.start`` and the ledger write of ``_launch``)
        is adopted, or finished from its exit record, and True is returned; False when the
        backend knows of no such run (or cannot tell: backends without ``find_started``).
        Starting it again would run the job twice on the same devices. Found by
        tests/test_crash.py."""
        rec = self.records[uid]
        find = getattr(self.backend, "find_started", None)
        if find is None or _is_lease(rec):
            return False
        info = find(uid, self._log_path(rec))
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
            self._finish(uid, st.state, st.exit_code, st.finished_at or now, st.message)
        return True

    def _restore_cancelled_still_stopping(self, now: float) -> None:
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
            if not run or not row.get("admission") or _is_lease(row) or uid in self.records:
                continue
            info = RunInfo.from_json(run)
            if not self.backend.adopt(uid, info):
                continue  # its process has ended: nothing is held
            wl = self._engine_workload(row)
            wl.admission = serialize.admission_from_dict(row["admission"])
            self._track(row, wl)
            self.scheduler.add_workload(wl)
            self.stopping[uid] = "Cancelled"
            grace = max(0.0, float(row.get("finished_at") or now) + self.stop_grace_seconds - now)
            self.backend.stop(uid, row.get("message") or "cancelled", grace)
            self.log.info("gpuqueue: cancelled job %s still runs after the restart: stopping it", row["name"])

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._slicing = True
            try:
                self.tick()
            except Exception:  # pragma: no cover - logged, the loop must go on
                self.log.exception("gpuqueue: scheduling loop error")
            finally:
                self._slicing = False
            # Sleep until woken (wake()) or cycle_interval has passed. Not asyncio.wait_for: on
            # Python 3.11 a cancel (stop()) racing with its timeout could leave this task
            # cancelling forever, and the server hung at shutdown.
            timer = loop.call_later(self.cycle_interval, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            # Let the changes of the next moment arrive too, so that a burst (submissions, jobs
            # that ended) costs one tick, not one each (BENCHMARKS.md, "The live service").
            await asyncio.sleep(self.tick_settle_seconds)
            self._wake.clear()

    def wake(self) -> None:
        self._dirty = True
        if self._wake is not None:
            self._wake.set()

    def tick(self) -> None:
        """One pass of the loop: reap finished jobs, enforce run-time limits, schedule."""
        statuses = self.backend.poll()
        # After the poll: a job that ended meanwhile has a finish time before this tick's
        # decisions (its devices are not given to another job "before" it ended).
        now = self.clock()
        if statuses:
            # Every job that ended since the last tick in one transaction: one fsync, not one each.
            with self._batch():
                for st in statuses:
                    if st.uid in self.records and st.state not in (SUCCEEDED, FAILED):
                        self._observe(st, now)  # cluster backends: Running / Waiting / Kueue's admissions
                    elif st.uid in self.records:
                        self._finish(st.uid, st.state, st.exit_code, st.finished_at or now, st.message)
        self._enforce_max_runtime(now)
        if self._reasons_to_write and now - self._reasons_written_at >= self.reason_write_interval:
            self._write_reasons(now)
        self._costs_tick(now)  # budget holds, spot notices, utilization samples (service_costs.py)
        if self._dirty:
            self._dirty = False
            self._schedule(now)

    def _schedule(self, now: float) -> None:
        if self.delegated:
            return self._schedule_delegated(now)
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
        deadline = time.perf_counter() + self.schedule_slice_seconds if self._slicing else math.inf
        for _ in range(10_000):
            if changed and time.perf_counter() > deadline:
                self.wake()  # not done: go on in the next tick
                break
            result = self.scheduler.schedule(now)
            if result.heads == 0 or not result.changed:
                break
            changed = True
            if result.preempted and admitted:
                self._apply_admissions(admitted, now)  # victims may be among them: apply them first
                admitted = []
            for p in result.preempted:
                self._preempt(p, now)
            admitted.extend(result.admitted)
            considered.update(dict.fromkeys(result.requeued))
        self._apply_admissions(admitted, now)
        updates = []
        for key in considered:
            uid = self.by_key.get(key)
            rec = self.records.get(uid) if uid is not None else None
            if rec is None or rec["state"] != PENDING:
                continue
            reason, message = self.scheduler.reason(key) or ("Pending", "")
            if (rec.get("reason"), rec.get("message")) != (reason, message):
                rec["reason"], rec["message"] = reason, message
                updates.append(uid)
        for uid in updates:
            self._reasons_to_write[uid] = None
            self._emit_workload(uid)
        if changed:
            self._emit_coalesced("queues")
            self._emit_coalesced("inventory")

    # Seconds of scheduling cycles per tick before the loop serves others again (see _schedule):
    # a cycle costs 20-60 µs; 5 ms slices left position queries' p99 at 78 ms under 100 panels,
    # 1 ms brought it under 50 ms, with the same makespan (BENCHMARKS.md, "The live service").
    schedule_slice_seconds = 0.001

    # Seconds between writes of pending workloads' new reasons to the ledger (see _write_reasons).
    reason_write_interval = 1.0

    def _write_reasons(self, now: float) -> None:
        """Write the reasons that scheduling cycles gave pending workloads since the last call, in
        one statement. A pending reason is derived state (the view reads the live one, and a
        restart recomputes it), so it is written at most every ``reason_write_interval`` seconds
        rather than with its own commit (one fsync) in every tick: under a burst of submissions
        every new workload gets one as it becomes a head."""
        items = []
        for uid in self._reasons_to_write:
            rec = self.records.get(uid)
            if rec is not None and rec["state"] == PENDING:  # admitted meanwhile: its row is newer
                items.append((uid, rec.get("reason"), rec.get("message")))
        self._reasons_to_write = {}
        self._reasons_written_at = now
        if items:
            self.ledger.set_reasons(items)

    def _apply_admissions(self, admitted: list[Workload], now: float) -> None:
        """Apply the admissions of this tick's cycles: all recorded in one transaction (a decision
        is persisted before it is applied), then all started, their runs recorded in one more."""
        if not admitted:
            return
        uids = [self.by_key[wl.key] for wl in admitted]
        with self._batch():
            self._admit_many(list(zip(uids, admitted)), now)
        self._to_launch.extend(uids)
        if self._slicing and not self._launch_scheduled:
            # In the service's loop: started from the next loop turn on, after the tick has let go.
            self._launch_scheduled = True
            asyncio.get_running_loop().call_soon(self._launch_some)
        elif not self._slicing:
            self._launch_some()

    # Jobs started per event-loop turn (see _launch_some).
    launch_chunk = 1

    def _launch_some(self) -> None:
        """Start admitted jobs, ``launch_chunk`` per loop turn in the service's loop (all at once
        otherwise), their runs recorded in one transaction per turn. Starting a local job costs a
        fork and exec (≈ 2-3 ms here): a tick that admits 30 jobs would otherwise hold the loop
        for 100 ms. A job that left Admitted meanwhile (cancelled, preempted) is skipped; one not
        started when the server dies is started at restart (restore)."""
        if self._launch_scheduled and not self._started:
            return  # stopped meanwhile: the rest is Admitted in the ledger, started at the next start
        chunk = self.launch_chunk if self._slicing or self._launch_scheduled else len(self._to_launch)
        self._launch_scheduled = False
        batch, self._to_launch = self._to_launch[:chunk], self._to_launch[chunk:]
        with self._batch():
            for uid in batch:
                rec = self.records.get(uid)
                if rec is not None and rec["state"] == ADMITTED and not rec.get("run"):
                    self._launch(uid)
        if self._to_launch:
            self._launch_scheduled = True
            asyncio.get_running_loop().call_soon(self._launch_some)

    # ------------------------------------------------------------------------------------------
    # decisions applied

    def _admit_many(self, items: list[tuple[str, Workload]], now: float) -> None:
        """:meth:`_admit` (without starting) for every ``(uid, Workload)`` of a tick, written to
        the ledger in two statements (Ledger.admit_workloads) instead of two per workload."""
        admissions, intervals, opened = [], [], []
        for uid, wl in items:
            rec = self.records[uid]
            admission = serialize.admission_to_dict(wl.admission)
            admissions.append({"uid": uid, "admission": admission, "admitted_at": now,
                               "cluster_queue": wl.admission.cluster_queue})
            first = uid in self._billing or not rec.get("evictions")  # every interval of it seen here
            rates = []
            for flavor, resource, qty in self._billable(wl):  # GPUs / MIG slices held (service_costs.py)
                gpu_eq = self.prices.gpu_equivalent(resource, qty)
                if gpu_eq <= 0:
                    continue
                rate = self.prices.usd_per_hour(flavor, resource, qty)
                intervals.append({"workload_uid": uid, "flavor": flavor, "resource": resource, "quantity": qty,
                                  "gpu_equivalent": gpu_eq, "usd_per_hour": rate, "start": now})
                rates.append(rate)
            opened.append((uid, rec, admission, wl, first, rates))
        self.ledger.admit_workloads(admissions, intervals)
        for uid, rec, admission, wl, first, rates in opened:
            self._billing_opened(uid, now, rates, first)
            rec.update(state=ADMITTED, admission=admission, admitted_at=now,
                       cluster_queue=wl.admission.cluster_queue, reason=None, message=None)

    def _admit(self, uid: str, wl: Workload, now: float, launch: bool = True) -> None:
        self._admit_many([(uid, wl)], now)
        if launch:
            self._launch(uid)

    def _launch(self, uid: str) -> None:
        rec = self.records[uid]
        wl = self.engine_workloads[uid]
        spec = rec["spec"]
        devices = [d for p in wl.admission.placements for d in p.devices]
        visible = ",".join(devices)
        env = dict(spec.get("env") or {})
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": visible,
                "NVIDIA_VISIBLE_DEVICES": visible if visible else "void",
                "GPUQUEUE_WORKLOAD_NAME": rec["name"],
                "GPUQUEUE_NAMESPACE": rec["namespace"],
                "GPUQUEUE_WORKLOAD_UID": uid,
                "GPUQUEUE_LOCAL_QUEUE": rec["local_queue"],
                "GPUQUEUE_CLUSTER_QUEUE": wl.admission.cluster_queue,
                "GPUQUEUE_FLAVOR": ",".join(sorted({f for p in wl.admission.pod_set_assignments for f in p.flavors.values()})),
                "GPUQUEUE_MAX_RUNTIME_SECONDS": str(spec.get("maxRuntimeSeconds") or ""),
                **self._spot_env(rec),  # GPUQUEUE_SPOT, GPUQUEUE_PREEMPTION_* (service_costs.py)
            }
        )
        log_path = self._log_path(rec)
        launch = LaunchSpec(uid=uid, key=f"{rec['namespace']}/{rec['name']}", argv=list(spec["command"]),
                            cwd=spec["workingDir"], env=env, log_path=log_path, workload=self._cluster_context(rec))
        now = self.clock()
        try:
            info = self.backend.start(launch)
        except GpuQueueError as exc:
            self._finish(uid, FAILED, None, now, f"could not start: {exc.message}")
            return
        except OSError as exc:
            self._finish(uid, FAILED, None, now, f"could not start: {exc}")
            return
        # A cluster backend reports Running itself once a Pod runs (see _observe).
        started_at = None if getattr(self.backend, "reports_running", False) and not _is_lease(rec) else info.started_at
        state = RUNNING if started_at is not None else ADMITTED
        self.ledger.update_workload(uid, state=state, run=info.to_json(), started_at=started_at)
        rec.update(state=state, run=info.to_json(), started_at=started_at)
        self._emit_workload(uid)

    def _preempt(self, p, now: float) -> None:
        """A victim was chosen: stop its process; it goes back to the queue once it is gone
        (``_requeue_evicted``), and only then are its quota and devices released."""
        uid = self.by_key.get(p.victim)
        if uid is None:
            return
        rec = self.records[uid]
        preemptor = self.records.get(self.by_key.get(p.preemptor, ""), {})
        message = (f"Preempted to accommodate {p.preemptor} (UID: {preemptor.get('uid', '?')}) due to "
                   f"{HUMAN_REASONS.get(p.reason, p.reason)}")
        rec["message"] = message
        self.ledger.update_workload(uid, message=message)
        if rec["state"] == RUNNING and uid in self.backend.running() and _is_lease(rec):
            # A notebook lease is warned, not cut: it keeps its quota and devices until its
            # evictionDeadline (persisted in its run, so a restart keeps the same deadline).
            run = dict(rec.get("run") or {})
            deadline = run.get("evictionDeadline") or now + self.lease_preemption_grace_seconds
            run["evictionDeadline"] = deadline
            run.setdefault("evictionReason", p.reason)
            self.ledger.update_workload(uid, run=run)
            rec["run"] = run
            self.stopping[uid] = "Preempted:" + p.reason
            self.backend.stop(uid, message, max(0.0, deadline - self.clock()))  # released at the deadline
        elif rec["state"] == RUNNING and self._spot_notice(uid, p.reason, message, now):
            pass  # a spot job is told first (notice file + SIGUSR1); SIGTERM follows (service_costs.py)
        elif rec["state"] in (ADMITTED, RUNNING) and uid in self.backend.running():
            # The eviction is recorded before the job is stopped: a server killed before it saw
            # the job end requeues it at restart (restore) instead of marking it Failed.
            run = {**(rec.get("run") or {}), "evictionReason": p.reason}
            self.ledger.update_workload(uid, run=run)
            rec["run"] = run
            self.stopping[uid] = "Preempted:" + p.reason
            # Kubernetes suspends the Job (as Kueue does); the local backend stops the process.
            getattr(self.backend, "suspend", self.backend.stop)(uid, message, self.stop_grace_seconds)
        else:
            self._requeue_evicted(uid, now, p.reason, message)
        self._emit_workload(uid)

    def _requeue_evicted(self, uid: str, when: float, reason: str, message: str) -> None:
        """A preempted workload has stopped: close its usage, release its quota, queue it again."""
        rec = self.records[uid]
        key = f"{rec['namespace']}/{rec['name']}"
        evictions = int(rec.get("evictions") or 0) + 1
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, when)
            self._billing_closed(uid, when)
            self.ledger.update_workload(uid, state=PENDING, admission=None, run=None, admitted_at=None,
                                        started_at=None, evictions=evictions, reason="Preempted",
                                        message=message)
        rec.update(state=PENDING, admission=None, run=None, admitted_at=None, started_at=None,
                   evictions=evictions, reason="Preempted", message=message)
        if key in self.scheduler.admitted:
            self.scheduler.evict(key, when)
        self._dirty = True
        self._emit_workload(uid)
        self._emit_coalesced("queues")  # one per moment, however many jobs end or are evicted
        self._emit_coalesced("inventory")

    # -- cluster backends (backends/kubernetes.py, backends/kueue.py) ------------------------------

    def _cluster_context(self, rec: dict) -> dict:
        """What a cluster backend needs to build the workload's Job (LaunchSpec.workload)."""
        return {"namespace": rec["namespace"], "name": rec["name"], "localQueue": rec["local_queue"],
                "clusterQueue": rec.get("cluster_queue"), "priorityClass": rec.get("priority_class"),
                "spec": rec["spec"], "admission": rec.get("admission"), "owner": rec.get("owner")}

    def _schedule_delegated(self, now: float) -> None:
        """Kueue admits: every pending workload gets its (suspended, queue-labelled) Job now."""
        for uid, rec in list(self.records.items()):
            if rec["state"] != PENDING or uid in self.backend.running():
                continue
            launch = LaunchSpec(uid=uid, key=f"{rec['namespace']}/{rec['name']}", argv=list(rec["spec"]["command"]),
                                cwd=rec["spec"]["workingDir"], workload=self._cluster_context(rec))
            try:
                info = self.backend.start(launch)
            except GpuQueueError as exc:
                self._finish(uid, FAILED, None, now, f"could not create the Job: {exc.message}")
                continue
            self.ledger.update_workload(uid, run=info.to_json())
            rec["run"] = info.to_json()

    def _observe(self, st, now: float) -> None:
        """A non-final report of a cluster backend: ``Running`` (a Pod runs), ``Waiting`` (a Pod
        cannot start: message), and from Kueue ``Admitted`` (details: admission, billed from
        Kueue's admission time), ``Evicted`` (requeued), ``Pending`` (reason, message, positions)."""
        uid, rec = st.uid, self.records[st.uid]
        d = st.details or {}
        at = st.finished_at or now
        if st.state == "Admitted" and rec["state"] == PENDING:
            wl = self.engine_workloads[uid]
            key = wl.key
            self.scheduler.remove_workload(key)
            wl.admission = serialize.admission_from_dict(d["admission"])
            self.scheduler.add_workload(wl)  # the engine mirrors Kueue's usage
            self.kueue_positions.pop(uid, None)
            self._admit(uid, wl, at, launch=False)
        elif st.state == "Running" and rec["state"] == ADMITTED:
            self.ledger.update_workload(uid, state=RUNNING, started_at=at, message=None)
            rec.update(state=RUNNING, started_at=at, message=None)
        elif st.state == "Evicted" and rec["state"] in (ADMITTED, RUNNING):
            self._requeue_evicted(uid, at, d.get("reason") or "Evicted", st.message)
            return
        elif st.state == "Pending" and rec["state"] == PENDING:
            pos = (d.get("positionInClusterQueue"), d.get("positionInLocalQueue"))
            changed = self.kueue_positions.get(uid) != pos
            self.kueue_positions[uid] = pos
            reason, message = d.get("reason") or "Pending", st.message or None
            if (rec.get("reason"), rec.get("message")) != (reason, message):
                changed = True
                rec.update(reason=reason, message=message)
                self.ledger.update_workload(uid, reason=reason, message=message)
            if not changed:
                return
        elif st.state == "Waiting" and st.message and rec.get("message") != st.message:
            rec["message"] = st.message
            self.ledger.update_workload(uid, message=st.message)
        else:
            return
        self._emit_workload(uid)
        self._emit({"type": "queues"})

    def _finish(self, uid: str, state: str, exit_code: Optional[int], when: float, message: str,
                *, in_scheduler: bool = True) -> None:
        rec = self.records.get(uid)
        if rec is None:
            return
        stop_reason = self.stopping.pop(uid, None)
        if stop_reason and stop_reason.startswith("Preempted:") and rec["state"] != CANCELLED:
            if not _is_lease(rec):
                self._requeue_evicted(uid, when, stop_reason.split(":", 1)[1], rec.get("message") or message)
                return
        reason = None
        if stop_reason and stop_reason.startswith("Preempted:") and rec["state"] != CANCELLED:
            # A preempted notebook lease ends (its server is stopped by the spawner), not requeued.
            state, reason, message = FAILED, "Preempted", rec.get("message") or message
        elif rec["state"] == CANCELLED:
            # Cancelled by the user earlier: the row is final; only release what the process held.
            state = CANCELLED
        elif stop_reason == "MaximumExecutionTimeExceeded":
            state, reason = FAILED, stop_reason
            message = f"exceeded its maximum run time of {rec['spec'].get('maxRuntimeSeconds')} s"
        if rec["state"] != CANCELLED:
            with self.ledger.transaction():
                self.ledger.close_intervals(uid, when)
                self._billing_closed(uid, when)
                self.ledger.update_workload(uid, state=state, exit_code=exit_code, finished_at=when,
                                            reason=reason, message=message or None)
            rec.update(state=state, exit_code=exit_code, finished_at=when, reason=reason, message=message or None)
        key = f"{rec['namespace']}/{rec['name']}"
        if in_scheduler:
            self.scheduler.remove_workload(key)
        self.engine_workloads.pop(uid, None)
        self._dirty = True
        self._emit_workload(uid)
        self._emit_coalesced("queues")  # one per moment, however many jobs end or are evicted
        self._emit_coalesced("inventory")
        # Finished work lives on in the ledger only.
        self.records.pop(uid, None)
        self._billing.pop(uid, None)
        self.by_key.pop(key, None)

    def _enforce_max_runtime(self, now: float) -> None:
        for uid in self.backend.running():  # O(running) per tick, not O(every active workload)
            rec = self.records.get(uid)
            if rec is None or rec["state"] != RUNNING or uid in self.stopping:
                continue
            limit = rec["spec"].get("maxRuntimeSeconds")
            started = rec.get("started_at")
            if limit and started and now - started > limit:
                self.stopping[uid] = "MaximumExecutionTimeExceeded"
                grace = 0.0 if _is_lease(rec) else self.stop_grace_seconds  # a lease ends on time
                self.backend.stop(uid, "exceeded maximum run time", grace)

    # ------------------------------------------------------------------------------------------
    # bookkeeping

    def _track(self, row: dict, wl: Workload) -> None:
        self.records[row["uid"]] = row
        self.by_key[f"{row['namespace']}/{row['name']}"] = row["uid"]
        self.engine_workloads[row["uid"]] = wl

    def _engine_workload(self, row: dict) -> Workload:
        spec = row["spec"]
        return Workload(
            namespace=row["namespace"],
            name=row["name"],
            queue_name=row["local_queue"],
            pod_sets=[serialize.pod_set_from_dict(p) for p in spec["podSets"]],
            priority=row["priority"],
            priority_class=row.get("priority_class"),
            creation_time=row["created_at"],
            uid=row["uid"],
            maximum_execution_time_seconds=spec.get("maxRuntimeSeconds"),
        )

    def _record(self, namespace: str, name: str) -> dict:
        uid = self.by_key.get(f"{namespace}/{name}")
        if uid is not None:
            return self.records[uid]
        row = self.ledger.find_workload(namespace, name)
        if row is None:
            raise NotFound(f"workload {namespace}/{name} not found", "name")
        return row

    # ------------------------------------------------------------------------------------------
    # events

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (docs/rest-api.md); returns an unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: dict) -> None:
        if self._batch_events is not None:  # inside _batch: sent once the transaction commits
            self._batch_events.append(event)
            return
        for cb in list(self._subscribers):
            try:
                cb(event)
            except Exception:  # pragma: no cover - a broken subscriber must not stop the queue
                self.log.exception("gpuqueue: event subscriber failed")

    def _emit_workload(self, uid: str) -> None:
        if not self._subscribers:
            return
        self._emit({"type": "workload", "workload": self._view(self.records[uid])})

    # "queues" / "inventory" events go out at most this often (seconds); panels refetch on them.
    coalesce_seconds = 0.1

    def _emit_coalesced(self, kind: str) -> None:
        """Send ``{"type": kind}`` ("queues" or "inventory": something changed, refetch) once for
        every change of the next moment: at the end of this event-loop turn, and at most every
        ``coalesce_seconds`` (a burst of submissions or completions makes one event, not one per
        change: with 100 panels open each event is 100 messages); at once without a running loop."""
        if not self._subscribers or kind in self._coalesced:
            return
        self._coalesced[kind] = None
        if len(self._coalesced) == 1:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._flush_coalesced()
                return
            delay = self._last_coalesced_flush + self.coalesce_seconds - loop.time()
            if delay > 0:
                loop.call_later(delay, self._flush_coalesced)
            else:
                loop.call_soon(self._flush_coalesced)

    def _flush_coalesced(self) -> None:
        kinds, self._coalesced = list(self._coalesced), {}
        try:
            self._last_coalesced_flush = asyncio.get_running_loop().time()
        except RuntimeError:
            pass
        for kind in kinds:
            self._emit({"type": kind})

    @contextmanager
    def _batch(self):
        """Many ledger changes in one transaction (one commit, one fsync), for the background
        loop's bursts (jobs that ended, admissions of a cycle, their starts). Their events are
        held and sent after the commit, so that no subscriber hears of a change before it is
        durable. Nested uses join the outer batch."""
        if self._batch_events is not None:
            yield
            return
        self._batch_events = []
        try:
            with self.ledger.transaction():
                yield
        finally:
            events, self._batch_events = self._batch_events, None
        for event in events:
            self._emit(event)

    # ------------------------------------------------------------------------------------------
    # submissions

    # Teams from JupyterHub groups (hub-service mode): set with ``use_group_teams``.
    mode = "standalone"
    # Most Pending workloads per user (GpuQueueApp.max_pending_per_user); 0: no limit.
    max_pending_per_user = 0
    pending_cap_retry_after = 10.0  # seconds: the Retry-After hint when the cap is hit
    group_local_queues: Optional[dict[str, list[str]]] = None
    groups_of: Optional[Callable[[str], Iterable[str]]] = None
    no_team_hint = "ask an admin to give you a LocalQueue (c.GpuQueueApp.user_local_queues)"

    def use_group_teams(
        self,
        group_local_queues: dict[str, list[str]],
        groups_of: Callable[[str], Iterable[str]],
        *,
        hint: Optional[str] = None,
    ) -> None:
        """Map groups (e.g. JupyterHub groups) to LocalQueues: a user may submit to the LocalQueues
        of every group they are in (plus ``user_local_queues[user]``), the first being the default.

        ``group_local_queues``: group name -> ["namespace/name", ...]. ``groups_of(user)`` -> the
        user's group names (plain data; called on the event-loop thread, must not block). ``hint``:
        what a user in no mapped group should do, appended to the 403. Raises ValidationError
        (field ``group_local_queues[<group>]``) for a malformed mapping; a LocalQueue that is not
        (yet) configured is only logged, since the configuration can change live."""
        checked: dict[str, list[str]] = {}
        if not isinstance(group_local_queues, dict):
            raise ValidationError("must map group names to lists of LocalQueues", "group_local_queues")
        for group, queues in group_local_queues.items():
            field = f"group_local_queues[{group!r}]"
            if isinstance(queues, str) or not isinstance(queues, (list, tuple)):
                raise ValidationError("must be a list of 'namespace/name' LocalQueues", field)
            for q in queues:
                if not isinstance(q, str) or q.count("/") != 1 or "" in q.split("/"):
                    raise ValidationError(f"{q!r} is not 'namespace/name' of a LocalQueue", field)
                if q not in self.config.local_queues:
                    self.log.warning("%s: LocalQueue %s is not configured (yet)", field, q)
            checked[str(group)] = list(queues)
        self.group_local_queues = checked
        self.groups_of = groups_of
        if hint:
            self.no_team_hint = hint

    def _allowed_local_queues(self, user: str) -> list[str]:
        if self.user_local_queues is None and self.group_local_queues is None:
            return sorted(self.config.local_queues)
        keys = list((self.user_local_queues or {}).get(user, []))
        if self.group_local_queues is not None and self.groups_of is not None:
            for group in self.groups_of(user):
                keys.extend(self.group_local_queues.get(group, []))
        return [lq for lq in dict.fromkeys(keys) if lq in self.config.local_queues]

    def _default_local_queue(self, user: str) -> Optional[str]:
        allowed = self._allowed_local_queues(user)
        if self.default_local_queue in allowed:
            return self.default_local_queue
        return allowed[0] if allowed else None

    def _resolve_local_queue(self, value, user: str) -> tuple[str, str]:
        if value in (None, ""):
            value = self._default_local_queue(user)
            if value is None:
                raise Forbidden(
                    f"user {user} is not a member of any team (no LocalQueue): {self.no_team_hint}", "localQueue"
                )
        if not isinstance(value, str) or value.count("/") != 1:
            raise ValidationError("must be 'namespace/name' of a LocalQueue", "localQueue")
        if value not in self.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {value}", "localQueue")
        if value not in self._allowed_local_queues(user):
            hint = "" if self._allowed_local_queues(user) else f": {self.no_team_hint}"
            raise Forbidden(f"user {user} may not submit to LocalQueue {value}{hint}", "localQueue")
        ns, name = value.split("/")
        return ns, name

    def _resolve_priority(self, name) -> tuple[int, Optional[str]]:
        if name in (None, ""):
            name = self.default_priority_class
        if name in (None, ""):
            pc = self.config.default_priority_class()
            return (pc.value, pc.name) if pc else (0, None)
        if not isinstance(name, str):
            raise ValidationError("must be a string", "priorityClass")
        pc = self.config.workload_priority_classes.get(name) or self.config.priority_classes.get(name)
        if pc is None:
            known = sorted(set(self.config.priority_classes) | set(self.config.workload_priority_classes))
            raise ValidationError(f"unknown priority class {name!r} (known: {', '.join(known)})", "priorityClass")
        return pc.value, pc.name

    def _max_runtime(self, request: dict) -> int:
        """Whole seconds (fractions round up, so 0.5 is 1 s, never 0 = "no limit"), at most
        MAX_RUNTIME_LIMIT (Kueue's maximumExecutionTimeSeconds is an int32): larger, NaN or
        infinite values are refused (they made costs infinite and broke the JSON answers)."""
        if request.get("maxRuntimeSeconds") is not None:
            v = request["maxRuntimeSeconds"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValidationError("must be a positive number of seconds", "maxRuntimeSeconds")
            if v > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {v:g}", "maxRuntimeSeconds")
            return math.ceil(v)
        if request.get("maxRuntime") not in (None, ""):
            try:
                seconds = parse_duration(request["maxRuntime"], "maxRuntime")
            except ManifestError as exc:
                raise ValidationError(exc.reason, "maxRuntime") from None
            if seconds > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {seconds}", "maxRuntime")
            return seconds
        return DEFAULT_MAX_RUNTIME

    def _pod_set_from_form(self, request: dict, cq_name: str) -> PodSet:
        mig = request.get("migProfile")
        if mig not in (None, ""):
            if not isinstance(mig, str) or not _MIG_PROFILE.match(mig):
                raise ValidationError(f"{mig!r} is not a MIG profile like 1g.10gb", "migProfile")
            resource = MIG_PREFIX + mig
            if resource not in self._known_resources():
                raise ValidationError(f"unknown MIG profile {mig} (no ClusterQueue offers {resource})", "migProfile")
            qty = 1
        else:
            gpus = request.get("gpus", 1)
            if isinstance(gpus, str) and gpus.strip().isdigit():
                gpus = int(gpus)
            if isinstance(gpus, bool) or not isinstance(gpus, int):
                raise ValidationError("must be a whole number of GPUs", "gpus")
            if gpus <= 0:
                raise ValidationError("must be at least 1", "gpus")
            resource, qty = GPU, gpus
        ps = PodSet(name="main", count=1, requests={resource: qty})
        flavor = request.get("flavor")
        if flavor not in (None, "", "any"):
            fl = self.config.resource_flavors.get(flavor)
            if fl is None:
                raise ValidationError(
                    f"unknown ResourceFlavor {flavor!r} (known: {', '.join(sorted(self.config.resource_flavors))})",
                    "flavor",
                )
            cq = self.config.cluster_queues.get(cq_name)
            rg = cq.group_for(resource) if cq else None
            if rg is None or flavor not in [f.name for f in rg.flavors]:
                raise ValidationError(f"ClusterQueue {cq_name} offers no {resource} in flavor {flavor}", "flavor")
            # Kueue users pin a flavor with a nodeSelector on its nodeLabels; so do we.
            ps.node_selector = dict(fl.node_labels)
        return ps

    def _known_resources(self) -> set[str]:
        covered = {r for cq in self.config.cluster_queues.values() for rg in cq.resource_groups for r in rg.covered_resources}
        return covered | self._transformed_inputs(covered)  # e.g. MIG profiles counted as GPU slices

    def _check_max_quota(self, wl: Workload, cq_name: str, field: str) -> None:
        """Reject a workload that no ClusterQueue could ever admit (Kueue's ExceedsMaxQuota)."""
        cq = self.config.cluster_queues.get(cq_name)
        node = self.scheduler.tree.cluster_queues.get(cq_name)
        if cq is None or node is None:
            return
        for ps in wl.pod_sets:
            for r, q in apply_transformations(ps.requests, self.config.resource_transformations).items():
                if q <= 0:
                    continue
                rg = cq.group_for(r)
                if rg is None:
                    raise ValidationError(f"resource {r} unavailable in ClusterQueue {cq_name}", field)
                best = 0
                for fq in rg.flavors:
                    fl = self.config.resource_flavors.get(fq.name)
                    if fl is None or flavor_eligible(fl, ps) is not None:
                        continue
                    best = max(best, node.potential_available((fq.name, r)))
                need = q * ps.count
                if need > best:
                    raise ValidationError(
                        f"exceeds max quota: {format_quantity(r, need)} {r} requested, but ClusterQueue {cq_name} "
                        f"can never admit more than {format_quantity(r, best)} in the eligible flavors",
                        field,
                    )

    def _command(self, request: dict) -> tuple[list[str], str]:
        has_cmd = request.get("command") not in (None, "", [])
        has_script = request.get("script") not in (None, "")
        if has_cmd == has_script:
            raise ValidationError("give exactly one of 'command' or 'script'", "command")
        wd = request.get("workingDir")
        if has_script:
            script = request["script"]
            if not isinstance(script, str):
                raise ValidationError("must be a path", "script")
            path = Path(script) if os.path.isabs(script) else Path(self.root_dir) / script
            if not path.is_file():
                raise ValidationError(f"no such file: {script}", "script")
            args = request.get("args") or []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValidationError("must be a list of strings", "args")
            argv = [self.python_executable, str(path.resolve()), *args]
            default_wd = str(path.resolve().parent)
        else:
            cmd = request["command"]
            if isinstance(cmd, str):
                try:
                    cmd = shlex.split(cmd)
                except ValueError as exc:
                    raise ValidationError(f"cannot split the command: {exc}", "command") from None
            if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
                raise ValidationError("must be a non-empty list of strings (argv)", "command")
            argv = list(cmd)
            default_wd = self.root_dir
        if wd not in (None, ""):
            if not isinstance(wd, str):
                raise ValidationError("must be a path", "workingDir")
            wd_path = Path(wd) if os.path.isabs(wd) else Path(self.root_dir) / wd
            if not wd_path.is_dir():
                raise ValidationError(f"no such directory: {wd}", "workingDir")
            cwd = str(wd_path.resolve())
        else:
            cwd = default_wd
        if not getattr(self.backend, "local_commands", True):
            return argv, cwd  # runs in a container image (Kubernetes), not on this server
        exe = argv[0]
        if "/" in exe:
            p = Path(exe) if os.path.isabs(exe) else Path(cwd) / exe
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise ValidationError(f"command not found or not executable: {exe}", "command")
        elif _which(exe) is None:
            raise ValidationError(f"command not found: {exe}", "command")
        return argv, cwd

    def _new_name(self, request: dict, argv: list[str], namespace: str) -> str:
        name = request.get("name")
        if name not in (None, ""):
            return _dns_label(name, "name")
        if not argv:
            base = "notebook"  # a lease runs nothing
        else:
            base = Path(argv[1]).stem if len(argv) > 1 and argv[0] == self.python_executable else Path(argv[0]).name
        for _ in range(100):
            cand = f"{_slug(base)}-{_random_hex(6)}"
            key = f"{namespace}/{cand}"
            if key in self.by_key or key in self._inflight:
                continue
            # With the group commit, a clash with a finished workload (ledger only) is found by
            # the commit itself and the name drawn again (_accept_grouped): no query per submission.
            if self._committer is not None or self.ledger.find_workload(namespace, cand) is None:
                return cand
        raise GpuQueueError("could not generate a unique name", "name")  # pragma: no cover

    def _prepare(self, request: dict, user: str) -> tuple[dict, Workload]:
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self._resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.config.local_queues[f"{ns}/{lq}"].cluster_queue
        kind = request.get("kind") or "Job"
        if kind not in ("Job", LEASE_KIND):
            raise ValidationError(f"must be 'Job' or '{LEASE_KIND}', got {kind!r}", "kind")
        if kind == LEASE_KIND and self.delegated:
            # Kueue admits here, and a lease has no Job for Kueue to admit: it would stay Pending
            # forever (a spawn waiting to its timeout). docs/kubernetes.md, "The Kueue mode".
            raise ValidationError(
                f"a {LEASE_KIND} needs the queue's own admission (backend 'local' or 'kubernetes'); with "
                "backend 'kueue', Kueue admits notebook pods itself: label them with kueue.x-k8s.io/queue-name "
                "(Kueue's pod integration) instead of queueing them here", "kind")
        pc_request = request.get("priorityClass")
        if kind == LEASE_KIND and pc_request in (None, ""):
            pc_request = self.lease_priority_class
        priority, pc_name = self._resolve_priority(pc_request)
        max_runtime = self._max_runtime(request)
        ps = self._pod_set_from_form(request, cq_name)
        accept_spot = request.get("acceptSpot", False)
        if not isinstance(accept_spot, bool):
            raise ValidationError(f"must be true or false, got {accept_spot!r}", "acceptSpot")
        if accept_spot:  # may land on spot flavors: tolerate their taints (service_costs.py)
            ps.tolerations = list(ps.tolerations) + self._spot_tolerations()
        if kind == LEASE_KIND:
            # A lease holds devices for a notebook server started elsewhere: no command.
            for f in ("command", "script", "args", "workingDir", "env"):
                if request.get(f) not in (None, "", [], {}):
                    raise ValidationError(f"a {LEASE_KIND} runs no command; remove {f!r}", f)
            argv, cwd = [], self.root_dir
        else:
            argv, cwd = self._command(request)
        env = request.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValidationError("must be an object of string values", "env")
        name = self._new_name(request, argv, ns)
        wl = Workload(namespace=ns, name=name, queue_name=lq, pod_sets=[ps], priority=priority,
                      priority_class=pc_name, maximum_execution_time_seconds=max_runtime)
        self._check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps)],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": request.get("flavor") or "any",
            "source": "form",
        }
        if kind == LEASE_KIND:
            spec["kind"] = LEASE_KIND
        if accept_spot:
            spec["acceptSpot"] = True
        return spec, wl

    def submit(self, request: dict, *, user: str) -> dict:
        """Validate a SubmitRequest, persist it, queue it; returns the Workload view (docs/rest-api.md).

        Raises ValidationError (400, naming the field), Forbidden (403), Conflict (409, name taken),
        TooManyRequests (429) beyond ``max_pending_per_user``."""
        spec, wl = self._prepare(request, user)
        self._check_pending_cap(user, 1)
        return self._accept(spec, wl, user)

    def _check_pending_cap(self, user: str, new: int) -> None:
        """TooManyRequests (429, nothing queued) when ``new`` more Pending workloads would take
        ``user`` past ``max_pending_per_user``. Costs one pass over the active workloads, and
        only when the cap is set."""
        cap = self.max_pending_per_user
        if not cap:
            return
        pending = sum(1 for r in self.records.values() if r["state"] == PENDING and r["owner"] == user)
        if pending + new > cap:
            raise TooManyRequests(
                f"user {user} has {pending} pending workload(s) and the limit is {cap} per user "
                f"(c.GpuQueueApp.max_pending_per_user): wait until some start, or cancel some",
                None, retry_after=self.pending_cap_retry_after)

    def submit_manifest(self, text: str, *, user: str) -> list[dict]:
        """Submit the workloads of a Kubernetes manifest (batch/v1 Job, Kueue Workload, ...).

        The whole text is validated first; nothing is queued unless every document is valid."""
        return [self._accept(spec, wl, user) for spec, wl in self._prepare_manifest(text, user)]

    def _prepare_manifest(self, text: str, user: str) -> list[tuple[dict, Workload]]:
        """Validate every document of a manifest; (spec, Workload) of each workload in it."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("empty manifest", "manifest")
        try:
            docs = parse_yaml_documents(text, "manifest")
        except ManifestError as exc:
            raise ValidationError(str(exc), exc.field or "manifest") from None
        prepared = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict):
                raise ValidationError(f"document {i} is not a mapping", "manifest")
            try:
                wl = parse_workload_document(doc, self.config, "manifest", i)
            except ManifestError as exc:
                if "configuration kind" in exc.reason or "not a workload" in exc.reason:
                    raise Forbidden(f"{exc}: queue configuration is changed by admins only", "kind") from None
                raise ValidationError(str(exc), exc.field or "manifest") from None
            if wl is None:
                continue
            prepared.append(self._prepare_manifest_workload(doc, wl, user, i))
        if not prepared:
            raise ValidationError(
                "no workload in the manifest (a Job needs the label kueue.x-k8s.io/queue-name)", "manifest"
            )
        self._check_pending_cap(user, len(prepared))
        return prepared

    def _prepare_manifest_workload(self, doc: dict, wl: Workload, user: str, index: int) -> tuple[dict, Workload]:
        lq_key = f"{wl.namespace}/{wl.queue_name}"
        if lq_key not in self.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {lq_key}", "metadata.labels[kueue.x-k8s.io/queue-name]")
        if lq_key not in self._allowed_local_queues(user):
            hint = "" if self._allowed_local_queues(user) else f": {self.no_team_hint}"
            raise Forbidden(f"user {user} may not submit to LocalQueue {lq_key}{hint}", "metadata.namespace")
        _dns_label(wl.name, "metadata.name")
        if f"{wl.namespace}/{wl.name}" in self.by_key or f"{wl.namespace}/{wl.name}" in self._inflight \
                or self.ledger.find_workload(wl.namespace, wl.name):
            from .errors import Conflict

            raise Conflict(f"workload {wl.namespace}/{wl.name} already exists", "metadata.name")
        if getattr(self.backend, "runs_manifests", False):  # Kubernetes: the Job itself runs
            from .backends.k8s_jobs import manifest_spec

            self._check_max_quota(wl, self.config.local_queues[lq_key].cluster_queue, "spec.template.spec.containers")
            wl.maximum_execution_time_seconds = wl.maximum_execution_time_seconds or DEFAULT_MAX_RUNTIME
            return manifest_spec(doc, wl), wl
        pods = sum(ps.count for ps in wl.pod_sets)
        if pods != 1:
            raise ValidationError(
                f"the local backend runs one pod per workload; this one has {pods} (use the Kubernetes backend)",
                "spec",
            )
        template = _pod_template(doc)
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValidationError("no container", "spec.template.spec.containers")
        c0 = containers[0]
        argv = list(c0.get("command") or []) + list(c0.get("args") or [])
        if not argv:
            raise ValidationError("the local backend needs a command", "spec.template.spec.containers[0].command")
        req = {"command": argv, "workingDir": c0.get("workingDir")}
        try:
            argv, cwd = self._command(req)
        except ValidationError as exc:
            exc.field = "spec.template.spec.containers[0]." + (exc.field or "command")
            raise
        env = {e["name"]: str(e.get("value", "")) for e in c0.get("env") or [] if isinstance(e, dict) and "name" in e}
        cq_name = self.config.local_queues[lq_key].cluster_queue
        self._check_max_quota(wl, cq_name, "spec.template.spec.containers[0].resources")
        max_runtime = wl.maximum_execution_time_seconds or DEFAULT_MAX_RUNTIME
        wl.maximum_execution_time_seconds = max_runtime
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps) for ps in wl.pod_sets],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": "any",
            "source": "manifest",
            "manifest": doc,
        }
        return spec, wl

    def _accept(self, spec: dict, wl: Workload, user: str) -> dict:
        row, hold = self._new_row(spec, wl, user)
        self.ledger.add_workload(row)  # durable before it is acknowledged; Conflict if the name is taken
        self._accepted(row, wl, hold)
        return self._view(self.records[row["uid"]], cost=0.0)

    def _new_row(self, spec: dict, wl: Workload, user: str) -> tuple[dict, Optional[str]]:
        """The ledger row of a new submission (uid and creation time set on ``wl`` too), and the
        budget-hold message if it is held."""
        now = self.clock()
        uid = _new_uid()
        wl.uid = uid
        wl.creation_time = now
        if hasattr(self.backend, "dry_run") and spec.get("source") in ("form", "manifest") and not _is_lease({"spec": spec}):
            # Kubernetes: the API server validates the Job before the submission is acknowledged.
            self.backend.dry_run(uid, {"namespace": wl.namespace, "name": wl.name, "localQueue": wl.queue_name,
                                       "priorityClass": wl.priority_class, "spec": spec, "owner": user})
        hold = self._budget_hold_message(wl.namespace, now)  # a hard budget is spent: held (service_costs.py)
        row = {
            "uid": uid,
            "namespace": wl.namespace,
            "name": wl.name,
            "owner": user,
            "local_queue": wl.queue_name,
            "cluster_queue": self.scheduler.cluster_queue_name(wl),
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

    def _accepted(self, row: dict, wl: Workload, hold: Optional[str]) -> None:
        """A submission's row is durable: track it and queue it (or hold it)."""
        uid = row["uid"]
        self._track(dict(row), wl)
        if hold:
            self.budget_holds[uid] = row["created_at"]
        else:
            self.scheduler.add_workload(wl)
        self.wake()
        self._emit_workload(uid)
        self._emit_coalesced("queues")

    # -- group commit (ledger/group_commit.py) -----------------------------------------------------

    async def submit_async(self, request: dict, *, user: str) -> dict:
        """:meth:`submit` for the REST handlers: validated the same way, but the row is written by
        the ledger's group commit (one transaction, one fsync, for every submission of the moment),
        and the Workload view is returned once that commit has returned: acknowledged ⇒ durable.
        Same errors as :meth:`submit`."""
        spec, wl = self._prepare(request, user)
        self._check_pending_cap(user, 1)
        generated = request.get("name") in (None, "")
        return (await self._accept_grouped([(spec, wl)], user, redraw_name=generated))[0]

    # The most SubmitRequests in one batch (``submit_many_async``; the API's SubmitBatch.maxItems).
    max_batch_items = 1000

    async def submit_many_async(self, requests: list, *, user: str) -> list[dict]:
        """Submit a batch of SubmitRequests (``POST workloads`` with ``{"items": [...]}``, e.g. a
        parameter sweep, as a Slurm job array): every item is validated as :meth:`submit`
        validates one, then all are committed in one group commit, all or nothing, and queued in
        their order; returns their Workload views in that order, once durable.

        Errors change nothing and name the item: ValidationError (400, field ``items[i].gpus``;
        ``items`` when the list is empty, not a list or longer than ``max_batch_items``),
        Forbidden (403), Conflict (409, ``items[i].name``: a name taken, or chosen twice in the
        batch), TooManyRequests (429) beyond ``max_pending_per_user``."""
        if not isinstance(requests, list) or not requests:
            raise ValidationError("must be a non-empty list of SubmitRequests", "items")
        if len(requests) > self.max_batch_items:
            raise ValidationError(
                f"a batch holds at most {self.max_batch_items} submissions, got {len(requests)}", "items")
        prepared, generated, chosen = [], [], {}
        for i, request in enumerate(requests):
            try:
                spec, wl = self._prepare(request, user)
            except GpuQueueError as exc:
                exc.field = f"items[{i}]" + (f".{exc.field}" if exc.field and exc.field != "body" else "")
                raise
            is_generated = request.get("name") in (None, "")
            if not is_generated:
                key = f"{wl.namespace}/{wl.name}"
                if key in chosen:
                    raise Conflict(f"workload {key} is submitted twice in this batch (items[{chosen[key]}] "
                                   f"and items[{i}])", f"items[{i}].name")
                if key in self.by_key or key in self._inflight or self.ledger.find_workload(wl.namespace, wl.name):
                    raise Conflict(f"workload {key} already exists", f"items[{i}].name")
                chosen[key] = i
            else:
                self._inflight.add(f"{wl.namespace}/{wl.name}")  # the batch's next names differ
            prepared.append((spec, wl))
            generated.append(is_generated)
        self._inflight.difference_update(
            f"{wl.namespace}/{wl.name}" for (_spec, wl), g in zip(prepared, generated) if g)
        self._check_pending_cap(user, len(prepared))
        return await self._accept_grouped(prepared, user, redraw_name=generated)

    async def submit_manifest_async(self, text: str, *, user: str) -> list[dict]:
        """:meth:`submit_manifest` through the group commit; the workloads of one manifest are
        committed all together or not at all."""
        return await self._accept_grouped(self._prepare_manifest(text, user), user)

    async def _accept_grouped(self, prepared: list[tuple[dict, Workload]], user: str, *,
                              redraw_name: "bool | list[bool]" = False) -> list[dict]:
        """Commit ``prepared`` as one group; on a name clash found by the commit, draw the
        generated names again (``redraw_name``: all, or per item) and retry."""
        redraw = redraw_name if isinstance(redraw_name, list) else [redraw_name] * len(prepared)
        if self._committer is None:  # not started (a service used without its loop): one commit each
            return [self._accept(spec, wl, user) for spec, wl in prepared]
        for attempt in range(5):
            made = [(self._new_row(spec, wl, user), wl) for spec, wl in prepared]
            keys = [f"{wl.namespace}/{wl.name}" for _, wl in prepared]
            self._inflight.update(keys)
            loop = asyncio.get_running_loop()
            done: asyncio.Future = loop.create_future()
            commit = self._committer.submit([row for (row, _hold), _wl in made])
            # Runs on the loop once the commit returned, whether or not the request still waits (a
            # client that went away does not keep a committed workload out of the queue).
            commit.add_done_callback(
                lambda f, made=made, keys=keys, done=done: loop.call_soon_threadsafe(self._committed, f, made, keys, done))
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
                    wl.name = f"{base}-{_random_hex(6)}"
        raise AssertionError("unreachable")  # pragma: no cover

    def _committed(self, commit, made: list, keys: list[str], done: asyncio.Future) -> None:
        self._inflight.difference_update(keys)
        exc = commit.exception()
        if exc is not None:
            if not done.done():
                done.set_exception(exc)
            return
        views = []
        for (row, hold), wl in made:
            self._accepted(row, wl, hold)
            views.append(self._view(self.records[row["uid"]], cost=0.0))
        if not done.done():
            done.set_result(views)

    # ------------------------------------------------------------------------------------------
    # reading

    def info(self, user: str) -> dict:
        lqs = []
        for key in self._allowed_local_queues(user):
            lq = self.config.local_queues[key]
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue})
        profiles = sorted(
            {r[len(MIG_PREFIX):] for r in self._known_resources() if r.startswith(MIG_PREFIX)},
            key=lambda p: (int(p.split("g.")[0]), p),
        )
        pcs = [
            {"name": pc.name, "value": pc.value, "kind": pc.kind, "description": pc.description}
            for pc in sorted(
                list(self.config.priority_classes.values()) + list(self.config.workload_priority_classes.values()),
                key=lambda p: p.value,
            )
        ]
        default_pc = self.default_priority_class
        if not default_pc:
            pc = self.config.default_priority_class()
            default_pc = pc.name if pc else None
        return {
            "user": user,
            "mode": self.mode,
            "version": _version(),
            "localQueues": lqs,
            "defaultLocalQueue": self._default_local_queue(user),
            "flavors": sorted(self.config.resource_flavors),
            "migProfiles": profiles,
            "priorityClasses": pcs,
            "defaultPriorityClass": default_pc,
            "defaultMaxRuntimeSeconds": DEFAULT_MAX_RUNTIME,
            "pythonExecutable": self.python_executable,
            "rootDir": self.root_dir,
        }

    def list_workloads(self, *, namespace: Optional[str] = None, owner: Optional[str] = None,
                       states: Optional[Iterable[str]] = None) -> list[dict]:
        """Workload views, newest first. Finished workloads come from the ledger."""
        states = list(states) if states else None
        rows = self.ledger.list_workloads(states=states)
        out_rows = []
        for row in rows:
            live = self.records.get(row["uid"])
            row = live if live is not None else row
            if namespace and row["namespace"] != namespace:
                continue
            if owner and row["owner"] != owner:
                continue
            out_rows.append(row)
        out_rows.sort(key=lambda r: r["created_at"], reverse=True)
        costs = self.ledger.costs_usd([r["uid"] for r in out_rows], self.clock()) if out_rows else {}
        return [self._view(r, cost=costs.get(r["uid"], 0.0)) for r in out_rows]

    def get_workload(self, namespace: str, name: str) -> dict:
        return self._view(self._record(namespace, name))

    def cancel(self, namespace: str, name: str, *, user: str) -> dict:
        """Cancel a workload of ``user``: pending ones leave the queue, running ones get SIGTERM (then
        SIGKILL after the grace period). Billing stops now; the devices are released once the process
        is gone. Finished workloads are returned unchanged. Raises NotFound, Forbidden."""
        rec = self._record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"workload {namespace}/{name} belongs to {rec['owner']}", "name")
        if rec["state"] in FINISHED_STATES:
            return self._view(rec)
        uid = rec["uid"]
        now = self.clock()
        prev = rec["state"]
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, now)
            self._billing_closed(uid, now)
            self.ledger.update_workload(uid, state=CANCELLED, finished_at=now, reason="Cancelled",
                                        message=f"cancelled by {user}")
        rec.update(state=CANCELLED, finished_at=now, reason="Cancelled", message=f"cancelled by {user}")
        if uid in self.backend.running() and (prev in (ADMITTED, RUNNING) or self.delegated):
            self.stopping[uid] = "Cancelled"
            grace = 0.0 if _is_lease(rec) else self.stop_grace_seconds  # a lease has no process to wait for
            self.backend.stop(uid, f"cancelled by {user}", grace)
        else:
            self.budget_holds.pop(uid, None)
            self.scheduler.remove_workload(f"{namespace}/{name}")
            self.engine_workloads.pop(uid, None)
            self._dirty = True
        self.wake()
        self._emit_workload(uid)
        self._emit({"type": "queues"})
        return self._view(rec)

    def read_log(self, namespace: str, name: str, *, user: str, offset: int = 0, limit: int = 1 << 20) -> dict:
        """The job's output from byte ``offset``, at most ``limit`` bytes (at most 4 MiB):
        ``{"text", "offset", "nextOffset", "eof", "size"}``. Only the owner may read it
        (Forbidden); ValidationError names ``offset`` / ``limit``. A local job's log file is read
        here; a Kubernetes job's Pod log is read from the API server (the backend's
        ``read_log``), which :meth:`read_log_async` does off the event loop."""
        rec, run, offset, limit = self._log_request(namespace, name, user, offset, limit)
        return self._log_answer(rec, offset, *self._read_log_bytes(run, rec["uid"], offset, limit))

    async def read_log_async(self, namespace: str, name: str, *, user: str, offset: int = 0,
                             limit: int = 1 << 20) -> dict:
        """:meth:`read_log` for the REST API: a Pod log is fetched in a worker thread."""
        rec, run, offset, limit = self._log_request(namespace, name, user, offset, limit)
        if run is not None and not run.log_path and getattr(self.backend, "read_log", None) is not None:
            read = await asyncio.get_running_loop().run_in_executor(
                None, self._read_log_bytes, run, rec["uid"], offset, limit)
        else:
            read = self._read_log_bytes(run, rec["uid"], offset, limit)
        return self._log_answer(rec, offset, *read)

    def _log_request(self, namespace: str, name: str, user: str, offset: int, limit: int):
        rec = self._record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"only the owner may read the logs of {namespace}/{name}", "name")
        if offset < 0:
            raise ValidationError("must be ≥ 0", "offset")
        if limit <= 0:
            raise ValidationError("must be > 0", "limit")
        run = RunInfo.from_json(rec["run"]) if rec.get("run") else None
        return rec, run, offset, min(limit, 4 << 20)

    def _read_log_bytes(self, run: Optional[RunInfo], uid: str, offset: int, limit: int) -> tuple[bytes, int, int, bool]:
        """``(data, start, size, more)``: the bytes read from ``start`` (``offset``, or the end
        of a shorter log), the log's size known so far, and whether more is known to follow."""
        if run is None:
            return b"", offset, 0, False
        if run.log_path:
            if not os.path.exists(run.log_path):
                return b"", offset, 0, False
            size = os.path.getsize(run.log_path)
            start = min(offset, size)
            with open(run.log_path, "rb") as f:
                f.seek(start)
                return f.read(limit), start, size, False
        read_remote = getattr(self.backend, "read_log", None)  # a cluster backend: the Pod's log
        if read_remote is None:
            return b"", offset, 0, False
        data, size, more = read_remote(uid, offset, limit)
        return data, (offset if data else min(offset, size)), size, more

    @staticmethod
    def _log_answer(rec: dict, offset: int, data: bytes, start: int, size: int, more: bool) -> dict:
        next_offset = start + len(data)
        eof = rec["state"] in FINISHED_STATES and not more and next_offset >= size
        return {"text": data.decode("utf-8", errors="replace"), "offset": offset, "nextOffset": next_offset,
                "eof": eof, "size": size}

    def estimate(self, request: dict, *, user: str) -> dict:
        """Cost estimate of a SubmitRequest before submitting: requested GPU-hours × price per hour of
        the chosen flavor (with ``any``, the dearest flavor it could land on). Validates like submit,
        except for the command."""
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self._resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.config.local_queues[f"{ns}/{lq}"].cluster_queue
        self._resolve_priority(request.get("priorityClass"))
        max_runtime = self._max_runtime(request)
        ps = self._pod_set_from_form(request, cq_name)
        wl = Workload(namespace=ns, name="estimate", queue_name=lq, pod_sets=[ps])
        self._check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        resource, qty = next(iter(ps.requests.items()))
        flavor = self._likely_flavor(cq_name, ps, resource)
        per_hour = self.prices.usd_per_hour(flavor, resource, qty) if flavor else 0.0
        gpu_eq = self.prices.gpu_equivalent(resource, qty)
        return {
            "gpuHours": round(gpu_eq * max_runtime / 3600.0, 6),
            "costUsd": round(per_hour * max_runtime / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            "flavor": flavor,
            "resource": resource,
            "quantity": qty,
            "maxRuntimeSeconds": max_runtime,
        }

    def _likely_flavor(self, cq_name: str, ps: PodSet, resource: str) -> Optional[str]:
        cq = self.config.cluster_queues.get(cq_name)
        resource, ps = self._quota_resource(cq, ps, resource)  # through resources.transformations
        rg = cq.group_for(resource) if cq else None
        if rg is None:
            return None
        node = self.scheduler.tree.cluster_queues[cq_name]
        eligible = []
        for fq in rg.flavors:
            fl = self.config.resource_flavors.get(fq.name)
            if fl is None or flavor_eligible(fl, ps) is not None:
                continue
            if node.potential_available((fq.name, resource)) < ps.requests[resource] * ps.count:
                continue
            eligible.append(fq.name)
        if not eligible:
            return None
        return max(eligible, key=lambda f: self.prices.price(f))

    def queues(self) -> dict:
        """ClusterQueues with usage per flavor and resource, and their pending workloads in order."""
        cqs = []
        for name in sorted(self.config.cluster_queues):
            cq = self.config.cluster_queues[name]
            node = self.scheduler.tree.cluster_queues[name]
            resources = []
            for rg in cq.resource_groups:
                for fq in rg.flavors:
                    for rq in fq.resources:
                        fr = (fq.name, rq.name)
                        resources.append({
                            "flavor": fq.name,
                            "resource": rq.name,
                            "nominalQuota": format_quantity(rq.name, rq.nominal_quota),
                            "borrowingLimit": None if rq.borrowing_limit is None else format_quantity(rq.name, rq.borrowing_limit),
                            "lendingLimit": None if rq.lending_limit is None else format_quantity(rq.name, rq.lending_limit),
                            "usage": format_quantity(rq.name, node.usage.get(fr, 0)),
                            "borrowed": format_quantity(rq.name, node.borrowed(fr)),
                        })
            pending = []
            for key in self.scheduler.pending_keys(name):
                uid = self.by_key.get(key)
                rec = self.records.get(uid) if uid else None
                if rec is None:
                    continue
                pos = (self.kueue_positions.get(uid) if self.delegated else self.scheduler.position(key)) or (None, None)
                reason = self.scheduler.reason(key) or (None, None)
                pending.append({
                    "namespace": rec["namespace"], "name": rec["name"], "localQueue": rec["local_queue"],
                    "owner": rec["owner"], "priority": rec["priority"], "priorityClass": rec.get("priority_class"),
                    "positionInClusterQueue": pos[0], "positionInLocalQueue": pos[1],
                    "reason": reason[0], "message": reason[1], "createdAt": rec["created_at"],
                })
            admitted = sum(1 for w in self.scheduler.admitted.values() if w.admission.cluster_queue == name)
            cqs.append({
                "name": name, "cohort": cq.cohort, "queueingStrategy": cq.queueing_strategy,
                "active": name not in self.scheduler.inactive,
                "resources": resources, "pendingWorkloads": len(pending), "admittedWorkloads": admitted,
                "pending": pending,
            })
        lqs = []
        for key in sorted(self.config.local_queues):
            lq = self.config.local_queues[key]
            q = self.scheduler.queues.get(lq.cluster_queue)
            adm = sum(
                1 for w in self.scheduler.admitted.values()
                if w.namespace == lq.namespace and w.queue_name == lq.name
            )
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
                        "pendingWorkloads": q.count_local_queue(key) if q else 0, "admittedWorkloads": adm})
        return {"clusterQueues": cqs, "localQueues": lqs}

    def inventory_view(self) -> dict:
        """GPUs and MIG slices per flavor: free and total, and every device with its holder."""
        alloc = self.scheduler.allocator
        summary = []
        for fname in sorted(self.config.resource_flavors):
            fl = self.config.resource_flavors[fname]
            nodes = [n for n in self.inventory.nodes if all(n.labels.get(k) == v for k, v in fl.node_labels.items())]
            offered = {r for cq in self.config.cluster_queues.values() for rg in cq.resource_groups
                       for f in rg.flavors if f.name == fname for r in rg.covered_resources}
            offered |= self._transformed_inputs(offered)
            for resource in sorted(r for r in offered if r == GPU or r.startswith(MIG_PREFIX)):
                free, total = alloc.totals(resource, nodes) if alloc else (0, 0)
                if total == 0:
                    continue
                summary.append({"flavor": fname, "resource": resource, "free": free, "total": total})
        nodes = []
        owner = alloc.owner if alloc else {}
        for n in self.inventory.nodes:
            gpus = []
            for g in n.gpus:
                gd = {"index": g.index, "uuid": g.uuid, "product": g.product, "memoryMiB": g.memory_mib,
                      "assignedTo": owner.get(f"{n.name}/{g.index}") if g.mig is None else None, "mig": None}
                if g.mig is not None:
                    gd["mig"] = [{"uuid": d.uuid, "profile": d.profile, "slices": d.slices,
                                  "assignedTo": owner.get(d.uuid)} for d in g.mig]
                gpus.append(gd)
            nodes.append({"name": n.name, "labels": dict(n.labels), "gpus": gpus})
        return {"source": self.inventory.source, "summary": summary, "nodes": nodes}

    def prices_view(self) -> dict:
        return self.prices.to_json()

    # ------------------------------------------------------------------------------------------
    # admin: the live configuration (built and validated by jupyter_gpuqueue/admin.py)

    def apply_config(self, config: ClusterConfig, *, actor: str, operation: str, target: str = "",
                     before=None, after=None, prices: Optional[Prices] = None) -> dict:
        """Make ``config`` (and ``prices``, USD per GPU-hour, when given) the live configuration.

        ``config`` must come validated from ``admin.py`` (Kueue's rules). The engine Scheduler is
        rebuilt on it (``Scheduler.update_config``) with every active workload re-added: admitted
        ones keep their admission, quota usage, admission time and devices, even where a lowered
        quota no longer covers them (Kueue does not evict on a quota change; nothing new is
        admitted there until usage is below the quota again); pending ones are re-queued in their
        original order. The change, the whole configuration (Kueue YAML,
        restored at the next start) and an audit entry (``actor``, ``operation`` on ``target``,
        ``before`` → ``after``) are written in one ledger transaction before the swap; the next
        scheduling cycle uses the new configuration.

        Raises ValidationError (field ``localQueues``, nothing changed) when an active workload's
        LocalQueue, the ClusterQueue behind it, or the ClusterQueue that admitted it would
        disappear. Returns ``{"appliedAt": seconds, "auditId": int}``."""
        from .admin import config_to_yaml

        lost = []
        for rec in self.records.values():
            if rec["state"] not in ACTIVE_STATES:
                continue
            key, lq_key = f"{rec['namespace']}/{rec['name']}", f"{rec['namespace']}/{rec['local_queue']}"
            lq = config.local_queues.get(lq_key)
            if lq is None:
                lost.append(f"{key} (LocalQueue {lq_key} would not exist)")
            elif lq.cluster_queue not in config.cluster_queues:
                lost.append(f"{key} (ClusterQueue {lq.cluster_queue} of LocalQueue {lq_key} would not exist)")
            elif rec.get("admission") and rec["admission"]["clusterQueue"] not in config.cluster_queues:
                lost.append(f"{key} (admitted by ClusterQueue {rec['admission']['clusterQueue']}, which would not exist)")
        if lost:
            more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
            raise ValidationError(
                "the new configuration drops queues that active workloads use; keep those queues, or let the "
                f"workloads finish or cancel them first: {'; '.join(lost[:10])}{more}", "localQueues")
        prices = prices or self.prices
        now = self.clock()
        moved = {}  # pending workloads whose LocalQueue now points to another ClusterQueue
        for uid, rec in self.records.items():
            lq = config.local_queues.get(f"{rec['namespace']}/{rec['local_queue']}")
            if rec["state"] == PENDING and lq is not None and lq.cluster_queue != rec.get("cluster_queue"):
                moved[uid] = lq.cluster_queue
        with self.ledger.transaction():
            self.ledger.save_config(config_to_yaml(config), prices.to_json(), actor, now)
            audit_id = self.ledger.add_audit(actor=actor, operation=operation, target=target,
                                             before=before, after=after, at=now)
            for uid, cq in moved.items():
                self.ledger.update_workload(uid, cluster_queue=cq)
        for uid, cq in moved.items():
            self.records[uid]["cluster_queue"] = cq
        # The engine's live reconfiguration: quota tree and queues rebuilt, every admitted workload
        # re-charged with its admission, admission time and devices, every pending one re-queued in
        # its original order.
        self.scheduler.update_config(config)
        self.config, self.prices = config, prices
        self.log.info("gpuqueue: %s applied %s %s", actor, operation, target)
        self.wake()
        self._emit({"type": "queues"})
        self._emit({"type": "inventory"})
        return {"appliedAt": now, "auditId": audit_id}

    def load_stored_config(self) -> bool:
        """Before :meth:`start`: make the configuration admins applied last (stored in the ledger)
        the live one, instead of the config files'. Returns False when none is stored. Raises
        ValidationError (field ``storedConfig``) when the stored YAML no longer validates."""
        from .admin import load_config_text

        row = self.ledger.active_config()
        if row is None:
            return False
        try:
            config = load_config_text(row["kueue_yaml"], "stored configuration").config
            prices = Prices.from_json(row["prices"])
        except GpuQueueError as exc:
            raise ValidationError(f"the stored configuration is invalid ({exc}); start with "
                                  "GpuQueueApp.discard_stored_config=True to drop it", "storedConfig") from None
        self.config, self.prices = config, prices
        self.scheduler = Scheduler(config, self.scheduler.inventory, self.scheduler.options)
        return True

    def discard_stored_config(self, *, actor: str) -> int:
        """Drop every stored configuration (audited) so that the config files rule from the next
        start on; returns how many were dropped."""
        now = self.clock()
        with self.ledger.transaction():
            n = self.ledger.discard_config()
            if n:
                self.ledger.add_audit(actor=actor, operation="discard-stored-config", target="",
                                      before={"storedConfigurations": n}, after=None, at=now)
        return n

    # ------------------------------------------------------------------------------------------
    # the Workload view

    def _price_per_hour(self, rec: dict) -> float:
        adm = rec.get("admission")
        if adm:
            return sum(self.prices.usd_per_hour(f, r, q) for f, r, q in self._billable_json(adm, rec["spec"]))
        spec = rec["spec"]
        total = 0.0
        for p in spec["podSets"]:
            ps = serialize.pod_set_from_dict(p)
            for r, q in ps.requests.items():
                if r == GPU or r.startswith(MIG_PREFIX):
                    cq_name = rec.get("cluster_queue") or ""
                    f = self._likely_flavor(cq_name, ps, r) if cq_name in self.config.cluster_queues else None
                    if f:
                        total += self.prices.usd_per_hour(f, r, q * ps.count)
        return total

    def _view(self, rec: dict, cost: Optional[float] = None) -> dict:
        key = f"{rec['namespace']}/{rec['name']}"
        state = rec["state"]
        pos = (self.kueue_positions.get(rec["uid"]) if self.delegated else self.scheduler.position(key)) if state == PENDING else None
        reason, message = rec.get("reason"), rec.get("message")
        if state == PENDING:
            live = None if self.delegated else self.scheduler.reason(key)
            if live:
                reason, message = live
        adm = rec.get("admission")
        spec = rec["spec"]
        now = self.clock()
        if cost is None:
            cost = self._cost_usd(rec, now)  # from memory where it can (service_costs.py)
        per_hour = self._price_per_hour(rec)
        max_rt = spec.get("maxRuntimeSeconds") or 0
        placements = adm.get("placements", []) if adm else []
        devices = [d for p in placements for d in p["devices"]]
        pod_sets = []
        for p in spec["podSets"]:
            pod_sets.append({"name": p["name"], "count": p["count"],
                             "requests": {r: format_quantity(r, int(v)) for r, v in p["requests"].items()}})
        admission = None
        if adm:
            admission = {
                "clusterQueue": adm["clusterQueue"],
                "podSetAssignments": [
                    {"name": a["name"], "count": a["count"], "flavors": a["flavors"],
                     "resourceUsage": {r: format_quantity(r, int(v)) for r, v in a["resourceUsage"].items()}}
                    for a in adm["podSetAssignments"]
                ],
            }
        return {
            "uid": rec["uid"],
            "name": rec["name"],
            "namespace": rec["namespace"],
            "localQueue": rec["local_queue"],
            "clusterQueue": rec.get("cluster_queue"),
            "owner": rec["owner"],
            "state": state,
            "reason": reason,
            "message": message,
            "priorityClass": rec.get("priority_class"),
            "priority": rec["priority"],
            "positionInClusterQueue": pos[0] if pos else None,
            "positionInLocalQueue": pos[1] if pos else None,
            "podSets": pod_sets,
            "admission": admission,
            "placement": placements,
            "visibleDevices": ",".join(devices) if adm else None,
            "kind": spec.get("kind") or "Job",
            "evictionDeadline": (rec.get("run") or {}).get("evictionDeadline") if state == RUNNING else None,
            "command": spec["command"],
            "workingDir": spec["workingDir"],
            "maxRuntimeSeconds": max_rt,
            "createdAt": rec["created_at"],
            "admittedAt": rec.get("admitted_at"),
            "startedAt": rec.get("started_at"),
            "finishedAt": rec.get("finished_at"),
            "exitCode": rec.get("exit_code"),
            "evictions": rec.get("evictions", 0),
            "costUsd": round(cost, 6),
            "estimatedCostUsd": round(per_hour * max_rt / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            "estimatedStartAt": None,
            "acceptSpot": bool(spec.get("acceptSpot")),
            "budgetWarning": self.budgets.warning(rec["namespace"], now) if self.budgets is not None else None,
        }


def _is_lease(rec: dict) -> bool:
    """Whether a workload record is a notebook GPU lease (backends/lease.py)."""
    return (rec.get("spec") or {}).get("kind") == LEASE_KIND


def _pod_template(doc: dict) -> dict:
    spec = doc.get("spec") or {}
    if "template" in spec:
        return spec["template"] or {}
    if "podSets" in spec and spec["podSets"]:
        return spec["podSets"][0].get("template") or {}
    return {}


def _version() -> str:
    from .version import __version__

    return __version__


def create_service(
    *,
    config_paths: Optional[list[str]],
    inventory_path: Optional[str],
    db_url: Optional[str],
    root_dir: str,
    data_dir: str,
    prices: Optional[dict[str, float]] = None,
    default_local_queue: Optional[str] = None,
    default_priority_class: Optional[str] = None,
    user_local_queues: Optional[dict[str, list[str]]] = None,
    cycle_interval: float = 0.5,
    stop_grace_seconds: float = 10.0,
    options: Optional[SchedulerOptions] = None,
    logger: Optional[logging.Logger] = None,
    lease_preemption_grace_seconds: float = 300.0,
    lease_priority_class: Optional[str] = "development",
    backend: str = "local",
    kubernetes: Optional[dict] = None,
) -> QueueService:
    """Build a QueueService with the local backend, or with ``backend`` "kubernetes" / "kueue" a
    cluster one (``kubernetes``: its options, see ``backends/k8s_factory.py``; the inventory then
    comes from the cluster's Nodes unless ``inventory_path`` is given).

    ``inventory_path`` None: NVML discovery where GPUs are present, else the demo inventory.
    ``config_paths`` None: with discovered GPUs, one team owning exactly them
    (``inventory.default_config``); else the demo cluster (``jupyter_gpuqueue/demo/cluster.yaml``). ``db_url`` None:
    ``sqlite:///{data_dir}/gpuqueue.sqlite``. Raises ValidationError for an invalid configuration."""
    from .backends.lease import LeaseBackend
    from .backends.local import LocalBackend
    from .inventory import load_inventory
    from .inventory.default_config import config_for_inventory

    cluster = None
    if backend != "local":  # "kubernetes" | "kueue": see backends/k8s_factory.py
        from .backends.k8s_factory import ClusterConnection

        cluster = ClusterConnection(backend, kubernetes or {})
    inventory = cluster.inventory() if cluster is not None and not inventory_path else load_inventory(inventory_path)
    config = ClusterConfig()
    if config_paths:
        paths = list(config_paths)
    elif inventory.source == "nvml":
        # Real GPUs and no configuration: one team owning exactly the discovered hardware.
        paths = []
        config = config_for_inventory(inventory)
    else:
        paths = [str(DEMO_DIR / "cluster.yaml")]
    for p in paths:
        try:
            text = Path(p).read_text()
        except OSError as exc:
            raise ValidationError(f"cannot read {p}: {exc}", "config_files") from None
        try:
            m = load_text(text, p)
        except ManifestError as exc:
            raise ValidationError(str(exc), "config_files") from None
        config.merge(m.config)
    os.makedirs(data_dir, exist_ok=True)
    ledger = Ledger(db_url or f"sqlite:///{os.path.join(os.path.abspath(data_dir), 'gpuqueue.sqlite')}")
    price_obj = Prices(prices) if prices else Prices()
    if default_local_queue is None and "team-a/team-a-queue" in config.local_queues:
        default_local_queue = "team-a/team-a-queue"
    if default_priority_class is None and "experiment-normal" in config.priority_classes:
        default_priority_class = "experiment-normal"
    if lease_priority_class and lease_priority_class not in config.priority_classes \
            and lease_priority_class not in config.workload_priority_classes:
        # Jobs still run; a lease naming no priority class is refused with this class's name.
        (logger or log).warning(
            "gpuqueue: the notebook lease priority class %r is not in the cluster configuration; "
            "add it (a PriorityClass or WorkloadPriorityClass) or set c.GpuQueueApp.lease_priority_class",
            lease_priority_class)
    return QueueService(
        config=config,
        inventory=inventory,
        ledger=ledger,
        backend=LeaseBackend(cluster.backend(config) if cluster is not None else LocalBackend()),
        prices=price_obj,
        root_dir=root_dir,
        data_dir=data_dir,
        default_local_queue=default_local_queue,
        default_priority_class=default_priority_class,
        user_local_queues=user_local_queues,
        cycle_interval=cycle_interval,
        stop_grace_seconds=stop_grace_seconds,
        lease_preemption_grace_seconds=lease_preemption_grace_seconds,
        lease_priority_class=lease_priority_class,
        options=options,
        logger=logger,
    )
