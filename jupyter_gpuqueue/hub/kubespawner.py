"""KubeSpawner: the notebook pod carries what its admitted GPU lease says.

``c.KubeSpawner.modify_pod_hook = gpuqueue_modify_pod_hook`` with a spawner built on
:class:`~jupyter_gpuqueue.hub.spawner.GpuQueueSpawnerMixin` (or the plain pre-spawn hook). The
lease is admitted before ``start()`` (so KubeSpawner's ``start_timeout`` is not spent queueing),
and KubeSpawner applies this hook in ``_start()`` after the profile's ``kubespawner_override``.
For a pod of an admitted lease it sets, as Kueue does for an admitted Workload:

- ``spec.priorityClassName``: the lease's priority class (``development`` by default);
- labels ``kueue.x-k8s.io/queue-name`` (the LocalQueue), ``kueue.x-k8s.io/priority-class`` and
  ``gpuqueue.io/workload`` (the lease's name);
- ``spec.nodeSelector`` and ``spec.tolerations``: the assigned ResourceFlavor's ``nodeLabels`` and
  ``tolerations`` (from ``gpuqueue_config_files``);
- ``containers[0].resources``: limits and requests of exactly the admitted GPU / MIG resource and
  quantity (``nvidia.com/gpu: 1``, ``nvidia.com/mig-1g.10gb: 1``), replacing any GPU / MIG entry
  the profile set;
- ``containers[0].env``: without ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` / ``CUDA_DEVICE_ORDER`` (which
  ``GpuQueueSpawnerMixin.get_env`` / the pre-spawn hook set for local servers; ``GPUQUEUE_LEASE``
  stays). In a cluster NVIDIA's device plugin picks the devices of the requested resource and
  tells the container runtime; the queue's device ids are advisory there (node-level GPU indices,
  synthetic MIG ids). In the pod they would hide the container's GPUs (the container numbers its
  GPUs from 0, so ``CUDA_VISIBLE_DEVICES=3`` names none) or, through ``NVIDIA_VISIBLE_DEVICES``,
  ask the NVIDIA runtime for GPUs other than the ones allocated to the pod.

A pod without a lease (a CPU-only profile) is returned unchanged.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..backends.k8s_jobs import LEASE_WORKLOAD_LABEL

from .config import setting as _setting

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
WORKLOAD_LABEL = LEASE_WORKLOAD_LABEL  # the inventory does not count these Pods' GPUs twice
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
# the device plugin's business in a cluster (module docstring)
DEVICE_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})

_flavor_cache: dict[tuple, dict] = {}


def _is_accelerator(resource: str) -> bool:
    return resource == GPU or resource.startswith(MIG_PREFIX)


def load_flavors(paths: list[str]) -> dict:
    """ResourceFlavors by name from Kueue YAML files (engine model objects), cached per file
    modification time. Raises ValueError naming the file for an unreadable or invalid file."""
    from ..engine.errors import ManifestError
    from ..engine.manifests import load_texts

    key = tuple((p, os.path.getmtime(p) if os.path.exists(p) else None) for p in paths)
    if key in _flavor_cache:
        return _flavor_cache[key]
    texts = []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                texts.append((p, f.read()))
        except OSError as e:
            raise ValueError(f"gpuqueue_config_files: cannot read {p}: {e}") from None
    try:
        flavors = dict(load_texts(texts).config.resource_flavors) if texts else {}
    except ManifestError as e:
        raise ValueError(f"gpuqueue_config_files: {e}") from None
    _flavor_cache.clear()
    _flavor_cache[key] = flavors
    return flavors


def _lease_workload(spawner: Any) -> Optional[dict]:
    lease = getattr(spawner, "gpuqueue_lease", None)
    if lease is None or getattr(lease, "done", False):
        return None
    w = lease.workload
    return w if w and w.get("state") == "Running" else None


def _assigned(workload: dict) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(resource, quantity, flavor) of the lease's GPU / MIG assignment."""
    adm = workload.get("admission") or {}
    for psa in adm.get("podSetAssignments") or []:
        for resource, qty in (psa.get("resourceUsage") or {}).items():
            if _is_accelerator(resource):
                return resource, str(qty), (psa.get("flavors") or {}).get(resource)
    return None, None, None


def _toleration(t) -> Any:
    from kubernetes_asyncio.client.models import V1Toleration

    return V1Toleration(key=t.key or None, operator=t.operator or None, value=t.value or None,
                        effect=t.effect or None)


def _tol_key(t) -> tuple:
    if isinstance(t, dict):
        return (t.get("key"), t.get("operator"), t.get("value"), t.get("effect"))
    return (t.key, t.operator, t.value, t.effect)


def gpuqueue_modify_pod_hook(spawner: Any, pod: Any) -> Any:
    """KubeSpawner ``modify_pod_hook``: see the module docstring. Returns ``pod`` (a ``V1Pod``),
    changed in place. Raises ValueError when the assigned flavor is not in
    ``gpuqueue_config_files`` (the pod would land on the wrong nodes)."""
    w = _lease_workload(spawner)
    if w is None:
        return pod
    from kubernetes_asyncio.client.models import V1ResourceRequirements

    spec, meta = pod.spec, pod.metadata
    if w.get("priorityClass"):
        spec.priority_class_name = w["priorityClass"]
    labels = dict(meta.labels or {})
    labels[QUEUE_NAME_LABEL] = w["localQueue"]
    if w.get("priorityClass"):
        labels[PRIORITY_CLASS_LABEL] = w["priorityClass"]
    labels[WORKLOAD_LABEL] = w["name"]
    meta.labels = labels

    resource, qty, flavor_name = _assigned(w)
    if flavor_name:
        paths = list(_setting(spawner, "gpuqueue_config_files") or [])
        flavors = load_flavors(paths)
        flavor = flavors.get(flavor_name)
        if flavor is None:
            raise ValueError(
                f"the GPU lease was admitted on ResourceFlavor {flavor_name!r}, which gpuqueue_config_files "
                f"({', '.join(paths) or 'none'}) does not define")
        spec.node_selector = {**(spec.node_selector or {}), **flavor.node_labels}
        tolerations = list(spec.tolerations or [])
        have = {_tol_key(t) for t in tolerations}
        for t in flavor.tolerations:
            v = _toleration(t)
            if _tol_key(v) not in have:
                tolerations.append(v)
                have.add(_tol_key(v))
        spec.tolerations = tolerations or None
    if resource:
        c0 = spec.containers[0]
        res = c0.resources or V1ResourceRequirements()
        limits = {k: v for k, v in (res.limits or {}).items() if not _is_accelerator(k)}
        requests = {k: v for k, v in (res.requests or {}).items() if not _is_accelerator(k)}
        limits[resource] = qty
        requests[resource] = qty  # extended resources: requests must equal limits
        res.limits, res.requests = limits, requests
        c0.resources = res
    c0 = spec.containers[0]
    if c0.env:
        c0.env = [e for e in c0.env if _env_name(e) not in DEVICE_ENV]
    return pod


def _env_name(e) -> Optional[str]:
    return e.get("name") if isinstance(e, dict) else getattr(e, "name", None)
