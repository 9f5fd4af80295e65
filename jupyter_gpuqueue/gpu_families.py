"""NVIDIA GPU families: the one table of ResourceFlavor names and prices by GPU model (issue 32).

A discovered GPU is named and priced by its *family* — the model, and the memory size where one
model comes in two at different prices (A100 40 GB / 80 GB, V100 16 GB / 32 GB) — never by the
whole product string, which carries the form factor (SXM4, PCIe, NVL), the memory type (HBM3) and
changes between drivers ("Tesla T4", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"). The product
strings come from NVML (``nvmlDeviceGetName``: "NVIDIA H100 80GB HBM3") and from GPU Feature
Discovery's node label ``nvidia.com/gpu.product`` (the same string with spaces replaced by '-':
"NVIDIA-H100-80GB-HBM3"; with time-slicing "…-SHARED", with the ``single`` MIG strategy
"…-MIG-1g.5gb"); :func:`family_of` reads both.

:data:`GPU_FAMILIES` is the single source: ``ledger/pricing.DEFAULT_PRICES`` is built from it, the
generated queue configuration of a discovered machine (``inventory/default_config.py``) names its
ResourceFlavors with it, and the README's price table is checked against it
(``tests/test_gpu_families.py``). Prices are USD per GPU-hour; A100-80GB 2.21, A100-40GB 1.65,
H100 3.75 and L4 0.81 are DESIGN.md's ("Costs"); the others are this project's starting figures, set
on the same scale (roughly in proportion to public clouds' on-demand rates per GPU-hour in 2026),
not anyone's quote: admins set their own (``c.GpuQueueApp.prices``, Admin → Prices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GpuFamily:
    """One GPU family. ``flavor``: the ResourceFlavor name of discovered GPUs of this family (a
    DNS-1123 label, stable across drivers); ``model``: what people call it ("A100 80GB");
    ``usd_per_gpu_hour``: its price; ``products``: product names of it as NVML reports them
    (documentation and tests; any name :func:`family_of` maps here belongs to it);
    ``aliases``: other flavor names priced the same (the demo cluster's and the seed examples')."""

    flavor: str
    model: str
    usd_per_gpu_hour: float
    products: tuple[str, ...]
    aliases: tuple[str, ...] = ()


#: The families, USD per GPU-hour (module docstring). Order does not matter: :func:`family_of`
#: matches whole words of the product name.
GPU_FAMILIES: tuple[GpuFamily, ...] = (
    GpuFamily("nvidia-b200", "B200", 6.00, ("NVIDIA B200",)),
    GpuFamily("nvidia-gh200", "GH200", 4.50, ("NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e")),
    GpuFamily("nvidia-h200", "H200", 4.50, ("NVIDIA H200", "NVIDIA H200 NVL")),
    GpuFamily("nvidia-h100", "H100", 3.75, ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"),
              aliases=("h100-80gb",)),
    GpuFamily("nvidia-a100-80gb", "A100 80GB", 2.21, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
              aliases=("nvidia-a100", "a100-80gb")),
    GpuFamily("nvidia-a100-40gb", "A100 40GB", 1.65, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
              aliases=("a100-40gb",)),
    GpuFamily("nvidia-l40s", "L40S", 1.60, ("NVIDIA L40S",)),
    GpuFamily("nvidia-l40", "L40", 1.40, ("NVIDIA L40",)),
    GpuFamily("nvidia-l4", "L4", 0.81, ("NVIDIA L4",), aliases=("l4",)),
    GpuFamily("nvidia-a10g", "A10G", 1.01, ("NVIDIA A10G",)),
    GpuFamily("nvidia-a10", "A10", 0.75, ("NVIDIA A10",)),
    GpuFamily("nvidia-t4", "T4", 0.35, ("Tesla T4",)),
    GpuFamily("nvidia-v100-32gb", "V100 32GB", 1.20, ("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB")),
    GpuFamily("nvidia-v100-16gb", "V100 16GB", 1.00, ("Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB")),
    GpuFamily("nvidia-rtx-a6000", "RTX A6000", 0.80, ("NVIDIA RTX A6000",)),
    GpuFamily("nvidia-rtx-6000-ada", "RTX 6000 Ada", 1.20, ("NVIDIA RTX 6000 Ada Generation",)),
    GpuFamily("nvidia-rtx-4090", "RTX 4090", 0.60, ("NVIDIA GeForce RTX 4090",)),
)

_BY_FLAVOR = {f.flavor: f for f in GPU_FAMILIES}

# (pattern on the normalised name, family flavor or a memory-split pair (flavor >= threshold GB, below))
_MODELS: tuple[tuple[re.Pattern, object], ...] = tuple(
    (re.compile(p), target) for p, target in (
        (r"\bB200\b", "nvidia-b200"),
        (r"\bGH200\b", "nvidia-gh200"),
        (r"\bH200\b", "nvidia-h200"),
        (r"\bH100\b", "nvidia-h100"),
        (r"\bA100\b", ("nvidia-a100-80gb", 60, "nvidia-a100-40gb")),
        (r"\bL40S\b", "nvidia-l40s"),
        (r"\bL40\b", "nvidia-l40"),
        (r"\bL4\b", "nvidia-l4"),
        (r"\bA10G\b", "nvidia-a10g"),
        (r"\bA10\b", "nvidia-a10"),
        (r"\bT4\b", "nvidia-t4"),
        (r"\bV100S?\b", ("nvidia-v100-32gb", 24, "nvidia-v100-16gb")),
        (r"\bRTX A6000\b", "nvidia-rtx-a6000"),
        (r"\bRTX 6000 ADA\b", "nvidia-rtx-6000-ada"),
        (r"\bRTX 4090\b", "nvidia-rtx-4090"),
    )
)
_MEMORY_IN_NAME = re.compile(r"\b(\d+) ?GB?\b")
# GPU Feature Discovery's suffixes: time-slicing ("-SHARED"), the single MIG strategy ("-MIG-1g.5gb")
_GFD_SUFFIX = re.compile(r"( SHARED| MIG .*)$")


def _normalise(product: str) -> str:
    """"NVIDIA-A100-SXM4-80GB" / "NVIDIA A100-SXM4-80GB" → "NVIDIA A100 SXM4 80GB"."""
    s = re.sub(r"[\s_-]+", " ", product.upper()).strip()
    return _GFD_SUFFIX.sub("", s)


def family_of(product: str, memory_mib: Optional[int] = None) -> Optional[GpuFamily]:
    """The :class:`GpuFamily` of a product name (NVML's ``nvmlDeviceGetName`` or GPU Feature
    Discovery's ``nvidia.com/gpu.product`` label), or None when it is none of
    :data:`GPU_FAMILIES`. Where one model comes in two memory sizes the memory in the name decides
    ("A100-SXM4-40GB"), else ``memory_mib`` (the GPU's memory, MiB: ``nvmlDeviceGetMemoryInfo``'s
    total or the ``nvidia.com/gpu.memory`` label); with neither, None (the price would be a guess)."""
    if not product:
        return None
    name = _normalise(product)
    for pattern, target in _MODELS:
        if not pattern.search(name):
            continue
        if isinstance(target, str):
            return _BY_FLAVOR[target]
        big, threshold_gb, small = target
        m = _MEMORY_IN_NAME.search(name[pattern.search(name).end():]) or _MEMORY_IN_NAME.search(name)
        if m is not None:
            gb = int(m.group(1))
        elif memory_mib:
            gb = int(memory_mib) / 1024
        else:
            return None
        return _BY_FLAVOR[big if gb >= threshold_gb else small]
    return None


#: Node labels that name a node's GPU product: GPU Feature Discovery's (with ``nvidia.com/gpu.memory``,
#: MiB) and GKE's accelerator label ("nvidia-h100-80gb", "nvidia-tesla-a100").
PRODUCT_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
MEMORY_LABEL = "nvidia.com/gpu.memory"


def family_of_node_labels(labels: dict) -> Optional[GpuFamily]:
    """The :class:`GpuFamily` named by a ResourceFlavor's (or a Node's) labels: the first of
    :data:`PRODUCT_LABELS` present, with :data:`MEMORY_LABEL` (MiB) where the model comes in two
    memory sizes; None when no such label names a known family. ``{"nvidia.com/gpu.product":
    "NVIDIA-H100-80GB-HBM3"}`` → H100; ``{"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}`` → T4."""
    memory = labels.get(MEMORY_LABEL)
    try:
        memory_mib = int(memory) if memory else None
    except (TypeError, ValueError):
        memory_mib = None
    for key in PRODUCT_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value:
            return family_of(value, memory_mib)
    return None


def dns_label(product: str) -> str:
    """``NVIDIA-Foo 9000`` → ``nvidia-foo-9000``: a DNS-1123 label (at most 63 characters) made
    of a product name, for a product of no known family."""
    name = re.sub(r"[^a-z0-9-]+", "-", product.lower()).strip("-")
    return re.sub(r"-+", "-", name)[:63].strip("-") or "gpu"


def flavor_for_product(product: str, memory_mib: Optional[int] = None) -> str:
    """The ResourceFlavor name of GPUs of ``product``: their family's (``nvidia-h100``,
    ``nvidia-a100-80gb``), or, for a product of no known family, the product name made a DNS-1123
    label (``nvidia-foo-9000``; billed at the default price, which the service names at start)."""
    fam = family_of(product, memory_mib)
    return fam.flavor if fam is not None else dns_label(product)


def family_prices() -> dict[str, float]:
    """Flavor name → USD per GPU-hour of every family and alias (``ledger/pricing.DEFAULT_PRICES``)."""
    out: dict[str, float] = {}
    for fam in GPU_FAMILIES:
        out[fam.flavor] = fam.usd_per_gpu_hour
        for alias in fam.aliases:
            out[alias] = fam.usd_per_gpu_hour
    return out


__all__ = ["GPU_FAMILIES", "GpuFamily", "MEMORY_LABEL", "PRODUCT_LABELS", "dns_label", "family_of",
           "family_of_node_labels", "family_prices", "flavor_for_product"]
