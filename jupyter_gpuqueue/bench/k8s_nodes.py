"""The node stand-in of ``bench k8s`` in a process of its own, as kubelets are: its status
updates and Pod processes then do not share the queue service's interpreter (and GIL).

    python -m jupyter_gpuqueue.bench.k8s_nodes CONTROL_PLANE_WORKDIR NODES GPUS_PER_NODE PRODUCT

Registers ``NODES`` GPU nodes ``gpu-000``… (``nvidia.com/gpu: GPUS_PER_NODE``, GFD product label
``PRODUCT``) with the control plane whose folder is ``CONTROL_PLANE_WORKDIR`` (its admin kubeconfig
and kubelet certificate), prints ``ready`` once they are registered, runs until its standard
input closes, then prints its counters as JSON and stops (killing what it runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from kubernetes import config

    from ..devcluster.nodes import NodeAgent

    workdir, nodes, gpus, product = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    pki = workdir / "pki"
    agent = NodeAgent(config.new_client_from_config(config_file=str(workdir / "admin.kubeconfig")),
                      workdir / "nodes", tls_cert=pki / "kubelet.crt", tls_key=pki / "kubelet.key",
                      client_ca=pki / "ca.crt", heartbeat_interval=3.0).start()
    try:
        for i in range(nodes):
            agent.add_node(f"gpu-{i:03d}", allocatable={"nvidia.com/gpu": str(gpus)},
                           labels={"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)})
        print("ready", flush=True)
        sys.stdin.read()
        print(json.dumps(agent.counters()), flush=True)
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
