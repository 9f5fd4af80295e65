"""A queue configuration that matches a discovered inventory.

When the server finds real GPUs (NVML) and no Kueue configuration is given, the demo cluster's
flavors (A100, H100, L4) would match none of them and every job would wait forever. Instead one
ResourceFlavor is made per GPU product (``nodeLabels`` on ``nvidia.com/gpu.product``, as GPU Feature
Discovery labels nodes), named by the product's GPU family (``gpu_families``: ``nvidia-h100`` for
"NVIDIA H100 80GB HBM3", ``nvidia-a100-80gb`` for "NVIDIA A100-SXM4-80GB"; names that do not change
with the driver, and that ``DEFAULT_PRICES`` prices), plus one per product for its MIG slices
(``<family>-mig``, priced as its family), and a single team, namespace
``default`` with LocalQueue ``default-queue`` → ClusterQueue ``default-cq``, whose nominal quota is
exactly the hardware: every whole GPU and every MIG slice. The priority classes are the demo's.
Admins replace all of it with ``c.GpuQueueApp.config_files``.
"""

from __future__ import annotations

from collections import Counter

from ..gpu_families import dns_label, flavor_for_product
from ..engine.model import (
    GPU,
    MIG_PREFIX,
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    Inventory,
    LabelSelector,
    LocalQueue,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)

PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, GPU Feature Discovery
NAMESPACE = "default"
LOCAL_QUEUE = "default-queue"
CLUSTER_QUEUE = "default-cq"

# The demo's priority classes (from seed000-priority-classes.yaml).
PRIORITY_CLASSES = (
    ("production-retrain", 1_000_000, False),
    ("experiment-high", 100_000, False),
    ("experiment-normal", 10_000, True),
    ("development", 1_000, False),
)


def flavor_name(product: str, memory_mib: int = 0) -> str:
    """The ResourceFlavor of a product label: its GPU family's name (``NVIDIA-H100-80GB-HBM3`` →
    ``nvidia-h100``; ``memory_mib`` tells an A100 40 GB from an 80 GB where the name does not), or
    for an unknown product the label made a DNS-1123 name (``NVIDIA-Foo`` → ``nvidia-foo``)."""
    return flavor_for_product(product, memory_mib or None)


def _memory_mib(node) -> int:
    label = node.labels.get(MEMORY_LABEL, "")
    if label.isdigit():
        return int(label)
    return max((g.memory_mib for g in node.gpus), default=0)


def config_for_inventory(inventory: Inventory) -> ClusterConfig:
    """One team owning all the hardware of ``inventory`` (see the module docstring)."""
    cfg = ClusterConfig()
    whole: Counter[str] = Counter()  # flavor -> GPUs with MIG off
    mig: dict[str, Counter[str]] = {}  # MIG flavor -> resource -> slices
    products: dict[str, str] = {}  # flavor -> the product label it selects
    for node in inventory.nodes:
        product = node.labels.get(PRODUCT_LABEL) or "gpu"
        base = flavor_name(product, _memory_mib(node))
        if products.setdefault(base, product) != product:
            # Two products of one family (H100 PCIe and SXM nodes): a flavor selects one label.
            base = dns_label(product)
            products.setdefault(base, product)
        for gpu in node.gpus:
            if gpu.mig is None:
                whole[base] += 1
                if base not in cfg.resource_flavors:
                    cfg.resource_flavors[base] = ResourceFlavor(base, node_labels={PRODUCT_LABEL: product})
            else:
                mflavor = f"{base}-mig"
                if mflavor not in cfg.resource_flavors:
                    cfg.resource_flavors[mflavor] = ResourceFlavor(mflavor, node_labels={PRODUCT_LABEL: product})
                for dev in gpu.mig:
                    mig.setdefault(mflavor, Counter())[MIG_PREFIX + dev.profile] += 1
    groups = []
    if whole:
        groups.append(ResourceGroup([GPU], [FlavorQuotas(f, [ResourceQuota(GPU, n)]) for f, n in sorted(whole.items())]))
    if mig:
        resources = sorted({r for c in mig.values() for r in c})
        groups.append(
            ResourceGroup(
                resources,
                [FlavorQuotas(f, [ResourceQuota(r, c.get(r, 0)) for r in resources]) for f, c in sorted(mig.items())],
            )
        )
    cfg.cluster_queues[CLUSTER_QUEUE] = ClusterQueue(
        name=CLUSTER_QUEUE, resource_groups=groups, namespace_selector=LabelSelector()
    )
    cfg.namespaces[NAMESPACE] = Namespace(NAMESPACE)
    cfg.local_queues[f"{NAMESPACE}/{LOCAL_QUEUE}"] = LocalQueue(NAMESPACE, LOCAL_QUEUE, CLUSTER_QUEUE)
    for name, value, default in PRIORITY_CLASSES:
        cfg.priority_classes[name] = PriorityClass(name, value, global_default=default)
    return cfg
