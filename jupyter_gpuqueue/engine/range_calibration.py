"""The range of a published start estimate, calibrated on the live service's own estimates at
submission (issue 35): split-conformal, the workloads still waiting counted as censored
observations.

Why not :class:`.calibration.WaitCalibration` alone
----------------------------------------------------
That calibration learns from workloads that have *started*: a workload estimated at submission is
observed when it starts. On a live queue the estimates that err late are exactly those observed
last, so the errors known at any moment are the short waits' — the 95th percentile it computes is
that of the starts seen so far, not of the estimates made. On ``jupyter gpuqueue bench eta``
(BENCHMARKS.md) its late bound missed 11–18 of ~60 starts, nearly all 4-GPU jobs: they wait for
four GPUs to be free at once while smaller later arrivals take each one as it frees, 40 s later
than the simulation (which foresees no arrivals) says, and the first such error became known a
minute and a half after the first such estimate.

How
---
Each estimate at submission is registered (:meth:`RangeCalibration.submitted`) with its point wait
``e``. Its score is the log-ratio ``r = ln((a + offset) / (e + offset))`` of
its actual wait ``a`` (``offset_s`` keeps waits of zero finite). A workload that has started gives
an exact score (:meth:`started`); one still waiting at ``now`` a *censored* one: its score is at
least ``ln((now − submitted + offset) / (e + offset))`` (a workload that has waited 90 s for a
40-s estimate is a known miss before it starts). :meth:`ranges` reads the Kaplan-Meier
estimate of the scores' distribution over the last ``window`` exact and all censored scores (at
most ``max_pending``, the most recent), and takes its quantiles at the split-conformal
levels for ``coverage`` (two-sided, each tail ``(1 − coverage) / 2``): with ``n`` scores the
upper one at ``⌈(n + 1)(1 + coverage) / 2⌉ / n`` (the largest score when that is ≥ 1), the lower
one symmetrically — the finite-sample correction that makes ``n`` exchangeable scores hold the
stated coverage (Vovk et al., *Algorithmic Learning in a Random World*, 2005; Lei et al., JASA
2018, "Distribution-free predictive inference for regression"). A new estimate ``e`` is then,
once there are at least ``min_samples`` scores::

    early = (e + offset) · exp(q_low) − offset,   late = (e + offset) · exp(q_high) − offset

widened to contain ``e``. Without enough data: ``e`` ×/÷ ``fallback_factor`` in the same space
(:attr:`CalibratedRanges.calibrated` False).

One pool for all workloads: kept apart by ClusterQueue or by shape (GPUs asked for), with the pool
where a stratum had too few, the range held fewer starts on ``bench eta`` (replayed offline on
three seeds' estimates, each stratum answering from 20 scores: by shape 81–91 %, by ClusterQueue
84–94 %, the pool 89–94 %): a stratum's few scores miss the spells the pool has already seen.

Errors on a live queue come in spells (the estimates made at one moment share one error), so the
scores are not exchangeable and the nominal coverage is an aim, not a guarantee; the bench measures
what it holds.

:meth:`ranges` returns a :class:`CalibratedRanges` (two quantiles, plain data: it is pickled to
the estimates' worker process). Cost: O(m log m), ``m`` the exact and censored scores
(``window`` 1,000 + ``max_pending`` 5,000 at most). No I/O, no clock (times are
the caller's seconds), no threads: the caller serialises the calls.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Hashable, Optional, Sequence

def km_quantiles(exact: Sequence[float], censored: Sequence[float], levels: Sequence[float]) -> list[float]:
    """Quantiles of a distribution known from ``exact`` values and right-censored lower bounds
    ``censored`` (the true value is at least that), by the Kaplan-Meier estimate of its CDF, at
    each of ``levels`` (in [0, 1]): the smallest exact value whose estimated CDF reaches the
    level; where censoring leaves the CDF short of it, the largest value seen (exact or censored)
    for a level ≥ 0.5, the smallest below.
    Raises ValueError when both are empty."""
    pts = sorted([(x, 1) for x in exact] + [(x, 0) for x in censored])
    if not pts:
        raise ValueError("km_quantiles: no values")
    out = [math.nan] * len(levels)
    order = sorted(range(len(levels)), key=lambda i: levels[i])
    li = 0
    surv, at_risk, i, n = 1.0, len(pts), 0, len(pts)
    while i < n and li < len(order):
        x = pts[i][0]
        d = m = 0
        while i < n and pts[i][0] == x:
            d += pts[i][1]
            m += 1
            i += 1
        if d:
            surv *= 1.0 - d / at_risk
            while li < len(order) and 1.0 - surv >= levels[order[li]] - 1e-12:
                out[order[li]] = x
                li += 1
        at_risk -= m
    for k in order[li:]:  # censoring left the CDF short of the level: the extreme seen on that side
        out[k] = pts[-1][0] if levels[k] >= 0.5 else pts[0][0]
    return out


def conformal_levels(n: int, coverage: float) -> tuple[float, float]:
    """The split-conformal quantile levels (low, high) of ``n`` scores for a two-sided interval of
    ``coverage``: ``high = min(1, ⌈(n + 1)(1 + coverage) / 2⌉ / n)``, ``low = 1 − high``'s mirror
    (``max(0, ⌊(n + 1)(1 − coverage) / 2⌋ / n)``)."""
    a = (1.0 - coverage) / 2.0
    high = min(1.0, math.ceil((n + 1) * (1.0 - a) - 1e-9) / n)
    low = max(0.0, math.floor((n + 1) * a + 1e-9) / n)
    return low, high


class CalibratedRanges:
    """The calibrated quantiles at one moment (:meth:`RangeCalibration.ranges`): ``quantiles``
    ``(q_low, q_high)`` (log-ratios), None without enough data. Plain data (picklable)."""

    __slots__ = ("quantiles", "offset_s", "fallback_factor")

    def __init__(self, quantiles: Optional[tuple[float, float]], offset_s: float, fallback_factor: float):
        self.quantiles, self.offset_s, self.fallback_factor = quantiles, offset_s, fallback_factor

    @property
    def calibrated(self) -> bool:
        """Whether there were enough scores (else :meth:`adjust` is the fallback)."""
        return self.quantiles is not None

    def adjust(self, estimated_wait_s: float) -> tuple[float, float, float]:
        """``(point, early, late)`` waits (s from the moment of the estimate; ``0 <= early <=
        point <= late``) of an estimated wait: the point unchanged, the range from the
        quantiles, or ×/÷ ``fallback_factor`` without them."""
        e = max(0.0, float(estimated_wait_s))
        o = self.offset_s
        if self.quantiles is None:
            f = self.fallback_factor
            return e, max(0.0, (e + o) / f - o), (e + o) * f - o
        lo, hi = self.quantiles
        early = min(e, max(0.0, (e + o) * math.exp(lo) - o))
        late = max(e, (e + o) * math.exp(hi) - o)
        return e, early, late


class RangeCalibration:
    """Scores of the estimates at submission, exact once a workload starts and censored while it
    waits (module docstring). ``coverage``: the share of starts the range should hold;
    ``offset_s``: added to both waits before their ratio (s); ``window``: exact scores kept (the
    most recent); ``min_samples``: scores (exact and censored) needed before it answers;
    ``max_pending``: waiting workloads kept (the most recent); ``fallback_factor``: the range
    without data. Raises ValueError naming a bad setting."""

    def __init__(self, *, coverage: float = 0.9, offset_s: float = 60.0, window: int = 1000, min_samples: int = 20,
                 max_pending: int = 5000, fallback_factor: float = 4.0):
        if not 0 < coverage < 1:
            raise ValueError(f"coverage must be in (0, 1), not {coverage!r}")
        if offset_s <= 0:
            raise ValueError(f"offset_s must be > 0, not {offset_s!r}")
        self.coverage, self.offset_s = float(coverage), float(offset_s)
        self.window, self.max_pending = max(1, int(window)), max(0, int(max_pending))
        self.min_samples = max(1, int(min_samples))
        self.fallback_factor = max(1.0, float(fallback_factor))
        self._exact: deque = deque(maxlen=self.window)  # scores, in the order the workloads started
        self._pending: dict[Hashable, tuple[float, float]] = {}  # id -> (at, ln(e + offset)), oldest first
        self.observed = 0

    def submitted(self, ident: Hashable, at: float, estimated_wait_s: float) -> None:
        """Workload ``ident`` was estimated at ``at`` (s) to wait ``estimated_wait_s`` s. The first
        call per workload counts; later ones are ignored."""
        if ident in self._pending:
            return
        self._pending[ident] = (float(at), math.log(max(0.0, float(estimated_wait_s)) + self.offset_s))
        while len(self._pending) > self.max_pending:
            del self._pending[next(iter(self._pending))]

    def started(self, ident: Hashable, at: float) -> None:
        """Workload ``ident`` started at ``at`` (s): its score becomes exact. Unknown: ignored."""
        item = self._pending.pop(ident, None)
        if item is None:
            return
        t0, le = item
        self._exact.append(math.log(max(0.0, float(at) - t0) + self.offset_s) - le)
        self.observed += 1

    def gone(self, ident: Hashable) -> None:
        """Workload ``ident`` left the queue without starting (cancelled, deleted): forgotten."""
        self._pending.pop(ident, None)

    def pending(self) -> int:
        """Workloads registered and not started."""
        return len(self._pending)

    def samples(self) -> int:
        """Exact scores kept."""
        return len(self._exact)

    def ranges(self, now: float) -> CalibratedRanges:
        """The quantiles at ``now`` (s): the exact scores and the censored ones of the workloads
        still waiting (module docstring)."""
        o = self.offset_s
        censored = [math.log(max(0.0, now - t0) + o) - le for t0, le in self._pending.values()]
        n = len(self._exact) + len(censored)
        if n < self.min_samples:
            return CalibratedRanges(None, o, self.fallback_factor)
        lo, hi = conformal_levels(n, self.coverage)
        q = km_quantiles(list(self._exact), censored, (lo, hi))
        return CalibratedRanges((q[0], q[1]), o, self.fallback_factor)


__all__ = ["CalibratedRanges", "RangeCalibration", "conformal_levels", "km_quantiles"]
