"""Estimated start times in the live service (issue 14; docs/estimates.md, "For the service").

For every pending workload (jobs and notebook leases) the view carries ``estimatedStartAt``,
``estimatedStartRange``, ``waitingFor``, ``estimateReason`` / ``estimateMessage`` and
``fasterOptions`` (:meth:`Estimates.fields`). They come from the engine's estimator
(:func:`..engine.estimate.estimate_starts`: the live Scheduler copied and run forward with predicted
run times), computed here:

- **When.** After a change (:meth:`Estimates.changed`: the loop calls it when a tick scheduled,
  and on submissions, ends, preemptions, configuration and budget changes, which all wake the
  loop), debounced: at most once every ``min_interval`` seconds (1 s) and so that the estimates
  take at most ``cpu_share`` (10 %) of a core (a refresh that took 200 ms waits 2 s: by wall-clock
  time up to ``refresh_interval``, by CPU time beyond) and ``loop_share`` (1 %) of the event loop
  (the snapshot and the slices that apply the result), and at
  least every ``refresh_interval`` seconds (30 s: time passing moves predictions — a running job
  that has outlived its history is expected to run longer).
- **Where.** In a worker process of its own (``use_process``; ``service/estimate_worker.py``): a
  fresh interpreter, spawned once (never a fork of the multi-threaded server, which may deadlock
  in the child) and preloaded with the estimator, at a low CPU priority (``child_nice``, 10: on a
  busy machine the server's threads win the cores, and the worker still gets about a tenth of a
  core beside a busy process, where nice 19 got a seventieth: BENCHMARKS.md). The loop takes the
  copy of the Scheduler (:func:`..engine.snapshot.snapshot`) between two callbacks, its pending
  workloads frozen into tuples rather than copied (``freeze_pending``); the estimates' thread
  pickles it, sends it and waits for the answer (plain tuples), so the forward run shares
  no GIL with the loop. The loop decodes and publishes the answer in slices of at most
  ``slice_seconds`` (1 ms), each a callback of its own, so requests are served in between (as
  scheduling cycles are). The worker owns the run-time model: each request brings the run times
  observed since the last one, and the range's quantiles (this process calibrates them). Without it
  (``use_process = False``): the forward run on that thread, in this process (GIL shared with the
  loop). A result computed from a snapshot older than the one already published is dropped.
  Workloads whose estimate changed materially since the last event (a first estimate, a new
  reason, a start moved by more than ``max(60 s, 25 %)`` of the wait) get a ``workload`` event, at
  most ``events_per_refresh`` per refresh, so panels update without polling. BENCHMARKS.md,
  "Estimated start times in the live service", has what this costs the position queries.
- **At submission** (:meth:`Estimates.quick_estimate`, issue 35): a workload no refresh has seen
  is estimated on the spot, on the loop, by a forward run for it alone (bounded: ``quick_max_pending``,
  ``quick_loop_seconds`` per second on average, ``quick_loop_burst`` at most in a burst), so the
  POST answer carries an estimate; the next refresh
  replaces it.
- **The point and the range.** One forward run (no extra draws); its wait is blended with the
  ClusterQueue's recent admission rate (position / admissions per second over the last hour, or
  the time observed since ``observed_since`` when shorter, with at least 5 admissions:
  :mod:`..engine.wait_rate`), then bounded so that point, range and ``waitingFor`` agree
  (:mod:`..engine.estimate_bounds`), and the range
  comes from the service's own estimates at submission: each workload's first estimate is
  registered, scored against its actual start once it starts and, while it still waits, counted
  as a censored score (it is at least as late as it has waited), and early / late are the
  split-conformal quantiles of those scores
  (:class:`..engine.range_calibration.RangeCalibration`, computed on the loop at each refresh and
  sent to the worker; ×/÷ 4 until there are 20).
- **Run times.** :class:`..engine.runtime_model.HistoryRuntime` keyed by (team, owner, command,
  shape), then (team, shape), team, everything; seeded at start from the ledger's finished runs
  (the last ``history_seed_limit``), fed as runs end (``observe_finished``); without history, the
  declared maximum run time.
- **Budget holds.** A workload held by its team's hard budget is estimated from the budget's reset
  (the first second of the next UTC month) when it is held; ``BudgetExceeded`` otherwise.
- **Deadlines.** A running workload being preempted ends by its eviction deadline; a notebook
  lease by its maximum run time.
- **Faster options.** Every ``faster_options_interval`` seconds (10 s), and when new workloads
  wait (at the first refresh, or 2 s after the last round when one was that recent), for up to
  ``faster_options_limit`` pending workloads (highest priority, then oldest, first) whose
  estimated wait is over ``faster_options_min_wait`` seconds: the same request pinned to another
  flavor of its ClusterQueue (the same size: offered first), with another MIG profile, or with
  fewer GPUs (``changesSize``, and the sentence says so: "runs on 2 GPUs instead of 4"), each
  estimated by its own forward run with the variant in the workload's place; a variant is offered
  when it starts at least ``max(60 s, 20 %)`` of the wait sooner (``fasterOptions``: flavor, MIG
  profile, GPUs, start, price per hour, ``changesSize``, ``move``: the body that takes it in one
  step, service/moves.py, and a sentence).
- **Kueue mode.** The engine mirrors the installed Kueue's queues; the estimate is computed on the
  mirror as above and marked ``estimateApproximate``: Kueue, not this engine, decides.

What an estimate cannot foresee is in docs/estimates.md and in ``ESTIMATE_CAVEAT``.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import io
import logging
import math
import pickle
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterator, Optional

from ..engine.estimate import Estimate, WaitingFor, estimate_starts
from ..engine.model import GPU, MIG_PREFIX, Workload
from ..engine.runtime_model import DeclaredRuntime, HistoryRuntime, OWNER_LABEL, COMMAND_ANNOTATION
from ..engine.estimate_bounds import finish_estimates
from ..engine.range_calibration import CalibratedRanges, RangeCalibration
from ..engine.snapshot import copy_workload, freeze_pending, snapshot, thaw_pending
from ..engine.wait_rate import RATE_BLEND
from .estimate_worker import WorkerProcess
from .live import engine_workload
from .states import PENDING

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .checks import RequestChecks
    from .costs import Costs
    from .events import EventHub
    from .live import LiveConfig, LiveState

ESTIMATE_CAVEAT = ("An estimate assumes nothing else happens: it cannot foresee higher-priority work "
                   "that arrives later, the preemptions such work causes, run times far from the "
                   "prediction, or quota and configuration edits.")

NOT_YET = "NotYetEstimated"
FINISHED_STATES = ("Succeeded", "Failed", "Cancelled")


def history_keys(wl: Workload) -> tuple:
    """History keys of a live workload, most specific first: (team, owner, command, shape),
    (team, shape), (team,), everything. Owner and command come from the label / annotation that
    :func:`.live.engine_workload` sets."""
    shape = tuple(sorted(wl.total_requests().items()))
    ns = wl.namespace
    return (("owner-command-shape", ns, wl.labels.get(OWNER_LABEL), wl.annotations.get(COMMAND_ANNOTATION), shape),
            ("namespace-shape", ns, shape), ("namespace", ns), ("all",))


def next_month_start(now: float) -> float:
    """The first second (epoch s) of the UTC month after ``now``: when monthly budgets reset
    (the month boundaries of ledger/reports.py, which the budgets use)."""
    from ..ledger.reports import month_of, parse_month  # not in the worker process (it imports no ledger)

    return parse_month(month_of(now))[1]


def _summary(wl: Workload, flavors: Optional[dict] = None) -> str:
    """"2 × nvidia-a100", "1 × MIG 1g.10gb", "4 CPU": what ``wl`` holds or asks for."""
    parts = []
    for r, q in sorted(wl.total_requests().items()):
        if r == GPU:
            flavor = (flavors or {}).get(r)
            parts.append(f"{q} × {flavor}" if flavor else f"{q} GPU")
        elif r.startswith(MIG_PREFIX):
            parts.append(f"{q} × MIG {r[len(MIG_PREFIX):]}")
    return ", ".join(parts) or "CPU only"


def _flavors_of(wl: Workload) -> dict:
    adm = wl.admission
    if adm is None:
        return {}
    out = {}
    for a in adm.pod_set_assignments:
        out.update(a.flavors)
    return out


class Estimates:
    """The estimates of the pending workloads, kept up to date off the event loop (module docstring).

    Collaborators: ``conf`` (LiveConfig: the Scheduler to copy, configuration, prices, budgets,
    clock), ``live`` (records, engine workloads), the ``ledger`` (finished runs at start),
    ``checks`` (variants of a request for faster options), ``costs`` (budget holds), ``events``
    (workload events when an estimate changes) and ``log``. Settings: ``delegated`` (Kueue mode:
    estimates are approximate)."""

    min_interval = 1.0  # s between two refreshes at most
    refresh_interval = 30.0  # s between two refreshes at least (time passing moves predictions)
    # Deep queues: only the head of each ClusterQueue is simulated, the rest extrapolated at its
    # pace (engine/estimate.py); a queue of at most simulate_all_below pending is simulated whole.
    # benchmarks/bench_estimate.py: 10,570 pending over 30 ClusterQueues, one run with
    # exact_per_queue=1 and the calibrated range 241 ms (50 per queue: 11 s).
    exact_per_queue: Optional[int] = 1
    simulate_all_below = 1000
    # A queue of at most walk_below pending is walked cycle by cycle as Kueue does (compress=False):
    # the shortcut was off by 7.7 s median where the walk was off by 0.2 s (issue 35).
    walk_below = 200
    history_seed_limit = 20_000  # finished runs read from the ledger at start
    faster_options_limit = 10  # workloads per round that get variants estimated
    faster_options_min_wait = 120.0  # s: a wait shorter than this gets no faster option
    faster_options_seconds = 0.1  # s of worker time per round for the variants, at most
    faster_options_interval = 10.0  # s between two rounds of faster options (kept in between)
    use_process = True  # compute in the worker process (no GIL shared with the loop); else on a thread
    events_per_refresh = 50  # workload events sent per refresh at most (the rest at the next one)
    cpu_share = 0.1  # of one core, at most, for the estimates (refreshes are spaced to keep to it)
    loop_share = 0.01  # of the event loop's time, at most, for a refresh (the snapshot, applying the result)
    child_nice = 10  # the worker process's niceness: the server's threads win the cores (19: estimates
    # ~10 s late on a machine whose cores other work saturates, BENCHMARKS.md)
    slice_seconds = 0.001  # s of the loop per slice of applying a result (then the loop serves others)
    rows_per_chunk = 256  # estimates per pickled chunk of the worker process's result

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", checks: "RequestChecks",
                 costs: "Costs", events: "EventHub", log: logging.Logger, *, delegated: bool):
        self.conf, self.live, self.ledger, self.checks = conf, live, ledger, checks
        self.costs, self.events, self.log = costs, events, log
        self.delegated = delegated
        self.enabled = True  # refreshes run (False once the service stops)
        self.wanted = True  # GpuQueueApp.estimate_start_times: False, no estimates at all
        self.model = HistoryRuntime(history_keys, fallback=DeclaredRuntime())  # the worker's only
        # (Workload, seconds) to feed the model, on the worker; bounded: with estimates off nothing drains it
        self._observations: deque = deque(maxlen=self.history_seed_limit)
        # The range: the service's own estimates at submission, scored against the starts (and,
        # while they wait, censored: engine/range_calibration.py); this process's only, its
        # quantiles sent with each request.
        self.calibration = RangeCalibration()
        self._first: dict[str, float] = {}  # key -> when its first estimate was registered
        self._ranges_cache: Optional[tuple[float, CalibratedRanges]] = None
        self.ranges_seconds = 0.0  # s of the loop the last computation of the range's quantiles took
        # Admission times per ClusterQueue (ascending, the last 24 h): the rate the point is blended with.
        self._admissions: dict[str, list[float]] = {}
        self._prev_admitted: set[str] = set()
        self.rate_blend = RATE_BLEND
        self.rate_min_admissions = 5  # a rate from fewer admissions is not blended in
        # Admissions are known from here on (the server's start; seed_history moves it back to the
        # first admission it reads): the rate is counted over this span, not a whole hour.
        self.observed_since: Optional[float] = conf.clock()
        # Estimates at submission (quick_estimate): key -> (at, Estimate), until a refresh has one.
        self.quick: dict[str, tuple[float, Estimate]] = {}
        self.quick_max_pending = 500  # a submission into a deeper queue waits for the refresh
        self.quick_seconds = 0.0  # s of the loop the estimates at submission took, in all
        self.quick_loop_seconds = 0.1  # s of the loop per second, on average, for estimates at submission
        # ... and at most this much in a burst (a token bucket: a burst of submissions in one second
        # each gets its estimate where a fixed 0.1 s per second left the 5th of a burst without one
        # on a loaded machine, BENCHMARKS.md "bench eta")
        self.quick_loop_burst = 0.3
        self._quick_last, self._quick_tokens = time.monotonic(), 0.3
        self._quick_tried: set[str] = set()
        self.quick_count = 0
        self.results: dict[str, Estimate] = {}
        self.faster: dict[str, list[dict]] = {}
        self._sent: dict[str, Estimate] = {}  # key -> the estimate the last workload event carried
        self._sent_faster: dict[str, bool] = {}
        self._last_faster = -math.inf  # monotonic time of the last round of faster options
        self._faster_seen: set[str] = set()  # pending keys at the last round of faster options
        self.computed_at: Optional[float] = None
        self._published_version = -1
        self._version = 0
        self._running = False
        self._dirty = True
        self._last_start = -math.inf
        self._timer: Optional[asyncio.Handle] = None
        self._executor: Optional[ThreadPoolExecutor] = None
        self.refreshes = 0  # completed refreshes (tests, metrics)
        self.last_duration = 0.0  # s of the last forward run(s) on the worker (wall clock)
        self.last_cpu = 0.0  # CPU s of the last refresh's worker (the worker process or the thread)
        self._prepare_seconds = 0.0  # s of the last refresh's start on the event loop (the snapshot)
        self._worker: Optional[WorkerProcess] = None  # the worker process, started at the first refresh
        self._worker_failures = 0  # refreshes the worker process failed in a row (3: a thread instead)
        self.apply_seconds = 0.0  # s of the loop, in slices, the last result took to apply
        self._loop_seconds = 0.0  # s of the loop the last refresh took in all

    # -- inputs ------------------------------------------------------------------------------------
    def seed_history(self) -> int:
        """Feed the model the ledger's finished runs (the last ``history_seed_limit``); returns how
        many. Called once at start."""
        rows = self.ledger.list_workloads(states=FINISHED_STATES)
        since = self.conf.clock() - 24 * 3600.0
        for row in rows:  # admissions of the last day: the admission rates of the blend
            at, cq = row.get("admitted_at"), row.get("cluster_queue")
            if at is not None and cq and at >= since:
                bisect.insort(self._admissions.setdefault(cq, []), float(at))
                if self.observed_since is None or at < self.observed_since:
                    self.observed_since = float(at)
        n = 0
        for row in rows[-self.history_seed_limit:]:
            started, finished = row.get("started_at"), row.get("finished_at")
            if started is None or finished is None or finished < started:
                continue
            self._observe(engine_workload(row), finished - started)
            n += 1
        return n

    def observe_finished(self, rec: dict, wl: Optional[Workload]) -> None:
        """A run ended (Admission.finish): its run time feeds the model (on the worker)."""
        started, finished = rec.get("started_at") or rec.get("admitted_at"), rec.get("finished_at")
        if started is None or finished is None or finished < started:
            return
        wl = wl if wl is not None else engine_workload(rec)
        # The worker (process or thread) owns the model: fed at the next refresh.
        self._observe(wl, finished - started)

    def _observe(self, wl: Workload, seconds: float) -> None:
        """A run time for the model: queued for the worker (the next request carries it, and this
        process's copy of the model learns it then: :meth:`_request`)."""
        self._observations.append((wl, seconds))

    # -- scheduling of refreshes ---------------------------------------------------------------------
    def changed(self) -> None:
        """Something changed: refresh soon (debounced; needs a running event loop, else only
        marks the estimates stale until :meth:`refresh_now`)."""
        self._dirty = True
        if not self.enabled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._schedule(loop)

    def forget(self, key: str) -> None:
        """``key``'s request changed (service/moves.py): its estimate, faster options and first
        estimate (for the calibration) were for the old one. Estimated again soon (:meth:`changed`)."""
        for table in (self.results, self.faster, self.quick, self._first):
            table.pop(key, None)
        self._quick_tried.discard(key)
        self.changed()

    def tick(self, now_monotonic: Optional[float] = None) -> None:
        """Called by every loop tick: refresh at least every ``refresh_interval`` seconds."""
        t = time.monotonic() if now_monotonic is None else now_monotonic
        if t - self._last_start >= self.refresh_interval:
            self.changed()

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._running or self._timer is not None:
            return  # the refresh under way (or due) will see the change: _done reschedules when dirty
        # At most cpu_share of one core: a refresh that took 200 ms waits 2 s before the next; at
        # most loop_share of the loop (BENCHMARKS.md, "Estimated start times in the live
        # service"). By wall-clock time, up to refresh_interval: on a busy machine the worker
        # process (at low priority) takes longer, and refreshes (and the workload events they send)
        # come less often; the worker's CPU time bounds it beyond that.
        loop_s = self._loop_seconds
        gap = max(self.min_interval, loop_s / self.loop_share, (self.last_cpu + loop_s) / self.cpu_share,
                  min((self.last_duration + loop_s) / self.cpu_share, self.refresh_interval))
        wait = self._last_start + gap - time.monotonic()
        # The snapshot in a loop callback of its own, never added to the callback that asked (a tick)
        self._timer = loop.call_later(wait, self._start, loop) if wait > 0 else loop.call_soon(self._start, loop)

    def _in_process(self) -> bool:
        return bool(self.use_process)

    def prestart(self) -> None:
        """Start the worker process now, on the estimates' thread (the service starts: the first
        refresh then finds it preloaded); nothing when estimates are off or computed on a thread."""
        if not (self.enabled and self._in_process()):
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="gpuqueue-estimates")
        if self._worker is None:
            self._worker = WorkerProcess(self.child_nice)
        self._executor.submit(self._worker.start)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self._running or not self.enabled:
            return
        self._dirty = False
        self._last_start = time.monotonic()
        self._version += 1
        self._loop_seconds = 0.0
        in_process = self._in_process()
        try:
            t0 = time.perf_counter()
            job = self._job(self._plan(), share_pending=in_process)  # the copy, between two callbacks
            if in_process:
                request = self._request(job)
            self._prepare_seconds = time.perf_counter() - t0
        except Exception:  # pragma: no cover - the queue goes on without estimates
            self.log.exception("gpuqueue: could not prepare the start-time estimates")
            return
        self._running = True
        self._loop_seconds = self._prepare_seconds
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="gpuqueue-estimates")
        if in_process:
            if self._worker is None:
                self._worker = WorkerProcess(self.child_nice)
            # pickled, sent and waited for on the estimates' thread (estimate_worker.py)
            sent = loop.run_in_executor(self._executor, self._worker.compute, request)

            def answered(f) -> None:
                if f.cancelled() or not self.enabled or loop.is_closed():  # the service stopped
                    if not f.cancelled():
                        f.exception()  # retrieved: the worker's end at the stop is expected
                    self._running = False
                    return
                try:
                    data = f.result()
                except Exception as e:  # the worker failed or ended: the next refresh starts another
                    self._worker_failures += 1
                    self.log.error("gpuqueue: start-time estimates failed: %s", e)
                    if self._worker_failures >= 3:  # e.g. sys.executable cannot run the worker
                        self.log.warning("gpuqueue: the estimates' worker process failed 3 times in a row; "
                                         "computing the estimates on a thread from now on")
                        self.use_process = False
                    self._done(loop)
                    return
                self._worker_failures = 0
                self._apply_sliced(loop, self._decode_steps(data))

            sent.add_done_callback(answered)
            return
        fut = loop.run_in_executor(self._executor, self._compute, job)

        def computed(f) -> None:
            try:
                version, now, results, faster, duration, cpu = f.result()
            except Exception:
                self.log.exception("gpuqueue: start-time estimates failed")
                self._done(loop)
                return
            self.last_duration, self.last_cpu = duration, cpu
            self._apply_sliced(loop, self._publish_steps(version, now, results, faster))

        fut.add_done_callback(computed)

    def _done(self, loop: asyncio.AbstractEventLoop) -> None:
        """The refresh under way is over (published, dropped or failed): the next may start."""
        self._running = False
        if self._dirty and self.enabled and not loop.is_closed():
            self._schedule(loop)

    def _apply_sliced(self, loop: asyncio.AbstractEventLoop, steps: Iterator[None]) -> None:
        """Run ``steps`` (a generator that yields between small pieces of work) on the loop in
        slices of at most ``slice_seconds``, each in its own loop callback, so that requests and
        events are served between them (as the scheduling cycles are: BENCHMARKS.md, "Where the
        time goes", point 6); then :meth:`_done`."""

        def step() -> None:
            t0 = time.perf_counter()
            end = t0 + self.slice_seconds
            try:
                for _ in steps:
                    if time.perf_counter() >= end:
                        self._loop_seconds += time.perf_counter() - t0
                        if self.enabled and not loop.is_closed():
                            loop.call_soon(step)
                        else:
                            self._running = False
                        return
            except Exception:
                self.log.exception("gpuqueue: could not publish the start-time estimates")
            self._loop_seconds += time.perf_counter() - t0
            self.apply_seconds = self._loop_seconds - self._prepare_seconds
            self._done(loop)

        step()

    def _decode_steps(self, data: bytes) -> Iterator[None]:
        """The worker process's result (:func:`encode_result`) decoded a chunk of rows at a
        time, then published (:meth:`_publish_steps`); yields between pieces."""
        f = io.BytesIO(data)
        version, now, faster, duration, cpu, n_chunks = pickle.load(f)
        self.last_duration, self.last_cpu = duration, cpu
        if version <= self._published_version:
            return  # an older snapshot than what is shown
        results: dict[str, Estimate] = {}
        for _ in range(n_chunks):
            yield
            for i, (key, row) in enumerate(pickle.load(f)):
                results[key] = _decode_estimate(row)
                if i % 32 == 31:
                    yield
        yield from self._publish_steps(version, now, results, faster)

    def refresh_now(self) -> None:
        """Compute and publish the estimates at once, on this thread (tests, tools without a loop)."""
        self._dirty = False
        self._version += 1
        version, now, results, faster, duration, cpu = self._compute(self._job(self._plan()))
        self.last_duration, self.last_cpu = duration, cpu
        self._publish(version, now, results, faster)

    def close(self) -> None:
        """Stop refreshing (the service stops)."""
        self.enabled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._worker is not None:
            self._worker.close()  # its input closes: it ends (a request under way fails)
            self._worker = None

    # -- on the loop: what the refresh needs ------------------------------------------------------------
    def _plan(self) -> dict:
        """What the loop decides and records for a refresh (cheap: O(running), and O(pending) a
        set lookup each when faster options may be due): the time, the admissions since the last
        refresh, whether faster options are due."""
        now = self.conf.clock()
        sched = self.conf.scheduler
        self._record_admissions(sched, now)
        seen = self._faster_seen
        since = time.monotonic() - self._last_faster
        variants = False
        if self.faster_options_limit and (since >= self.faster_options_interval or since >= 2.0):
            pending = [k for k in sched.workloads if k not in sched.admitted]
            if since >= self.faster_options_interval or any(k not in seen for k in pending):
                # every faster_options_interval, and at once when new workloads wait
                self._last_faster = time.monotonic()
                self._faster_seen = set(pending)
                variants = True
        elif self.faster_options_limit:
            # Rounds are 2 s apart at least: a workload that started waiting since the last one
            # gets its round at a refresh 2 s on (``_done`` schedules it), not only at the
            # periodic one (refresh_interval).
            self._dirty = True
        return {"version": self._version, "now": now, "variants": variants}

    def _job(self, plan: dict, share_pending: bool = False) -> dict:
        """The snapshot and the inputs that live outside the engine (on the loop, between two
        callbacks; or on the calling thread for :meth:`refresh_now`). ``share_pending`` (for the
        worker process): the pending workloads are not copied but frozen (their fields read
        into tuples, ``engine/snapshot.freeze_pending``), which costs the loop a fraction of the
        copies; the worker thaws them (``job["frozen"]``)."""
        now = plan["now"]
        snap = snapshot(self.conf.scheduler, copy_pending=not share_pending)
        records, live = self.live.records, self.live
        holds: dict[str, Optional[float]] = {}
        hold_uids = self.costs.budget_holds
        for uid in hold_uids:
            rec = records.get(uid)
            wl = live.engine_workloads.get(uid)
            if rec is None or wl is None or rec["state"] != PENDING:
                continue
            budget = self.conf.budgets.get(rec["namespace"]) if self.conf.budgets is not None else None
            if wl.key not in snap.workloads:
                snap.add_workload(copy_workload(wl))
            # A hard budget resets with the month; an admin may also raise it (not foreseen).
            holds[wl.key] = next_month_start(now) if budget is not None else None
        deadlines: dict[str, float] = {}
        for key in snap.admitted:
            uid = live.by_key.get(key)
            rec = records.get(uid) if uid is not None else None
            if rec is None:
                continue
            deadline = (rec.get("run") or {}).get("evictionDeadline")
            if deadline:
                deadlines[key] = float(deadline)
        variants = None  # None: keep the faster options found before
        if plan["variants"]:
            variants = self._variants(snap, [k for k in snap.workloads if k not in snap.admitted])
        frozen = freeze_pending(snap) if share_pending else None  # last: the variants read the workloads
        return {"version": plan["version"], "now": now, "snap": snap, "holds": holds, "deadlines": deadlines,
                "variants": variants, "admissions": {cq: list(ts) for cq, ts in self._admissions.items()},
                "frozen": frozen, "ranges": self._ranges(now)}

    def _ranges(self, now: float) -> CalibratedRanges:
        """The range's quantiles at ``now`` (engine/range_calibration.py), on the loop: at most
        once a second (O(window + pending registered), bounded by the calibration's ``window``
        and ``max_pending``: ~1 ms at 500 pending, ~7 ms at 5,000), not at every submission of a
        burst (the estimates at submission share ``quick_loop_seconds``)."""
        c = self._ranges_cache
        if c is not None and 0.0 <= now - c[0] < 1.0:
            return c[1]
        t0 = time.perf_counter()
        ranges = self.calibration.ranges(now)
        self.ranges_seconds = time.perf_counter() - t0
        self._ranges_cache = (now, ranges)
        return ranges

    def _record_admissions(self, sched, now: float) -> None:
        """Admissions since the last refresh, per ClusterQueue (for the rate of the blend)."""
        admitted = sched.admitted
        for key in admitted:
            if key in self._prev_admitted:
                continue
            cq = sched.admitted_cq.get(key)
            at = sched.admit_time.get(key)
            if cq and at is not None:
                bisect.insort(self._admissions.setdefault(cq, []), float(at))
        self._prev_admitted = set(admitted)
        horizon = now - 24 * 3600.0
        for ts in self._admissions.values():
            if ts and ts[0] < horizon:
                del ts[:bisect.bisect_left(ts, horizon)]

    # -- the worker process's side ------------------------------------------------------------------
    _WORKER_SETTINGS = ("simulate_all_below", "exact_per_queue", "faster_options_limit", "faster_options_seconds",
                        "faster_options_min_wait", "rate_blend", "rate_min_admissions", "rows_per_chunk",
                        "walk_below", "observed_since")

    def _request(self, job: dict) -> dict:
        """What the worker process gets for a refresh (on the loop; pickled on the estimates'
        thread): the job (with the range's quantiles), the run times observed since the last
        request (taken from this process's queue: the worker's model learns them), the settings."""
        obs = self._observations
        observations = list(obs)
        obs.clear()
        # This process keeps a copy of the model, learning what the worker learns, for the
        # estimates at submission (quick_estimate, on the loop).
        for wl, seconds in observations:
            self.model.observe(wl, seconds)
        return {"job": job, "observations": observations,
                "settings": {name: getattr(self, name) for name in self._WORKER_SETTINGS}}

    @classmethod
    def worker_side(cls) -> "Estimates":
        """An Estimates that only computes (``estimate_worker_main.py``): its run-time model, fed
        by the requests (the range's quantiles come with each job); no service around it."""
        est = cls.__new__(cls)
        est.model = HistoryRuntime(history_keys, fallback=DeclaredRuntime())
        est._observations = deque()
        est.observed_since = None  # the server's, with each request (_WORKER_SETTINGS)
        return est

    def configure_worker(self, settings: dict) -> None:
        """Take the server's settings (:meth:`_request`) on the worker process's side."""
        for name in self._WORKER_SETTINGS:
            if name in settings:
                setattr(self, name, settings[name])

    # -- on the worker -------------------------------------------------------------------------------
    def _drain_observations(self) -> None:
        """Feed the run-time model what it was given since the last refresh (on the worker
        thread, or in the worker process: :meth:`_request` sends them)."""
        obs = self._observations
        while obs:
            wl, seconds = obs.popleft()
            self.model.observe(wl, seconds)

    def _compute(self, job: dict):
        """The forward run(s) of a refresh: ``(version, now, results, faster options or None,
        wall seconds, CPU seconds of this thread)``."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self._drain_observations()
        snap, now = job["snap"], job["now"]
        if job.get("frozen"):
            thaw_pending(snap, job["frozen"])
        pending = len(snap.workloads) - len(snap.admitted)
        exact = None if pending <= self.simulate_all_below else self.exact_per_queue
        results = estimate_starts(snap, now, self.model, holds=job["holds"], deadlines=job["deadlines"],
                                  exact_per_queue=exact, ranges=False, compress=pending > self.walk_below)
        self._blend_and_range(snap, now, results, job["admissions"], job["ranges"], job["deadlines"])
        if job["variants"] is None:
            return job["version"], now, results, None, time.perf_counter() - t0, time.thread_time() - cpu0
        faster: dict[str, list[dict]] = {}
        budget = self.faster_options_limit
        give_up = time.perf_counter() + self.faster_options_seconds
        for key, options in job["variants"].items():
            est = results.get(key)
            if est is None or est.start_at is None or budget <= 0 or time.perf_counter() > give_up:
                continue
            wait = est.start_at - now
            if wait < self.faster_options_min_wait:
                continue
            budget -= 1
            found = []
            for opt in options:
                start = self._variant_start(snap, key, opt["workload"], now, job)
                if start is None or start > est.start_at - max(60.0, 0.2 * wait):
                    continue
                found.append(_option_json(opt, start, now))
            # the same size first; of the others, the one closest to the request (most GPUs)
            found.sort(key=lambda o: (o["changesSize"], o["estimatedStartAt"], -o["gpus"], o["pricePerHourUsd"]))
            if found:
                faster[key] = found[:3]
        return job["version"], now, results, faster, time.perf_counter() - t0, time.thread_time() - cpu0

    def _blend_and_range(self, snap, now: float, results: dict, admissions: dict, ranges: CalibratedRanges,
                         deadlines: Optional[dict] = None) -> None:
        """Each estimate's point blended with its ClusterQueue's admission rate counted over the
        time observed (engine/wait_rate.py), its range from the service's own past estimates
        (``ranges``: engine/range_calibration.py), and point, range and waitingFor made consistent
        (engine/estimate_bounds.py): ``start_at``, ``early``, ``late`` set in place."""
        finish_estimates(snap, now, results, model=self.model, calibration=ranges,
                         admissions=admissions, rate_blend=self.rate_blend,
                         min_admissions=self.rate_min_admissions, observed_since=self.observed_since,
                         deadlines=deadlines)

    def _variant_start(self, snap, key: str, variant: Workload, now: float, job: dict) -> Optional[float]:
        """When ``variant`` would start in ``key``'s place (a copy of ``snap``, one forward run)."""
        trial = snapshot(snap)
        trial.remove_workload(key)
        trial.add_workload(variant)
        est = estimate_starts(trial, now, self.model, holds=job["holds"], deadlines=job["deadlines"],
                              keys=[key], ranges=False, max_waiting_for=0)
        e = est.get(key)
        return None if e is None else e.start_at

    # -- faster options: the variants of a request -----------------------------------------------------
    def _variants(self, snap, pending: list[str]) -> dict[str, list[dict]]:
        """Variants (another flavor, MIG profile, fewer GPUs) of the pending form submissions, the
        oldest first, at most ``2 × faster_options_limit`` workloads (the worker keeps those
        whose wait is long enough)."""
        out: dict[str, list[dict]] = {}
        cands = sorted((snap.workloads[k] for k in pending), key=lambda w: (-w.priority, w.order_time))
        for wl in cands:
            if len(out) >= 2 * self.faster_options_limit:
                break
            uid = self.live.by_key.get(wl.key)
            rec = self.live.records.get(uid) if uid is not None else None
            if rec is None or rec["spec"].get("source") != "form" or len(wl.pod_sets) != 1:
                continue
            try:
                opts = self._variants_of(rec, wl)
            except Exception:  # pragma: no cover - a variant that does not validate is not offered
                self.log.debug("gpuqueue: no variants for %s", wl.key, exc_info=True)
                continue
            if opts:
                out[wl.key] = opts
        return out

    def _variants_of(self, rec: dict, wl: Workload) -> list[dict]:
        config = self.conf.config
        cq_name = rec.get("cluster_queue") or config.local_queues[f"{wl.namespace}/{wl.queue_name}"].cluster_queue
        cq = config.cluster_queues.get(cq_name)
        if cq is None:
            return []
        ps = wl.pod_sets[0]
        (resource, qty), = ps.requests.items() if len(ps.requests) == 1 else ((None, None),)
        if resource is None or not (resource == GPU or resource.startswith(MIG_PREFIX)):
            return []
        flavor = rec["spec"].get("flavor") or "any"
        requests: list[dict] = []
        if resource == GPU:
            # the same size first: pinned to another flavor (with "any", each flavor pinned: the
            # first whose quota fits may be the one whose devices are all taken)
            rg = cq.group_for(GPU)
            if rg is not None:
                requests += [{"gpus": qty, "flavor": f.name} for f in rg.flavors if f.name != flavor]
            n = qty // 2  # then fewer GPUs, which the option says plainly (_option_json)
            while n >= 1:
                requests.append({"gpus": n, "flavor": flavor})
                n //= 2
        else:
            for r in sorted(self.checks.known_resources()):
                if r.startswith(MIG_PREFIX) and r != resource and cq.group_for(r) is not None:
                    requests.append({"migProfile": r[len(MIG_PREFIX):], "flavor": flavor})
        out = []
        for req in requests:
            try:
                vps = self.checks.pod_set_from_form(req, cq_name)
            except Exception:
                continue
            vps.tolerations = list(ps.tolerations)
            variant = copy_workload(wl)
            variant.pod_sets = [vps]
            variant.admission = None
            (vr, vq), = vps.requests.items()
            f = req.get("flavor")
            f = None if f in (None, "any") else f
            price_flavor = f or self._cheapest_flavor(cq, vr)
            out.append({"workload": variant, "flavor": f, "migProfile": req.get("migProfile"),
                        "gpus": vq if vr == GPU else 0, "resource": vr,
                        "pricePerHourUsd": self.conf.prices.usd_per_hour(price_flavor, vr, vq) if price_flavor else 0.0,
                        "fewer": vr == GPU and resource == GPU and vq < qty,
                        "changesSize": vr != resource or vq != qty,
                        "was": (f"{qty}" if resource == GPU else resource[len(MIG_PREFIX):]),
                        "move": ({"migProfile": req["migProfile"], "flavor": req.get("flavor") or "any"}
                                 if req.get("migProfile") else {"gpus": vq, "flavor": req.get("flavor") or "any"})})
        return out

    def _cheapest_flavor(self, cq, resource: str) -> Optional[str]:
        rg = cq.group_for(resource)
        if rg is None or not rg.flavors:
            return None
        return min((f.name for f in rg.flavors), key=lambda f: self.conf.prices.price(f))

    # -- publishing, on the loop -----------------------------------------------------------------------
    def _publish(self, version: int, now: float, results: dict, faster: Optional[dict]) -> None:
        """Publish a refresh's result at once (:meth:`refresh_now`; the loop applies it in slices)."""
        for _ in self._publish_steps(version, now, results, faster):
            pass

    def _publish_steps(self, version: int, now: float, results: dict, faster: Optional[dict]) -> Iterator[None]:
        """Publish a refresh's result: the estimates are replaced at once (every view then shows
        the new ones), then the first estimates are remembered (for the calibration) and the
        workload events sent, yielding between small pieces of work (:meth:`_apply_sliced`)."""
        if version <= self._published_version:
            return  # an older snapshot than what is shown
        self._published_version = version
        if faster is None:  # no new round of faster options: keep those still pending
            faster = {k: v for k, v in self.faster.items() if k in results}
        self.results, self.faster, self.computed_at = results, faster, now
        self.refreshes += 1
        if self.quick:  # estimates at submission that this refresh saw are replaced by its own
            for key in [k for k, (at, _) in self.quick.items() if k in results or at <= now]:
                del self.quick[key]
        yield
        yield from self._observe_starts(results, now)
        # A workload event for each estimate that changed materially since the last one sent,
        # at most events_per_refresh (first estimates first); the others go at the next refresh.
        by_key, records, sent, sent_faster = self.live.by_key, self.live.records, self._sent, self._sent_faster
        due_first, due = [], []
        for i, (key, est) in enumerate(results.items()):
            if i % 256 == 255:
                yield
            uid = by_key.get(key)
            rec = records.get(uid) if uid is not None else None
            if rec is None or rec["state"] != PENDING:
                continue
            old = sent.get(key)
            if old is None:
                due_first.append((key, uid, est))
            elif _material(old, est, now) or sent_faster.get(key, False) != (key in faster):
                due.append((key, uid, est))
        for key, uid, est in (due_first + due)[:self.events_per_refresh]:
            yield
            rec = records.get(uid)
            if rec is None or rec["state"] != PENDING or self.results is not results:
                continue  # started meanwhile (its own event says so), or a newer result is shown
            sent[key] = est
            sent_faster[key] = key in faster
            self.events.emit_workload(uid)
        if len(sent) > 2 * len(results) + 1000:  # forget workloads that left the queue
            for key in [k for k in sent if k not in results]:
                sent.pop(key, None)
                sent_faster.pop(key, None)

    def _register_first(self, key: str, now: float, est: Estimate) -> None:
        """A workload's first estimate (at submission, else its first refresh's) is registered
        with the range's calibration (engine/range_calibration.py)."""
        if est.start_at is None or key in self._first:
            return
        self._first[key] = now
        self.calibration.submitted(key, now, max(0.0, est.start_at - now))

    def _observe_starts(self, results: dict, now: float) -> Iterator[None]:
        """Register each workload's first estimate; when it has started, its score is exact (the
        calibration's ``started``); one that left without starting is forgotten. Yields between
        pieces of work."""
        first, records, by_key = self._first, self.live.records, self.live.by_key
        for i, (key, est) in enumerate(results.items()):
            if i % 256 == 255:
                yield
            if est.start_at is not None and key not in first:
                self._register_first(key, now, est)
        for key in [k for k in first if k not in results and k not in self.quick]:
            at = first.pop(key)
            uid = by_key.get(key)
            rec = records.get(uid) if uid is not None else None
            admitted = rec.get("admitted_at") if rec is not None else None
            if admitted is not None and admitted >= at:
                self.calibration.started(key, admitted)
            else:
                self.calibration.gone(key)

    # -- the view's fields -----------------------------------------------------------------------------
    def fields(self, rec: dict) -> dict:
        """The estimate fields of a workload view (docs/rest-api.md, Workload): null / empty
        unless the workload is Pending."""
        out = {"estimatedStartAt": None, "estimatedStartRange": None, "waitingFor": [],
               "estimateReason": None, "estimateMessage": None, "estimateComputedAt": None,
               "estimateApproximate": self.delegated, "fasterOptions": []}
        if rec["state"] != PENDING:
            return out
        if not self.wanted:
            out["estimateReason"] = "Disabled"
            out["estimateMessage"] = "start-time estimates are off (c.GpuQueueApp.estimate_start_times)"
            return out
        key = f"{rec['namespace']}/{rec['name']}"
        est = self.results.get(key)
        computed_at = self.computed_at
        if est is None:
            quick = self.quick.get(key) or self.quick_estimate(key)
            if quick is not None:
                computed_at, est = quick
        out["estimateComputedAt"] = computed_at
        if est is None:
            out["estimateReason"] = NOT_YET
            out["estimateMessage"] = "no estimate yet: it is computed within a few seconds of a change"
            return out
        if est.start_at is None:
            out["estimateReason"] = est.reason
            out["estimateMessage"] = est.message or None
            return out
        # Never an estimate in the past: one that time has overtaken starts now, and its range
        # is moved along (the next refresh recomputes it).
        now = self.conf.clock()
        start = max(est.start_at, now)
        out["estimatedStartAt"] = round(start, 3)
        if est.early is not None or est.late is not None:
            early = min(max(est.early if est.early is not None else est.start_at, now), start)
            out["estimatedStartRange"] = {"early": round(early, 3),
                                          "late": None if est.late is None else round(max(est.late, start), 3)}
        out["estimateMessage"] = est.message or ESTIMATE_CAVEAT
        out["waitingFor"] = [self._waiting_json(w, rec) for w in est.waiting_for]
        out["fasterOptions"] = self.faster.get(key, [])
        return out

    def quick_estimate(self, key: str) -> Optional[tuple[float, Estimate]]:
        """An estimate at submission: a workload that no refresh has seen yet (the answer to its
        POST, a view right after) is estimated on the spot, on the loop, from the current state —
        the same forward run as a refresh but for this workload only (``keys``: it stops once the
        workload starts; what it waits for are its blockers' predicted ends), then the same blend,
        range and bounds. ``(computed at, Estimate)``, kept in ``quick`` until the next refresh
        replaces it; None (and tried once only) when the queue is deeper than
        ``quick_max_pending``, when the loop has spent its budget on them (``quick_loop_seconds``
        per second on average, ``quick_loop_burst`` at most at once: a token bucket), or when the run-time model belongs to the worker thread (where the worker is a
        process, this process keeps its own copy of the model, fed with what each request sends
        the worker: :meth:`_request`; the range's calibration is this process's)."""
        if key in self._quick_tried:
            return None
        sched = self.conf.scheduler
        if key not in sched.workloads or key in sched.admitted:
            return None
        self._quick_tried.add(key)
        if len(self._quick_tried) > 10_000:
            self._quick_tried = {key}
        if not self.enabled or not self._in_process():
            return None  # the model is the worker thread's
        if len(sched.workloads) - len(sched.admitted) > self.quick_max_pending:
            return None
        t = time.monotonic()
        self._quick_tokens = min(self.quick_loop_burst,
                                 self._quick_tokens + (t - self._quick_last) * self.quick_loop_seconds)
        self._quick_last = t
        if self._quick_tokens <= 0.0:
            return None
        t0 = time.perf_counter()
        try:
            now = self.conf.clock()
            self._record_admissions(sched, now)
            snap = snapshot(sched)
            deadlines: dict[str, float] = {}
            for k in snap.admitted:
                uid = self.live.by_key.get(k)
                rec = self.live.records.get(uid) if uid is not None else None
                deadline = ((rec or {}).get("run") or {}).get("evictionDeadline")
                if deadline:
                    deadlines[k] = float(deadline)
            results = estimate_starts(snap, now, self.model, deadlines=deadlines, keys=[key], ranges=False,
                                      compress=len(snap.workloads) - len(snap.admitted) > self.walk_below)
            self._blend_and_range(snap, now, results, self._admissions, self._ranges(now), deadlines)
        except Exception:  # pragma: no cover - the refresh will estimate it
            self.log.debug("gpuqueue: no estimate at submission for %s", key, exc_info=True)
            return None
        finally:
            spent = time.perf_counter() - t0
            self._quick_tokens -= spent
            self.quick_seconds += spent
            self.quick_count += 1
        est = results.get(key)
        if est is None:
            return None
        self.quick[key] = (now, est)
        self._register_first(key, now, est)  # calibrated on estimates at submission
        return now, est

    def _waiting_json(self, w, rec: dict) -> dict:
        """One entry of ``waitingFor``: another team's workload is shown by its team only (name
        and owner null); :func:`reveal_waiting_for` fills them in for admins."""
        ns, _, name = w.key.partition("/")
        uid = self.live.by_key.get(w.key)
        other = self.live.records.get(uid) if uid is not None else None
        wl = self.live.engine_workloads.get(uid) if uid is not None else None
        summary = _summary(wl, _flavors_of(wl)) if wl is not None else ""
        same_team = ns == rec["namespace"]
        return {"namespace": ns, "name": name if same_team else None,
                "owner": (other or {}).get("owner") if same_team else None,
                "kind": w.kind, "expectedEndAt": round(w.expected_end, 3), "summary": summary}

    def reveal_waiting_for(self, view: dict) -> dict:
        """``view`` with the names and owners of every workload it waits for (for admins)."""
        items = view.get("waitingFor") or []
        if not any(i.get("name") is None for i in items):
            return view
        est = self.results.get(f"{view['namespace']}/{view['name']}")
        if est is None:
            return view
        full = []
        for item, w in zip(items, est.waiting_for):
            item = dict(item)
            if item.get("name") is None:
                item["name"] = w.key.partition("/")[2]
                uid = self.live.by_key.get(w.key)
                item["owner"] = (self.live.records.get(uid) or {}).get("owner") if uid is not None else None
            full.append(item)
        return {**view, "waitingFor": full}

    def gauge_items(self) -> list[tuple[str, str, str, float]]:
        """(namespace, name, ClusterQueue, estimated wait in s from now) of every pending workload
        with an estimate: the Prometheus gauge ``gpuqueue_workload_estimated_wait_seconds``."""
        now = self.conf.clock()
        out = []
        for key, est in self.results.items():
            if est.start_at is None:
                continue
            uid = self.live.by_key.get(key)
            rec = self.live.records.get(uid) if uid is not None else None
            if rec is None or rec["state"] != PENDING:
                continue
            out.append((rec["namespace"], rec["name"], rec.get("cluster_queue") or "", max(0.0, est.start_at - now)))
        return out


_ESTIMATE_FIELDS = tuple(f.name for f in dataclasses.fields(Estimate))
_WAITING_FOR_FIELDS = tuple(f.name for f in dataclasses.fields(WaitingFor))
_WAITING_FOR_INDEX = _ESTIMATE_FIELDS.index("waiting_for")


def encode_result(version: int, now: float, results: dict, faster: Optional[dict], duration: float, cpu: float,
                   rows_per_chunk: int) -> bytes:
    """A refresh's result as the worker process writes it: one pickle of ``(version, now, faster,
    duration, cpu, number of chunks)``, then the estimates as chunks of at most ``rows_per_chunk``
    ``(key, row)`` pairs, a row being an :class:`Estimate`'s fields in order (its ``waiting_for``
    as tuples): plain tuples unpickle about eight times faster than the dataclasses, and the loop
    decodes one chunk at a time (:meth:`Estimates._decode_steps`)."""
    items = list(results.items())
    chunks = [items[i:i + rows_per_chunk] for i in range(0, len(items), rows_per_chunk)]
    buf = io.BytesIO()  # pickles one after the other (each its own memo), read back by pickle.load
    pickle.dump((version, now, faster, duration, cpu, len(chunks)), buf, protocol=pickle.HIGHEST_PROTOCOL)
    for chunk in chunks:
        pickle.dump([(key, _encode_estimate(est)) for key, est in chunk], buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def _encode_estimate(est: Estimate) -> tuple:
    row = [getattr(est, name) for name in _ESTIMATE_FIELDS]
    row[_WAITING_FOR_INDEX] = tuple(tuple(getattr(w, name) for name in _WAITING_FOR_FIELDS)
                                    for w in est.waiting_for)
    return tuple(row)


def _decode_estimate(row: tuple) -> Estimate:
    est = Estimate(*row)
    if row[_WAITING_FOR_INDEX]:
        est.waiting_for = tuple(WaitingFor(*w) for w in row[_WAITING_FOR_INDEX])
    return est


def _option_json(opt: dict, start: float, now: float) -> dict:
    """A faster option as the view carries it (docs/rest-api.md, Workload.fasterOptions): the
    request, its start and price, ``changesSize`` and ``move`` (the body of ``POST
    workloads/{namespace}/{name}/move`` that takes it, service/moves.py) and a sentence that says
    plainly when the option changes the job's size (issue 34 item 6): "4 × nvidia-l4 is free now:
    start at once, $3.24/h", "runs on 2 GPUs instead of 4: free now, starts at once, $4.42/h"."""
    price = opt["pricePerHourUsd"]
    wait = start - now
    changes = bool(opt.get("changesSize", opt["fewer"] or opt["migProfile"]))
    if not changes:
        what = f"{opt['gpus']} × {opt['flavor']}" if opt["flavor"] else f"{opt['gpus']} GPU{'s' if opt['gpus'] != 1 else ''}"
        when = "is free now: start at once" if wait <= 1.0 else f"would start in ~{_human_wait(wait)}"
        summary = f"{what} {when}, ${price:,.2f}/h"
    else:
        if opt["migProfile"]:
            what = f"runs on MIG {opt['migProfile']} instead of {opt.get('was') or 'its profile'}"
        else:
            n = opt["gpus"]
            what = (f"runs on {n} GPU{'s' if n != 1 else ''}" + (f" of {opt['flavor']}" if opt["flavor"] else "")
                    + (f" instead of {opt['was']}" if opt.get("was") else ""))
        when = "free now, starts at once" if wait <= 1.0 else f"would start in ~{_human_wait(wait)}"
        summary = f"{what}: {when}, ${price:,.2f}/h"
    return {"flavor": opt["flavor"], "migProfile": opt["migProfile"], "gpus": opt["gpus"],
            "estimatedStartAt": round(max(start, now), 3), "startsNow": wait <= 1.0,
            "pricePerHourUsd": round(price, 6), "changesSize": changes,
            "move": dict(opt.get("move") or {}), "summary": summary}


def _human_wait(seconds: float) -> str:
    m = int(round(seconds / 60.0))
    if m < 1:
        return "1 min"
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    return f"{h} h {m} min" if m else f"{h} h"


def _material(old: Optional[Estimate], new: Estimate, now: float) -> bool:
    """Whether a change of estimate is worth a workload event: a new reason, an estimate gained or
    lost, or a start moved by more than max(60 s, 25 % of the wait). (Panels count the time down
    themselves; what an estimate waits for is refreshed with the next such event or fetch.)"""
    if old is None:
        return True
    if old.reason != new.reason:
        return True
    if (old.start_at is None) != (new.start_at is None):
        return True
    if new.start_at is None:
        return False
    return abs(new.start_at - old.start_at) > max(60.0, 0.25 * max(0.0, new.start_at - now))


__all__ = ["Estimates", "ESTIMATE_CAVEAT", "history_keys", "next_month_start"]
