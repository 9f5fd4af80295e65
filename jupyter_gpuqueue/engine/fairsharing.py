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
- **Preemption** (``pkg/scheduler/preemption/fair_strategy.go``, ``fairsharing/ordering.go``,
  ``fairsharing/target.go``, KEP 1714): victims are taken from the ClusterQueue reached by descending
  from the root into the child with the highest share; shares are compared at the almost least common
  ancestors of the preemptor's and the target's queues — S2-a ``LessThanOrEqualToFinalShare``:
  preemptor's new share ≤ the target side's share without the victim; S2-b ``LessThanInitialShare``
  (tried second, once per queue): preemptor's new share < the target side's current share. Then
  fill-back as in classical preemption.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

from .model import ClusterQueue, Workload
from .preemption_common import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    AdmittedState,
    Target,
    add_usage,
    fill_back,
    remove_usage,
    workload_fits,
)
from .quota import FlavorResource, QuotaNode

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

    def __init__(self, sched: AdmittedState):
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
    def pick(self, entries: list):
        """The next entry to process among ``entries`` (Kueue fairSharingIterator.pop): the
        scheduler's cycle entries, each with its ``wl``, ``cq`` and flavor ``assignment``."""
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
    sched: AdmittedState,
    wl: Workload,
    cq: ClusterQueue,
    req: dict[FlavorResource, int],
    frs: set[FlavorResource],
    candidates: list[str],
    below_priority: Optional[int] = None,
) -> list[Target]:
    """Kueue ``fairPreemptionStrategy`` (``fair_strategy.go``) over ``candidates`` (already ordered).

    While victims are chosen, the preemptor's usage is simulated as admitted, so that shares account
    for it. ClusterQueues are visited in ``_TargetOrdering`` order; shares are compared at the
    *almost least common ancestors* of the preemptor and target queues (``target.go``).
    ``below_priority`` is unused: borrowWithinCohort applies to classical preemption only."""
    fs = FairSharing(sched)
    strategies = sched.config.fair_sharing.preemption_strategies or [
        LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE,
    ]
    pre = sched.tree.cluster_queues[cq.name]
    removed: list[tuple[Target, QuotaNode, dict]] = []

    def remove(key: str, reason: str) -> None:
        name = sched.admitted_cq[key]
        n = sched.tree.cluster_queues[name]
        u = sched.usage_of[key]
        remove_usage(n, u)
        removed.append((Target(key, name, reason), n, u))

    def fits_now() -> bool:  # the consumer checks fit without the simulated preemptor usage
        remove_usage(pre, req)
        try:
            return workload_fits(req, pre, True)
        finally:
            add_usage(pre, req)

    fits = False
    add_usage(pre, req)
    try:
        ordering = _TargetOrdering(sched, fs, pre, candidates)
        retry: list[str] = []
        for target in ordering:
            name = target.name
            if target is pre:
                remove(ordering.pop(name), IN_CLUSTER_QUEUE)
                if fits_now():
                    fits = True
                    break
                continue
            p_lca, t_lca = _almost_lcas(pre, target)
            pre_new, t_old = fs.share(p_lca), fs.share(t_lca)
            while ordering.has(name):
                key = ordering.pop(name)
                u = sched.usage_of[key]
                remove_usage(target, u)
                t_new = fs.share(t_lca)
                add_usage(target, u)
                if _strategy(strategies[0], pre_new, t_old, t_new):
                    remove(key, IN_COHORT_FAIR_SHARING)
                    fits = fits_now()
                    break  # shares changed: pick the next ClusterQueue again
                retry.append(key)
            if fits:
                break
        if not fits and len(strategies) > 1:
            ordering = _TargetOrdering(sched, fs, pre, retry)
            for target in ordering:
                p_lca, t_lca = _almost_lcas(pre, target)
                key = ordering.pop(target.name)
                if _strategy(strategies[1], fs.share(p_lca), fs.share(t_lca), None):
                    remove(key, IN_COHORT_FAIR_SHARING)
                    if fits_now():
                        fits = True
                        break
                ordering.drop(target)  # S2-b applies at most once per ClusterQueue
    finally:
        remove_usage(pre, req)
    return fill_back(removed, fits, req, pre, True)


def _almost_lcas(a: QuotaNode, b: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The children of the least common ancestor of ``a`` and ``b`` on the paths to each of them
    (Kueue ``getAlmostLCAs``)."""
    path_a = list(a.path_to_root())
    ancestors_a = {id(n): i for i, n in enumerate(path_a)}
    prev_b = b
    for n in b.path_to_root():
        if id(n) in ancestors_a:
            i = ancestors_a[id(n)]
            return (path_a[i - 1] if i > 0 else a), (prev_b if prev_b is not n else b)
        prev_b = n
    return a, b


class _TargetOrdering:
    """Kueue ``TargetClusterQueueOrdering`` (``fairsharing/ordering.go``): from the root, descend into
    the child with the highest share that still has candidates (cohorts win ties); prune
    ClusterQueues without candidates or not borrowing (except the preemptor's own), and cohorts not
    borrowing unless on the preemptor's path. Iterating yields target ClusterQueue nodes; between two
    of them a candidate must be popped or the queue dropped."""

    def __init__(self, sched: AdmittedState, fs: FairSharing, pre: QuotaNode, candidates: Iterable[str]):
        self.fs = fs
        self.pre = pre
        self.ancestors = {id(n) for n in pre.path_to_root() if n is not pre}
        self.by_cq: dict[str, list[str]] = {}
        for key in candidates:
            self.by_cq.setdefault(sched.admitted_cq[key], []).append(key)
        self.pruned: set[int] = set()

    def has(self, name: str) -> bool:
        return bool(self.by_cq.get(name))

    def pop(self, name: str) -> str:
        return self.by_cq[name].pop(0)

    def drop(self, node: QuotaNode) -> None:
        self.pruned.add(id(node))

    def __iter__(self):
        if self.pre.parent is None:
            while self.has(self.pre.name):
                yield self.pre
            return
        root = self.pre.root()
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode) -> Optional[QuotaNode]:
        zero = (0, 0.0)
        best_cq, best_cq_share = None, None
        best_co, best_co_share = None, None
        for child in cohort.children:
            if id(child) in self.pruned:
                continue
            share = self.fs.share(child)
            if child.is_cluster_queue:
                if (share == zero and child is not self.pre) or not self.has(child.name):
                    self.pruned.add(id(child))
                elif best_cq_share is None or share >= best_cq_share:
                    best_cq, best_cq_share = child, share
            else:
                if share == zero and id(child) not in self.ancestors:
                    self.pruned.add(id(child))
                elif best_co_share is None or share >= best_co_share:
                    best_co, best_co_share = child, share
        if best_cq is None and best_co is None:
            self.pruned.add(id(cohort))
            return None
        if best_co is not None and (best_cq is None or best_co_share >= best_cq_share):
            return self._next(best_co)
        return best_cq


def _neg(share: Share) -> tuple:
    # heapq is a min-heap; the highest share must come first.
    return (-share[0], -share[1])


def _strategy(name: str, preemptor_new: Share, target_old: Share, target_new: Optional[Share]) -> bool:
    if name == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor_new <= target_new
    return preemptor_new < target_old
