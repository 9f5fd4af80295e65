"""Flavor assignment: which ResourceFlavor each PodSet's resources are charged to.

Follows Kueue's flavor assigner (``pkg/scheduler/flavorassigner/flavorassigner.go``):

- Per PodSet and resource group, the ClusterQueue's flavors are tried in order.
- A flavor is eligible when the pod tolerates its ``nodeTaints`` (plus the flavor's own
  tolerations) and the pod's nodeSelector, restricted to the label keys the flavor defines, matches
  the flavor's ``nodeLabels``.
- Per resource, with ``val`` = this PodSet's request plus what earlier PodSets of the workload were
  already assigned on the same (flavor, resource):
  ``val > potentialAvailable`` → no fit ever (max quota exceeded); ``val ≤ available`` → fit, at a
  borrowing level (0 = within nominal quota); otherwise the quota is in use (preemption territory).
- A flavor's mode is the worst of its resources. ``flavorFungibility``: stop at a fitting flavor
  unless it borrows and ``whenCanBorrow: TryNextFlavor``; a flavor that would need preemption is
  passed over when ``whenCanPreempt: TryNextFlavor``. Among the flavors tried the best wins: fit over
  preempt over no fit, then the lower borrowing level.

Messages copy Kueue's wording ("insufficient unused quota for nvidia.com/gpu in flavor x, 1 more
needed"), so that people who know Kueue recognise them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from .model import (
    PODS,
    BORROW,
    PREEMPT,
    TRY_NEXT_FLAVOR,
    ClusterConfig,
    ClusterQueue,
    PodSet,
    ResourceFlavor,
    apply_transformations,
)
from .quota import FlavorResource, QuotaNode

# Modes, ordered worst to best (Kueue granularMode: noFit < noPreemptionCandidates < preempt <
# reclaim < fit). "preempt" needs victims in the workload's own ClusterQueue, "reclaim" only in
# other ClusterQueues of the cohort.
NO_FIT = 0
NO_CANDIDATES = 1
PREEMPT_MODE = 2
RECLAIM = 3
FIT = 4

# An oracle answers, for one (flavor, resource) and a quantity that does not fit the unused quota,
# whether preemption could make room: (mode, borrowing level after preemption).
Oracle = Callable[[FlavorResource, int], tuple[int, int]]


@dataclass(slots=True)
class FlavorChoice:
    flavor: Optional[str]
    mode: int
    borrowing_level: int = 0
    messages: list[str] = field(default_factory=list)
    exceeds_max: bool = False
    preempt_frs: set = field(default_factory=set)


@dataclass(slots=True)
class PodSetAssignmentResult:
    name: str
    count: int
    flavors: dict[str, str]  # resource -> flavor
    mode: int
    borrowing_level: int
    message: str = ""
    exceeds_max: bool = False
    preempt_frs: set = field(default_factory=set)  # (flavor, resource) pairs that need preemption
    usage: dict = field(default_factory=dict)  # resource -> total quantity for this PodSet's pods


@dataclass(slots=True)
class Assignment:
    """The result of assigning flavors to every PodSet of a workload in one ClusterQueue."""

    pod_sets: list[PodSetAssignmentResult]
    usage: dict[FlavorResource, int]

    @property
    def mode(self) -> int:
        return min((p.mode for p in self.pod_sets), default=FIT)

    @property
    def borrowing_level(self) -> int:
        return max((p.borrowing_level for p in self.pod_sets), default=0)

    @property
    def borrows(self) -> bool:
        return self.borrowing_level > 0

    @property
    def preempt_frs(self) -> set:
        out: set = set()
        for p in self.pod_sets:
            out |= p.preempt_frs
        return out

    @property
    def exceeds_max(self) -> bool:
        return any(p.exceeds_max for p in self.pod_sets if p.mode == NO_FIT)

    def message(self) -> str:
        parts = [
            f"couldn't assign flavors to pod set {p.name}: {p.message}"
            for p in self.pod_sets
            if p.mode != FIT
        ]
        return "; ".join(parts)


def flavor_eligible(flavor: ResourceFlavor, ps: PodSet) -> Optional[str]:
    """None if PodSet ``ps`` may use ``flavor``; else why not (Kueue wording).

    Kueue ``flavorSelector``: the pod's nodeSelector and required node affinity, restricted to the
    flavor's own label keys, must match the flavor's ``nodeLabels``; affinity terms are ORed, and a term left with no expression
    matches anything. The pod (plus the flavor's tolerations) must tolerate its NoSchedule /
    NoExecute taints."""
    tolerations = list(ps.tolerations) + list(flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return f"untolerated taint {{{taint.key}: {taint.value}}} in flavor {flavor.name}"
    labels = flavor.node_labels
    keys = labels.keys()
    for k, v in ps.node_selector.items():
        if k in keys and labels.get(k) != v:
            return f"flavor {flavor.name} doesn't match node affinity"
    if ps.required_affinity:
        terms = []
        for term in ps.required_affinity:
            kept = [e for e in term if e.key in keys]
            if not kept:
                terms = []
                break
            terms.append(kept)
        if terms and not any(all(e.matches(labels) for e in term) for term in terms):
            return f"flavor {flavor.name} doesn't match node affinity"
    return None


def assign_flavors(
    wl_pod_sets: list[PodSet],
    cq: ClusterQueue,
    node: QuotaNode,
    config: ClusterConfig,
    counts: Optional[list[int]] = None,
    oracle: Optional[Oracle] = None,
    can_preempt_while_borrowing: bool = False,
) -> Assignment:
    """Assign flavors to every PodSet (``counts`` overrides PodSet counts, for partial admission).

    ``oracle`` (Kueue's preemption oracle) tells whether preemption could free what does not fit;
    without one, such a flavor counts as needing preemption whenever its nominal quota could hold
    the request. Pure with respect to ``node``: usage is read (the oracle restores what it
    simulates)."""
    usage: dict[FlavorResource, int] = {}
    results: list[PodSetAssignmentResult] = []
    fungibility = cq.flavor_fungibility
    for i, ps in enumerate(wl_pod_sets):
        count = ps.count if counts is None else counts[i]
        # Quota is charged for the transformed requests (Kueue's resources.transformations).
        per_pod = apply_transformations({r: q for r, q in ps.requests.items() if q > 0},
                                        config.resource_transformations)
        requests = {r: q * count for r, q in per_pod.items() if q > 0}
        if cq.group_for(PODS) is not None:
            requests[PODS] = count  # Kueue counts pods against a covered "pods" resource
        flavors: dict[str, str] = {}
        ps_mode = FIT
        ps_level = 0
        messages: list[str] = []
        exceeds = False
        ps_preempt: set = set()
        # Group the requested resources by the resource group that covers them.
        groups: dict[int, dict[str, int]] = {}
        for r, q in requests.items():
            gi = next((j for j, rg in enumerate(cq.resource_groups) if r in rg.covered_resources), None)
            if gi is None:
                ps_mode = NO_FIT
                messages.append(f"resource {r} unavailable in ClusterQueue")
                continue
            groups.setdefault(gi, {})[r] = q
        for gi, reqs in groups.items():
            rg = cq.resource_groups[gi]
            best: Optional[FlavorChoice] = None
            tried_msgs: list[str] = []
            all_exceeded = True
            for fq in rg.flavors:
                flavor = config.resource_flavors.get(fq.name)
                if flavor is None:
                    tried_msgs.append(f"flavor {fq.name} not found")
                    continue
                why = flavor_eligible(flavor, ps)
                if why is not None:
                    tried_msgs.append(why)
                    continue
                choice = _fits_flavor(fq.name, reqs, usage, node, oracle, can_preempt_while_borrowing)
                tried_msgs.extend(choice.messages)
                all_exceeded = all_exceeded and choice.exceeds_max
                if best is None or _preferred(choice, best):
                    best = choice
                if not _should_try_next_flavor(choice, fungibility):
                    break
            if best is None or best.mode == NO_FIT:
                ps_mode = NO_FIT
                exceeds = exceeds or (best is not None and all_exceeded)
                messages.extend(tried_msgs)
                continue
            for r in reqs:
                flavors[r] = best.flavor
                fr = (best.flavor, r)
                usage[fr] = usage.get(fr, 0) + reqs[r]
            ps_level = max(ps_level, best.borrowing_level)
            if best.mode != FIT:
                ps_mode = min(ps_mode, best.mode)
                messages.extend(best.messages)
                ps_preempt |= best.preempt_frs
        results.append(
            PodSetAssignmentResult(
                name=ps.name,
                count=count,
                flavors=flavors,
                mode=ps_mode,
                borrowing_level=ps_level,
                message=", ".join(messages),
                exceeds_max=exceeds and ps_mode == NO_FIT,
                preempt_frs=ps_preempt,
                usage={r: q for r, q in requests.items() if r in flavors},
            )
        )
    return Assignment(pod_sets=results, usage=usage)


def _should_try_next_flavor(choice: FlavorChoice, fungibility) -> bool:
    """Kueue ``shouldTryNextFlavor``: stop at a flavor that fits without borrowing; at one that
    borrows unless ``whenCanBorrow: TryNextFlavor``; at one that needs preemption when
    ``whenCanPreempt: Preempt`` (and, if it also borrows, ``whenCanBorrow: Borrow``)."""
    borrows = choice.borrowing_level > 0
    if choice.mode in (PREEMPT_MODE, RECLAIM) and fungibility.when_can_preempt == PREEMPT:
        if not borrows or fungibility.when_can_borrow == BORROW:
            return False
    if choice.mode == FIT:
        if not borrows or fungibility.when_can_borrow == BORROW:
            return False
    return True


def _preferred(a: FlavorChoice, b: FlavorChoice) -> bool:
    """Kueue ``isPreferred`` with the default BorrowingOverPreemption: better mode wins, then the
    lower borrowing level."""
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrowing_level < b.borrowing_level


def _fits_flavor(
    flavor: str,
    reqs: dict[str, int],
    assigned: dict[FlavorResource, int],
    node: QuotaNode,
    oracle: Optional[Oracle],
    can_preempt_while_borrowing: bool,
) -> FlavorChoice:
    """Kueue ``fitsResourceQuota`` over every resource of one flavor; the flavor's mode is the worst."""
    mode = FIT
    level = 0
    messages: list[str] = []
    exceeded = False
    preempt_frs: set = set()
    for r, q in reqs.items():
        fr = (flavor, r)
        prev = assigned.get(fr, 0)
        val = prev + q
        potential = node.potential_available(fr)
        if val > potential:
            mode = NO_FIT
            exceeded = True
            if prev:
                messages.append(
                    f"insufficient quota for {r} in flavor {flavor}, previously considered podsets "
                    f"requests ({prev}) + current podset request ({q}) > maximum capacity ({potential})"
                )
            else:
                messages.append(
                    f"insufficient quota for {r} in flavor {flavor}, request > maximum capacity "
                    f"({q} > {potential})"
                )
            continue
        borrow, may_reclaim_in_hierarchy = node.borrowing_level(fr, val)
        available = node.available(fr)
        if val <= available:
            level = max(level, borrow)
            continue
        messages.append(
            f"insufficient unused quota for {r} in flavor {flavor}, {val - max(available, 0)} more needed"
        )
        if val <= node.nominal.get(fr, 0) or may_reclaim_in_hierarchy or can_preempt_while_borrowing:
            if oracle is not None:
                fr_mode, borrow = oracle(fr, val)
            else:
                fr_mode = PREEMPT_MODE
            if fr_mode != NO_FIT:
                preempt_frs.add(fr)
            mode = min(mode, fr_mode)
            level = max(level, borrow)
        else:
            mode = NO_FIT
    return FlavorChoice(
        flavor=flavor, mode=mode, borrowing_level=level, messages=messages, exceeds_max=exceeded,
        preempt_frs=preempt_frs,
    )


__all__ = [
    "Assignment",
    "FIT",
    "NO_CANDIDATES",
    "NO_FIT",
    "PREEMPT_MODE",
    "RECLAIM",
    "PodSetAssignmentResult",
    "assign_flavors",
    "flavor_eligible",
    "TRY_NEXT_FLAVOR",
]
