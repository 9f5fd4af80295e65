"""Preemption: which admitted workloads to evict so that a pending one fits.

Classical preemption follows Kueue ``pkg/scheduler/preemption/classical_strategy.go``,
``classical/candidate_generator.go`` and ``classical/hierarchical_preemption.go``:

- **Candidates** in three classes: *same queue* (``withinClusterQueue``: ``LowerPriority`` strictly
  lower, ``LowerOrNewerEqualPriority`` also equal priority queued later); *hierarchy* candidates, in
  subtrees of the cohort tree above their quota where the preemptor has a hierarchical advantage
  (its request fits within a subtree closer to it), taken regardless of borrowing; and *priority*
  candidates elsewhere above quota (``reclaimWithinCohort`` ``LowerPriority`` or ``Any``), which may
  only be taken while the preemptor borrows if ``borrowWithinCohort`` allows it for their priority.
- **Ordering** (Kueue ``CandidatesOrdering``): already being evicted first (per class), then
  hierarchy, priority and same-queue candidates; within a class other queues first, lower priority
  first, most recently admitted first, then UID.
- **Validity** is checked again as victims are removed: a candidate in another queue is valid only
  while its queue, and every cohort up to the least common ancestor, is still above quota.
- **Attempts**: with or without the preemptor borrowing, in Kueue's order.
- **Minimal set**: remove valid candidates in order until the preemptor fits; then *fill back* in
  reverse, keeping out only the victims without which it would not fit.
- **Each preemptor's victims are its own** (ours, with ``SchedulerOptions.preemptor_first``, which
  the live service turns on): a workload being evicted for another preemptor that still waits for
  it is no candidate (:meth:`Preemptor.claimed_by_another`). Kueue takes such a workload as a
  candidate, ordered first, and the two preemptors then wait on the same victim; whichever is
  ordered first takes its quota, and the other preempts again: two victims recorded as preempted by
  the same preemptor, one of them having freed its quota for the other (issue 33). Once its
  preemptor is admitted or gone, a workload still being evicted is a candidate again (first).

Fair-sharing preemption lives in ``fairsharing``. Everything is simulated on the live quota tree and
restored before returning.

**Preemption for placement** (ours; in Kubernetes kube-scheduler's job): when a workload's quota fits
but its pods cannot all be placed on free devices, :meth:`Preemptor.placement_candidates` says which
admitted workloads it may preempt, combining Kueue's ClusterQueue rules with kube-scheduler's:
workloads of strictly lower priority (kube-scheduler, ``SelectVictimsOnNode``: only pods of lower
priority are potential victims), in its own ClusterQueue if ``withinClusterQueue`` is not ``Never``
and in the other ClusterQueues of its cohort tree if ``reclaimWithinCohort`` is not ``Never``
(Kueue never preempts outside the cohort tree); none if its PriorityClass has ``preemptionPolicy:
Never`` (kube-scheduler ``PodEligibleToPreemptOthers``). Unlike a quota preemption the victim's
ClusterQueue need not be borrowing: what is short is devices, not quota. ``placement.DeviceAllocator.
preemption_victims`` then picks the victims node by node.
"""

from __future__ import annotations

from typing import Optional

from .model import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER, ClusterQueue, Workload
from .preemption_common import (  # noqa: F401 (re-exported: the names preemption is known by)
    HUMAN_REASONS,
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    IN_NODE_PLACEMENT,
    AdmittedState,
    Target,
    add_usage,
    cq_is_borrowing,
    fill_back,
    queue_under_nominal,
    remove_usage,
    workload_fits,
    workload_usage,
)
from .quota import FlavorResource, QuotaNode

_WITHIN_CQ = "WithinCQ"
_HIERARCHICAL_RECLAIM = "HierarchicalReclaim"
_RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
_RECLAIM_WHILE_BORROWING = "ReclaimWhileBorrowing"
_REASONS = {
    _WITHIN_CQ: IN_CLUSTER_QUEUE,
    _HIERARCHICAL_RECLAIM: IN_COHORT_RECLAMATION,
    _RECLAIM_WITHOUT_BORROWING: IN_COHORT_RECLAMATION,
    _RECLAIM_WHILE_BORROWING: IN_COHORT_RECLAIM_WHILE_BORROWING,
}


def _within_nominal(node: QuotaNode, frs_t) -> bool:
    """Kueue ``IsWithinNominalInResources``: at or below its quota in every one of ``frs_t``."""
    usage, quota = node.usage, node.subtree_quota
    for fr in frs_t:
        if usage.get(fr, 0) > quota.get(fr, 0):
            return False
    return True


def _fit_in_quota(node: QuotaNode, req: dict) -> tuple[bool, dict]:
    """Kueue ``QuantitiesFitInQuota``: whether ``req`` fits the node's subtree quota, and what is
    left to find above it."""
    fits = True
    remaining = {}
    for fr, v in req.items():
        if node.usage.get(fr, 0) + v > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, v - node.local_available(fr))
    return fits, remaining


class Preemptor:
    """Finds preemption targets over a Scheduler's live state (classical policy)."""

    def __init__(self, sched: AdmittedState):
        self.sched = sched

    def claimed_by_another(self, key: str, wl: Workload) -> bool:
        """``key`` is being evicted for another preemptor that still waits for it (pending), and
        preemptors keep their own victims (``SchedulerOptions.preemptor_first``): not a candidate
        for ``wl`` (module docstring)."""
        s = self.sched
        preemptor = s.evicting.get(key)
        if preemptor is None or preemptor == wl.key:
            return False
        options = getattr(s, "options", None)
        if options is None or not options.preemptor_first:
            return False
        return preemptor in s.workloads and preemptor not in s.admitted

    # -- candidates --------------------------------------------------------------------------------
    def find_candidates(self, wl: Workload, cq: ClusterQueue, frs: set[FlavorResource]) -> list[str]:
        s = self.sched
        admitted, usage_of = s.admitted, s.usage_of
        frs_t = tuple(frs)

        def uses(key: str) -> bool:  # Kueue workloadUsesResources (and not another's victim)
            u = usage_of[key]
            for fr in frs_t:
                if fr in u:
                    return not (key in s.evicting and self.claimed_by_another(key, wl))
            return False

        out: list[str] = []
        policy = cq.preemption
        prio = wl.priority
        if policy.within_cluster_queue != NEVER:
            same_prio_ok = policy.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY
            for key in s.admitted_by_cq.get(cq.name, ()):
                cand = admitted[key]
                if cand.priority > prio:
                    continue
                if cand.priority == prio and not (same_prio_ok and wl.order_time < cand.order_time):
                    continue
                if uses(key):
                    out.append(key)
        node = s.tree.cluster_queues[cq.name]
        if node.parent is not None and policy.reclaim_within_cohort != NEVER:
            only_lower = policy.reclaim_within_cohort != ANY
            for other in node.root().subtree_cluster_queues():
                if other is node:
                    continue
                usage, quota = other.usage, other.subtree_quota
                for fr in frs_t:  # Kueue cqIsBorrowing: only queues above their quota lose workloads
                    if usage.get(fr, 0) > quota.get(fr, 0):
                        break
                else:
                    continue
                for key in s.admitted_by_cq.get(other.name, ()):
                    if only_lower and admitted[key].priority >= prio:
                        continue
                    if uses(key):
                        out.append(key)
        return out

    def placement_candidates(self, wl: Workload, cq: ClusterQueue, now: float) -> dict[str, tuple[int, float]]:
        """Admitted workloads ``wl`` may preempt to be *placed* (its quota fits; devices are short):
        key → (priority, admission time in seconds; ``now`` when unknown). See the module docstring
        for the rule. Workloads already being evicted for another preemptor are left to it."""
        s = self.sched
        if wl.priority_class_kind == "PriorityClass" and wl.priority_class:
            pc = s.config.priority_classes.get(wl.priority_class)
            if pc is not None and pc.preemption_policy == "Never":
                return {}
        policy = cq.preemption
        queues: list[str] = []
        if policy.within_cluster_queue != NEVER:
            queues.append(cq.name)
        node = s.tree.cluster_queues[cq.name]
        if node.parent is not None and policy.reclaim_within_cohort != NEVER:
            queues.extend(other.name for other in node.root().subtree_cluster_queues() if other is not node)
        out: dict[str, tuple[int, float]] = {}
        for name in queues:
            for key in s.admitted_by_cq.get(name, ()):
                cand = s.admitted[key]
                if cand.priority >= wl.priority:
                    continue
                evicting_for = s.evicting.get(key)
                if evicting_for is not None and evicting_for != wl.key:
                    continue
                t = s.admit_time.get(key)
                out[key] = (cand.priority, now if t is None else t)
        return out

    def candidates_ordering(self, keys: list[str], cq_name: str, now: float) -> list[str]:
        s = self.sched

        def sort_key(key: str):
            w = s.admitted[key]
            admitted_at = s.admit_time.get(key)
            t = now if admitted_at is None else admitted_at
            return (
                key not in s.evicting,  # already being evicted first
                s.admitted_cq[key] == cq_name,  # other ClusterQueues first
                w.priority,  # lower priority first
                -t,  # admitted more recently first
                w.uid or key,
            )

        return sorted(keys, key=sort_key)

    # -- classical (Kueue classical_strategy.go, classical/candidate_generator.go,
    #    classical/hierarchical_preemption.go) ------------------------------------------------------
    def classical_preemptions(self, wl, cq, req, frs, now) -> list[Target]:
        """The minimal set of admitted workloads to evict for ``wl`` (request ``req`` per
        (flavor, resource), of which ``frs`` need preemption). Empty: preemption cannot help.
        (With fair sharing on, the scheduler asks ``fairsharing.fair_preemptions`` instead, over
        :meth:`find_candidates` in :meth:`candidates_ordering`.)"""
        s = self.sched
        node = s.tree.cluster_queues[cq.name]
        same, hierarchy, priority = self._classify(wl, cq, node, req, frs)
        if not (same or hierarchy or priority):
            return []
        order = lambda elems: sorted(elems, key=lambda e: self._order_key(e[0], cq.name, now))  # noqa: E731
        same, hierarchy, priority = order(same), order(hierarchy), order(priority)
        ev = lambda elems, evicted: [e for e in elems if (e[0] in s.evicting) == evicted]  # noqa: E731
        elems = (ev(hierarchy, True) + ev(priority, True) + ev(same, True)
                 + ev(hierarchy, False) + ev(priority, False) + ev(same, False))
        bwc = cq.preemption.borrow_within_cohort
        bwc_forbidden = bwc is None or bwc.policy == NEVER
        if not (hierarchy or priority) or (bwc_forbidden and not queue_under_nominal(node, frs)):
            attempts = (True,)
        elif bwc_forbidden and not hierarchy:
            attempts = (False, True)
        else:
            attempts = (True, False)
        for allow_borrowing in attempts:
            targets = self._minimal(req, node, frs, elems, allow_borrowing, cq.name)
            if targets:
                return targets
        return []

    def _order_key(self, key: str, cq_name: str, now: float):
        s = self.sched
        w = s.admitted[key]
        t = s.admit_time.get(key)
        return (key not in s.evicting, s.admitted_cq[key] == cq_name, w.priority,
                -(now if t is None else t), w.uid or key)

    def _classify(self, wl, cq, node, req, frs):
        """Kueue ``collectSameQueueCandidates`` and ``collectCandidatesForHierarchicalReclaim``:
        (same-queue, hierarchy, priority) candidates as (key, lca, variant) triples."""
        s = self.sched
        frs_t = tuple(frs)
        policy = cq.preemption
        bwc = policy.borrow_within_cohort
        bwc_allowed = bwc is not None and bwc.policy != NEVER
        threshold = bwc.max_priority_threshold if bwc_allowed else None
        prio = wl.priority

        def too_high(cand: Workload, same_cq: bool) -> bool:
            pol = policy.within_cluster_queue if same_cq else policy.reclaim_within_cohort
            lower = prio > cand.priority
            if pol == LOWER_PRIORITY:
                return not lower
            if pol == LOWER_OR_NEWER_EQUAL_PRIORITY:
                return not (lower or (prio == cand.priority and wl.order_time < cand.order_time))
            return pol != ANY

        def variant(key: str, same_cq: bool, advantage: bool) -> Optional[str]:
            u = s.usage_of[key]
            if not any(fr in u for fr in frs_t):
                return None
            cand = s.admitted[key]
            if too_high(cand, same_cq):
                return None
            if key in s.evicting and self.claimed_by_another(key, wl):
                return None
            if same_cq:
                return _WITHIN_CQ
            if advantage:
                return _HIERARCHICAL_RECLAIM
            if not bwc_allowed:
                return _RECLAIM_WITHOUT_BORROWING
            if cand.priority >= prio or (threshold is not None and cand.priority > threshold):
                return _RECLAIM_WITHOUT_BORROWING
            return _RECLAIM_WHILE_BORROWING

        same: list = []
        if policy.within_cluster_queue != NEVER:
            for key in s.admitted_by_cq.get(cq.name, ()):
                v = variant(key, True, False)
                if v is not None:
                    same.append((key, None, v))
        hierarchy: list = []
        priority: list = []
        if node.parent is None or policy.reclaim_within_cohort == NEVER:
            return same, hierarchy, priority
        advantage, remaining = _fit_in_quota(node, req)
        previous = None
        current = node.parent
        while current is not None:
            out = hierarchy if advantage else priority
            self._collect(current, current, previous, advantage, node, frs_t, variant, out)
            fits, remaining = _fit_in_quota(current, remaining)
            advantage = advantage or fits
            previous = current
            current = current.parent
        return same, hierarchy, priority

    def _collect(self, cohort, lca, skip, advantage, pre_node, frs_t, variant, out) -> None:
        """Kueue ``collectCandidatesInSubtree``: candidates in subtrees above their quota."""
        s = self.sched
        for child in cohort.children:
            if child is skip or child is pre_node:
                continue
            if _within_nominal(child, frs_t):
                continue
            if child.is_cluster_queue:
                for key in s.admitted_by_cq.get(child.name, ()):
                    v = variant(key, False, advantage)
                    if v is not None:
                        out.append((key, lca, v))
            else:
                self._collect(child, lca, skip, advantage, pre_node, frs_t, variant, out)

    def _valid(self, elem, allow_borrowing: bool, frs_t, cq_name: str) -> bool:
        """Kueue ``candidateIsValid``: checked again as victims are removed."""
        key, lca, v = elem
        s = self.sched
        cand_cq = s.admitted_cq[key]
        if cand_cq == cq_name:
            return True
        if allow_borrowing and v == _RECLAIM_WITHOUT_BORROWING:
            return False
        node = s.tree.cluster_queues[cand_cq]
        if _within_nominal(node, frs_t):
            return False
        n = node.parent
        while n is not None and n is not lca:
            if _within_nominal(n, frs_t):
                return False
            n = n.parent
        return True

    def _minimal(self, req, node, frs, elems, allow_borrowing: bool, cq_name: str) -> list[Target]:
        s = self.sched
        frs_t = tuple(frs)
        for fr, v in req.items():  # see minimal_preemptions: an exact shortcut for hopeless searches
            short = v - node.available(fr)
            if short > 0 and sum(s.usage_of[e[0]].get(fr, 0) for e in elems) < short:
                return []
        removed: list[tuple[Target, QuotaNode, dict]] = []
        fits = False
        for elem in elems:
            if not self._valid(elem, allow_borrowing, frs_t, cq_name):
                continue
            key = elem[0]
            cand_cq = s.admitted_cq[key]
            n = s.tree.cluster_queues[cand_cq]
            u = s.usage_of[key]
            remove_usage(n, u)
            removed.append((Target(key, cand_cq, _REASONS[elem[2]]), n, u))
            if workload_fits(req, node, allow_borrowing):
                fits = True
                break
        return fill_back(removed, fits, req, node, allow_borrowing)
