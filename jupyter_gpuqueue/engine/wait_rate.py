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

Seconds everywhere; no I/O, no clock, no threads.
"""

from __future__ import annotations

import bisect
import math
from typing import Optional, Sequence

RATE_WINDOWS = (3600.0, 6 * 3600.0, 24 * 3600.0)
RATE_BLEND = 0.2
OFFSET_S = 60.0


def rate_wait(position: int, admissions: Sequence[float], now: float, min_admissions: int = 1) -> Optional[float]:
    """Seconds until a workload at 0-based ``position`` in its ClusterQueue is admitted, at the
    ClusterQueue's recent admission rate; ``admissions``: its admission times, ascending. The
    first window with at least ``min_admissions`` admissions answers (the replay: 1; the live
    service: 5, a rate from one or two admissions says little). None when none has enough."""
    hi = bisect.bisect_left(admissions, now)  # admissions strictly before now
    for w in RATE_WINDOWS + (None,):
        lo = 0 if w is None else bisect.bisect_left(admissions, now - w)
        n = hi - lo
        if n >= max(1, min_admissions):
            span = w if w is not None else max(now - admissions[0], 1.0)
            return (position + 1) / (n / span)
    return None


def blend_waits(model_wait: float, rate_wait_s: float, w: float = RATE_BLEND, offset: float = OFFSET_S) -> float:
    """Geometric blend of two waits (s): ``model^(1-w) · rate^w``, each + ``offset``, then − it."""
    a, b = math.log(max(0.0, model_wait) + offset), math.log(max(0.0, rate_wait_s) + offset)
    return max(0.0, math.exp((1.0 - w) * a + w * b) - offset)


__all__ = ["OFFSET_S", "RATE_BLEND", "RATE_WINDOWS", "blend_waits", "rate_wait"]
