"""Estimated start times of pending workloads: the live state run forward in simulated time by the
very same :class:`~.scheduler.Scheduler`, with predicted run times.

``estimate_starts(state, now, runtime_model)`` returns, for every pending workload (or those of
``keys``), an :class:`Estimate`: ``start_at`` (seconds, the clock of ``now``), a range ``early`` –
``late``, ``waiting_for`` (the few workloads whose end released the quota it is admitted into)
or, when there is no estimate, ``reason`` and ``message``.

How
---
1. ``state`` is copied (:func:`.snapshot.snapshot`): the caller's scheduler is only read, never
   changed. Victims being evicted leave at once (they are requeued, as preempted workloads are).
2. Every admitted workload ends at its admission time + its predicted run time
   (``runtime_model.predict(wl, elapsed)``, see :mod:`.runtime_model`: conditioned on the time it
   has already run), never later than its admission + ``maximum_execution_time_seconds`` or its
   deadline in ``deadlines`` (a lease's end, a preemption grace's end), never before ``now``.
3. Events (those ends, and the returns of held workloads) are applied in time order and, at each
   instant, scheduling cycles run until nothing changes — the simulator's logic
   (:mod:`.simulator`): Kueue's order, borrowing, reclaiming and preemption (a victim stops at
   once and is requeued, restarting its whole run), batched requeues (``requeue_batch_seconds``
   of the scheduler's options). A workload admitted in the simulation runs its predicted run time
   from there. The first admission of a pending workload is its estimated start.
4. The whole queue is estimated by *one* forward run (not one per workload); it stops as soon as
   every workload asked for has started or cannot start, or at ``now + horizon``.
5. ``exact_per_queue=N`` bounds the cost on deep queues: only the first N workloads (in queue
   order) of each ClusterQueue are simulated; each one behind them starts, by extrapolation, the
   head's last start plus its distance from it times the head's simulated seconds per admission
   (early: half that pace, late: twice; ``extrapolated`` is set). Default None: everything is
   simulated.
6. Run times. A model with a distribution (``quantile``, :class:`.runtime_model.QuantileModel`,
   e.g. ``HistoryRuntime``) gives each workload the run time at *its own* quantile u, fixed by
   a hash of its key (``sampled=True``, the default): the running workloads then end spread as
   the model's distribution says, so the queue drains at the rate it predicts — one point per
   workload (all at the median, or all at the mean) makes them end together and drains a
   heavy-tailed mix far too fast or too slow. u is the same at every recomputation, so an
   estimate does not jump between two of them. The range: two more runs with two other draws of
   u; ``early`` / ``late`` = the earliest / latest of the three starts (``ranges=False`` skips
   them). Without ``quantile`` (or ``sampled=False``): the point, low and high of
   ``predict``. Queueing is not monotone in run times, so the bounds are widened to contain
   ``start_at``. This range is narrow (on the Philly trace it held 1.6 % of the actual starts:
   the draws average out over many running workloads); a range with a measured coverage comes
   from the estimator's past errors instead (:mod:`.calibration`, ``ranges=False`` here).
7. ``also_started=True``: the forward run also reports every other pending workload it admitted
   before it stopped (``start_at``, ``cq``), free, for the calibration to learn from.
8. ``draws=N`` (default 1): the point is the median start of N forward runs, each with its own
   draw of every workload's quantile (the median of the predictive distribution is the point
   that minimises the expected absolute error). N times the cost; on the Philly trace it did not
   help (BENCHMARKS.md: the draws average out over the many workloads ahead, as in 6).

Holds and reasons (no estimate: ``start_at`` None, ``reason`` set)
-----------------------------------------------------------------
* ``holds``: workload key → when it may be admitted again (a budget's reset), or None (never).
  A held workload leaves the queue until then and comes back in its old place; with None, its
  reason is ``BudgetExceeded`` ("no budget reset in sight").
* ``ExceedsMaxQuota``, ``Inactive``, ``Misconfigured`` (its ClusterQueue can never admit it):
  the scheduler's reason and message.
* ``NotWithinHorizon``: not admitted within ``horizon`` seconds of simulated time.

What it cannot foresee: workloads that arrive later (a higher-priority one goes ahead; one that
reclaims quota preempts), the preemptions those cause, run times far from the prediction, quota
or configuration edits, cancellations, nodes and devices going away. docs/estimates.md says so
next to the estimate.

Like the rest of ``engine/``: no I/O, no clock, no threads. The service takes the snapshot on the
thread that owns the scheduler and calls this on a worker.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from .model import LOWER_OR_NEWER_EQUAL_PRIORITY, REASON_EXCEEDS_MAX_QUOTA, REASON_INACTIVE, REASON_MISCONFIGURED
from .runtime_model import RuntimeModel
from .scheduler import Scheduler
from .snapshot import copy_workload, snapshot

REASON_BUDGET_EXCEEDED = "BudgetExceeded"
REASON_NOT_WITHIN_HORIZON = "NotWithinHorizon"
REASON_LIVELOCK = "PreemptionLivelock"
NEVER_REASONS = (REASON_EXCEEDS_MAX_QUOTA, REASON_INACTIVE, REASON_MISCONFIGURED)

DEFAULT_HORIZON = 30 * 86400.0
RUNNING = "running"
PENDING = "pending"

_POINT, _LOW, _HIGH = 0, 1, 2
_DRAW0 = 3  # the further draws of ``draws``: 3, 4, ...
_END, _RETURN = 0, 1  # event kinds: a run ends / a held workload comes back


@dataclass(frozen=True, slots=True)
class WaitingFor:
    """A workload an estimate waits for: its ``key``, its expected end (``expected_end``, s) and
    ``kind``: ``running`` (admitted now) or ``pending`` (itself queued now, admitted and ended in
    the simulation)."""

    key: str
    expected_end: float
    kind: str


@dataclass(slots=True)
class Estimate:
    """``start_at``: estimated admission (s); ``early`` / ``late``: the range; ``waiting_for``:
    a few workloads whose end it waits for. No estimate: ``start_at`` None, ``reason`` (and
    ``message``) say why; ``held_until``: a budget hold's end, when one delays it; ``cq``: the
    ClusterQueue it is admitted into in the simulation; ``extrapolated``: beyond the simulated head
    of its queue (``exact_per_queue``)."""

    start_at: Optional[float] = None
    early: Optional[float] = None
    late: Optional[float] = None
    waiting_for: tuple[WaitingFor, ...] = ()
    reason: Optional[str] = None
    message: str = ""
    held_until: Optional[float] = None
    cq: Optional[str] = None
    extrapolated: bool = False


@dataclass(slots=True)
class _Run:
    starts: dict[str, float]
    waits: dict[str, tuple[WaitingFor, ...]]
    ends: dict[str, float]
    reasons: dict[str, tuple[str, str]]
    stopped: Optional[str]  # None, "horizon" or "livelock"
    cqs: dict[str, str]
    others: Optional[dict[str, tuple[float, str]]] = None  # also_started: key -> (start, cq)


def _pending_keys(state: Scheduler) -> list[str]:
    return [k for k in state.workloads if k not in state.admitted]


def estimate_starts(
    state: Scheduler,
    now: float,
    runtime_model: RuntimeModel,
    *,
    horizon: float = DEFAULT_HORIZON,
    holds: Optional[Mapping[str, Optional[float]]] = None,
    deadlines: Optional[Mapping[str, float]] = None,
    keys: Optional[Iterable[str]] = None,
    ranges: bool = True,
    max_waiting_for: int = 3,
    compress: bool = True,
    sampled: bool = True,
    exact_per_queue: Optional[int] = None,
    also_started: bool = False,
    draws: int = 1,
) -> dict[str, Estimate]:
    """Estimate when each pending workload of ``state`` starts (see the module docstring).

    ``state``: the scheduler (only read; copied). ``now``: the present, in the scheduler's clock.
    ``runtime_model``: see :mod:`.runtime_model`. ``horizon``: seconds of simulated time after which
    the simulation stops. ``holds``: key → reset time or None (never). ``deadlines``: key → time by
    which that admitted workload stops. ``keys``: estimate only these (default: every pending
    workload); the simulation stops once they have all started. ``exact_per_queue``: simulate
    only the first N of each ClusterQueue, extrapolate the rest (module docstring, 5). ``ranges``: also run the low and
    high quantiles for ``early`` / ``late``. ``compress``: skip the walk over queued workloads of a
    shape that does not fit (``_Forward``; False: Kueue's walk, cycle for cycle, slower on deep
    queues). ``also_started``: also return an :class:`Estimate` (``start_at``, ``cq``; no range, no
    ``waiting_for``) for every *other* workload pending now that the forward run admitted before
    it stopped — free, since the run simulates them anyway (what :mod:`.calibration` learns from).
    ``draws``: with a quantile model, the point is the median start of ``draws`` forward runs,
    each with its own independent draw of every workload's run-time quantile (1, the default: one
    run; the median of the predictive distribution is what minimises the absolute error, see the
    module docstring, 8). Returns key → :class:`Estimate`."""
    holds = dict(holds or {})
    deadlines = deadlines or {}
    wanted = list(keys) if keys is not None else _pending_keys(state)
    out: dict[str, Estimate] = {}
    todo: set[str] = set()
    for k in wanted:
        wl = state.workloads.get(k)
        if wl is None or k in state.admitted:
            continue
        reason = state.pending_reason.get(k)
        if reason is not None and reason[0] in NEVER_REASONS:
            out[k] = Estimate(reason=reason[0], message=reason[1])
        elif k in holds and holds[k] is None:
            out[k] = Estimate(reason=REASON_BUDGET_EXCEEDED,
                              message="the team's budget is exceeded and no reset is in sight")
        else:
            todo.add(k)
            if k in holds:
                out[k] = Estimate(held_until=max(float(holds[k]), now))
    if not todo:
        return out
    tail: dict[str, list[str]] = {}
    if exact_per_queue is not None:
        todo, tail = _split_head(state, todo, max(1, int(exact_per_queue)))
    preds = _Predictions(state, now, runtime_model, sampled)
    end_time = now + horizon if horizon is not None and math.isfinite(horizon) else math.inf
    point = _forward(state, now, preds, _POINT, holds, deadlines, todo, end_time, max_waiting_for, compress,
                     also_started)
    if draws > 1 and preds.quantile is not None:
        extra = [_forward(state, now, preds, _DRAW0 + i, holds, deadlines, todo, end_time, 0, compress)
                 for i in range(int(draws) - 1)]
        point.starts = _median_starts(point, extra, todo)
    low = high = None
    if ranges:
        low = _forward(state, now, preds, _LOW, holds, deadlines, todo, end_time, 0, compress)
        high = _forward(state, now, preds, _HIGH, holds, deadlines, todo, end_time, 0, compress)
    for k in todo:
        e = out.get(k) or Estimate()
        out[k] = e
        t = point.starts.get(k)
        if t is None:
            r = point.reasons.get(k)
            if r is not None and r[0] in NEVER_REASONS:
                e.reason, e.message = r
            elif point.stopped == "livelock":
                e.reason, e.message = REASON_LIVELOCK, "the simulation stopped on a preemption livelock"
            else:
                e.reason = REASON_NOT_WITHIN_HORIZON
                e.message = f"not within {_human(horizon)}"
            continue
        e.start_at = t
        e.cq = point.cqs.get(k)
        e.waiting_for = point.waits.get(k, ())
        if ranges:
            lo, hi = low.starts.get(k), high.starts.get(k)
            e.early = min(t, *(x for x in (lo, hi) if x is not None))
            e.late = None if lo is None or hi is None else max(t, lo, hi)  # None: beyond the horizon
        else:
            e.early = e.late = t
    if tail:
        _extrapolate(out, tail, now)
    if also_started and point.others:
        for k, (t, cq) in point.others.items():
            if k not in out:
                out[k] = Estimate(start_at=t, early=t, late=t, cq=cq)
    return out


def _median_starts(point: _Run, extra: list[_Run], todo: set[str]) -> dict[str, float]:
    """Per workload of ``todo``, the median of its starts in ``point`` and ``extra`` (a run that
    did not start it counts as later than any start; the lower median of an even count; none when
    that median is such a run)."""
    out: dict[str, float] = {}
    runs = [point] + extra
    for k in todo:
        xs = sorted(r.starts.get(k, math.inf) for r in runs)
        m = xs[(len(xs) - 1) // 2]
        if m != math.inf:
            out[k] = m
    return out


def _split_head(state: Scheduler, todo: set[str], n: int) -> tuple[set[str], dict[str, list[str]]]:
    """The first ``n`` of ``todo`` in each ClusterQueue's order (simulated), and per ClusterQueue
    the rest of ``todo`` in queue order (extrapolated)."""
    head: set[str] = set()
    tail: dict[str, list[str]] = {}
    seen: set[str] = set()
    for name, q in state.queues.items():
        count = 0
        rest: list[str] = []
        for k in q.ordered_keys():
            if k not in todo:
                continue
            seen.add(k)
            if count < n:
                head.add(k)
                count += 1
            else:
                rest.append(k)
        if rest:
            tail[name] = rest
    head |= todo - seen  # not in any queue (e.g. held): simulated
    return head, tail


def _extrapolate(out: dict[str, Estimate], tail: dict[str, list[str]], now: float) -> None:
    """Workloads beyond the simulated head of their ClusterQueue: the head's last start plus
    their distance from it times the head's simulated seconds per admission (early: half, late:
    twice that pace)."""
    heads: dict[str, list[Estimate]] = {}
    for e in out.values():
        if e.start_at is not None and e.cq is not None and not e.extrapolated:
            heads.setdefault(e.cq, []).append(e)
    for cq, keys in tail.items():
        done = heads.get(cq)
        if not done:
            for k in keys:
                out[k] = Estimate(reason=REASON_NOT_WITHIN_HORIZON, message="nothing ahead of it started "
                                  "within the horizon", extrapolated=True)
            continue
        last = max(done, key=lambda e: e.start_at)
        per = max(last.start_at - now, 1.0) / len(done)  # seconds per admission in this ClusterQueue
        early0 = last.early if last.early is not None else last.start_at
        for i, k in enumerate(keys, start=1):
            out[k] = Estimate(
                start_at=last.start_at + i * per,
                early=early0 + i * per * 0.5,
                late=None if last.late is None else last.late + i * per * 2.0,
                message="extrapolated from the simulated admissions ahead of it",
                cq=cq, extrapolated=True,
            )


def _human(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "ever"
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    return f"{seconds:g}s"


def _unit(seed: int, key: str) -> float:
    """A quantile in (0, 1) fixed by the workload's key: the same at every recomputation."""
    return (zlib.crc32(f"{seed}/{key}".encode()) + 0.5) / 4294967296.0


class _Predictions:
    """Run times for the three forward runs (point, then the two that bound the range), computed
    when a run first needs a workload's: admitted ones conditioned on their elapsed time, pending
    ones from zero. Shared by the three runs."""

    def __init__(self, state: Scheduler, now: float, model: RuntimeModel, sampled: bool):
        self.state, self.now, self.model = state, now, model
        self.quantile = getattr(model, "quantile", None) if sampled else None
        self.cache: dict[str, tuple] = {}
        set_running = getattr(model, "set_running", None)
        if set_running is not None:  # running workloads: censored observations of run times
            at = state.admit_time
            set_running([(state.workloads[k], max(0.0, now - at[k]) if at.get(k) is not None else 0.0)
                         for k in state.admitted])

    def __getitem__(self, k: str) -> tuple:
        hit = self.cache.get(k)
        if hit is not None:
            return hit
        state = self.state
        wl = state.workloads[k]
        elapsed = self._elapsed(k)
        q = self.quantile
        if q is not None:
            out = (q(wl, elapsed, _unit(0, k)), q(wl, elapsed, _unit(1, k)), q(wl, elapsed, _unit(2, k)))
        else:
            p = self.model.predict(wl, elapsed)
            out = (p.point, p.low, p.high)
        self.cache[k] = out
        return out

    def _elapsed(self, k: str) -> float:
        state = self.state
        if k in state.admitted:
            start = state.admit_time.get(k)
            return max(0.0, self.now - start) if start is not None else 0.0
        return 0.0

    def get(self, k: str, which: int) -> float:
        """Run time of ``k`` in run ``which``: point, low, high (0-2), or a further draw (3, ...)."""
        if which < _DRAW0 or self.quantile is None:
            return self[k][min(which, _HIGH)]
        ck = (k, which)
        hit = self.cache.get(ck)
        if hit is None:
            hit = self.cache[ck] = self.quantile(self.state.workloads[k], self._elapsed(k), _unit(which, k))
        return hit


def _forward(
    base: Scheduler,
    now: float,
    preds: _Predictions,
    which: int,
    holds: Mapping[str, Optional[float]],
    deadlines: Mapping[str, float],
    todo: set[str],
    end_time: float,
    max_waiting_for: int,
    compress: bool = True,
    also_started: bool = False,
) -> _Run:
    f = _Forward(base, now, preds, which, holds, deadlines, max_waiting_for, compress)
    return f.run(todo, end_time, also_started)


class _Forward:
    """One forward simulation on a snapshot (see the module docstring).

    **Shape compression.** Kueue walks a BestEffortFIFO queue head by head after every release
    (each head that does not fit is parked; the next cycle pops the next one), which makes a
    forward run over a deep queue quadratic. But two pending workloads of one ClusterQueue with
    the same *shape* (``Scheduler._shape``: what a nomination reads of a workload) get the same
    nomination at the same admitted state: when the first does not fit, neither does the second.
    So each ClusterQueue's queue holds only the first pending workload (in queue order) of each
    shape; the next one of that shape joins the queue when it is admitted. Which workloads are
    admitted at an instant is unchanged; only the walk over workloads that cannot fit is skipped,
    which can change the order in which two ClusterQueues of a cohort reach freed quota within one
    instant (in Kueue, the ClusterQueue whose walk is shorter gets there first). Exact
    (``compress=False``): Kueue's walk, cycle for cycle. Not applied under ``withinClusterQueue:
    LowerOrNewerEqualPriority``, whose nominations also read the creation time.
    """

    def __init__(self, base, now, preds, which, holds, deadlines, max_waiting_for, compress=True):
        self.base = base
        self.now = now
        self.preds = preds
        self.which = which
        self.deadlines = deadlines
        self.max_waiting_for = max_waiting_for
        # Pending workloads are copied only when they enter a queue (``_compress``,
        # ``_next_of_group``): a deep queue holds only a few of them at a time.
        s = self.s = snapshot(base, positions=False, copy_pending=not compress)
        self.batch = max(0.0, s.options.requeue_batch_seconds)
        self.events: list[tuple[float, int, int, str, int]] = []  # (time, kind, seq, key, token)
        self.seq = 0
        self.token: dict[str, int] = {}
        self.ends: dict[str, float] = {}
        self.releases: dict[str, deque] = {}
        self.backlog: dict[tuple, deque] = {}  # (cq, shape) -> keys held back, in queue order
        self.group_of: dict[str, tuple] = {}
        self.held_wl: dict[str, object] = {}
        self.never_of: dict[str, tuple[str, str]] = {}  # held-back key -> its group head's reason
        # Victims chosen but not yet stopped stop now, and are requeued.
        for victim in list(s.evicting):
            if victim in s.admitted:
                s.evict(victim, now)
        for key in s.admitted:
            start = s.admit_time.get(key)
            start = now if start is None else start
            end = start + self.runtime(key)
            d = deadlines.get(key)
            if d is not None and d < end:
                end = d
            self._push_end(key, max(end, now))
        for key, reset in holds.items():
            wl = s.workloads.get(key)
            if wl is None or key in s.admitted:
                continue
            s.remove_workload(key)
            if reset is not None:
                self.held_wl[key] = wl
                self.seq += 1
                self.events.append((max(float(reset), now), _RETURN, self.seq, key, 0))
        heapq.heapify(self.events)
        if compress:
            self._compress()
            wls = s.workloads
            for q in s.queues.values():
                for k in q.keys:
                    if wls[k] is base.workloads.get(k):
                        wls[k] = copy_workload(wls[k])

    def runtime(self, key: str) -> float:
        wl = self.s.workloads[key]
        t = self.preds.get(key, self.which)
        mx = wl.maximum_execution_time_seconds
        if mx:
            t = min(t, float(mx))
        return t

    def _push_end(self, key: str, end: float) -> None:
        self.seq += 1
        self.token[key] = self.seq
        self.ends[key] = end
        heapq.heappush(self.events, (end, _END, self.seq, key, self.seq))

    def _compress(self) -> None:
        s = self.s
        for name, q in s.queues.items():
            cq = s.config.cluster_queues[name]
            if cq.preemption.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY or len(q.keys) < 2:
                continue
            groups: dict[int, list] = {}
            for key, (ok, _) in q.keys.items():
                if key == q.sticky:
                    continue
                groups.setdefault(s._shape(key, s.workloads[key]), []).append((ok, key))
            for shape, members in groups.items():
                if len(members) < 2:
                    continue
                members.sort()
                gk = (name, shape)
                rest = deque()
                for _, key in members[1:]:
                    q.delete(key)
                    rest.append(key)
                    self.group_of[key] = gk
                self.group_of[members[0][1]] = gk
                self.backlog[gk] = rest

    def _release(self, key: str, t: float, cq: str) -> None:
        root = self.s._root_of.get(cq, cq)
        rel = self.releases.get(root)
        if rel is None:
            rel = self.releases[root] = deque(maxlen=16)
        rel.append((key, t, cq))

    def _next_of_group(self, key: str) -> None:
        gk = self.group_of.get(key)
        if gk is None:
            return
        rest = self.backlog.get(gk)
        if rest:
            nxt = rest.popleft()
            wl = self.s.workloads[nxt]
            if wl is self.base.workloads.get(nxt):
                wl = self.s.workloads[nxt] = copy_workload(wl)
            self.s.queues[gk[0]].push(wl, f"{wl.namespace}/{wl.queue_name}")

    def never(self, key: str) -> Optional[tuple[str, str]]:
        """A reason that the workload can never be admitted, its own or its group head's."""
        r = self.s.pending_reason.get(key)
        if r is not None and r[0] in NEVER_REASONS:
            return r
        return None

    def run(self, todo: set[str], end_time: float, also_started: bool = False) -> _Run:
        s, events, now = self.s, self.events, self.now
        starts: dict[str, float] = {}
        others: Optional[dict[str, tuple[float, str]]] = {} if also_started else None
        cqs: dict[str, str] = {}
        waits: dict[str, tuple[WaitingFor, ...]] = {}
        running_now = self.base.admitted
        workloads, admitted = s.workloads, s.admitted
        left = {k for k in todo if self.never(k) is None}
        stopped = None
        t = now
        first = True
        while left:
            if not first:
                t = events[0][0] if events else None
                tr = s.next_requeue_time()
                if tr is not None:
                    tr = max(tr, now)
                    if t is None or tr < t:
                        t = tr
                if t is None:
                    break  # nothing will ever change again
                if t > end_time:
                    stopped = "horizon"
                    break
            first = False
            while events and events[0][0] <= t:
                _, kind, _, key, tok = heapq.heappop(events)
                if kind == _END:
                    if self.token.get(key) != tok or key not in admitted:
                        continue
                    self._release(key, self.ends[key], s.admitted_cq[key])
                    s.remove_workload(key, t)
                else:  # a held workload comes back, in its old place
                    wl = copy_workload(self.held_wl[key])
                    wl.admission = None
                    s.add_workload(wl)
            if len(workloads) == len(admitted) and not events:
                break
            victims_here: dict[str, int] = {}
            requeued: list[str] = []
            while True:
                r = s.schedule(t)
                if r.requeued:
                    requeued.extend(r.requeued)
                for wl in r.admitted:
                    key = wl.key
                    self._next_of_group(key)
                    if key in left:
                        left.discard(key)
                        starts[key] = t
                        cqs[key] = wl.admission.cluster_queue
                        if self.max_waiting_for and t > now:
                            waits[key] = _waiting_for(key, wl.admission.cluster_queue, t, self.batch,
                                                      self.releases, s._root_of, running_now,
                                                      self.max_waiting_for)
                    elif others is not None and key not in running_now and key not in starts \
                            and key not in others:
                        others[key] = (t, wl.admission.cluster_queue)
                    end = t + self.runtime(key)
                    d = self.deadlines.get(key) if key in running_now else None
                    if d is not None and d < end:
                        end = max(d, t)
                    self._push_end(key, end)
                for p in r.preempted:
                    v = p.victim
                    if v not in admitted:
                        continue
                    self._release(v, t, s.admitted_cq[v])
                    self.token[v] = -1
                    s.evict(v, t)
                    n = victims_here[v] = victims_here.get(v, 0) + 1
                    if n > 3:
                        stopped = "livelock"
                if stopped or r.heads == 0 or not (r.changed or r.admitted or r.preempted):
                    break
            if stopped:
                break
            for k in requeued:  # a head that can never be admitted: nor can the rest of its shape
                reason = self.never(k)
                if reason is not None:
                    left.discard(k)
                    gk = self.group_of.get(k)
                    if gk is not None:
                        for other in self.backlog.get(gk, ()):
                            left.discard(other)
                            self.never_of[other] = reason
        reasons = {}
        for k in todo:
            if k not in starts:
                r = self.never(k) or self.never_of.get(k) or s.pending_reason.get(k)
                if r is not None:
                    reasons[k] = r
        return _Run(starts, waits, self.ends, reasons, stopped, cqs, others)


def _waiting_for(key, cq, t, batch, releases, root_of, running_now, limit) -> tuple[WaitingFor, ...]:
    """The releases of ``key``'s cohort tree that its admission at ``t`` followed: those of the
    requeue batch that woke it (within ``batch`` s before ``t``), else the latest before ``t``;
    its own ClusterQueue's first, then the latest."""
    rel = releases.get(root_of.get(cq, cq))
    if not rel:
        return ()
    recent = [r for r in rel if t - batch - 1e-6 <= r[1] <= t]
    if not recent:
        recent = [r for r in rel if r[1] <= t]
    recent.sort(key=lambda r: (r[2] != cq, -r[1]))
    out = []
    for k, end, _ in recent[:limit]:
        out.append(WaitingFor(k, end, RUNNING if k in running_now else PENDING))
    return tuple(out)


__all__ = [
    "DEFAULT_HORIZON",
    "Estimate",
    "NEVER_REASONS",
    "REASON_BUDGET_EXCEEDED",
    "REASON_LIVELOCK",
    "REASON_NOT_WITHIN_HORIZON",
    "WaitingFor",
    "estimate_starts",
]
