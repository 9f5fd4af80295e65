"""Node specs for the node stand-in from an inventory file such as
``jupyter_gpuqueue/demo/inventory.yaml`` (format: ``nodes[].{name, labels, taints,
gpus[].{index, uuid, product, memoryMiB, mig: [{uuid, profile}]}}``).

:func:`node_specs` turns each node into ``add_node`` keyword arguments the way the NVIDIA GPU
operator would expose it with the *mixed* MIG strategy: whole GPUs (not in MIG mode) as
``nvidia.com/gpu``, MIG devices as ``nvidia.com/mig-<profile>``, and GPU Feature Discovery
labels (``nvidia.com/gpu.present``, ``gpu.count``, ``gpu.memory`` in MiB, ``gpu.product``,
``mig-<profile>.count``) under the inventory's own labels.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import yaml

DEMO_INVENTORY = Path(__file__).resolve().parent.parent / "demo" / "inventory.yaml"


def node_specs(path: str | os.PathLike = DEMO_INVENTORY, *, cpu: str = "64",
               memory: str = "512Gi") -> list[dict]:
    """``[{"name", "allocatable", "labels", "taints"}]`` for ``NodeAgent.add_node(**spec)``."""
    doc = yaml.safe_load(Path(path).read_text())
    out = []
    for n in doc.get("nodes") or []:
        gpus = n.get("gpus") or []
        whole = [g for g in gpus if not g.get("mig")]
        migs = Counter(m["profile"] for g in gpus for m in g.get("mig") or [])
        alloc = {"cpu": cpu, "memory": memory}
        labels: dict[str, str] = {}
        if gpus:
            alloc["nvidia.com/gpu"] = str(len(whole))
            labels.update({
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(len(gpus)),
                "nvidia.com/gpu.memory": str(gpus[0].get("memoryMiB", 0)),
                "nvidia.com/gpu.product": str(gpus[0].get("product", "")).replace(" ", "-"),
            })
        for profile, count in sorted(migs.items()):
            alloc[f"nvidia.com/mig-{profile}"] = str(count)
            labels[f"nvidia.com/mig-{profile}.count"] = str(count)
        labels.update({k: str(v) for k, v in (n.get("labels") or {}).items()})
        out.append({"name": n["name"], "allocatable": alloc, "labels": labels,
                    "taints": list(n.get("taints") or [])})
    return out
