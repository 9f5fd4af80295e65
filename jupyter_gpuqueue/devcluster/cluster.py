"""One call to get a working development cluster: the control plane plus the node stand-in with
the demo inventory's GPU nodes (for benchmarks and manual runs).

    cp, agent = start_cluster("/tmp/devcluster")      # ~10 s
    ...                                               # cp.kubeconfig_path for clients
    stop_cluster(cp, agent)
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from .controlplane import ControlPlane
from .inventory import DEMO_INVENTORY, node_specs
from .nodes import NodeAgent


def start_cluster(workdir: str | os.PathLike | None = None, *,
                  inventory: str | os.PathLike | None = DEMO_INVENTORY,
                  cpu_node: str | None = "cpu-node", kueue_crds: bool = False,
                  heartbeat_interval: float = 3.0, timeout: float = 60.0,
                  **control_plane_kwargs) -> tuple[ControlPlane, NodeAgent]:
    """Start a :class:`ControlPlane` in ``workdir`` (default: a fresh temporary folder) and a
    :class:`NodeAgent` with one Node per entry of ``inventory`` (None: none) plus a plain CPU
    node named ``cpu_node`` (None: none); ``kueue_crds``: also install Kueue v0.14.8's CRDs.
    Waits until every node is untainted (schedulable). Raises what ``ControlPlane.start``
    raises, or TimeoutError; stops what it started on failure."""
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gpuqueue-devcluster-"))
    cp = ControlPlane(wd, **control_plane_kwargs).start()
    agent = None
    try:
        agent = NodeAgent.for_control_plane(cp, heartbeat_interval=heartbeat_interval).start()
        names = []
        for spec in node_specs(inventory) if inventory else []:
            agent.add_node(**spec)
            names.append(spec["name"])
        if cpu_node:
            agent.add_node(cpu_node, allocatable={"cpu": "16", "memory": "64Gi"})
            names.append(cpu_node)
        if kueue_crds:
            from .assets import kueue_crds_dir

            d = kueue_crds_dir()
            if d is None:
                raise FileNotFoundError("Kueue CRDs not found in the kube assets folder")
            cp.install_crds(d)
        deadline = time.monotonic() + timeout
        while True:
            nodes = {n["metadata"]["name"]: n for n in cp.kube.list("/api/v1/nodes")[0]}
            if all(n in nodes and not nodes[n]["spec"].get("taints") for n in names):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {names} not schedulable after {timeout} s")
            time.sleep(0.1)
        return cp, agent
    except BaseException:
        stop_cluster(cp, agent)
        raise


def stop_cluster(cp: ControlPlane | None, agent: NodeAgent | None = None) -> None:
    """Stop the node stand-in (killing container processes), then the control plane."""
    if agent is not None:
        agent.stop()
    if cp is not None:
        cp.stop()
