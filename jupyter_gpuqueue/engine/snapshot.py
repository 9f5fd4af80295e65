"""A copy of a :class:`~.scheduler.Scheduler`'s state that can be run forward without touching the
original: what start-time estimates (``estimate``) simulate on.

``snapshot(sched)`` returns a new ``Scheduler`` with the same configuration, inventory and options
and *copies* of everything a scheduling cycle mutates: the workloads (each a shallow copy: its
``admission``, ``evictions`` and ``queue_order_time`` are the copy's own), the admitted indexes and
their admission times, victims being evicted, pending reasons, every ClusterQueue's queue (heap,
parked set, sticky head, pop and requeue cycles), batched requeues, the quota tree's usage and the
device allocator's assignments. The configuration, the inventory and per-workload read-only data
(PodSets, usage dicts, admission objects) are shared: the scheduler never mutates them. Nomination
memos start empty (they are a cache).

It reads the scheduler's private fields: the price of a copy in a few milliseconds per 10,000
workloads instead of a rebuild through ``add_workload``. ``tests/engine/test_estimate.py`` checks
that a snapshot run forward decides exactly as the original run forward, and that the original is
not changed. Like the rest of ``engine/``: no I/O, no clock, no threads — but a snapshot is taken
on the thread that owns the live scheduler; the copy may then go to another thread.

``positions=False`` skips the sorted indexes used only for positions (``Scheduler.position``): a
forward simulation never reads them, and they are the larger part of a copy's cost. Positions of
such a copy are not available.
"""

from __future__ import annotations

import dataclasses
import operator

from sortedcontainers import SortedList

from .fairsharing import FairSharing
from .model import Workload
from .placement import DeviceAllocator
from .preemption import Preemptor
from .queues import ClusterQueueQueue
from .scheduler import Scheduler

_WL_SLOTS = tuple(f.name for f in dataclasses.fields(Workload))


def copy_workload(wl: Workload) -> Workload:
    """A shallow copy of ``wl`` (faster than ``copy.copy`` for a slotted dataclass)."""
    new = object.__new__(Workload)
    for name in _WL_SLOTS:
        object.__setattr__(new, name, getattr(wl, name))
    return new


_WL_FIELDS = operator.attrgetter(*_WL_SLOTS)


def freeze_pending(snap: Scheduler) -> dict[str, tuple]:
    """For a copy taken with ``copy_pending=False``: each pending workload's fields as a tuple
    (read at once, in C: a fraction of :func:`copy_workload`'s cost), and the shared Workload
    objects taken out of the copy (its ``workloads`` hold None for them), so that the copy can go
    to another thread while the original's workloads change. :func:`thaw_pending` puts copies
    back. Returns key → fields."""
    admitted = snap.admitted
    wls = snap.workloads
    frozen = {k: _WL_FIELDS(wl) for k, wl in wls.items() if k not in admitted}
    for k in frozen:
        wls[k] = None
    return frozen


def thaw_pending(snap: Scheduler, frozen: dict[str, tuple]) -> None:
    """The inverse of :func:`freeze_pending`: each frozen workload back into ``snap`` as a
    Workload of its own."""
    wls = snap.workloads
    for k, values in frozen.items():
        new = object.__new__(Workload)
        for name, v in zip(_WL_SLOTS, values):
            object.__setattr__(new, name, v)
        wls[k] = new


def _copy_queue(q: ClusterQueueQueue, positions: bool) -> ClusterQueueQueue:
    new = object.__new__(ClusterQueueQueue)
    new.name = q.name
    new.strategy = q.strategy
    new._heap = list(q._heap)  # items are shared tuples: ``_active``'s identity checks still hold
    new._active = dict(q._active)
    if positions:
        new.all_pending = q.all_pending.copy()
        new.by_local_queue = {k: v.copy() for k, v in q.by_local_queue.items()}
    else:
        new.all_pending = SortedList()
        new.by_local_queue = {}
    new.parked = dict(q.parked)
    new.keys = dict(q.keys)
    new.pop_cycle = q.pop_cycle
    new.requeue_cycle = q.requeue_cycle
    new.popped_at = dict(q.popped_at)
    new.sticky = q.sticky
    return new


def snapshot(sched: Scheduler, *, positions: bool = True, copy_pending: bool = True) -> Scheduler:
    """A copy of ``sched`` that can be scheduled forward independently (see the module
    docstring). ``sched`` is only read. ``copy_pending=False`` shares the pending Workload objects
    with ``sched``: the caller must replace each one with :func:`copy_workload` before a cycle can
    admit it (the estimator does, for the few it keeps in the queues)."""
    new = Scheduler.__new__(Scheduler)
    new.options = dataclasses.replace(sched.options)
    new.inventory = sched.inventory
    if copy_pending:
        new.workloads = {k: copy_workload(wl) for k, wl in sched.workloads.items()}
    else:
        admitted = sched.admitted
        new.workloads = {k: (copy_workload(wl) if k in admitted else wl) for k, wl in sched.workloads.items()}
    wls = new.workloads
    new.admitted = {k: wls[k] for k in sched.admitted}
    new.pending_reason = dict(sched.pending_reason)
    new.orphans = dict(sched.orphans)
    new._placement_parked = dict(sched._placement_parked)
    new.admitted_by_cq = {cq: dict(keys) for cq, keys in sched.admitted_by_cq.items()}
    new.admitted_cq = dict(sched.admitted_cq)
    new.usage_of = dict(sched.usage_of)  # values are never mutated in place
    new.admit_time = dict(sched.admit_time)
    new.evicting = dict(sched.evicting)
    new._placement_victims = set(getattr(sched, "_placement_victims", ()))
    new.terminating = set(getattr(sched, "terminating", ()))
    new._requeue_due = dict(sched._requeue_due)
    new._version = {}
    new._memo = {}
    new._shapes = dict(sched._shapes)
    new._shape_ids = dict(sched._shape_ids)
    new._unknown_admit_times = sched._unknown_admit_times
    new.preemptor = Preemptor(new)
    new.fair = FairSharing(new)
    # Configuration-derived state (tree structure, inactive queues, queue order) is rebuilt from
    # the shared config; then the mutable parts are copied over.
    new._configure(sched.config)
    for name, node in sched.tree.cluster_queues.items():
        new.tree.cluster_queues[name].usage = dict(node.usage)
    for name, node in sched.tree.cohorts.items():
        mine = new.tree.cohorts.get(name)
        if mine is not None:
            mine.usage = dict(node.usage)
    new.queues = {name: _copy_queue(q, positions) for name, q in sched.queues.items()}
    if sched.allocator is not None:
        alloc = DeviceAllocator(sched.inventory)
        alloc.owner = dict(sched.allocator.owner)
        alloc.by_workload = {k: list(v) for k, v in sched.allocator.by_workload.items()}
        if hasattr(sched.allocator, "nominated"):  # devices kept for waiting preemptors (placement.py)
            alloc.nominated = dict(sched.allocator.nominated)
        if hasattr(sched.allocator, "held"):  # devices kept for workloads evicted by placement preemption
            alloc.held = dict(sched.allocator.held)
        new.allocator = alloc
    else:
        new.allocator = None
    return new


def state_digest(sched: Scheduler) -> tuple:
    """A comparable summary of everything a cycle can change (tests: "not mutated")."""
    return (
        tuple(sorted((k, wl.admission is not None, wl.evictions, wl.queue_order_time)
                     for k, wl in sched.workloads.items())),
        tuple(sorted(sched.admitted_cq.items())),
        tuple(sorted((k, v) for k, v in sched.admit_time.items())),
        tuple(sorted(sched.evicting.items())),
        tuple(sorted(sched.pending_reason.items())),
        tuple(sorted(sched._requeue_due.items())),
        tuple(sorted((n, tuple(sorted(node.usage.items()))) for n, node in sched.tree.cluster_queues.items())),
        tuple(sorted((n, tuple(sorted(node.usage.items()))) for n, node in sched.tree.cohorts.items())),
        tuple(sorted((n, tuple(sorted(q.keys)), tuple(sorted(q.parked)), tuple(sorted(q._active)), q.sticky,
                      q.pop_cycle, q.requeue_cycle) for n, q in sched.queues.items())),
        tuple(sorted(sched.allocator.owner.items())) if sched.allocator is not None else (),
    )


__all__ = ["copy_workload", "freeze_pending", "snapshot", "state_digest", "thaw_pending"]
