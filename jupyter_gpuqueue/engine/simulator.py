"""An event-driven simulator with a clock: workloads arrive, run for their run time and finish, in
simulated time, admitted by the very same :class:`~.scheduler.Scheduler` the live service runs.

Used by ``jupyter gpuqueue replay`` (trace replay, Kueue's performance-test workloads) and the
benchmarks. Like the rest of ``engine/``: no I/O, no wall clock, no threads. The caller measures the
wall time.

Model (units: seconds of simulated time, floats; quantities in the engine's canonical units)
------------------------------------------------------------------------------------------------
* **Events** sit in one priority queue ordered by (time, sequence): *arrivals* (``add_job``: the
  workload is added to the scheduler, pending, at its ``submit_time``) and *completions* (a
  running workload has run for its run time: ``Scheduler.remove_workload(key, now)`` frees its
  quota and requeues the parked workloads of its cohort tree). Event times are rounded to the
  microsecond (``TIME_DECIMALS``) so that sums such as ``0.1 + 0.2`` and ``0.3`` meet at one
  instant.
* **Instants**: every event due at the same time is applied first, then scheduling cycles run
  *at that instant* until one changes nothing (``result.heads == 0`` or nothing admitted, parked,
  preempted or re-reasoned). Kueue runs its cycles back to back (after a cycle that admitted
  nothing it backs off 1 ms doubling to 10 ms, ``pkg/scheduler/scheduler.go``; with no workload
  pending, ``Manager.Heads`` blocks, and here no cycle runs at all); by default a
  cycle costs no simulated time (``cycle_seconds = 0``) but every cycle is counted. With
  ``cycle_seconds > 0`` each productive cycle takes that long: the next cycle runs that much later,
  after the events due by then — a model of a scheduler whose throughput is bounded.
* **Requeues**: parked (inadmissible) workloads come back when quota is freed in their cohort
  tree; the scheduler batches that like Kueue's delaying workqueue (``requeueBatchPeriod``,
  ``SchedulerOptions.requeue_batch_seconds``) and says when through ``next_requeue_time()``: the
  simulator wakes up then and runs cycles, even when no event is due.
* **Admission** starts a run at the cycle's time; its completion is due ``remaining`` seconds
  later.
* **Preemption** (when the scheduler reports ``CycleResult.preempted``: objects with ``.victim``
  (workload key), ``.preemptor`` and ``.reason``): the victim's run stops at once, the scheduler
  is told (``Scheduler.evict(victim, now)``: quota released, back to pending, ``evictions`` + 1)
  and cycling continues at the same instant. A preempted workload **restarts from the beginning**
  when admitted again (its whole run time is needed again, as Kueue's own performance-test runner
  does: ``test/performance/scheduler/runner/controller/controller.go`` times a run from the last
  admission), unless ``resume_preempted`` keeps the time it had already run (checkpointing).

Results are read from :attr:`Simulator.jobs` (one :class:`SimJob` per workload key, with every
run interval) and :attr:`Simulator.stats` (:class:`SimStats`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from .model import Workload
from .scheduler import CycleResult, Scheduler

TIME_DECIMALS = 6  # event times are rounded to the microsecond

_COMPLETION = 0  # at the same instant completions sort before arrivals (no semantic difference:
_ARRIVAL = 1  # every event of an instant is applied before its first cycle)

Usage = tuple[tuple[tuple[str, str], int], ...]  # (((flavor, resource), quantity), ...)


@dataclass(slots=True)
class Run:
    """One interval during which a workload held quota: ``start``/``end`` in simulated seconds
    (``end`` is None while it runs), the ClusterQueue that admitted it and the quota it used,
    ``usage`` = ``(((flavor, resource), quantity), ...)`` in canonical units (GPUs: devices).
    ``preempted``: the run ended by preemption, not completion."""

    start: float
    cluster_queue: str
    usage: Usage
    end: Optional[float] = None
    preempted: bool = False


@dataclass(slots=True)
class SimJob:
    """One workload's life in the simulation.

    Inputs: ``workload`` (pending, ``admission`` None; its ``creation_time`` should equal
    ``submit_time`` so that FIFO order is submission order), ``submit_time`` (s), ``run_time``
    (s of running needed to finish), optional ``tag`` (anything, e.g. a team or workload class; not
    used by the simulator).

    Outputs (simulated seconds, None until it happens): ``first_admit_time``, ``last_admit_time``,
    ``finish_time``; ``evictions`` (preemptions suffered); ``runs`` (every :class:`Run`);
    ``remaining`` (s still to run).
    """

    workload: Workload
    submit_time: float
    run_time: float
    tag: object = None
    remaining: float = -1.0
    first_admit_time: Optional[float] = None
    last_admit_time: Optional[float] = None
    finish_time: Optional[float] = None
    evictions: int = 0
    runs: list[Run] = field(default_factory=list)
    run_id: int = 0  # bumped by every start and stop: stale completion events are ignored

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def queueing_delay(self) -> Optional[float]:
        """Seconds from submission to the first admission."""
        return None if self.first_admit_time is None else self.first_admit_time - self.submit_time

    @property
    def completion_time(self) -> Optional[float]:
        """Seconds from submission to the finish (queueing + running, lost runs included)."""
        return None if self.finish_time is None else self.finish_time - self.submit_time


@dataclass(slots=True)
class Preemption:
    """A preemption carried out: at ``time``, ``victim`` (workload key) was stopped for
    ``preemptor`` (key) for ``reason`` (Kueue's: InClusterQueue, InCohortReclamation, ...);
    ``lost`` = seconds of the victim's run thrown away (0 with ``resume_preempted``)."""

    time: float
    victim: str
    preemptor: str
    reason: str
    lost: float


@dataclass(slots=True)
class SimStats:
    """Counters of a simulation. ``cycles``: scheduling cycles run; ``idle_cycles``: those that
    changed nothing (the last one of each instant, as a rule); ``instants``: distinct simulated
    times at which events were applied; ``arrivals``, ``admissions`` (re-admissions included),
    ``completions``, ``preemptions``; ``max_cycles_in_instant``: the longest run of cycles at one
    instant; ``skipped_instants``: instants with nothing pending, where no cycle runs (Kueue's
    ``Manager.Heads`` blocks until a ClusterQueue has work); ``end_time``: the simulated time of
    the last arrival or completion (not of a later requeue wake-up or cycle)."""

    cycles: int = 0
    idle_cycles: int = 0
    instants: int = 0
    arrivals: int = 0
    admissions: int = 0
    completions: int = 0
    preemptions: int = 0
    max_cycles_in_instant: int = 0
    skipped_instants: int = 0
    end_time: float = 0.0


class SimulationError(RuntimeError):
    """The simulation cannot go on (e.g. cycles at one instant never settle)."""


class Simulator:
    """Drive a :class:`Scheduler` through simulated time.

    ``scheduler``: a fresh scheduler (its configuration; workloads are added through
    :meth:`add_job`). ``resume_preempted``: a preempted workload keeps the time it already ran
    (default False: it restarts from the beginning). ``cycle_seconds``: simulated cost of a
    productive scheduling cycle (default 0: cycles are free, as between two events nothing else
    could happen). ``max_cycles_per_instant``: a safety bound on cycles at one instant (raises
    :class:`SimulationError`). ``on_cycle(now, result)``: optional observer called after every
    cycle. ``record_preemptions``: keep a :class:`Preemption` per preemption in
    :attr:`preemptions`.

    Livelock guard: at one instant, a workload preempted more than ``max_preemptions_per_workload``
    times (default 3) means the scheduler keeps undoing its own decisions (a victim re-admitted into
    the quota freed for its preemptor, which then preempts it again): :class:`SimulationError`
    names the workloads, instead of cycling forever.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        resume_preempted: bool = False,
        cycle_seconds: float = 0.0,
        max_cycles_per_instant: int = 1_000_000,
        on_cycle: Optional[Callable[[float, CycleResult], None]] = None,
        record_preemptions: bool = True,
        max_preemptions_per_workload: int = 3,
    ):
        if cycle_seconds < 0:
            raise ValueError("cycle_seconds must be >= 0")
        self.scheduler = scheduler
        self.resume_preempted = resume_preempted
        self.cycle_seconds = float(cycle_seconds)
        self.max_cycles_per_instant = max_cycles_per_instant
        self.on_cycle = on_cycle
        self.record_preemptions = record_preemptions
        self.max_preemptions_per_workload = max_preemptions_per_workload
        self._instant_victims: dict[str, int] = {}
        self.jobs: dict[str, SimJob] = {}
        self.preemptions: list[Preemption] = []
        self.stats = SimStats()
        self.now = 0.0
        self._events: list[tuple[float, int, int, str, int]] = []  # (time, kind, seq, key, run_id)
        self._seq = 0

    # -- input -----------------------------------------------------------------------------------
    def add_job(self, job: SimJob) -> None:
        """Schedule ``job``'s arrival at ``job.submit_time`` (not before the current time)."""
        key = job.key
        if key in self.jobs:
            raise ValueError(f"workload {key} already exists")
        if job.run_time < 0:
            raise ValueError(f"workload {key}: run time must be >= 0, got {job.run_time}")
        job.remaining = job.run_time
        self.jobs[key] = job
        t = round(max(job.submit_time, self.now), TIME_DECIMALS)
        self._seq += 1
        heapq.heappush(self._events, (t, _ARRIVAL, self._seq, key, 0))

    def add_jobs(self, jobs: Iterable[SimJob]) -> None:
        """:meth:`add_job` for each, faster for many (one heapify)."""
        events = self._events
        for job in jobs:
            key = job.key
            if key in self.jobs:
                raise ValueError(f"workload {key} already exists")
            if job.run_time < 0:
                raise ValueError(f"workload {key}: run time must be >= 0, got {job.run_time}")
            job.remaining = job.run_time
            self.jobs[key] = job
            self._seq += 1
            events.append((round(max(job.submit_time, self.now), TIME_DECIMALS), _ARRIVAL, self._seq, key, 0))
        heapq.heapify(events)

    # -- running ---------------------------------------------------------------------------------
    def next_event_time(self) -> Optional[float]:
        """When the next event is due, None if there is none."""
        return self._events[0][0] if self._events else None

    def run(self, until: Optional[float] = None) -> SimStats:
        """Process events (and the cycles they cause) until none is left, or the next is due after
        ``until`` (the clock then stands at ``until``). Returns :attr:`stats`. May be called again,
        after more ``add_job`` too."""
        events = self._events
        next_requeue = getattr(self.scheduler, "next_requeue_time", None)
        last = None
        repeats = 0
        while True:
            t = events[0][0] if events else None
            if next_requeue is not None:
                tr = next_requeue()
                if tr is not None:
                    tr = round(max(tr, self.now), TIME_DECIMALS)
                    if t is None or tr < t:
                        t = tr
            if t is None or (until is not None and t > until):
                if until is not None and until > self.now:
                    self.now = round(until, TIME_DECIMALS)  # the clock stands at ``until``
                break
            repeats = repeats + 1 if t == last else 0
            if repeats > 3:
                raise SimulationError(f"the scheduler's requeue at t={t} is never carried out")
            last = t
            self._instant(t)
        return self.stats

    def _apply_due(self, now: float) -> None:
        events = self._events
        sched = self.scheduler
        jobs = self.jobs
        stats = self.stats
        while events and events[0][0] <= now:
            t, kind, _, key, run_id = heapq.heappop(events)
            job = jobs[key]
            if kind == _ARRIVAL:
                stats.arrivals += 1
                stats.end_time = t
                sched.add_workload(job.workload)
            elif run_id == job.run_id:  # a completion of the current run
                stats.end_time = t
                run = job.runs[-1]
                run.end = t  # the scheduler learns of it at ``now`` (later with cycle_seconds)
                job.remaining = 0.0
                job.finish_time = t
                job.run_id += 1
                stats.completions += 1
                sched.remove_workload(key, now)

    def _instant(self, t: float) -> None:
        """Apply the events due at ``t`` and cycle until nothing changes (with ``cycle_seconds``,
        cycles advance the clock and pick up events due meanwhile)."""
        stats = self.stats
        self.now = now = t
        stats.instants += 1
        self._apply_due(now)
        sched = self.scheduler
        step = self.cycle_seconds
        n = 0
        if self._instant_victims:
            self._instant_victims.clear()
        if not self._anything_pending() and not self._requeue_due(now):
            # Nothing to schedule (Kueue's Manager.Heads blocks): no cycle runs.
            stats.skipped_instants += 1
            return
        while True:
            result = sched.schedule(now)
            n += 1
            stats.cycles += 1
            preempted = getattr(result, "preempted", None) or ()
            if result.admitted:
                self._start_runs(result.admitted, now)
            if preempted:
                self._preempt(preempted, now)
            if self.on_cycle is not None:
                self.on_cycle(now, result)
            if result.heads == 0 or not (result.changed or result.admitted or preempted):
                stats.idle_cycles += 1
                break
            if n >= self.max_cycles_per_instant:
                raise SimulationError(
                    f"{n} scheduling cycles at t={now} did not settle (max_cycles_per_instant)"
                )
            if step:
                now = round(now + step, TIME_DECIMALS)
                self.now = now
                if self._instant_victims:  # the livelock guard counts within one point in time
                    self._instant_victims.clear()
                self._apply_due(now)
        if n > stats.max_cycles_in_instant:
            stats.max_cycles_in_instant = n

    def _requeue_due(self, now: float) -> bool:
        nrt = getattr(self.scheduler, "next_requeue_time", None)
        if nrt is None:
            return False
        t = nrt()
        return t is not None and round(t, TIME_DECIMALS) <= now

    def _anything_pending(self) -> bool:
        sched = self.scheduler
        workloads = getattr(sched, "workloads", None)
        admitted = getattr(sched, "admitted", None)
        if workloads is None or admitted is None:
            return True
        return len(workloads) > len(admitted)

    def _start_runs(self, admitted: list[Workload], now: float) -> None:
        jobs = self.jobs
        events = self._events
        stats = self.stats
        for wl in admitted:
            job = jobs[wl.key]
            adm = wl.admission
            usage: dict[tuple[str, str], int] = {}
            for psa in adm.pod_set_assignments:
                for r, flavor in psa.flavors.items():
                    q = psa.resource_usage.get(r, 0)
                    if q:
                        fr = (flavor, r)
                        usage[fr] = usage.get(fr, 0) + q
            job.runs.append(Run(now, adm.cluster_queue, tuple(usage.items())))
            if job.first_admit_time is None:
                job.first_admit_time = now
            job.last_admit_time = now
            job.run_id += 1
            stats.admissions += 1
            self._seq += 1
            heapq.heappush(
                events, (round(now + job.remaining, TIME_DECIMALS), _COMPLETION, self._seq, wl.key, job.run_id)
            )

    def _preempt(self, preempted, now: float) -> None:
        jobs = self.jobs
        sched = self.scheduler
        for p in preempted:
            key = p.victim
            job = jobs.get(key)
            if job is None or key not in sched.admitted:
                continue  # already stopped (named twice) or not ours
            run = job.runs[-1]
            run.end = now
            run.preempted = True
            ran = now - run.start
            lost = 0.0
            if self.resume_preempted:
                job.remaining = max(0.0, job.remaining - ran)
            else:
                job.remaining = job.run_time
                lost = ran
            job.evictions += 1
            job.run_id += 1  # its pending completion is now stale
            self.stats.preemptions += 1
            if self.record_preemptions:
                self.preemptions.append(
                    Preemption(now, key, getattr(p, "preemptor", ""), getattr(p, "reason", ""), lost)
                )
            sched.evict(key, now)
            times = self._instant_victims.get(key, 0) + 1
            self._instant_victims[key] = times
            if times > self.max_preemptions_per_workload:
                raise SimulationError(
                    f"preemption livelock at t={now}: {key} preempted {times} times in one instant "
                    f"(last by {getattr(p, 'preemptor', '?')}, {getattr(p, 'reason', '?')}); the victim "
                    "is re-admitted into the quota freed for its preemptor"
                )


def simulate_jobs(
    scheduler: Scheduler,
    jobs: Iterable[SimJob],
    *,
    resume_preempted: bool = False,
    cycle_seconds: float = 0.0,
) -> Simulator:
    """Convenience: a :class:`Simulator` over ``jobs``, run to the end. Returns the simulator
    (read ``.jobs``, ``.stats``, ``.preemptions``)."""
    sim = Simulator(scheduler, resume_preempted=resume_preempted, cycle_seconds=cycle_seconds)
    sim.add_jobs(jobs)
    sim.run()
    return sim


__all__ = [
    "Preemption",
    "Run",
    "SimJob",
    "SimStats",
    "SimulationError",
    "Simulator",
    "TIME_DECIMALS",
    "simulate_jobs",
]
