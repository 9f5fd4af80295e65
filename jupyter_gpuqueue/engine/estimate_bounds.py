"""The published estimate from the forward run's: the rate blend, the calibrated range, and the
bounds that keep point, range and ``waitingFor`` consistent (issue 35; docs/estimates.md).

:func:`finish_estimates` turns the raw :class:`.estimate.Estimate` s of one forward run into what
the service publishes, in place:

1. **The rate blend** (:mod:`.wait_rate`): the simulated wait blended with the ClusterQueue's
   admission rate, the rate counted over the time actually observed (``observed_since``: the
   server's start, or its first recorded admission if earlier), never over a whole hour of which
   the server saw minutes. ``rate_blend`` 0 drops it.
2. **The range** from the live service's own estimates at submission
   (:class:`.range_calibration.CalibratedRanges`: split-conformal quantiles of their errors, the
   workloads still waiting counted as censored).
3. **The bounds** (:func:`bound_estimate`): the point is never later than the end of the last
   workload it waits for plus what the simulation put after that end (blending may lower it, never
   push it past what it waits for); the late bound is at least the blockers' upper run-time
   quantile (``upper_quantile`` of the run-time model, conditioned on the time each has already
   run) plus that gap; ``early <= point <= late``; nothing before ``now``. The blockers' declared
   maxima (admission + maximum execution time) plus that gap, when every blocker runs and declares
   one, bound the late bound only while the calibration has no data (its ×/÷ 4 fallback), and
   then stretched by ``COLD_CAP_STRETCH`` (×2, in the calibration's offset space): on ``bench
   eta`` the cap cost 9 points of coverage where the calibration had data (a high-priority
   arrival, or another team's job taking the freed GPUs first, starts a workload later than any
   blocker's end explains) and, unstretched, 3–8 points more in the first minute, before it had
   any; stretched, 0–2 (BENCHMARKS.md).

Seconds everywhere; no I/O, no clock, no threads.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from .estimate import RUNNING, Estimate
from .range_calibration import CalibratedRanges
from .scheduler import Scheduler
from .wait_rate import blend_waits, rate_wait

UPPER_QUANTILE = 0.95
COLD_CAP_STRETCH = 2.0  # the declared-maxima cap without calibration data, stretched (offset space)


def blocker_bounds(state: Scheduler, est: Estimate, now: float, model, *, upper_quantile: float = UPPER_QUANTILE,
                   deadlines: Optional[Mapping[str, float]] = None) -> tuple[Optional[float], Optional[float]]:
    """``(upper, cap)`` of the end of the last workload ``est`` waits for (s, the clock of
    ``now``): ``upper`` from the run-time model's ``upper_quantile`` of each running blocker's run
    time given the time it has already run (a pending blocker: its expected end); ``cap`` the
    latest declared end (admission + ``maximum_execution_time_seconds``, or a deadline), None
    unless every blocker is running and has one. Both None without ``waiting_for``."""
    if not est.waiting_for:
        return None, None
    deadlines = deadlines or {}
    upper, cap = -math.inf, -math.inf
    for w in est.waiting_for:
        wl = state.workloads.get(w.key)
        at = state.admit_time.get(w.key) if wl is not None else None
        if w.kind != RUNNING or wl is None or at is None:
            upper = max(upper, w.expected_end)
            cap = math.inf
            continue
        elapsed = max(0.0, now - at)
        hard = [t for t in (deadlines.get(w.key),
                            at + wl.maximum_execution_time_seconds if wl.maximum_execution_time_seconds else None)
                if t is not None]
        q = getattr(model, "quantile", None)
        try:
            run = q(wl, elapsed, upper_quantile) if q is not None else model.predict(wl, elapsed).high
        except Exception:  # pragma: no cover - a model that cannot say: its expected end
            run = w.expected_end - at
        end = max(w.expected_end, at + run, now)
        if hard:
            end = min(end, max(min(hard), w.expected_end))
            cap = max(cap, min(hard), w.expected_end)
        else:
            cap = math.inf
        upper = max(upper, end)
    return upper, (None if math.isinf(cap) else cap)


def stretch_cap(now: float, cap_at: float, offset_s: float, factor: float = COLD_CAP_STRETCH) -> float:
    """``cap_at`` (an absolute time, s) stretched away from ``now`` by ``factor`` in offset space:
    ``now + (cap_at − now + offset_s) · factor − offset_s``."""
    return now + (max(cap_at, now) - now + offset_s) * factor - offset_s


def bound_estimate(now: float, sim_start: float, point: float, early: float, late: float,
                   waiting_ends: Sequence[float] = (), upper: Optional[float] = None,
                   cap: Optional[float] = None, *, calibrated: bool = False,
                   offset_s: float = 60.0) -> tuple[float, float, float]:
    """``(point, early, late)`` (absolute times, s) made consistent (module docstring, 3):
    ``sim_start`` is the forward run's start, ``waiting_ends`` the expected ends of what it waits
    for, ``upper`` / ``cap`` from :func:`blocker_bounds`; ``calibrated``: the range came from
    data (the cap then does not apply), else the cap + gap is stretched by
    :data:`COLD_CAP_STRETCH` (:func:`stretch_cap`, ``offset_s``). Guarantees ``now <= early <=
    point <= late`` and, with ``waiting_ends``, ``point <= max(waiting_ends) + max(0, sim_start -
    max(waiting_ends))``."""
    sim_start = max(sim_start, now)
    point = max(point, now)
    if waiting_ends:
        last = max(waiting_ends)
        gap = max(0.0, sim_start - last)
        point = min(point, max(last, now) + gap)
        if cap is not None and not calibrated:
            late = min(late, stretch_cap(now, max(cap, now) + gap, offset_s))
        if upper is not None:
            late = max(late, upper + gap)
    early = min(max(early, now), point)
    late = max(late, point)
    return point, early, late


def finish_estimates(state: Scheduler, now: float, results: Mapping[str, Estimate], *, model,
                     calibration: CalibratedRanges, admissions: Mapping[str, Sequence[float]],
                     rate_blend: float, min_admissions: int = 5, observed_since: Optional[float] = None,
                     deadlines: Optional[Mapping[str, float]] = None,
                     upper_quantile: float = UPPER_QUANTILE) -> None:
    """The published estimates from a forward run's ``results`` (in place: ``start_at``,
    ``early``, ``late``, ``cq``): blended with the rate (``admissions``: ClusterQueue → ascending
    admission times; ``rate_blend`` the weight, 0: none; ``observed_since``: see
    :func:`.wait_rate.rate_wait`), ranged by ``calibration`` (:meth:`.range_calibration.
    RangeCalibration.ranges`), bounded (module docstring)."""
    for key, est in results.items():
        if est.start_at is None:
            continue
        wl = state.workloads.get(key)
        cq = est.cq or (state.cluster_queue_name(wl) if wl is not None else None) or "?"
        sim_start = est.start_at
        wait = max(0.0, sim_start - now)
        if rate_blend > 0 and not est.extrapolated and est.held_until is None:
            pos = state.position(key)
            r = (rate_wait(pos[0], admissions.get(cq, ()), now, min_admissions, observed_since=observed_since)
                 if pos is not None else None)
            if r is not None:
                wait = blend_waits(wait, r, rate_blend)
        ends = [w.expected_end for w in est.waiting_for]
        # The range around the point as published (the calibration's scores are the published
        # points' errors): the point bounded first, then ranged, then the range bounded.
        point = bound_estimate(now, sim_start, now + wait, now + wait, now + wait, ends)[0]
        _, e, lt = calibration.adjust(point - now)
        upper, cap = blocker_bounds(state, est, now, model, upper_quantile=upper_quantile, deadlines=deadlines)
        est.start_at, est.early, est.late = bound_estimate(
            now, sim_start, point, now + e, now + lt, ends, upper, cap,
            calibrated=calibration.calibrated, offset_s=calibration.offset_s)
        est.cq = cq


__all__ = ["COLD_CAP_STRETCH", "UPPER_QUANTILE", "blocker_bounds", "bound_estimate", "finish_estimates",
           "stretch_cap"]
