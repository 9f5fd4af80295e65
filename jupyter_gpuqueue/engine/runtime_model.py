"""Predicted run times, for start-time estimates (:mod:`.estimate`): a small pluggable protocol and
three models.

The protocol
------------
A runtime model has one method, ``predict(wl, elapsed) -> Prediction``: the *total* run time of
workload ``wl`` (seconds from its admission to its end), given that it has already run ``elapsed``
seconds (0 for a pending workload). A :class:`Prediction` is three figures, ``low <= point <=
high``: the estimator runs its forward simulation with ``point`` for the estimated start and with
``low`` / ``high`` for the early and late bounds of the range. A model must return totals of at
least ``elapsed`` (a running workload cannot end in the past) and must not read the future: in a
replay, only what finished before the moment of the estimate.

The estimator clamps every prediction by the workload's maximum run time
(``maximum_execution_time_seconds``) and by any deadline the caller passes (a lease's end, a
preemption deadline), so a model need not.

The models
----------
* :class:`DeclaredRuntime`: the declared maximum run time (``maximum_execution_time_seconds``), or
  ``default_seconds`` when none is declared; the same figure three times. What a user would
  assume knowing nothing else; pessimistic by construction. A workload without a declared maximum
  that has already run longer than the default is assumed to run as long again (:func:`outrun`).
* :class:`OracleRuntime`: the true run times (known only in a replay): the ceiling of what any
  model can reach, and the baseline that measures the error the *queue* adds (arrivals,
  preemptions) apart from the error of the run-time prediction.
* :class:`HistoryRuntime`: quantiles of the run times of similar workloads that finished before,
  learned online (``observe`` as runs end). *Similar* is a list of keys from the most to the least
  specific, given by a function of the workload (default :func:`default_history_keys`: same owner
  and command and shape, same namespace and shape, same namespace, everything); the first key with
  at least ``min_samples`` recorded run times answers, else the ``fallback`` model (default:
  declared). For a running workload the quantiles are those of the recorded run times longer than
  ``elapsed`` (the distribution conditioned on having run that long), which is what makes a
  heavy-tailed workload mix predictable: a job that has already run 5 hours is not expected to
  end at the median of all jobs. Each key keeps its last ``window`` run times. A running workload
  that has outrun every key's history is assumed to run as long again (:func:`outrun`), not to
  end now. ``set_running`` (the estimator calls it) adds the running workloads as censored
  observations: ``quantile`` then reads the Kaplan-Meier estimate, which corrects the bias of a
  history of finished runs towards the short ones (long runs are still running). Its mass beyond
  the longest finished run (the share still running) runs at least as long as the median of those
  running ones has so far, then as the broader keys say.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from typing import Callable, Hashable, Iterable, Mapping, NamedTuple, Optional, Protocol, Sequence

from .model import Workload

DEFAULT_RUNTIME_SECONDS = 24 * 3600.0


class Prediction(NamedTuple):
    """Total run time in seconds: ``low`` (early bound), ``point`` (the estimate), ``high``."""

    low: float
    point: float
    high: float


class RuntimeModel(Protocol):
    def predict(self, wl: Workload, elapsed: float) -> Prediction:
        """Total run time of ``wl`` (>= ``elapsed``), given it has run ``elapsed`` seconds."""
        ...  # pragma: no cover


class QuantileModel(RuntimeModel, Protocol):
    """A model that also knows its distribution: ``quantile(wl, elapsed, u)`` is the total run
    time at quantile ``u`` (0 < u < 1) of the run times of workloads like ``wl`` that run longer
    than ``elapsed``. The estimator then draws each workload's run time at its own quantile (see
    :mod:`.estimate`, "Sampled run times")."""

    def quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        ...  # pragma: no cover


def outrun_quantile(elapsed: float, u: float) -> float:
    """Quantile ``u`` of the run time of a workload that has outrun everything known: Pareto with
    index 1 from ``elapsed`` (the median is twice ``elapsed``, as :func:`outrun`'s point), ``u``
    capped at 0.9."""
    return elapsed / (1.0 - min(u, 0.9))


OUTRUN = (1.5, 2.0, 3.0)


def outrun(elapsed: float) -> Prediction:
    """A workload that has run longer than anything the model knows (and declares no maximum):
    as long again (point), half as long again (low), twice as long again (high). For
    heavy-tailed run times (Philly's: median 19 min, mean 3.6 h) the time still to run grows with
    the time already run."""
    return Prediction(elapsed * OUTRUN[0], elapsed * OUTRUN[1], elapsed * OUTRUN[2])


def _at_least(p: Prediction, elapsed: float) -> Prediction:
    if p.low > elapsed or elapsed <= 0:
        return p
    if p.high <= elapsed:
        return outrun(elapsed)
    return Prediction(max(p.low, elapsed), max(p.point, elapsed), max(p.high, elapsed))


class DeclaredRuntime:
    """The declared maximum run time, else ``default_seconds`` (24 h)."""

    def __init__(self, default_seconds: float = DEFAULT_RUNTIME_SECONDS):
        self.default_seconds = float(default_seconds)

    def predict(self, wl: Workload, elapsed: float) -> Prediction:
        t = wl.maximum_execution_time_seconds
        if t:
            t = max(float(t), elapsed)  # a declared maximum is enforced: it ends by then
            return Prediction(t, t, t)
        if elapsed >= self.default_seconds:
            return outrun(elapsed)
        t = self.default_seconds
        return Prediction(t, t, t)

    def quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        t = wl.maximum_execution_time_seconds
        if t:
            return max(float(t), elapsed)
        if elapsed >= self.default_seconds:
            return outrun_quantile(elapsed, u)
        return self.default_seconds


class OracleRuntime:
    """True run times by workload key (a replay knows them); ``fallback`` for unknown keys."""

    def __init__(self, runtimes: Mapping[str, float], fallback: Optional[RuntimeModel] = None):
        self.runtimes = runtimes
        self.fallback = fallback or DeclaredRuntime()

    def predict(self, wl: Workload, elapsed: float) -> Prediction:
        t = self.runtimes.get(wl.key)
        if t is None:
            return self.fallback.predict(wl, elapsed)
        t = max(float(t), elapsed)
        return Prediction(t, t, t)

    def quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        t = self.runtimes.get(wl.key)
        if t is None:
            return _quantile_of(self.fallback, wl, elapsed, u)
        return max(float(t), elapsed)


def _quantile_of(model, wl: Workload, elapsed: float, u: float) -> float:
    q = getattr(model, "quantile", None)
    if q is not None:
        return q(wl, elapsed, u)
    return model.predict(wl, elapsed).point


def _shape(wl: Workload) -> tuple:
    return tuple(sorted(wl.total_requests().items()))


OWNER_LABEL = "gpuqueue.jupyter.org/owner"
COMMAND_ANNOTATION = "gpuqueue.jupyter.org/command"


def default_history_keys(wl: Workload) -> tuple:
    """Keys of similar workloads, most specific first: (namespace, owner, command, shape),
    (namespace, shape), (namespace,), (). Owner and command are read from the label
    :data:`OWNER_LABEL` and the annotation :data:`COMMAND_ANNOTATION` when the workload has them."""
    shape = _shape(wl)
    ns = wl.namespace
    keys = []
    owner = wl.labels.get(OWNER_LABEL)
    command = wl.annotations.get(COMMAND_ANNOTATION)
    if owner is not None or command is not None:
        keys.append(("owner-command-shape", ns, owner, command, shape))
    keys.append(("namespace-shape", ns, shape))
    keys.append(("namespace", ns))
    keys.append(("all",))
    return tuple(keys)


def _quantile(xs: list[float], q: float, start: int = 0) -> float:
    """Linear-interpolated quantile of the sorted non-empty list ``xs[start:]`` (not copied)."""
    n = len(xs) - start
    if n == 1:
        return xs[start]
    pos = (n - 1) * q
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return xs[start + lo] + (xs[start + hi] - xs[start + lo]) * (pos - lo)


class _Samples:
    __slots__ = ("order", "sorted", "cache", "sums", "censored", "km")

    def __init__(self):
        self.order: deque = deque()
        self.sorted: list[float] = []
        self.cache: Optional[Prediction] = None
        self.sums: Optional[list[float]] = None  # suffix sums of ``sorted``, built when needed
        self.censored: list[float] = []  # elapsed times of running workloads (sorted)
        self.km: Optional[tuple[list[float], list[float]]] = None  # Kaplan-Meier: times, survival

    def kaplan_meier(self) -> tuple[list[float], list[float]]:
        """The Kaplan-Meier survival curve of the run times, the running workloads counted as
        censored at their elapsed time: (event times ascending, S just after each)."""
        if self.km is None:
            xs, cs = self.sorted, self.censored
            n = len(xs) + len(cs)
            times: list[float] = []
            surv: list[float] = []
            S = 1.0
            i = j = 0
            while i < len(xs):
                t = xs[i]
                while j < len(cs) and cs[j] < t:  # censored before t: no longer at risk
                    n -= 1
                    j += 1
                d = 0
                while i < len(xs) and xs[i] == t:
                    d += 1
                    i += 1
                if n > 0:
                    S *= 1.0 - d / n
                n -= d
                times.append(t)
                surv.append(S)
            self.km = (times, surv)
        return self.km

    def censored_share(self, elapsed: float) -> float:
        """Of the workloads that ran longer than ``elapsed``, the share that still runs beyond the
        longest finished run (Kaplan-Meier's mass there): 0 without censored runs or when
        ``elapsed`` is beyond every finished run."""
        if not self.censored:
            return 0.0
        times, surv = self.kaplan_meier()
        if elapsed >= times[-1]:
            return 0.0
        j = bisect.bisect_right(times, elapsed)
        return surv[-1] / (surv[j - 1] if j > 0 else 1.0)

    def tail_mean(self, start: int) -> float:
        if self.sums is None:
            sums = list(itertools.accumulate(reversed(self.sorted)))
            sums.reverse()
            self.sums = sums
        return self.sums[start] / (len(self.sorted) - start)


class HistoryRuntime:
    """Quantiles of past run times of similar workloads (see the module docstring).

    ``keys(wl)``: keys from the most to the least specific (default :func:`default_history_keys`);
    ``quantiles``: (low, point, high) quantiles, default (0.25, 0.5, 0.75); ``point``: ``"mean"``
    (default) takes the mean of the runs for the point estimate instead of the middle quantile —
    a queue drains at the rate of the *mean* run time, which a heavy tail puts far above the
    median (the point is then at least ``low``, and ``high`` at least the point); ``min_samples``: run
    times a key needs before it answers; ``window``: run times kept per key (the most recent);
    ``fallback``: the model when no key answers (default :class:`DeclaredRuntime`);
    ``min_samples_for``: key → the run times that key needs (default ``min_samples`` for all), e.g.
    fewer for a very specific key whose runs are alike; ``sibling_floor``: a workload whose
    most specific key has too few finished runs but running ones answers from the broader keys
    conditioned on running at least as long as the longest of those has so far — a pending one,
    and a running one that has run less long than that sibling (off by default: on the Philly trace it
    moved the median error by less than its noise and lengthened the tail, BENCHMARKS.md);
    ``sibling_floor_quantile``: the floor is this quantile of the running siblings' elapsed times
    instead of the longest (1, the default; 0.5: the median — one job of a sweep can run for
    days)."""

    def __init__(
        self,
        keys: Callable[[Workload], Sequence[Hashable]] = default_history_keys,
        *,
        quantiles: tuple[float, float, float] = (0.25, 0.5, 0.75),
        min_samples: int = 5,
        window: int = 2000,
        fallback: Optional[RuntimeModel] = None,
        point: str = "mean",
        min_samples_for: Optional[Callable[[Hashable], int]] = None,
        sibling_floor: bool = False,
        sibling_floor_quantile: float = 1.0,
    ):
        if point not in ("mean", "quantile"):
            raise ValueError("point must be 'mean' or 'quantile'")
        self.point = point
        if not (0 <= quantiles[0] <= quantiles[1] <= quantiles[2] <= 1):
            raise ValueError("quantiles must be 0 <= low <= point <= high <= 1")
        self.keys = keys
        self.quantiles = quantiles
        self.min_samples = max(1, int(min_samples))
        self.min_samples_for = min_samples_for
        self.window = max(1, int(window))
        self.fallback = fallback or DeclaredRuntime()
        self._samples: dict[Hashable, _Samples] = {}
        self.observed = 0
        self.sibling_floor = sibling_floor
        if not 0.0 <= sibling_floor_quantile <= 1.0:
            raise ValueError("sibling_floor_quantile must be within [0, 1]")
        self.sibling_floor_quantile = float(sibling_floor_quantile)
        self._sibling_floor: dict[Hashable, float] = {}  # key -> the floor its running workloads set

    def observe(self, wl: Workload, runtime: float) -> None:
        """Record a finished run of ``wl`` that lasted ``runtime`` seconds."""
        self.observe_keys(self.keys(wl), runtime)

    def observe_keys(self, keys: Iterable[Hashable], runtime: float) -> None:
        runtime = float(runtime)
        self.observed += 1
        for k in keys:
            s = self._samples.get(k)
            if s is None:
                s = self._samples[k] = _Samples()
            s.order.append(runtime)
            bisect.insort(s.sorted, runtime)
            if len(s.order) > self.window:
                old = s.order.popleft()
                del s.sorted[bisect.bisect_left(s.sorted, old)]
            s.cache = None
            s.sums = None
            s.km = None

    def set_running(self, running: Iterable[tuple[Workload, float]]) -> None:
        """The workloads running now and how long each has run: censored observations (they run
        at least that long), so that the distribution of run times is not biased towards the
        short runs that finished (``quantile`` uses the Kaplan-Meier estimate). The estimator
        calls it before predicting."""
        by_key: dict[Hashable, list[float]] = {}
        for wl, elapsed in running:
            for k in self.keys(wl):
                by_key.setdefault(k, []).append(float(elapsed))
        if self.sibling_floor:
            q = self.sibling_floor_quantile
            self._sibling_floor = {k: _quantile(sorted(v), q) for k, v in by_key.items()}
        for k, s in self._samples.items():
            cs = by_key.get(k)
            new = sorted(cs) if cs else []
            if new != s.censored:
                s.censored = new
                s.km = None

    def samples(self, key: Hashable) -> int:
        s = self._samples.get(key)
        return len(s.sorted) if s is not None else 0

    def _need(self, k: Hashable) -> int:
        f = self.min_samples_for
        return self.min_samples if f is None else max(1, int(f(k)))

    def predict(self, wl: Workload, elapsed: float) -> Prediction:
        ql, qp, qh = self.quantiles
        for k in self.keys(wl):
            need = self._need(k)
            s = self._samples.get(k)
            if s is None or len(s.sorted) < need:
                continue
            xs = s.sorted
            if elapsed <= 0:
                if s.cache is None:
                    s.cache = self._predict(s, 0)
                return s.cache
            i = bisect.bisect_right(xs, elapsed)
            if len(xs) - i < need:
                continue  # too few runs this long under this key: ask a broader one
            return self._predict(s, i)
        if elapsed > 0 and self._known(wl):
            return outrun(elapsed)
        return _at_least(self.fallback.predict(wl, elapsed), elapsed)


    def quantile(self, wl: Workload, elapsed: float, u: float) -> float:
        keys = self.keys(wl)
        if self.sibling_floor and keys:
            # A workload whose most specific key has too few finished runs but running ones (a
            # sweep that has started): it runs at least as long as the longest of them (or the
            # sibling_floor_quantile-th) has so far — pending, or running for less time.
            k0 = keys[0]
            floor = self._sibling_floor.get(k0, 0.0)
            if floor > elapsed and self.samples(k0) < self._need(k0):
                return max(elapsed, self._quantile_keys(wl, keys[1:], floor, u))
        return self._quantile_keys(wl, keys, elapsed, u)

    def _quantile_keys(self, wl: Workload, keys: Sequence[Hashable], elapsed: float, u: float) -> float:
        for ki, k in enumerate(keys):
            need = self._need(k)
            s = self._samples.get(k)
            if s is None or len(s.sorted) < need:
                continue
            xs = s.sorted
            i = bisect.bisect_right(xs, elapsed) if elapsed > 0 else 0
            if len(xs) - i < need:
                continue
            if not s.censored:
                return _quantile(xs, u, i)
            # Kaplan-Meier: the first time t with S(t) <= S(elapsed) (1 - u)
            times, surv = s.kaplan_meier()
            j = bisect.bisect_right(times, elapsed)
            s_e = surv[j - 1] if j > 0 else 1.0
            target = s_e * (1.0 - u)
            lo, hi = j, len(times)
            while lo < hi:  # survival is non-increasing
                mid = (lo + hi) // 2
                if surv[mid] <= target:
                    hi = mid
                else:
                    lo = mid + 1
            if lo < len(times):
                return times[lo]
            # Beyond the longest finished run the rest of the mass is the workloads of this key
            # still running longer than it (censored): the workload runs at least as long as the
            # median of those has so far, and the broader keys (then "as long again") say how
            # much longer. (A Pareto tail at the longest finished run said a job of a sweep whose
            # first five runs failed at once would fail too, while the other twenty ran for hours.)
            tail = s.censored_share(elapsed)
            v = (u - (1 - tail)) / max(tail, 1e-9)
            last = max(elapsed, times[-1])
            cs = s.censored
            c = bisect.bisect_right(cs, last)
            floor = cs[c + (len(cs) - c - 1) // 2] if c < len(cs) else last
            if floor > last and ki + 1 < len(keys):
                return max(elapsed, self._quantile_keys(wl, keys[ki + 1:], floor, v))
            return outrun_quantile(floor, v)
        if elapsed > 0 and self._known(wl):  # longer than any run of its kind: as long again
            return outrun_quantile(elapsed, u)
        fb = self.fallback.predict(wl, elapsed)
        if elapsed > 0 and fb.high <= elapsed:
            return outrun_quantile(elapsed, u)
        return max(_quantile_of(self.fallback, wl, elapsed, u), elapsed)

    def _known(self, wl: Workload) -> bool:
        for k in self.keys(wl):
            s = self._samples.get(k)
            if s is not None and len(s.sorted) >= self._need(k):
                return True
        return False

    def _predict(self, s: _Samples, i: int) -> Prediction:
        ql, qp, qh = self.quantiles
        xs = s.sorted
        low, high = _quantile(xs, ql, i), _quantile(xs, qh, i)
        if self.point == "mean":
            point = max(low, s.tail_mean(i))
            return Prediction(low, point, max(high, point))
        return Prediction(low, _quantile(xs, qp, i), high)


MODELS = ("history", "declared", "oracle")


__all__ = [
    "COMMAND_ANNOTATION",
    "DEFAULT_RUNTIME_SECONDS",
    "DeclaredRuntime",
    "HistoryRuntime",
    "MODELS",
    "OWNER_LABEL",
    "OracleRuntime",
    "Prediction",
    "QuantileModel",
    "outrun",
    "outrun_quantile",
    "RuntimeModel",
    "default_history_keys",
]
