"""What a job's CUDA is told: the devices of its placement, named so that the device it uses is
the device it is billed for (DESIGN.md, "Persistence, recovery, security"; issue 32).

A placement names whole GPUs by their NVML index ("0", "3") and MIG devices by their UUID
(``engine/placement.py``). CUDA numbers GPUs in its own order, fastest first, unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the order of NVML and nvidia-smi): on a host with mixed models an
index can name another GPU than the one the queue assigned and bills. So:

- GPUs discovered through NVML (``Inventory.source == "nvml"``) are named by their UUID
  (``GPU-…``), which ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` accept, whatever
  the order; MIG devices by theirs (``MIG-…``) as before.
- Other inventories (a static file, the demo) keep the indices (their UUIDs may be made up: the
  demo's are), and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA count as NVML does, the order a
  static inventory's ``index`` is written in.

``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set in every case (with UUIDs it changes nothing).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..engine.model import GPU, Inventory

#: Set beside CUDA_VISIBLE_DEVICES: CUDA counts GPUs in PCI bus order, as NVML and nvidia-smi do.
DEVICE_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _field(p: Any, name: str, key: str, default=None):
    return p.get(key, default) if isinstance(p, dict) else getattr(p, name, default)


def visible_devices(placements: Iterable[Any], inventory: Inventory) -> list[str]:
    """The devices of ``placements`` (engine ``DevicePlacement``s or their JSON dicts, ``node``,
    ``devices``, ``resource``) as CUDA_VISIBLE_DEVICES names them: a whole GPU of an NVML
    inventory by its UUID, else as placed (an index; a MIG device's UUID)."""
    uuids = None
    if inventory.source == "nvml":
        uuids = {(n.name, str(g.index)): g.uuid for n in inventory.nodes for g in n.gpus}
    out: list[str] = []
    for p in placements:
        node = _field(p, "node", "node")
        whole = (_field(p, "resource", "resource", GPU) or GPU) == GPU
        for d in _field(p, "devices", "devices", ()) or ():
            out.append(uuids.get((node, str(d)), d) if uuids is not None and whole else d)
    return out


def device_environment(placements: Iterable[Any], inventory: Inventory) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA container runtime's:
    the same names, ``void`` for none) of ``placements``, and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``."""
    visible = ",".join(visible_devices(placements, inventory))
    return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "void", **DEVICE_ORDER_ENV}
