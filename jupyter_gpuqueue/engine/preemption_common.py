"""What preemption, fair sharing and the scheduling cycle share (Kueue ``pkg/scheduler/preemption/common``).

- ``AdmittedState``: what the preemption strategies read of the scheduler's live state (the quota
  tree and the admitted workloads, indexed). The ``Scheduler`` provides it; the strategies depend
  on this protocol, not on the scheduler, so that ``scheduler`` → ``preemption`` / ``fairsharing``
  → ``preemption_common`` is the only direction of imports.
- ``Target`` and Kueue's preemption reasons.
- Usage arithmetic on the quota tree, Kueue's ``workloadFits``, and the *fill back* that both the
  classical and the fair-sharing strategy end with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Protocol

from .model import ClusterConfig, Workload
from .quota import FlavorResource, QuotaNode, QuotaTree


class AdmittedState(Protocol):
    """The scheduler's live state as the preemption strategies read it (``Scheduler`` has it)."""

    config: ClusterConfig
    tree: QuotaTree
    admitted: dict[str, Workload]  # key -> admitted Workload
    admitted_by_cq: dict[str, dict[str, None]]  # ClusterQueue -> keys admitted there
    admitted_cq: dict[str, str]  # key -> its ClusterQueue
    usage_of: dict[str, dict[FlavorResource, int]]  # key -> quota usage
    admit_time: dict[str, Optional[float]]  # key -> admission time (None: unknown)
    evicting: dict[str, str]  # victim key -> preemptor key
    workloads: dict[str, Workload]  # key -> every workload it knows (pending or admitted)


IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
# Ours (no Kueue reason: in Kubernetes kube-scheduler preempts for nodes, and marks the victim pod
# with the DisruptionTarget condition, reason PreemptionByScheduler): the quota fits, but the
# devices the preemptor needs are held by lower-priority workloads (``preemption.placement_candidates``).
IN_NODE_PLACEMENT = "InNodePlacement"

HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "fair sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
    IN_NODE_PLACEMENT: "placement on a node: the quota fits, but lower-priority workloads held the devices",
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


def fill_back(removed: list[tuple[Target, QuotaNode, dict]], fits: bool, req: dict[FlavorResource, int],
              node: QuotaNode, allow_borrowing: bool) -> list[Target]:
    """Kueue ``fillBackWorkloads``: with the victims ``removed`` (in order) the preemptor fits
    (``fits``); add them back in reverse, keeping out only those without which it would not fit.
    Restores the tree's usage; returns the targets."""
    if not fits:
        for _, n, u in removed:
            add_usage(n, u)
        return []
    keep = [True] * len(removed)
    for i in range(len(removed) - 2, -1, -1):
        t, n, u = removed[i]
        add_usage(n, u)
        if workload_fits(req, node, allow_borrowing):
            keep[i] = False  # not needed: it stays admitted
        else:
            remove_usage(n, u)
    targets = []
    for (t, n, u), k in zip(removed, keep):
        if k:
            add_usage(n, u)
            targets.append(t)
    return targets
