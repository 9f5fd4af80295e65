"""Where the GPUs come from: a static YAML file, NVML discovery, or the demo inventory.

:func:`load_inventory` picks one; the loaders return :class:`jupyter_gpuqueue.engine.model.Inventory`.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from ..engine.model import Inventory
from .nvml import discover
from .static import load_inventory_file, load_inventory_text, parse_inventory

log = logging.getLogger(__name__)

#: The demo inventory used when no file is given and NVML finds no GPU.
DEMO_INVENTORY_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo", "inventory.yaml")


def load_inventory(path: Optional[str] = None) -> Inventory:
    """The inventory the service schedules onto.

    ``path`` given: that YAML file (``source="static"``). Else the GPUs NVML finds on this machine
    (``source="nvml"``). Else the demo inventory ``jupyter_gpuqueue/demo/inventory.yaml``
    (``source="demo"``). Raises ValidationError for an unreadable or invalid file.
    """
    if path:
        return load_inventory_file(path, source="static")
    inv = discover()
    if inv is not None:
        return inv
    log.info("no GPU found through NVML; using the demo inventory %s", DEMO_INVENTORY_PATH)
    return load_inventory_file(DEMO_INVENTORY_PATH, source="demo")


__all__ = [
    "DEMO_INVENTORY_PATH",
    "discover",
    "load_inventory",
    "load_inventory_file",
    "load_inventory_text",
    "parse_inventory",
]
