"""The admission-rate estimate of a wait, and its blend with the forward simulation's.

* :func:`rate_wait`: a pending workload at 0-based position ``p`` in its ClusterQueue waits
  ``(p + 1) / rate`` seconds, ``rate`` being the ClusterQueue's admissions per second over the
  last hour (else 6 h, 24 h, everything since the first: the first window that saw one). It is
  the moving-average approach of Kueue's issue #13159 and KEP-168-2's user story, the ``rate``
  baseline of ``jupyter gpuqueue replay --eta``.
* :func:`blend_waits`: the estimate the service and the replay publish: the simulated wait and the
  rate wait blended geometrically, ``(sim + 60)^(1-w) · (rate + 60)^w − 60`` with ``w`` =
  :data:`RATE_BLEND` (0.2). On the Philly trace this cut the median error at submission from 9.7
  to 8.2 min (BENCHMARKS.md, "Estimated start times"): the simulation's error is mostly a bias of
  its run-time predictions that lasts, and the observed rate pulls against it.
* :func:`recent_wait`: the median wait of the workloads of the ClusterQueue (and shape) that
  started lately: measured as a third estimate to blend, not used (it did not help).

Seconds everywhere; no I/O, no clock, no threads.
"""

from __future__ import annotations

import bisect
import math
from typing import Optional, Sequence

RATE_WINDOWS = (3600.0, 6 * 3600.0, 24 * 3600.0)
RATE_BLEND = 0.2
OFFSET_S = 60.0


def rate_wait(position: int, admissions: Sequence[float], now: float, min_admissions: int = 1,
              observed_since: Optional[float] = None) -> Optional[float]:
    """Seconds until a workload at 0-based ``position`` in its ClusterQueue is admitted, at the
    ClusterQueue's recent admission rate; ``admissions``: its admission times, ascending. The
    first window with at least ``min_admissions`` admissions answers (the replay: 1; the live
    service: 5, a rate from one or two admissions says little). None when none has enough.
    ``observed_since``: admissions were only recorded from then on (a server's start): a window
    counts over the part of it after that (at least 1 s), not its whole length — 5 admissions in a
    server's first 5 minutes are a rate of one a minute, not 5 an hour (issue 35). None (the
    replay): the whole window."""
    hi = bisect.bisect_left(admissions, now)  # admissions strictly before now
    for w in RATE_WINDOWS + (None,):
        lo = 0 if w is None else bisect.bisect_left(admissions, now - w)
        n = hi - lo
        if n >= max(1, min_admissions):
            span = w if w is not None else max(now - admissions[0], 1.0)
            if observed_since is not None:
                span = min(span, max(now - min(observed_since, admissions[lo]), 1.0))
            return (position + 1) / (n / span)
    return None


def recent_wait(starts: Sequence[float], waits: Sequence[float], now: float, windows: Sequence[float] = RATE_WINDOWS,
                min_count: int = 1, elapsed: float = 0.0) -> Optional[float]:
    """"What did workloads like this one wait lately": the median wait (s) of the workloads that
    started in the last hour before ``now`` (else 6 h, 24 h, everything before: the first window
    with at least ``min_count``). ``starts``: their start times, ascending; ``waits``: their waits
    (start − submission, s), in the same order. Only starts strictly before ``now`` count (the
    past). None when none has enough. A third estimate that errs unlike the simulation (it ignores
    the queue ahead) and unlike the rate (it ignores the position); blended into the point on the
    Philly trace it did not help (BENCHMARKS.md, "Estimated start times"), so only ``replay --eta``'s
    details record it. ``elapsed``: the workload has
    already waited that long: only the waits longer than it count, and the result is the time
    still to wait (their median − ``elapsed``)."""
    hi = bisect.bisect_left(starts, now)
    for w in tuple(windows) + (None,):
        lo = 0 if w is None else bisect.bisect_left(starts, now - w)
        xs = sorted(x for x in waits[lo:hi] if x > elapsed) if elapsed > 0 else sorted(waits[lo:hi])
        n = len(xs)
        if n >= max(1, min_count):
            return (xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])) - elapsed
    return None


def blend_waits(model_wait: float, rate_wait_s: float, w: float = RATE_BLEND, offset: float = OFFSET_S) -> float:
    """Geometric blend of two waits (s): ``model^(1-w) · rate^w``, each + ``offset``, then − it."""
    a, b = math.log(max(0.0, model_wait) + offset), math.log(max(0.0, rate_wait_s) + offset)
    return max(0.0, math.exp((1.0 - w) * a + w * b) - offset)


__all__ = ["OFFSET_S", "RATE_BLEND", "RATE_WINDOWS", "blend_waits", "rate_wait", "recent_wait"]
