"""Online calibration of estimated waits from the estimator's own past errors: a range that means
something.

The forward simulation (:mod:`.estimate`) is as good as its run-time predictions. Its *range*
(early / late from two more draws of the run times) was far too narrow: the draws average out
over hundreds of running workloads, while the error is a bias of the run-time distribution that
all estimates made at one moment share. This module measures the error as it happens and turns
it into a range with a stated coverage.

How
---
When a workload whose wait was estimated starts, the caller reports the pair: the wait the
estimate said (``estimated_wait_s``: estimated start − the moment of the estimate) and the wait
it actually had (``actual_wait_s``: actual start − the same moment). The calibration keeps the
last ``window`` *log-ratios* ``r = ln((actual + offset) / (estimated + offset))`` per key (e.g.
the ClusterQueue; ``offset_s``, 60 s, keeps waits of zero finite) and, for every key, in one pool
of all keys. A new estimate ``e`` is judged by the ratios of the observations whose estimated
wait was *like* ``e`` (within a factor ``similar`` of it, 4 by default: the relative error of a
10-minute estimate is not that of a 10-hour one), from the key's pool when it has at least
``min_samples`` of them, else the pool of all keys::

    early = (e + offset) · exp(quantile_low r) − offset    (quantile (1 − coverage) / 2)
    late  = (e + offset) · exp(quantile_high r) − offset   (quantile (1 + coverage) / 2)
    point = e, or with ``correct_point=True`` (e + offset) · exp(median r) − offset

widened to contain the point. [early, late] holds ``coverage`` of the actual waits *if the coming
errors are like the past ones*; they are not quite (errors come in spells: all estimates made in
one hour share one error), so on the Philly trace a nominal 90 % (the default) holds 82–83 %
of the actual starts and a nominal 80 % about 75 % (the replay measures it: ``rangeCoverage``).
The point is left alone by default: on that trace correcting it by the median of recent
ratios made the median error worse (14.3 min instead of 9.7 with a window of 300; 9.7–11.3
with 3,000), because an estimate's error is shared with the estimates made at the same moment
and not with those made an hour before, whose outcome is all that is known. Without enough
data: ``point = e`` and the range is ``e`` ×/÷ ``fallback_factor`` (4).

Observations older than ``max_age_s`` (by their ``at``) are dropped when the next one is added
(default None: only the window bounds them).

It uses only the past: the errors of estimates whose workloads have started. No I/O, no clock
(``at`` is the caller's time, seconds, only compared with other ``at``), no threads: the caller
serialises ``observe`` and ``adjust`` (the service on its event loop, or under a lock). Cost:
``observe`` O(window) (a sorted insert, ~10 µs at 3,000); ``adjust`` reads quantiles cached per
key and ~20 % bin of the estimated wait until the next ``observe`` (a few µs; a miss sorts the
similar observations, ~0.3 ms at 3,000): 10,000 estimates over 30 keys take ~0.17 s right after
an ``observe``, ~0.03 s otherwise. The bin's centre, not ``e`` itself, chooses the similar
observations.

Units: every wait and time is in seconds; ``adjust`` returns waits (seconds from the moment of
the estimate), never negative, ``early <= point <= late``.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Hashable, Optional

ALL = ("*all*",)
_BIN = 0.2  # adjust's cache: bins of ln(wait + offset), ~20 % wide


class _Pool:
    __slots__ = ("order", "by_est")

    def __init__(self):
        self.order: deque = deque()  # (at, log_est, log_ratio), in arrival order
        self.by_est: list[tuple[float, float]] = []  # (log_est, log_ratio), sorted


class WaitCalibration:
    """Corrects estimated waits by the recent errors of past estimates (see the module docstring).

    ``window``: observations kept per key (the most recent); ``min_samples``: observations a key
    (then the pool of all keys) needs before it corrects; ``coverage``: the share of actual waits
    [early, late] should hold (quantiles (1 − coverage) / 2 and (1 + coverage) / 2 of the
    log-ratios); ``offset_s``: added to both waits before their ratio (s); ``similar``: only
    observations whose estimated wait is within this factor of the one corrected count (None:
    all of the key's); ``max_age_s``: drop observations older than this (s, by ``at``; None: no
    limit); ``fallback_factor``: the range without data; ``correct_point``: also move the point
    to the median ratio (default False: measured worse on the Philly trace)."""

    def __init__(
        self,
        *,
        window: int = 3000,
        min_samples: int = 20,
        coverage: float = 0.9,
        offset_s: float = 60.0,
        similar: Optional[float] = 4.0,
        max_age_s: Optional[float] = None,
        fallback_factor: float = 4.0,
        correct_point: bool = False,
    ):
        if not 0 < coverage < 1:
            raise ValueError("coverage must be in (0, 1)")
        if offset_s <= 0:
            raise ValueError("offset_s must be > 0")
        if similar is not None and similar < 1:
            raise ValueError("similar must be >= 1 (or None)")
        self.window = max(1, int(window))
        self.min_samples = max(1, int(min_samples))
        self.coverage = float(coverage)
        self.offset_s = float(offset_s)
        self.log_similar = math.log(similar) if similar is not None else None
        self.max_age_s = max_age_s
        self.fallback_factor = max(1.0, float(fallback_factor))
        self.correct_point = bool(correct_point)
        self._pools: dict[Hashable, _Pool] = {}
        self._cache: dict[tuple, Optional[tuple[float, float, float]]] = {}  # (key, bin) -> quantiles
        self.observed = 0

    # -- input ------------------------------------------------------------------------------------

    def observe(self, key: Hashable, estimated_wait_s: float, actual_wait_s: float, at: float) -> None:
        """A workload estimated (under ``key``) to wait ``estimated_wait_s`` seconds waited
        ``actual_wait_s`` seconds (both from the moment of that estimate); ``at``: when it started
        (s, the caller's clock). Call it once per workload, when it starts, with the estimate
        published first (e.g. at submission)."""
        o = self.offset_s
        le = math.log(max(0.0, float(estimated_wait_s)) + o)
        r = math.log(max(0.0, float(actual_wait_s)) + o) - le
        at = float(at)
        self.observed += 1
        self._cache.clear()
        for k in (key, ALL) if key != ALL else (ALL,):
            p = self._pools.get(k)
            if p is None:
                p = self._pools[k] = _Pool()
            p.order.append((at, le, r))
            bisect.insort(p.by_est, (le, r))
            while len(p.order) > self.window or (
                    self.max_age_s is not None and p.order and p.order[0][0] < at - self.max_age_s):
                _, le0, r0 = p.order.popleft()
                del p.by_est[bisect.bisect_left(p.by_est, (le0, r0))]

    # -- output -----------------------------------------------------------------------------------

    def samples(self, key: Hashable = ALL) -> int:
        """Observations kept under ``key`` (default: all keys)."""
        p = self._pools.get(key)
        return len(p.order) if p is not None else 0

    def _answering(self, key: Hashable, le: float) -> Optional[tuple[Hashable, int, int]]:
        """The pool that judges an estimate of ln(wait + offset) = ``le`` under ``key``, and the
        slice of its observations that do: ``(pool key, lo, hi)``, or None."""
        for k in (key, ALL):
            p = self._pools.get(k)
            if p is None or len(p.by_est) < self.min_samples:
                continue
            if self.log_similar is None:
                return k, 0, len(p.by_est)
            lo = bisect.bisect_left(p.by_est, (le - self.log_similar, -math.inf))
            hi = bisect.bisect_right(p.by_est, (le + self.log_similar, math.inf))
            if hi - lo >= self.min_samples:
                return k, lo, hi
        return None

    def ratios(self, key: Hashable, estimated_wait_s: float) -> Optional[list[float]]:
        """The log-ratios that judge ``estimated_wait_s`` under ``key`` (sorted), or None when too
        few."""
        ans = self._answering(key, math.log(max(0.0, float(estimated_wait_s)) + self.offset_s))
        if ans is None:
            return None
        k, lo, hi = ans
        return sorted(r for _, r in self._pools[k].by_est[lo:hi])

    def adjust(self, key: Hashable, estimated_wait_s: float) -> tuple[float, float, float]:
        """``(point, early, late)``: the corrected wait and its range (s from the moment of the
        estimate; ``0 <= early <= point <= late``) of an estimated wait of ``estimated_wait_s``
        under ``key``. Without enough observations: ``point`` = the estimate, the range ×/÷
        ``fallback_factor``."""
        e = max(0.0, float(estimated_wait_s))
        o = self.offset_s
        # The quantiles are cached per key and bin of ln(e + offset) (width _BIN) until the next
        # observe: a refresh adjusts thousands of estimates between two observations.
        b = round(math.log(e + o) / _BIN)
        ck = (key, b)
        qs = self._cache.get(ck, ())
        if qs == ():
            ans = self._answering(key, b * _BIN)
            if ans is None:
                qs = None
            else:
                pk, lo_i, hi_i = ans
                qs = self._cache.get((pk, b), ())  # keys without data share the pool of all's
                if qs == ():
                    rs = sorted(r for _, r in self._pools[pk].by_est[lo_i:hi_i])
                    a = (1.0 - self.coverage) / 2.0
                    qs = tuple(_quantile(rs, q) for q in (a, 0.5, 1.0 - a))
                    self._cache[(pk, b)] = qs
            self._cache[ck] = qs
        if qs is None:
            f = self.fallback_factor
            return e, max(0.0, (e + o) / f - o), (e + o) * f - o
        lo, mid, hi = qs
        point = max(0.0, (e + o) * math.exp(mid) - o) if self.correct_point else e
        early = min(point, max(0.0, (e + o) * math.exp(lo) - o))
        late = max(point, (e + o) * math.exp(hi) - o)
        return point, early, late


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of the sorted non-empty ``xs``."""
    pos = (len(xs) - 1) * q
    i = int(pos)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (pos - i)


__all__ = ["ALL", "WaitCalibration"]
