"""Preemption: which admitted workloads to evict so that a pending one fits.

Classical preemption follows Kueue ``pkg/scheduler/preemption/preemption.go``:

- **Candidates** (``find_candidates``): admitted workloads that use a (flavor, resource) needing
  preemption and that the policies allow —
  ``withinClusterQueue``: same ClusterQueue, ``LowerPriority`` (strictly lower) or
  ``LowerOrNewerEqualPriority`` (or equal priority and queued later);
  ``reclaimWithinCohort``: other ClusterQueues of the cohort tree that are *borrowing* one of those
  resources, ``LowerPriority`` or ``Any`` priority.
- **Ordering** (``candidates_ordering``, Kueue ``CandidatesOrdering``): already being evicted first,
  then other ClusterQueues before the preemptor's own, lower priority first, most recently admitted
  first, then UID.
- **Attempts** (``get_targets``): only own-queue candidates → borrowing allowed; with
  ``borrowWithinCohort`` → borrowing allowed, victims in other queues only below the priority
  threshold unless the preemptor's queue is under nominal quota; otherwise first without borrowing
  (only if the queue is under nominal quota in the contested resources), then own-queue candidates
  with borrowing.
- **Minimal set** (``minimal_preemptions``): remove candidates in order — those from another
  ClusterQueue only while it still borrows — until the preemptor fits; then *fill back* in reverse,
  keeping out only the victims without which it would not fit.

Fair sharing preemption lives in ``fairsharing``. Everything is simulated on the live quota tree and
restored before returning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

from .model import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER, ClusterQueue, Workload
from .quota import FlavorResource, QuotaNode

if TYPE_CHECKING:  # pragma: no cover
    from .scheduler import Scheduler

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"

HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "fair sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}


@dataclass(slots=True)
class Target:
    """A workload to evict (``key``), from ClusterQueue ``cluster_queue``, and why (Kueue reasons)."""

    key: str
    cluster_queue: str
    reason: str


def workload_usage(wl: Workload) -> dict[FlavorResource, int]:
    """An admitted workload's quota usage per (flavor, resource)."""
    out: dict[FlavorResource, int] = {}
    for psa in wl.admission.pod_set_assignments:
        for r, f in psa.flavors.items():
            q = psa.resource_usage.get(r, 0)
            if q:
                out[(f, r)] = out.get((f, r), 0) + q
    return out


def remove_usage(node: QuotaNode, usage: dict[FlavorResource, int]) -> None:
    for fr, q in usage.items():
        node.remove_usage(fr, q)


def add_usage(node: QuotaNode, usage: dict[FlavorResource, int]) -> None:
    for fr, q in usage.items():
        node.add_usage(fr, q)


def cq_is_borrowing(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Kueue ``cqIsBorrowing``: in a cohort and above its quota on one of ``frs``."""
    if node.parent is None:
        return False
    return any(node.usage.get(fr, 0) > node.subtree_quota.get(fr, 0) for fr in frs)


def workload_fits(req: dict[FlavorResource, int], node: QuotaNode, allow_borrowing: bool) -> bool:
    """Kueue ``workloadFits``: ``req`` fits the ClusterQueue's available quota (and, without
    borrowing, its own quota)."""
    for fr, v in req.items():
        if not allow_borrowing and node.borrowing_with(fr, v):
            return False
        if v > node.available(fr):
            return False
    return True


def queue_under_nominal(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Kueue ``queueUnderNominalInResourcesNeedingPreemption``."""
    return all(node.usage.get(fr, 0) < node.nominal.get(fr, 0) for fr in frs)


class Preemptor:
    """Finds preemption targets over a Scheduler's live state (classical policy)."""

    def __init__(self, sched: "Scheduler"):
        self.sched = sched

    # -- candidates --------------------------------------------------------------------------------
    def find_candidates(self, wl: Workload, cq: ClusterQueue, frs: set[FlavorResource]) -> list[str]:
        s = self.sched
        admitted, usage_of = s.admitted, s.usage_of
        frs_t = tuple(frs)

        def uses(key: str) -> bool:  # Kueue workloadUsesResources
            u = usage_of[key]
            for fr in frs_t:
                if fr in u:
                    return True
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

    # -- targets -----------------------------------------------------------------------------------
    def get_targets(
        self,
        wl: Workload,
        cq: ClusterQueue,
        req: dict[FlavorResource, int],
        frs: set[FlavorResource],
        now: float,
    ) -> list[Target]:
        """The minimal set of admitted workloads to evict for ``wl`` (request ``req`` per
        (flavor, resource), of which ``frs`` need preemption). Empty: preemption cannot help."""
        candidates = self.find_candidates(wl, cq, frs)
        if not candidates:
            return []
        candidates = self.candidates_ordering(candidates, cq.name, now)
        s = self.sched
        if s.config.fair_sharing.enable:
            from .fairsharing import fair_preemptions

            return fair_preemptions(s, wl, cq, req, frs, candidates)
        node = s.tree.cluster_queues[cq.name]
        same = [k for k in candidates if s.admitted_cq[k] == cq.name]
        if len(same) == len(candidates):
            return self.minimal_preemptions(req, node, frs, candidates, True, None)
        threshold = self._borrow_threshold(wl, cq)
        if threshold is not None:
            if not queue_under_nominal(node, frs):
                candidates = [k for k in candidates if s.admitted_cq[k] == cq.name or s.admitted[k].priority < threshold]
            return self.minimal_preemptions(req, node, frs, candidates, True, threshold)
        if queue_under_nominal(node, frs):
            targets = self.minimal_preemptions(req, node, frs, candidates, False, None)
            if targets:
                return targets
        return self.minimal_preemptions(req, node, frs, same, True, None)

    @staticmethod
    def _borrow_threshold(wl: Workload, cq: ClusterQueue) -> Optional[int]:
        """Kueue ``canBorrowWithinCohort``: None when borrowWithinCohort is off; else the priority
        below which victims in other queues may be taken while borrowing."""
        bwc = cq.preemption.borrow_within_cohort
        if bwc is None or bwc.policy == NEVER:
            return None
        threshold = wl.priority
        if bwc.max_priority_threshold is not None and bwc.max_priority_threshold < threshold:
            threshold = bwc.max_priority_threshold + 1
        return threshold

    def minimal_preemptions(
        self,
        req: dict[FlavorResource, int],
        node: QuotaNode,
        frs: set[FlavorResource],
        candidates: list[str],
        allow_borrowing: bool,
        below_priority: Optional[int],
    ) -> list[Target]:
        s = self.sched
        # Necessary condition (no change to the result): removing usage raises what is available by
        # at most the usage removed, so if all candidates together cannot cover the shortfall in
        # some resource, no set of them can. Kueue finds the same empty answer by removing them all.
        for fr, v in req.items():
            short = v - node.available(fr)
            if short > 0 and sum(s.usage_of[k].get(fr, 0) for k in candidates) < short:
                return []
        removed: list[tuple[Target, QuotaNode, dict]] = []
        fits = False
        for key in candidates:
            cand_cq = s.admitted_cq[key]
            cand_node = s.tree.cluster_queues[cand_cq]
            same = cand_node is node
            reason = IN_CLUSTER_QUEUE
            if not same and not cq_is_borrowing(cand_node, frs):
                continue
            if not same:
                reason = IN_COHORT_RECLAMATION
                if below_priority is not None:
                    if s.admitted[key].priority >= below_priority:
                        allow_borrowing = False
                    else:
                        reason = IN_COHORT_RECLAIM_WHILE_BORROWING
            usage = s.usage_of[key]
            remove_usage(cand_node, usage)
            removed.append((Target(key, cand_cq, reason), cand_node, usage))
            if workload_fits(req, node, allow_borrowing):
                fits = True
                break
        if not fits:
            for _, n, u in removed:
                add_usage(n, u)
            return []
        # Fill back in reverse: keep out only those the preemptor needs gone.
        kept = list(removed)
        for i in range(len(removed) - 2, -1, -1):
            t, n, u = removed[i]
            add_usage(n, u)
            if workload_fits(req, node, allow_borrowing):
                kept.remove(removed[i])
            else:
                remove_usage(n, u)
        for _, n, u in kept:
            add_usage(n, u)
        return [t for t, _, _ in kept]
