"""Fair sharing: dominant resource share (DRS), the admission tournament, and fair preemption.

Switched on by a Kueue Configuration document (``fairSharing: {enable: true}``). Sources in Kueue:

- **DRS** (``pkg/cache/scheduler/fair_sharing.go: dominantResourceShare``): for a node with a parent,
  per resource name, ``borrowed = Σ_flavors max(0, usage + request − subtreeQuota)``; ``lendable =
  Σ_flavors potentialAvailable(parent)``; ratio = borrowed × 1000 / lendable; the DRS is the largest
  ratio, divided by the node's fair-sharing weight. A node that borrows with weight 0 has an infinite
  share; a node without a parent, or not borrowing, has 0. Lower shares are admitted first and
  preempted last.
- **Tournament** (``pkg/scheduler/fair_sharing_iterator.go``): the cycle's entries are taken one at a
  time; in each cohort, bottom-up, the child (ClusterQueue or cohort) whose DRS *with its nominee
  admitted* is lowest wins, then higher priority, then older. Computed again after every admission.
- **Preemption** (``pkg/scheduler/preemption/preemption.go: fairPreemptions``, KEP 1714): victims are
  taken from the ClusterQueue with the highest share first; from another ClusterQueue only while the
  strategy holds — S2-a ``LessThanOrEqualToFinalShare``: preemptor's new share ≤ the victim queue's
  share without the victim; S2-b ``LessThanInitialShare``: preemptor's new share < the victim queue's
  current share (tried second, one victim per queue). Then fill-back as in classical preemption.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Iterable, Optional

from .model import ClusterQueue, Workload
from .preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    Target,
    add_usage,
    cq_is_borrowing,
    remove_usage,
    workload_fits,
)
from .quota import FlavorResource, QuotaNode

if TYPE_CHECKING:  # pragma: no cover
    from .scheduler import Scheduler, _Entry

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"

Share = tuple[int, float]  # (1 if a zero-weight node borrows, value): comparable like Kueue CompareDRS


def dominant_resource_share(node: QuotaNode, weight: float, req: Optional[dict[FlavorResource, int]] = None) -> Share:
    """The DRS of ``node`` with ``req`` more usage, as a sortable key (see the module docstring)."""
    if node.parent is None:
        return (0, 0.0)
    borrowing: dict[str, int] = {}
    for fr, quota in node.subtree_quota.items():
        amount = node.usage.get(fr, 0) + (req.get(fr, 0) if req else 0) - quota
        if amount > 0:
            borrowing[fr[1]] = borrowing.get(fr[1], 0) + amount
    if not borrowing:
        return (0, 0.0)
    parent = node.parent
    root = parent.root()
    lendable: dict[str, int] = {}
    for fr in root.subtree_quota:
        lendable[fr[1]] = lendable.get(fr[1], 0) + parent.potential_available(fr)
    ratio = 0.0
    for r, b in borrowing.items():
        lr = lendable.get(r, 0)
        if lr > 0:
            ratio = max(ratio, b * 1000.0 / lr)
    if weight == 0:
        return (1, ratio)
    return (0, ratio / weight if ratio else 0.0)


def weighted_share(share: Share) -> float:
    """The number Kueue reports in ``status.fairSharing.weightedShare`` (∞ for zero weight)."""
    return math.inf if share[0] else share[1]


class FairSharing:
    """DRS lookups over a Scheduler's quota tree with the configured weights."""

    def __init__(self, sched: "Scheduler"):
        self.sched = sched

    def weight(self, node: QuotaNode) -> float:
        cfg = self.sched.config
        if node.is_cluster_queue:
            cq = cfg.cluster_queues.get(node.name)
            return cq.fair_sharing_weight if cq else 1.0
        co = cfg.cohorts.get(node.name)
        return co.fair_sharing_weight if co else 1.0

    def share(self, node: QuotaNode, req: Optional[dict[FlavorResource, int]] = None) -> Share:
        return dominant_resource_share(node, self.weight(node), req)

    # -- the tournament ---------------------------------------------------------------------------
    def pick(self, entries: list["_Entry"]) -> "_Entry":
        """The next entry to process among ``entries`` (Kueue fairSharingIterator.pop)."""
        s = self.sched
        first = entries[0]
        node = s.tree.cluster_queues[first.cq.name]
        if node.parent is None:
            return first
        root = node.root()
        by_cq = {e.cq.name: e for e in entries}
        # DRS of each node on the path, with the nominee admitted (computeDRS).
        drs: dict[tuple[str, str], Share] = {}
        for cqn in root.subtree_cluster_queues():
            e = by_cq.get(cqn.name)
            if e is None or e.assignment is None:
                continue
            usage = e.assignment.usage
            add_usage(cqn, usage)
            try:
                child_share = self.share(cqn)
                for ancestor in cqn.path_to_root():
                    if ancestor is cqn:
                        continue
                    drs[(ancestor.name, e.wl.key)] = child_share
                    child_share = self.share(ancestor)
            finally:
                remove_usage(cqn, usage)
        winner = self._tournament(root, by_cq, drs)
        return winner if winner is not None else first

    def _tournament(self, cohort: QuotaNode, by_cq: dict, drs: dict):
        candidates = []
        for child in cohort.children:
            if child.is_cluster_queue:
                e = by_cq.get(child.name)
                if e is not None:
                    candidates.append(e)
            else:
                e = self._tournament(child, by_cq, drs)
                if e is not None:
                    candidates.append(e)
        if not candidates:
            return None
        zero = (0, 0.0)

        def key(e):
            return (drs.get((cohort.name, e.wl.key), zero), -e.wl.priority, e.wl.order_time, e.wl.uid or e.wl.key)

        return min(candidates, key=key)


def fair_preemptions(
    sched: "Scheduler",
    wl: Workload,
    cq: ClusterQueue,
    req: dict[FlavorResource, int],
    frs: set[FlavorResource],
    candidates: list[str],
    below_priority: Optional[int],
) -> list[Target]:
    """Kueue ``fairPreemptions`` (see the module docstring). ``candidates`` are ordered already."""
    fs = FairSharing(sched)
    strategies = sched.config.fair_sharing.preemption_strategies or [
        LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE,
    ]
    nominated = sched.tree.cluster_queues[cq.name]
    same = [k for k in candidates if sched.admitted_cq[k] == cq.name]
    if len(same) == len(candidates):
        return sched.preemptor.minimal_preemptions(req, nominated, frs, candidates, True, None)

    removed: list[tuple[Target, QuotaNode, dict]] = []

    def remove(key: str, reason: str) -> None:
        cq_name = sched.admitted_cq[key]
        n = sched.tree.cluster_queues[cq_name]
        u = sched.usage_of[key]
        remove_usage(n, u)
        removed.append((Target(key, cq_name, reason), n, u))

    def restore_all() -> None:
        for _, n, u in removed:
            add_usage(n, u)

    heap, groups = _cq_heap(sched, fs, candidates, first_only=False)
    new_nominated = fs.share(nominated, req)
    fits = False
    retry: list[str] = []
    strategy = strategies[0]
    while heap and not fits:
        _, name = heapq.heappop(heap)
        keys = groups[name]
        node = sched.tree.cluster_queues[name]
        if node is nominated:
            remove(keys[0], IN_CLUSTER_QUEUE)
            if workload_fits(req, nominated, True):
                fits = True
                break
            new_nominated = fs.share(nominated, req)
            groups[name] = keys[1:]
            if groups[name]:
                heapq.heappush(heap, (_neg(fs.share(node)), name))
            continue
        old_share = fs.share(node)
        for i, key in enumerate(keys):
            below = below_priority is not None and sched.admitted[key].priority < below_priority
            without = _share_without(fs, node, sched.usage_of[key])
            ok = _strategy(strategy, new_nominated, old_share, without)
            if below or ok:
                remove(key, IN_COHORT_FAIR_SHARING if ok else IN_COHORT_RECLAIM_WHILE_BORROWING)
                if workload_fits(req, nominated, True):
                    fits = True
                    break
                groups[name] = keys[i + 1:]
                if groups[name] and cq_is_borrowing(node, frs):
                    heapq.heappush(heap, (_neg(without), name))
                break
            retry.append(key)
    if not fits and len(strategies) > 1:
        heap, groups = _cq_heap(sched, fs, retry, first_only=True)
        while heap and not fits:
            _, name = heapq.heappop(heap)
            node = sched.tree.cluster_queues[name]
            if _strategy(strategies[1], new_nominated, fs.share(node), None):
                remove(groups[name][0], IN_COHORT_FAIR_SHARING)
                if workload_fits(req, nominated, True):
                    fits = True
    if not fits:
        restore_all()
        return []
    kept = list(removed)
    for i in range(len(removed) - 2, -1, -1):
        t, n, u = removed[i]
        add_usage(n, u)
        if workload_fits(req, nominated, True):
            kept.remove(removed[i])
        else:
            remove_usage(n, u)
    for _, n, u in kept:
        add_usage(n, u)
    return [t for t, _, _ in kept]


def _neg(share: Share) -> tuple:
    # heapq is a min-heap; the highest share must come first.
    return (-share[0], -share[1])


def _share_without(fs: FairSharing, node: QuotaNode, usage: dict[FlavorResource, int]) -> Share:
    remove_usage(node, usage)
    try:
        return fs.share(node)
    finally:
        add_usage(node, usage)


def _strategy(name: str, preemptor_new: Share, target_old: Share, target_new: Optional[Share]) -> bool:
    if name == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor_new <= target_new
    return preemptor_new < target_old


def _cq_heap(sched: "Scheduler", fs: FairSharing, candidates: Iterable[str], *, first_only: bool):
    groups: dict[str, list[str]] = {}
    for key in candidates:
        name = sched.admitted_cq[key]
        if name in groups:
            if not first_only:
                groups[name].append(key)
        else:
            groups[name] = [key]
    heap = [(_neg(fs.share(sched.tree.cluster_queues[name])), name) for name in groups]
    heapq.heapify(heap)
    return heap, groups
