"""The engine's data model: Kueue and Kubernetes objects as plain dataclasses.

Names follow Kueue v1beta1 (``apis/kueue/v1beta1/*_types.go``) in snake_case. Quantities are
integers in Kueue's canonical units (``pkg/resources``: ``ResourceValue``): ``cpu`` in millicores,
every other resource in whole base units (bytes for memory, devices for GPUs and MIG slices).

Nothing here does I/O, reads a clock or starts a thread; time is a float of seconds since the
Unix epoch that the caller passes in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

# Kueue constants (apis/kueue/v1beta1/constants.go, clusterqueue_types.go).
STRICT_FIFO = "StrictFIFO"
BEST_EFFORT_FIFO = "BestEffortFIFO"
QUEUEING_STRATEGIES = (STRICT_FIFO, BEST_EFFORT_FIFO)

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
ANY = "Any"
WITHIN_CLUSTER_QUEUE_POLICIES = (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)
RECLAIM_WITHIN_COHORT_POLICIES = (NEVER, LOWER_PRIORITY, ANY)
BORROW_WITHIN_COHORT_POLICIES = (NEVER, LOWER_PRIORITY)

# flavorFungibility (v1beta1 spellings).
BORROW = "Borrow"
PREEMPT = "Preempt"
TRY_NEXT_FLAVOR = "TryNextFlavor"
WHEN_CAN_BORROW = (BORROW, TRY_NEXT_FLAVOR)
WHEN_CAN_PREEMPT = (PREEMPT, TRY_NEXT_FLAVOR)

# Pending reasons (Kueue's QuotaReserved=False reasons, plus PlacementFailed of our own: the quota
# fits but the inventory has no free devices for the pods).
REASON_NO_FIT = "NoFit"
REASON_EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
REASON_MISCONFIGURED = "Misconfigured"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_NO_MATCHING_FLAVOR = "NoMatchingFlavor"
REASON_PLACEMENT_FAILED = "PlacementFailed"
REASON_INACTIVE = "Inactive"
REASON_PENDING = "Pending"  # not yet looked at by a cycle; or Kueue's own reason for what it never admits

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
CPU = "cpu"
PODS = "pods"


def is_device_resource(name: str) -> bool:
    """True for resources that are whole devices placed on GPUs: ``nvidia.com/gpu`` and MIG slices."""
    return name == GPU or name.startswith(MIG_PREFIX)


@dataclass(slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists (a Workload's template may hold another: it tolerates nothing)
    value: str = ""
    effect: str = ""  # empty: all effects

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes ``v1.Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("Equal", ""):
            return self.value == taint.value
        return False  # an operator Kubernetes does not know (a Workload's template may hold one)


@dataclass(slots=True)
class LabelSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Label selector and node selector requirement semantics (``Gt``/``Lt`` compare integers,
        as kube-scheduler's NodeSelectorRequirement does)."""
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator in ("Gt", "Lt") and self.key in labels and len(self.values) == 1:
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.operator == "Gt" else have < want
        return False


@dataclass(slots=True)
class LabelSelector:
    """metav1.LabelSelector. An empty selector matches everything."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        return all(e.matches(labels) for e in self.match_expressions)


@dataclass(slots=True)
class Namespace:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class PriorityClass:
    """``scheduling.k8s.io/v1`` PriorityClass or ``kueue.x-k8s.io`` WorkloadPriorityClass."""

    name: str
    value: int
    kind: str = "PriorityClass"  # or "WorkloadPriorityClass"
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"  # or "Never"
    description: str = ""


@dataclass(slots=True)
class ResourceFlavor:
    name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: list[Taint] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)


@dataclass(slots=True)
class ResourceQuota:
    """One ``resources[]`` entry of a flavor in a ClusterQueue or Cohort resource group.

    ``borrowing_limit``/``lending_limit`` of ``None`` mean unlimited / lend everything.
    """

    name: str
    nominal_quota: int
    borrowing_limit: Optional[int] = None
    lending_limit: Optional[int] = None


@dataclass(slots=True)
class FlavorQuotas:
    name: str
    resources: list[ResourceQuota]


@dataclass(slots=True)
class ResourceGroup:
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


@dataclass(slots=True)
class BorrowWithinCohort:
    policy: str = NEVER
    max_priority_threshold: Optional[int] = None


@dataclass(slots=True)
class ClusterQueuePreemption:
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: BorrowWithinCohort = field(default_factory=BorrowWithinCohort)


@dataclass(slots=True)
class FlavorFungibility:
    when_can_borrow: str = BORROW
    when_can_preempt: str = TRY_NEXT_FLAVOR


@dataclass(slots=True)
class ClusterQueue:
    name: str
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    cohort: Optional[str] = None
    queueing_strategy: str = BEST_EFFORT_FIFO
    # None: no namespace matches (Kueue: nil selector matches nothing); empty selector: all.
    namespace_selector: Optional[LabelSelector] = None
    preemption: ClusterQueuePreemption = field(default_factory=ClusterQueuePreemption)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    fair_sharing_weight: float = 1.0
    stop_policy: str = "None"  # None | Hold | HoldAndDrain

    def flavor_names(self) -> list[str]:
        return [f.name for rg in self.resource_groups for f in rg.flavors]

    def group_for(self, resource: str) -> Optional[ResourceGroup]:
        for rg in self.resource_groups:
            if resource in rg.covered_resources:
                return rg
        return None


@dataclass(slots=True)
class Cohort:
    """``kueue.x-k8s.io`` Cohort (hierarchical cohorts). Implicit cohorts named only by a
    ClusterQueue's ``spec.cohort`` are Cohorts with no quota and no parent."""

    name: str
    parent: Optional[str] = None
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    fair_sharing_weight: float = 1.0


@dataclass(slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class PodSet:
    """A group of identical pods. ``requests`` is per pod, in canonical units."""

    name: str
    count: int
    requests: dict[str, int] = field(default_factory=dict)
    min_count: Optional[int] = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Toleration] = field(default_factory=list)
    # requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: terms ORed, expressions ANDed
    required_affinity: list[list[LabelSelectorRequirement]] = field(default_factory=list)

    def total(self, count: Optional[int] = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {r: q * n for r, q in self.requests.items()}


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    flavors: dict[str, str]  # resource -> flavor
    resource_usage: dict[str, int]  # resource -> total quantity for all pods
    count: int


@dataclass(slots=True)
class DevicePlacement:
    """Where one pod runs: a node and the GPUs or MIG devices given to it.

    ``devices``: GPU indices as strings ("0", "3", NVML's order) or MIG device UUIDs ("MIG-…");
    CUDA_VISIBLE_DEVICES gets them with the GPUs named by UUID where NVML found them
    (``service/devices.py``).
    """

    pod_set: str
    pod_index: int
    node: str
    devices: list[str] = field(default_factory=list)
    resource: str = GPU


@dataclass(slots=True)
class Admission:
    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment]
    placements: list[DevicePlacement] = field(default_factory=list)


@dataclass(slots=True)
class Workload:
    """A Kueue Workload: what is queued, admitted and accounted.

    ``creation_time`` orders FIFO (seconds). ``priority`` is the resolved integer priority.
    """

    namespace: str
    name: str
    queue_name: str
    pod_sets: list[PodSet]
    priority: int = 0
    priority_class: Optional[str] = None
    priority_class_kind: Optional[str] = None
    creation_time: float = 0.0
    uid: str = ""
    maximum_execution_time_seconds: Optional[int] = None
    active: bool = True
    admission: Optional[Admission] = None
    evictions: int = 0
    # last queue-order timestamp change (Kueue GetQueueOrderTimestamp); None: creation_time
    queue_order_time: Optional[float] = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Kueue's "resources validation failed: …" (a request above its limit in a Workload object's
    # PodSet template, manifests/pods.py): Kueue's scheduler never admits it; nor does ours.
    invalid_resources: Optional[str] = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def order_time(self) -> float:
        return self.creation_time if self.queue_order_time is None else self.queue_order_time

    def total_requests(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ps in self.pod_sets:
            for r, q in ps.requests.items():
                out[r] = out.get(r, 0) + q * ps.count
        return out


@dataclass(slots=True)
class FairSharingConfig:
    enable: bool = False
    preemption_strategies: list[str] = field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    )


RETAIN = "Retain"
REPLACE = "Replace"
TRANSFORMATION_STRATEGIES = (RETAIN, REPLACE)


@dataclass(slots=True)
class ResourceTransformation:
    """Kueue's Configuration ``resources.transformations[]``: every unit of ``input`` requested by
    a pod counts as ``outputs`` (resource → quantity per unit, as a Fraction of the resource's
    canonical unit) against quota; ``strategy`` Retain keeps the input too, Replace drops it. E.g.
    ``nvidia.com/mig-1g.10gb`` → ``{gpuqueue.io/gpu-slices: 1}`` and ``nvidia.com/gpu`` →
    ``{gpuqueue.io/gpu-slices: 7}`` (Retain) make one quota of GPU compute slices for whole GPUs
    and MIG slices alike."""

    input: str
    outputs: dict[str, Fraction]
    strategy: str = RETAIN


def apply_transformations(requests: dict[str, int],
                          transformations: dict[str, "ResourceTransformation"]) -> dict[str, int]:
    """The requests quota is charged for (Kueue ``applyResourceTransformations``,
    ``pkg/workload/resources.go``): for every requested resource with a transformation, each
    output gets ``quantity × per-unit output`` (rounded up to a whole canonical unit; ``cpu`` in
    millicores), the input is dropped with Replace. Requests without a transformation pass through."""
    if not transformations:
        return dict(requests)
    out: dict[str, int] = {}
    for r, q in requests.items():
        t = transformations.get(r)
        if t is None:
            out[r] = out.get(r, 0) + q
            continue
        if t.strategy != REPLACE:
            out[r] = out.get(r, 0) + q
        for o, per_unit in t.outputs.items():
            amount = per_unit * q * (1000 if o == CPU else 1)
            whole = -((-amount.numerator) // amount.denominator)  # ceiling, as Quantity.Value()
            out[o] = out.get(o, 0) + whole
    return out


@dataclass
class ClusterConfig:
    """Every queueing object, keyed by name (LocalQueues by ``namespace/name``)."""

    resource_flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    workload_priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    # Kueue Configuration resources.transformations, by input resource
    resource_transformations: dict[str, ResourceTransformation] = field(default_factory=dict)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        ns = self.namespaces.get(namespace)
        labels = dict(ns.labels) if ns else {}
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return labels

    def local_queue(self, namespace: str, name: str) -> Optional[LocalQueue]:
        return self.local_queues.get(f"{namespace}/{name}")

    def default_priority_class(self) -> Optional[PriorityClass]:
        for pc in self.priority_classes.values():
            if pc.global_default:
                return pc
        return None

    def merge(self, other: "ClusterConfig") -> None:
        """Add ``other``'s objects; a later object of the same kind and name replaces an earlier."""
        self.resource_flavors.update(other.resource_flavors)
        self.cluster_queues.update(other.cluster_queues)
        self.cohorts.update(other.cohorts)
        self.local_queues.update(other.local_queues)
        self.priority_classes.update(other.priority_classes)
        self.workload_priority_classes.update(other.workload_priority_classes)
        self.namespaces.update(other.namespaces)
        if other.fair_sharing.enable:
            self.fair_sharing = other.fair_sharing
        self.resource_transformations.update(other.resource_transformations)


# ---------------------------------------------------------------------------------------------
# Inventory: the physical devices that admitted pods are placed on.


@dataclass(slots=True)
class MigDevice:
    """A MIG GPU instance: ``profile`` like ``1g.10gb``; ``slices`` compute slices of 7."""

    uuid: str
    profile: str
    slices: int

    @property
    def resource(self) -> str:
        return MIG_PREFIX + self.profile


@dataclass(slots=True)
class GpuDevice:
    """One physical GPU. ``mig`` is None when MIG mode is off, else its GPU instances."""

    index: int
    uuid: str
    product: str = ""
    memory_mib: int = 0
    mig: Optional[list[MigDevice]] = None
    max_slices: int = 7


@dataclass(slots=True)
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    gpus: list[GpuDevice] = field(default_factory=list)


@dataclass
class Inventory:
    nodes: list[Node] = field(default_factory=list)
    source: str = "static"  # static | nvml | kubernetes
