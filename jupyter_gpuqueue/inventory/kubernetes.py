"""The inventory from a Kubernetes cluster: its Nodes' GPUs and MIG slices, less what other pods use.

For each Node whose ``status.allocatable`` offers ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``
(NVIDIA's device plugin):

- whole GPUs: ``allocatable["nvidia.com/gpu"]``; MIG slices: ``allocatable["nvidia.com/mig-<p>"]``
  (the ``mixed`` MIG strategy). With the ``single`` strategy the plugin advertises MIG devices as
  ``nvidia.com/gpu``, so they are whole GPUs here too (pods request ``nvidia.com/gpu``).
- minus what pods that are not ours request on that node (bound: ``spec.nodeName``; not finished:
  phase other than Succeeded/Failed; ours carry ``app.kubernetes.io/managed-by=jupyter-gpuqueue``
  and are accounted by the engine itself). Extended resources cannot be overcommitted, so a pod's
  request is its limit (core/v1 validation).
- GPU Feature Discovery labels describe them: ``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``
  (MiB), ``nvidia.com/gpu.count`` (physical GPUs; MIG devices are packed onto the physical GPUs that
  are not offered whole, first fit by compute slices), ``nvidia.com/mig.strategy``. Node labels are
  kept as they are (ResourceFlavors select nodes by them).
- taints are kept (``spec.taints``), and a cordoned node (``spec.unschedulable``) or one that is not
  Ready gets the taint Kubernetes itself uses (``node.kubernetes.io/unschedulable`` /
  ``node.kubernetes.io/not-ready``, NoSchedule), so the engine places nothing there that the
  scheduler would refuse.

Device identifiers are synthetic and stable (``<node>/gpu-<i>``, ``<node>/mig-<profile>-<j>``): the
API does not expose GPU UUIDs, and in this mode the device plugin, not CUDA_VISIBLE_DEVICES,
assigns devices. The inventory is read when the service starts; afterwards :func:`follow_nodes`
keeps its Nodes' taints in step with the Kubernetes backend's Node watch: a Node cordoned, NotReady
(or Unknown: its kubelet stopped) or deleted gets the taint Kubernetes gives it
(``node.kubernetes.io/unschedulable``, ``node.kubernetes.io/not-ready`` /
``node.kubernetes.io/unreachable``; a deleted one ``node.kubernetes.io/unreachable`` too), so that
the engine admits nothing onto it; the taints go when the Node is back. A GPU Node added later is
taken in with all its devices free (what other Pods use there is seen from the next restart on).
"""

from __future__ import annotations

import logging
from typing import Optional

from kubernetes.utils import parse_quantity

from ..engine.model import GPU, MIG_PREFIX, GpuDevice, Inventory, MigDevice, Node, Taint
from ..backends.k8s_client import KubeClient, path_for
from ..backends.k8s_jobs import LEASE_WORKLOAD_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from .static import mig_profile_slices

log = logging.getLogger(__name__)


def _count(value) -> int:
    """A device count from a quantity string ("4", "4000m"); 0 when absent or invalid."""
    if value in (None, ""):
        return 0
    try:
        return max(0, int(parse_quantity(value)))
    except (ValueError, TypeError):
        return 0


def _pod_devices(pod: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        for r, q in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if r == GPU or r.startswith(MIG_PREFIX):
                out[r] = out.get(r, 0) + _count(q)
    return out


def used_by_others(pods: list[dict]) -> dict[str, dict[str, int]]:
    """node name → {device resource: count} requested by bound, unfinished pods not managed by us:
    neither our Jobs' Pods nor notebook Pods whose GPUs a lease of ours holds (the restored engine
    holds those devices already)."""
    used: dict[str, dict[str, int]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        labels = (p.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY or LEASE_WORKLOAD_LABEL in labels:
            continue
        for r, n in _pod_devices(p).items():
            used.setdefault(node, {})[r] = used.setdefault(node, {}).get(r, 0) + n
    return used


def _taints(node: dict) -> list[Taint]:
    spec = node.get("spec") or {}
    taints = [Taint(key=t.get("key", ""), value=t.get("value", "") or "", effect=t.get("effect") or "NoSchedule")
              for t in spec.get("taints") or []]
    keys = {t.key for t in taints}
    if spec.get("unschedulable") and "node.kubernetes.io/unschedulable" not in keys:
        taints.append(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        # the node lifecycle controller's taints: False -> not-ready, Unknown -> unreachable
        key = "node.kubernetes.io/not-ready" if ready.get("status") == "False" else "node.kubernetes.io/unreachable"
        if key not in keys:
            taints.append(Taint(key, "", "NoSchedule"))
    return taints


GONE = Taint("node.kubernetes.io/unreachable", "", "NoSchedule")


def follow_nodes(inventory: Inventory, nodes: list[dict]) -> tuple[list[str], list[Node]]:
    """Set the taints of ``inventory``'s Nodes from the Node objects ``nodes`` (the watch's cache,
    all of the cluster's Nodes): as :func:`node_from_k8s` derives them, and :data:`GONE` for a Node
    no longer in the cluster. Returns ``(changed, added)``: the names of the Nodes whose taints
    changed (the caller requeues what waits for them), and inventory Nodes for the cluster's GPU
    Nodes the inventory lacks (all their devices free: other Pods on a new Node are not seen), for
    the caller to add (``DeviceAllocator.add_node``). The Node objects of ``inventory`` are changed
    in place: the engine's device allocator reads their taints at each placement."""
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
    changed = []
    for node in inventory.nodes:
        obj = by_name.pop(node.name, None)
        taints = _taints(obj) if obj is not None else [GONE]
        if taints != node.taints:
            node.taints = taints
            changed.append(node.name)
    added = [n for n in (node_from_k8s(obj) for _, obj in sorted(by_name.items(), key=lambda kv: str(kv[0])))
             if n is not None]
    return changed, added


def node_from_k8s(node: dict, used: Optional[dict[str, int]] = None) -> Optional[Node]:
    """One Node object (``/api/v1/nodes`` item) → an inventory Node with its free devices; None when
    it offers no NVIDIA device."""
    meta = node.get("metadata") or {}
    name = meta.get("name") or ""
    labels = {k: str(v) for k, v in (meta.get("labels") or {}).items()}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    used = used or {}
    offered = {r: _count(q) for r, q in alloc.items() if r == GPU or r.startswith(MIG_PREFIX)}
    if not any(offered.values()):
        return None
    product = labels.get("nvidia.com/gpu.product", "")
    memory = _count(labels.get("nvidia.com/gpu.memory"))
    whole_alloc = offered.get(GPU, 0)
    whole_free = max(0, whole_alloc - used.get(GPU, 0))
    gpus = [GpuDevice(index=i, uuid=f"{name}/gpu-{i}", product=product, memory_mib=memory) for i in range(whole_free)]
    # MIG devices (mixed strategy), free ones only, packed onto the physical GPUs not offered whole.
    migs: list[MigDevice] = []
    for r in sorted(offered):
        if not r.startswith(MIG_PREFIX):
            continue
        profile = r[len(MIG_PREFIX):]
        slices = mig_profile_slices(profile)
        if slices is None:
            log.warning("node %s: ignoring %s (not a MIG profile like 1g.10gb)", name, r)
            continue
        free = max(0, offered[r] - used.get(r, 0))
        migs += [MigDevice(uuid=f"{name}/mig-{profile}-{j}", profile=profile, slices=slices) for j in range(free)]
    if migs:
        physical = _count(labels.get("nvidia.com/gpu.count"))
        bins: list[list[MigDevice]] = [[] for _ in range(max(1, physical - whole_alloc))]
        for d in sorted(migs, key=lambda d: -d.slices):
            for b in bins:
                if sum(x.slices for x in b) + d.slices <= 7:
                    b.append(d)
                    break
            else:
                bins.append([d])
        for b in bins:
            if b:
                i = len(gpus)
                gpus.append(GpuDevice(index=i, uuid=f"{name}/gpu-{i}-mig", product=product, memory_mib=memory, mig=b))
    return Node(name=name, labels=labels, taints=_taints(node), gpus=gpus)


def load_cluster_inventory(client: KubeClient) -> Inventory:
    """List Nodes and Pods (all namespaces) and build the Inventory (``source="kubernetes"``).
    Raises KubeApiError when the API cannot be read (e.g. 403: the ClusterRole lacks
    ``list nodes`` / ``list pods``)."""
    nodes, _ = client.list(path_for("", "v1", "nodes"))
    pods, _ = client.list(path_for("", "v1", "pods"))
    used = used_by_others(pods)
    out = []
    for n in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
        node = node_from_k8s(n, used.get((n.get("metadata") or {}).get("name") or ""))
        if node is not None:
            out.append(node)
    return Inventory(nodes=out, source="kubernetes")
