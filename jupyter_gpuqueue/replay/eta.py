"""``replay --eta``: how good are the estimated start times? Measured on a trace.

Two passes over the same deterministic simulation:

1. The replay itself (``replay_trace``) says which jobs waited (first admission after their
   submission) and when each started.
2. The same simulation again, stopped at *estimate points*: the submission of every sampled
   waiting job, and 25 %, 50 % and 75 % of its actual wait. At each point the estimator
   (:func:`~jupyter_gpuqueue.engine.estimate.estimate_starts`) runs on the simulation's scheduler
   — which it copies and never changes, so pass 2 decides exactly as pass 1 — for the jobs whose
   point it is, with the chosen runtime model. In the same run, two baselines estimate the same
   jobs at the same points:

   * ``rate``: the job's position in its ClusterQueue (1-based) divided by the ClusterQueue's
     recent admission rate, a moving average over the last ``rate_window`` seconds (1 h; 6 h, then
     24 h, then everything before, when the window saw no admission): the approach of Kueue's
     issue #13159 and the user story of KEP-168-2 (pending workloads visibility). No estimate when
     the ClusterQueue never admitted anything yet.
   * ``oracle``: the estimator with the true run times (``OracleRuntime``): what is left is the
     error of not knowing the future arrivals (and the preemptions they cause).

Runtime models (``--runtime-model``): ``history`` (default): per *burst* (:func:`label_bursts`:
the team's jobs of one GPU count submitted within 10 minutes of each other — array jobs and
sweeps, the trace's stand-in for "the same command or script", which it does not record), then
per team (namespace) and GPU count, then per team, then all jobs, then declared (quantiles 25/50/75 %, at least 5 runs, the last 2,000
per key; for a running job, the runs longer than it has run so far). A job whose burst has fewer
than 5 finished runs (a sweep that has just begun) answers, from its 5th job in the burst on, from
the team's previous sweep of that GPU count, and runs at least as long as its longest-running
sibling has so far — a running one from the sweep's own level instead, fitted to how long its
jobs have run with the previous sweep's as the prior; the share of a burst still running beyond its
longest finished run answers the same way; and a pending job fails at once as often as the last 10
lower-ranked jobs of its burst whose outcome is known did, since a sweep's failures come in runs
(:class:`SweepHistoryRuntime`; ``EtaOptions.sweeps`` and ``sweep_failures``, on by default). It learns
a job's run time when the job finishes in the simulation — only jobs finished before the estimate
point, never the future. ``declared``: the trace declares no maximum run time, so every job is assumed to run
``declared_seconds`` (24 h). ``oracle``: the true run times (then the model and the baseline
agree).

The model's estimate (``history`` and ``declared``; ``EtaOptions.calibrate``, on by default):

* **point**: the forward simulation's wait blended with the ``rate`` baseline's, geometrically:
  ``(sim + 60)^(1-w) · (rate + 60)^w − 60`` with ``w = rate_blend`` (0.2; without a rate: the
  simulation's). ``simulationOnly`` in the block: the simulation alone.
* **range**: from the model's past errors (:class:`~jupyter_gpuqueue.engine.calibration.WaitCalibration`,
  keyed by ClusterQueue; nominal 90 %): at every estimate point the forward run also reports every
  other pending job it admitted (``also_started``); the first such estimate of each job is
  observed when the job starts (its next start after the estimate, from pass 1, fed only once the
  simulation has reached it: the past only). No extra forward runs: the three-draw range is not
  computed.

Sampling (``--eta-sample K``): every K-th waiting job, in submission order (1: all). Coverage and
errors count the sampled jobs only; the block says ``"sampled": K``.

Measured and not used by default (BENCHMARKS.md, "What was tried"): ``draws`` (the median of
several forward runs), ``sibling_floor`` (a job whose burst has too few finished runs but running
ones runs at least as long as the longest-running of those has so far), and the recent waits of similar jobs (``details``
records them per estimate: ``recentCqGpus``, ``recentCq``, and ``…All`` with the jobs that did not
wait; :func:`~jupyter_gpuqueue.engine.wait_rate.recent_wait`).

The block, ``report["eta"]``::

    {"runtimeModel", "sampled", "jobsWaited", "jobsSampled", "coverage", "medianAbsErrorSeconds",
     "p90AbsErrorSeconds", "withinFactor2", "rangeCoverage", "medianWaitSeconds",
     "byPoint": {"submission": {...}, "25%": {...}, "50%": {...}, "75%": {...}},
     "baselines": {"rate": {...}, "oracle": {...}}, "errorsSeconds": {...}, "wallTimeS",
     "calibration": {"observed", "coverageTarget", "rateBlend", "window"}, "simulationOnly": {...},
     "vsRate": {"jobs", "ratio", "interval90", "resamples", "target", "atMostTarget"}}

Top-level figures are those of the estimates made at submission. Error = |estimated start −
actual start| (s). ``withinFactor2``: share of estimates whose estimated wait (from the estimate
point) is within a factor 2 of the actual wait. ``rangeCoverage``: share of actual starts within
[early, late] (also per point in ``byPoint``). ``coverage``: share of sampled
waiting jobs with an estimate. ``vsRate``: the model's median error at submission over the rate
baseline's, on the jobs both estimated, with how sure that is (a sample of ~120 jobs moves a
median by a tenth or more): the 90 % interval of the ratio over 2,000 paired bootstrap resamples of
the jobs and the share of them at most ``ACCURACY_TARGET`` (0.5, issue 14's target)
(:func:`.metrics.median_ratio`).
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional

from ..engine.wait_rate import RATE_WINDOWS, blend_waits, rate_wait, recent_wait
from ..engine.calibration import WaitCalibration
from ..engine.estimate import estimate_starts
from ..engine.model import GPU, Inventory, Workload
from ..engine.runtime_model import DeclaredRuntime, HistoryRuntime, OracleRuntime, RuntimeModel, _quantile
from ..engine.simulator import Simulator
from .metrics import median_ratio, percentile
from .trace import ReplayConfig, TraceJob, build_jobs

FRACTIONS = (0.25, 0.5, 0.75)
POINTS = ("submission",) + tuple(f"{int(f * 100)}%" for f in FRACTIONS)
DEFAULT_SAMPLE = 200
BURST_GAP = 600.0
ACCURACY_TARGET = 0.5  # issue 14: the model's median error at most this times the rate baseline's


@dataclass
class EtaOptions:
    """``runtime_model``: history | declared | oracle; ``sample``: every K-th waiting job;
    ``declared_seconds``: the declared run time when a job declares none; ``horizon``: the
    estimator's horizon (s)."""

    runtime_model: str = "history"
    sample: int = DEFAULT_SAMPLE
    declared_seconds: float = 24 * 3600.0
    horizon: float = 365 * 86400.0
    compress: bool = True
    details: bool = False  # add every estimate to the block ("estimates": [...])
    history_window: int = 2000  # run times kept per history key
    bursts: bool = True  # history keyed by burst first (``label_bursts``)
    burst_gap: float = BURST_GAP
    burst_min_samples: int = 5  # finished runs a burst needs before it answers
    oracle_baseline: bool = True  # False: skip the oracle baseline (faster experiments)
    calibrate: bool = True  # the range from the model's past errors (engine/calibration.py)
    calibration: Optional[dict] = None  # WaitCalibration keyword arguments
    rate_blend: float = 0.2  # the point: simulated wait^(1-w) x rate baseline's wait^w (0: simulation only)
    draws: int = 1  # forward runs per estimate point, the point their median start (estimate_starts' draws)
    # sibling_floor: HistoryRuntime(sibling_floor=True), a job (pending, or running for less long)
    # whose burst has too few finished runs runs at least as long as its longest-running sibling
    # has so far (alone: off by default; ``sweeps`` includes it).
    sibling_floor: bool = False
    # sweeps: the history model is SweepHistoryRuntime (the previous sweep's runs and the sibling
    # floor for a job whose burst has too few finished runs; BENCHMARKS.md).
    sweeps: bool = True
    sweep_min_jobs: int = 20  # jobs a burst needs to be a sweep that a later one learns from
    sweep_min_rank: int = 5  # a job answers from the previous sweep from this rank in its burst on
    # the sibling floor: this quantile of the running siblings' elapsed times (1: the longest-running;
    # 0.5, the median, measured: BENCHMARKS.md)
    sweep_floor_quantile: float = 1.0
    # sweep_level: a running job of a sweep with too few finished runs draws from the sweep's level
    # fitted to its running and finished jobs (SweepHistoryRuntime; BENCHMARKS.md, session 12);
    # sweep_spread: the within-sweep spread of log run times that fit assumes
    sweep_level: bool = True
    sweep_spread: float = 0.2
    # sweep_failures: a pending job of a burst fails at once (runs under failure_seconds) as often as
    # the last ``sweep_failure_window`` earlier-ranked jobs of its burst whose outcome is known did
    # (a sweep's failures come in runs; SweepHistoryRuntime; BENCHMARKS.md, session 14)
    sweep_failures: bool = True
    sweep_failure_window: int = 10
    # sweep_level_median: such a running job of a sweep with a fitted level runs its conditional
    # median, not a draw: the sweep's running jobs end together around its level (session 16)
    sweep_level_median: bool = True


BURST_LABEL = "gpuqueue.jupyter.org/replay-burst"
RANK_LABEL = "gpuqueue.jupyter.org/replay-burst-rank"  # 1 for a burst's first job, 2 for the next…


def team_gpu_keys(wl: Workload) -> tuple:
    """History keys of a replayed job: its burst (when labelled), (team, GPUs), team, everything."""
    gpus = wl.total_requests().get(GPU, 0)
    keys = (("team-gpus", wl.namespace, gpus), ("team", wl.namespace), ("all",))
    burst = wl.labels.get(BURST_LABEL)
    return ((("burst", burst),) + keys) if burst is not None else keys


def label_bursts(jobs, gap: float = BURST_GAP) -> int:
    """Label each job with its *burst*: the jobs of one team and GPU count submitted less than
    ``gap`` seconds after the previous one (array jobs, sweeps: the trace's stand-in for "the same
    command or script", which it does not record). Known at submission; so is each job's rank in
    its burst (``RANK_LABEL``: 1, 2, …). Returns the number of bursts."""
    last: dict[tuple, tuple[float, int]] = {}
    rank: dict[int, int] = {}
    n = 0
    for j in sorted(jobs, key=lambda j: (j.submit_time, j.key)):
        wl = j.workload
        k = (wl.namespace, wl.total_requests().get(GPU, 0))
        prev = last.get(k)
        if prev is None or j.submit_time - prev[0] > gap:
            n += 1
            bid = n
        else:
            bid = prev[1]
        last[k] = (j.submit_time, bid)
        rank[bid] = rank.get(bid, 0) + 1
        wl.labels = dict(wl.labels)
        wl.labels[BURST_LABEL] = str(bid)
        wl.labels[RANK_LABEL] = str(rank[bid])
    return n


class SweepHistoryRuntime(HistoryRuntime):
    """The replay's history model (:class:`HistoryRuntime` keyed by :func:`team_gpu_keys`) for a
    trace of sweeps: a team's bursts of alike jobs (:func:`label_bursts`).

    A sweep's jobs run alike (on Philly, 54–70 min from the 10th to the 90th percentile in one of
    them), but until enough of them have finished the burst key cannot answer, and the team's whole
    mix — a quarter of which fails within a minute, some of which runs for days — would: a queue of
    such draws drains far too fast. So, for a job whose burst has fewer finished runs than its key
    needs:

    * the **sibling floor** (``sibling_floor``, on): it runs at least as long as the longest-running
      job of its burst has so far (``floor_quantile``: 1; 0.5, the median of the running jobs'
      elapsed times, spares the others of a burst one of whose jobs runs for days, and was measured
      worse at the median, BENCHMARKS.md) — a pending job, or a running one that has run less
      long: a sweep whose jobs run is not one that fails at once;
    * the **previous sweep**: from its ``min_rank``-th job in its burst on (a sweep, not a single
      job), it answers from the finished runs of the team's most recent other burst of the same
      GPU count that has at least ``min_jobs`` jobs and enough finished runs (a team's next sweep
      runs like its last one more than like the team's mix: on Philly the previous sweep's median
      is within a factor e^0.43 of the next one's at the median, the team's within e^0.82),
      conditioned on the floor; with fewer than 5 runs that long, the broader keys, conditioned on
      the floor.

    A **running** job of such a sweep (``level``, on; from its ``min_rank``-th job on, with a previous
    sweep) draws instead from the sweep's own *level*, fitted: the sweep's log run times lie around
    a level μ with the spread ``spread`` (0.2: a sweep's runs are alike; the trace's sweeps have a
    median spread of 0.28, their middle half 0.12–0.49), and μ is a priori the previous sweep's
    median (of its runs over ``failure_seconds``) give or take ``level_sd`` (0.45: the previous
    sweep's median misses the next one's by a factor e^0.29 at the median, a normal's σ of 0.43).
    Its finished runs over ``failure_seconds`` and its running jobs — each has run at least its
    elapsed time: censored — give μ's posterior (:meth:`_level`); the job runs as the lognormal of
    that level (its spread widened by μ's uncertainty) says, given that it has run ``elapsed``. So a sweep whose
    jobs have all run past the previous sweep's runs is read as a longer sweep, and one
    long-running sibling (a sweep's first job can run for days) no longer makes the others run as
    long — the floor did: each observation's weight in the fit is bounded. A job already beyond
    ``outlier_z`` spreads above the level (one of a sweep's few long runs) answers as before.
    Measured (BENCHMARKS.md, session 12): the true run times of those running jobs would take the
    median error at submission from 6.8 to 5.7 min; the fit takes it to 6.5. And such a job runs
    the *median* of that lognormal given its elapsed time, whatever its quantile ``u``
    (``level_median``, on): a sweep's running jobs end together around its level, where
    independent draws spread their ends over the level's whole uncertainty (session 16: the
    simulation alone 7.2 -> 6.9 min on every 200th, 7.3 -> 7.0 on every 100th; blended 7.9 -> 7.6 on
    the first 40,000 jobs, within 0.02 min elsewhere). It is the job's sweep having a fitted level
    that sets ``u`` to 0.5, so a job beyond ``outlier_z`` answers as before but at its median too (the
    variant that keeps its own ``u`` there is not measured).

    And for a job whose burst *has* enough finished runs, while others still run: the burst's
    Kaplan-Meier estimate answers up to its longest finished run; the mass beyond it (the share of
    the burst still running: the first runs to finish are a sweep's shortest, often its failures)
    answers from the previous sweep, then the broader keys, conditioned on running longer than that
    run and the sibling floor — not from a Pareto tail at that last finished run, which put the rest
    of a sweep whose first five runs failed at a few minutes.

    And whether a **pending** job fails at once (``failures``, on): a sweep's failures come in
    runs — a broken configuration fails every job after it until it is fixed. On Philly, in the
    bursts of 20+ jobs, a job fails within 2 min in 13 % of cases, but in 88 % when the job ranked
    just before it failed and in 1.8 % when that one ran; the share of failures among a burst's
    last 10 ranks predicts the share among the 50 ranks from 10 further on within 0.025 at the mean
    (the largest team), the share over the whole burst so far within 0.047. So the share of
    failures (runs of at most ``failure_seconds``) among the last ``failure_window`` (10)
    lower-ranked jobs of its burst whose outcome is known — finished, or running past
    ``failure_seconds`` — with one pseudo-observation at the model's own share (below), replaces
    the model's share of failures for the job: its quantile ``u`` is remapped so that the model's
    failures are drawn below that share and its other runs above it (:meth:`_failure_share`,
    :meth:`_remapped`). The model's own share is that of the answer above, found by bisection on
    ``u`` (cached per burst and rank class until the next change). Measured (BENCHMARKS.md, session
    14): the median error at submission from 6.5 / 7.5 min to 6.2 / 6.9 min (every 200th / 100th
    waiting job); with the true failures of the pending jobs instead, 6.4.

    It reads only what is known at the estimate: finished runs, the running jobs' elapsed times and
    each job's rank in its burst (known at submission)."""

    def __init__(self, *args, min_jobs: int = 20, min_rank: int = 5, floor_quantile: float = 1.0,
                 level: bool = True, spread: float = 0.2, level_sd: float = 0.45,
                 failure_seconds: float = 300.0, outlier_z: float = 2.0, failures: bool = True,
                 failure_window: int = 10, level_median: bool = True, **kwargs):
        kwargs.setdefault("sibling_floor", True)
        kwargs.setdefault("sibling_floor_quantile", floor_quantile)
        super().__init__(*args, **kwargs)
        if spread <= 0 or level_sd <= 0:
            raise ValueError("spread and level_sd must be positive")
        self.min_jobs = max(1, int(min_jobs))
        self.min_rank = max(1, int(min_rank))
        self.level, self.spread, self.level_sd = bool(level), float(spread), float(level_sd)
        self.level_median = bool(level_median)
        self.failure_seconds, self.outlier_z = float(failure_seconds), float(outlier_z)
        self._last_sweep: dict = {}  # (team, GPUs) key -> burst key of its latest sweep
        self._running: dict = {}  # burst key -> elapsed times of its running jobs (set_running)
        self._levels: dict = {}  # (burst key, previous sweep's key) -> (μ, sd) or None, until a change
        self.failures, self.failure_window = bool(failures), max(1, int(failure_window))
        self._failed: dict = {}  # burst key -> {rank: failed?} of its finished jobs
        self._ran: dict = {}  # burst key -> ranks of its jobs running past failure_seconds (set_running)
        self._outcomes: dict = {}  # burst key -> (known ranks ascending, failures before each), until a change
        self._shares: dict = {}  # (burst key, rank >= min_rank) -> the model's share of failures, until a change

    def set_running(self, running) -> None:
        running = list(running)
        super().set_running(running)
        by_burst: dict = {}
        ran: dict = {}
        for wl, elapsed in running:
            burst = wl.labels.get(BURST_LABEL)
            if burst is not None:
                by_burst.setdefault(("burst", burst), []).append(float(elapsed))
                if elapsed > self.failure_seconds:
                    ran.setdefault(("burst", burst), []).append(_rank(wl))
        self._running = by_burst
        self._ran = ran
        self._levels, self._outcomes, self._shares = {}, {}, {}

    def observe(self, wl: Workload, runtime: float) -> None:
        self._levels, self._outcomes, self._shares = {}, {}, {}
        super().observe(wl, runtime)
        keys = self.keys(wl)
        if keys and keys[0][0] == "burst":
            self._failed.setdefault(keys[0], {})[_rank(wl)] = runtime <= self.failure_seconds
        if keys and keys[0][0] == "burst" and _rank(wl) >= self.min_jobs \
                and self.samples(keys[0]) >= self._need(keys[0]):
            self._last_sweep[keys[1]] = keys[0]

    def quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        if self.failures and elapsed <= 0.0:
            keys = self.keys(wl)
            if keys and keys[0][0] == "burst":
                p = self._failure_share(keys[0], _rank(wl))
                if p is not None:
                    return self._remapped(wl, keys[0], u, p)
        return self._sweep_quantile(wl, elapsed, u)

    def _failure_share(self, k0, rank: int) -> Optional[tuple[int, int]]:
        """(failures, outcomes) among the last ``failure_window`` jobs of burst ``k0`` ranked below
        ``rank`` whose outcome is known (finished, or running past ``failure_seconds``); None
        when none is."""
        known = self._outcomes.get(k0)
        if known is None:
            outcome = dict.fromkeys(self._ran.get(k0, ()), False)
            outcome.update(self._failed.get(k0, {}))
            ranks = sorted(outcome)
            before = [0]
            for r in ranks:
                before.append(before[-1] + outcome[r])
            known = self._outcomes[k0] = (ranks, before)
        ranks, before = known
        i = bisect.bisect_left(ranks, rank)
        j = max(0, i - self.failure_window)
        return (before[i] - before[j], i - j) if i > j else None

    def _remapped(self, wl: Workload, k0, u: float, seen: tuple[int, int]) -> float:
        """Quantile ``u`` of a pending job's run time with the model's share of failures replaced
        by the share ``seen`` (failures, outcomes) of its burst's recent outcomes, given one
        pseudo-observation at the model's share. Unchanged where the model has no failures or
        nothing but failures to draw from."""
        ck = (k0, _rank(wl) >= self.min_rank)
        u0 = self._shares.get(ck)
        if u0 is None:
            u0 = self._shares[ck] = self._model_failure_share(wl)
        if not 0.0 < u0 < 1.0:
            return self._sweep_quantile(wl, 0.0, u)
        failed, n = seen
        p = (failed + u0) / (n + 1.0)
        if u < p:
            return self._sweep_quantile(wl, 0.0, u / p * u0)
        return max(self.failure_seconds, self._sweep_quantile(wl, 0.0, u0 + (u - p) / (1.0 - p) * (1.0 - u0)))

    def _model_failure_share(self, wl: Workload) -> float:
        """The share of a pending job's runs of at most ``failure_seconds`` by the answer of
        :meth:`_sweep_quantile`: the quantile ``u`` where it crosses that, by bisection (to 2^-12)."""
        def fails(u: float) -> bool:
            return self._sweep_quantile(wl, 0.0, u) <= self.failure_seconds

        lo, hi = 1e-6, 1.0 - 1e-6
        if not fails(lo):
            return 0.0
        if fails(hi):
            return 1.0
        for _ in range(12):
            mid = 0.5 * (lo + hi)
            if fails(mid):
                lo = mid
            else:
                hi = mid
        return hi

    def _sweep_quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        """The answer without the failure runs (the class docstring's first three parts)."""
        keys = self.keys(wl)
        k0 = keys[0] if keys else None
        if k0 is None or k0[0] != "burst":
            return super().quantile(wl, elapsed, u)
        floor0 = self._sibling_floor.get(k0, 0.0) if self.sibling_floor else 0.0
        if self.samples(k0) >= self._need(k0):
            tail = self._censored_tail(k0, elapsed, u)
            if tail is None:
                return super().quantile(wl, elapsed, u)
            v, last = tail
            floor = max(elapsed, last, floor0)
            prev = self._previous_sweep(keys, k0, floor, v)
            if prev is not None:
                return max(elapsed, prev)
            return max(elapsed, self._quantile_keys(wl, keys[1:], floor, v))
        if _rank(wl) >= self.min_rank:
            if elapsed > 0 and self.level:
                if self.level_median and self._level(k0, self._last_sweep.get(keys[1])) is not None:
                    u = 0.5  # its sweep's running jobs end together, around the level (the fallbacks
                    # below too, for a job beyond outlier_z: see the class docstring)
                x = self._from_level(keys, k0, elapsed, u)
                if x is not None:
                    return x
            prev = self._previous_sweep(keys, k0, max(elapsed, floor0), u)
            if prev is not None:
                return max(elapsed, prev)
        return super().quantile(wl, elapsed, u)  # the sibling floor on the broader keys

    def _censored_tail(self, k0, elapsed: float, u: float) -> Optional[tuple[float, float]]:
        """Where quantile ``u`` of burst ``k0``'s Kaplan-Meier estimate (given ``elapsed``) lies
        beyond its longest finished run: (``u`` rescaled within that tail, that run), else None."""
        s = self._samples[k0]
        tail = s.censored_share(elapsed)  # the mass beyond the longest finished run
        if tail <= 0.0 or u < 1.0 - tail:
            return None
        return (u - (1.0 - tail)) / tail, s.sorted[-1]

    def _from_level(self, keys, k0, elapsed: float, u: float) -> Optional[float]:
        """Quantile ``u`` of a running job's run time (s) from its sweep's fitted level, given that it
        has run ``elapsed`` s; None without a level or beyond ``outlier_z`` spreads above it."""
        fit = self._level(k0, self._last_sweep.get(keys[1]))
        if fit is None:
            return None
        mu, sd = fit
        z = (math.log(max(elapsed, 1.0)) - mu) / sd
        if z > self.outlier_z:
            return None
        p0 = _NORMAL.cdf(z)
        p = min(max(p0 + u * (1.0 - p0), 1e-9), 1.0 - 1e-9)
        return max(elapsed, math.exp(mu + sd * _NORMAL.inv_cdf(p)))

    def _level(self, k0, prev) -> Optional[tuple[float, float]]:
        """(μ, sd) of burst ``k0``'s log run times: μ's posterior mean on a grid (the previous
        sweep ``prev``'s median ± ``level_sd`` a priori; the burst's finished runs over
        ``failure_seconds`` as observations with spread ``spread``, its running jobs as censored
        ones; each observation's likelihood floored at 1 %, so that one odd run cannot decide),
        and sd = √(spread² + μ's posterior variance). None without ``prev`` or with fewer than 5
        of its runs over ``failure_seconds``. Cached until the next ``observe`` or ``set_running``."""
        if prev is None or prev == k0:
            return None
        key = (k0, prev)
        if key in self._levels:
            return self._levels[key]
        xs = self._samples[prev].sorted
        i = bisect.bisect_right(xs, self.failure_seconds)
        fit = None
        if len(xs) - i >= 5:
            m0 = math.log(_quantile(xs, 0.5, i))
            own = self._samples.get(k0)
            done = [math.log(x) for x in (own.sorted if own else ()) if x > self.failure_seconds]
            running = [math.log(x) for x in self._running.get(k0, ()) if x > self.failure_seconds]
            sw, sp = self.spread, self.level_sd
            weights = []
            for g in _LEVEL_GRID:
                mu = m0 + g
                ll = -g * g / (2.0 * sp * sp)
                for x in done:
                    ll += math.log(math.exp(-0.5 * ((x - mu) / sw) ** 2) / sw + 0.01)
                for x in running:
                    ll += math.log(0.5 * math.erfc((x - mu) / (sw * math.sqrt(2.0))) + 0.01)
                weights.append(ll)
            top = max(weights)
            weights = [math.exp(v - top) for v in weights]
            total = sum(weights)
            mean = sum(w * g for w, g in zip(weights, _LEVEL_GRID)) / total
            var = sum(w * (g - mean) ** 2 for w, g in zip(weights, _LEVEL_GRID)) / total
            fit = (m0 + mean, math.sqrt(sw * sw + var))
        self._levels[key] = fit
        return fit

    def _previous_sweep(self, keys, k0, floor: float, u: float) -> Optional[float]:
        """Quantile ``u`` of the team's previous sweep's runs longer than ``floor``; None without
        such a sweep or with fewer than 5 such runs."""
        prev = self._last_sweep.get(keys[1])
        if prev is None or prev == k0:
            return None
        xs = self._samples[prev].sorted
        i = bisect.bisect_right(xs, floor) if floor > 0 else 0
        return _quantile(xs, u, i) if len(xs) - i >= 5 else None


_NORMAL = NormalDist()
_LEVEL_GRID = tuple(i * 0.05 for i in range(-50, 51))  # a sweep's level: log-offsets from the prior's


def _rank(wl: Workload) -> int:
    try:
        return int(wl.labels.get(RANK_LABEL, 0))
    except ValueError:
        return 0


def make_model(name: str, runtimes: dict[str, float], declared_seconds: float, window: int = 2000,
               burst_min_samples: int = 5, sweeps: bool = False, sweep_min_jobs: int = 20,
               sweep_min_rank: int = 5, sweep_floor_quantile: float = 1.0, sweep_level: bool = True,
               sweep_spread: float = 0.2, sweep_failures: bool = True,
               sweep_failure_window: int = 10, sweep_level_median: bool = True) -> RuntimeModel:
    """The runtime model ``name`` of ``--runtime-model`` (history | declared | oracle);
    ``sweeps``: the history model is :class:`SweepHistoryRuntime`."""
    declared = DeclaredRuntime(declared_seconds)
    if name == "declared":
        return declared
    if name == "oracle":
        return OracleRuntime(runtimes, declared)
    if name == "history":
        need = max(1, int(burst_min_samples))
        cls, extra = HistoryRuntime, {}
        if sweeps:
            cls, extra = SweepHistoryRuntime, {"min_jobs": sweep_min_jobs, "min_rank": sweep_min_rank,
                                               "floor_quantile": sweep_floor_quantile, "level": sweep_level,
                                               "spread": sweep_spread, "failures": sweep_failures,
                                               "failure_window": sweep_failure_window,
                                               "level_median": sweep_level_median}
        return cls(team_gpu_keys, fallback=declared, window=window,
                   min_samples_for=lambda k: need if k[0] == "burst" else 5, **extra)
    raise ValueError(f"unknown runtime model {name!r} (history, declared, oracle)")


def _stats(errors: list[float], factor2: list[bool], n_jobs: int, covered: int) -> dict:
    xs = sorted(errors)
    return {
        "estimates": len(xs),
        "coverage": (covered / n_jobs) if n_jobs else None,
        "medianAbsErrorSeconds": percentile(xs, 50),
        "p90AbsErrorSeconds": percentile(xs, 90),
        "withinFactor2": (sum(factor2) / len(factor2)) if factor2 else None,
    }


class _Tally:
    def __init__(self):
        self.errors = {p: [] for p in POINTS}
        self.factor2 = {p: [] for p in POINTS}
        self.covered = {p: 0 for p in POINTS}
        self.in_range = {p: [] for p in POINTS}

    def add(self, point: str, t: float, est: Optional[float], actual: float, rng=None) -> None:
        if est is None:
            return
        self.covered[point] += 1
        self.errors[point].append(abs(est - actual))
        act_wait, est_wait = actual - t, est - t
        self.factor2[point].append(act_wait / 2 <= est_wait <= act_wait * 2 if act_wait > 0 else est_wait <= 0)
        if rng is not None:
            lo, hi = rng
            self.in_range[point].append(lo is not None and lo <= actual and (hi is None or actual <= hi))

    def block(self, n_jobs: int) -> dict:
        out = _stats(self.errors["submission"], self.factor2["submission"], n_jobs, self.covered["submission"])
        if self.in_range["submission"]:
            out["rangeCoverage"] = sum(self.in_range["submission"]) / len(self.in_range["submission"])
        out["byPoint"] = {p: _stats(self.errors[p], self.factor2[p], n_jobs, self.covered[p]) for p in POINTS}
        for p in POINTS:
            if self.in_range[p]:
                out["byPoint"][p]["rangeCoverage"] = sum(self.in_range[p]) / len(self.in_range[p])
        return out


def eta_report(
    trace: list[TraceJob],
    rc: ReplayConfig,
    first: Simulator,
    make_simulator,
    *,
    inventory: Optional[Inventory] = None,
    options,
    eta: EtaOptions,
    source: str = "<trace>",
) -> dict:
    """Pass 2 (see the module docstring) after ``first``, the finished replay. ``make_simulator``:
    ``(config, inventory, options) -> Simulator`` as pass 1 built it."""
    t0 = time.perf_counter()
    K = max(1, int(eta.sample))
    waited = sorted((j for j in first.jobs.values()
                     if j.first_admit_time is not None and j.first_admit_time > j.submit_time),
                    key=lambda j: (j.submit_time, j.key))
    never_admitted = [j for j in first.jobs.values() if j.first_admit_time is None]
    sampled = waited[::K]
    actual = {j.key: j.first_admit_time for j in sampled}
    # Estimate points: (time, order, key, point name)
    points: list[tuple[float, int, str, str]] = []
    for j in sampled:
        wait = j.first_admit_time - j.submit_time
        points.append((j.submit_time, 0, j.key, "submission"))
        for i, f in enumerate(FRACTIONS):
            points.append((j.submit_time + f * wait, i + 1, j.key, POINTS[i + 1]))
    points.sort()
    # What pass 1 knows and the estimate points may use only up to their time: finished runs
    # (history), admissions per ClusterQueue (rate baseline).
    finished = sorted((j.finish_time, j.key) for j in first.jobs.values() if j.finish_time is not None)
    admissions: dict[str, list[float]] = {}
    for j in first.jobs.values():
        for run in j.runs:
            admissions.setdefault(run.cluster_queue, []).append(run.start)
    for v in admissions.values():
        v.sort()
    runtimes = {j.key: j.run_time for j in first.jobs.values()}
    recent = _recent_index(first)

    jobs = build_jobs(trace, rc, max_gpus_per_pod=options.max_gpus_per_pod, source=source)
    if eta.bursts:
        label_bursts(jobs, eta.burst_gap)
    sim = make_simulator(rc.config, inventory, options)
    sim.add_jobs(jobs)
    sched = sim.scheduler
    model = make_model(eta.runtime_model, runtimes, eta.declared_seconds, eta.history_window,
                       eta.burst_min_samples, sweeps=eta.sweeps and eta.bursts,
                       sweep_min_jobs=eta.sweep_min_jobs, sweep_min_rank=eta.sweep_min_rank,
                       sweep_floor_quantile=eta.sweep_floor_quantile, sweep_level=eta.sweep_level,
                       sweep_spread=eta.sweep_spread, sweep_failures=eta.sweep_failures,
                       sweep_failure_window=eta.sweep_failure_window,
                       sweep_level_median=eta.sweep_level_median)
    if eta.sibling_floor and isinstance(model, HistoryRuntime):
        model.sibling_floor = True
    oracle = OracleRuntime(runtimes, DeclaredRuntime(eta.declared_seconds))
    learn = callable(getattr(model, "observe", None))  # a model that learns from finished runs
    fed = 0
    ours, rate, orc, raw = _Tally(), _Tally(), _Tally(), _Tally()
    # Calibration (engine/calibration.py): the first estimate the model made of every waiting
    # job (at an estimate point, the forward run estimates every job it admits: also_started),
    # observed when the job starts — the past only.
    calibrate = eta.calibrate and eta.runtime_model != "oracle"
    cal = WaitCalibration(**(eta.calibration or {})) if calibrate else None
    blend = max(0.0, min(1.0, float(eta.rate_blend))) if calibrate else 0.0
    starts_of = {j.key: sorted(r.start for r in j.runs) for j in first.jobs.values() if j.runs}
    first_est: dict[str, tuple[float, float, str]] = {}  # key -> (t, estimated wait, calibration key)
    to_observe: list[tuple[float, str]] = []  # (actual start, key)
    at_submission: list[tuple[float, float]] = []  # (model's error, rate's error) of a job, both estimated
    records = []
    details = []
    t_est = t_oracle = 0.0
    i = 0
    while i < len(points):
        t = points[i][0]
        group = []
        while i < len(points) and points[i][0] == t:
            group.append(points[i])
            i += 1
        sim.run(until=t)
        if learn:
            while fed < len(finished) and finished[fed][0] <= t:
                key = finished[fed][1]
                model.observe(sim.jobs[key].workload, runtimes[key])
                fed += 1
        while to_observe and to_observe[0][0] <= t:
            at, key = heapq.heappop(to_observe)
            t0k, ew, ck = first_est[key]
            cal.observe(ck, ew, at - t0k, at)
            if eta.details:
                records.append({"key": key, "cq": ck, "t": t0k, "estWait": round(ew, 1),
                                "actualWait": round(at - t0k, 1)})
        keys = [g[2] for g in group if g[2] in sched.workloads and g[2] not in sched.admitted]
        a = time.perf_counter()
        # The range: with calibration, from the past errors; without, two more forward runs, only
        # where it is scored (at submission).
        ranges = not calibrate and any(g[3] == "submission" for g in group)
        est = estimate_starts(sched, t, model, keys=keys, horizon=eta.horizon, compress=eta.compress,
                              ranges=ranges, also_started=calibrate, draws=eta.draws)
        est1 = est
        if eta.details and eta.draws > 1:
            est1 = estimate_starts(sched, t, model, keys=keys, horizon=eta.horizon, compress=eta.compress,
                                   ranges=False)
        if calibrate:
            for k, e in est.items():
                if e.start_at is None or k in first_est or k not in starts_of:
                    continue
                runs = starts_of[k]  # its next start (a preempted job pending again started before)
                i_run = bisect.bisect_left(runs, t)
                if i_run == len(runs):
                    continue
                first_est[k] = (t, e.start_at - t, _cal_key(sched, k))
                heapq.heappush(to_observe, (runs[i_run], k))
        b = time.perf_counter()
        if eta.runtime_model == "oracle":
            est_o = est
        elif not eta.oracle_baseline:
            est_o = {}
        else:
            est_o = estimate_starts(sched, t, oracle, keys=keys, horizon=eta.horizon, ranges=False,
                                    compress=eta.compress)
        c = time.perf_counter()
        t_est += b - a
        t_oracle += c - b
        for _, _, key, point in group:
            act = actual[key]
            e = est.get(key)
            r_est = _rate_estimate(sched, key, t, admissions)
            m_est, m_rng = (e.start_at, (e.early, e.late)) if e and e.start_at is not None else (None, None)
            if calibrate and m_est is not None:
                raw.add(point, t, m_est, act, m_rng)
                pt, lo, hi = cal.adjust(_cal_key(sched, key), m_est - t)
                if r_est is not None and blend > 0:
                    pt = _blend(pt, r_est - t, blend)
                m_est, m_rng = t + pt, (t + min(lo, pt), t + max(hi, pt))
            ours.add(point, t, m_est, act, m_rng)
            if point == "submission" and m_est is not None and r_est is not None:
                at_submission.append((abs(m_est - act), abs(r_est - act)))
            eo = est_o.get(key)
            orc.add(point, t, eo.start_at if eo else None, act)
            rate.add(point, t, r_est, act)
            if eta.details:
                details.append({"key": key, "point": point, "t": t, "actual": act, "model": m_est,
                                "early": m_rng[0] if m_rng else None, "late": m_rng[1] if m_rng else None,
                                "raw": e.start_at if e else None, "oracle": eo.start_at if eo else None,
                                "rate": r_est, "cq": _cal_key(sched, key),
                                "raw1": est1[key].start_at if key in est1 else None,
                                "submit": sim.jobs[key].submit_time,
                                **_recent_estimates(recent, sched, sim.jobs[key], t)})
    n = len(sampled)
    block = {"runtimeModel": eta.runtime_model, "sampled": K, "jobsWaited": len(waited),
             "jobsNeverAdmitted": len(never_admitted), "jobsSampled": n}
    block |= ours.block(n)
    waits = sorted(j.first_admit_time - j.submit_time for j in sampled)
    block["medianWaitSeconds"] = percentile(waits, 50)
    block["meanWaitSeconds"] = (sum(waits) / len(waits)) if waits else None
    block["baselines"] = {"rate": rate.block(n), "oracle": orc.block(n)}
    block["baselines"]["rate"]["windowSeconds"] = RATE_WINDOWS[0]
    if calibrate:
        block["calibration"] = {"observed": cal.observed, "coverageTarget": cal.coverage, "rateBlend": blend,
                                "window": cal.window}
        block["simulationOnly"] = raw.block(n)  # the forward simulation's start, no blend
    block["vsRate"] = median_ratio(at_submission, target=ACCURACY_TARGET)
    block["errorsSeconds"] = {
        "model": [round(x, 1) for x in ours.errors["submission"]],
        "rate": [round(x, 1) for x in rate.errors["submission"]],
        "oracle": [round(x, 1) for x in orc.errors["submission"]],
    }
    if eta.details:
        block["estimates"] = details
        block["calibrationRecords"] = records
    block["wallTimeS"] = {"total": round(time.perf_counter() - t0, 3), "estimator": round(t_est, 3),
                          "oracle": round(t_oracle, 3), "estimatePoints": len({p[0] for p in points})}
    return block


def _recent_index(first: Simulator) -> dict[tuple, tuple[list[float], list[float], list[float]]]:
    """From pass 1, per (ClusterQueue, GPUs) and per ClusterQueue: the first admissions' start
    times (ascending), their waits, and the waits of those that waited (with their starts)."""
    rows: dict[tuple, list[tuple[float, float]]] = {}
    for j in first.jobs.values():
        if j.first_admit_time is None or not j.runs:
            continue
        cq = j.runs[0].cluster_queue
        gpus = j.workload.total_requests().get(GPU, 0)
        w = j.first_admit_time - j.submit_time
        for k in (("cq-gpus", cq, gpus), ("cq", cq)):
            rows.setdefault(k, []).append((j.first_admit_time, w))
    out = {}
    for k, v in rows.items():
        v.sort()
        out[k] = ([a for a, _ in v], [w for _, w in v])
        pos = [(a, w) for a, w in v if w > 0]
        out[k + ("waited",)] = ([a for a, _ in pos], [w for _, w in pos])
    return out


def _recent_estimates(recent, sched, job, t: float) -> dict:
    wl = sched.workloads.get(job.key)
    if wl is None:
        return {}
    cq = sched.cluster_queue_name(wl)
    gpus = wl.total_requests().get(GPU, 0)
    el = max(0.0, t - job.submit_time)
    out = {}
    for name, k in (("recentCqGpus", ("cq-gpus", cq, gpus, "waited")), ("recentCq", ("cq", cq, "waited")),
                    ("recentCqGpusAll", ("cq-gpus", cq, gpus)), ("recentCqAll", ("cq", cq))):
        v = recent.get(k)
        w = recent_wait(v[0], v[1], t, elapsed=el) if v else None
        out[name] = None if w is None else t + w
    return out


def _blend(model_wait: float, rate_wait_s: float, w: float, offset: float = 60.0) -> float:
    """:func:`..engine.wait_rate.blend_waits` (the service's blend too)."""
    return blend_waits(model_wait, rate_wait_s, w, offset)


def _cal_key(sched, key: str) -> str:
    """The calibration key of a job: its ClusterQueue."""
    wl = sched.workloads.get(key)
    return sched.cluster_queue_name(wl) if wl is not None else "?"


def _rate_estimate(sched, key: str, t: float, admissions: dict[str, list[float]]) -> Optional[float]:
    """Position (1-based) / the ClusterQueue's recent admission rate (engine/wait_rate.py)."""
    pos = sched.position(key)
    wl = sched.workloads.get(key)
    if pos is None or wl is None:
        return None
    wait = rate_wait(pos[0], admissions.get(sched.cluster_queue_name(wl), []), t)
    return None if wait is None else t + wait


__all__ = ["DEFAULT_SAMPLE", "EtaOptions", "FRACTIONS", "POINTS", "SweepHistoryRuntime", "eta_report", "label_bursts",
           "make_model", "team_gpu_keys"]
