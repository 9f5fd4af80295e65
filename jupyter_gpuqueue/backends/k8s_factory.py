"""Build the cluster backends and the cluster inventory from the service's options (one API
connection shared by both).

Options (``create_service(kubernetes=...)``, from ``GpuQueueApp`` traits): ``kubeconfig`` (path;
None: in-cluster service account, else ``$KUBECONFIG`` / ``~/.kube/config``), ``context``,
``api_client`` (an injected ``kubernetes.client.ApiClient``, for tests), ``namespaces`` (team
namespace → cluster namespace), ``image`` (container image of Jobs built from the form),
``pod_template`` (partial PodSpec merged into them, see ``k8s_jobs.apply_pod_template``),
``volcano`` (bool), ``volcano_queue``, ``kueue_version``, ``visibility_interval``,
``pods_ready_timeout`` (seconds; see ``backends/kubernetes.py``), ``start_concurrency`` (Jobs created
by worker threads, at most this many at a time; 0: on the service's thread; default 8),
``job_ttl_seconds`` (``spec.ttlSecondsAfterFinished`` of created Jobs; None: kept; default 1 day),
``pods_ready_recovery_timeout``, ``requeue_backoff_base`` / ``requeue_backoff_max`` /
``requeue_backoff_limit`` (waitForPodsReady's requeuingStrategy), ``forbidden_attempts``,
``check_access`` (the start-up SelfSubjectAccessReviews), passed to ``KubernetesBackend``.
"""

from __future__ import annotations

from typing import Any, Optional

from ..engine.model import ClusterConfig, Inventory
from ..errors import ValidationError
from .k8s_client import KubeClient, load_api_client

BACKENDS = ("kubernetes", "kueue")
# Options passed as they are to KubernetesBackend (see its docstring).
_KUBERNETES_ONLY = ("pods_ready_recovery_timeout", "requeue_backoff_base", "requeue_backoff_max",
                    "requeue_backoff_limit", "forbidden_attempts", "check_access")


class ClusterConnection:
    """``kind``: "kubernetes" (our engine admits, Jobs run in the cluster) or "kueue" (an installed
    Kueue admits). Raises ValidationError(field="backend") for another kind, (field="kubeconfig")
    when no cluster configuration can be loaded."""

    def __init__(self, kind: str, options: dict[str, Any]):
        if kind not in BACKENDS:
            raise ValidationError(f"unknown backend {kind!r} (one of local, {', '.join(BACKENDS)})", "backend")
        self.kind = kind
        self.options = dict(options)
        api_client = self.options.get("api_client")
        if api_client is None:
            try:
                api_client = load_api_client(self.options.get("kubeconfig"), self.options.get("context"))
            except Exception as exc:  # kubernetes.config.ConfigException, missing files
                raise ValidationError(f"cannot load the Kubernetes configuration: {exc}", "kubeconfig") from None
        self.client = KubeClient(api_client)

    def inventory(self) -> Inventory:
        """Nodes' GPUs and MIG slices, less what other pods use (inventory/kubernetes.py). Raises
        ValidationError(field="backend") with the API server's message when they cannot be read."""
        from ..inventory.kubernetes import load_cluster_inventory
        from .k8s_client import KubeApiError

        try:
            return load_cluster_inventory(self.client)
        except KubeApiError as err:
            raise ValidationError(f"cannot read the cluster's Nodes and Pods: {err.field_message()}",
                                  "backend") from None

    def backend(self, config: Optional[ClusterConfig]):
        o = self.options
        common = dict(config=config, image=o.get("image") or "python:3.12-slim", namespaces=o.get("namespaces") or {},
                      pod_template=o.get("pod_template") or {})
        if "job_ttl_seconds" in o:  # None: Jobs are kept
            common["ttl_seconds_after_finished"] = o["job_ttl_seconds"]
        k8s = {k: o[k] for k in _KUBERNETES_ONLY if k in o}
        if self.kind == "kueue":
            from .kueue import KueueBackend

            return KueueBackend(self.client, kueue_version=o.get("kueue_version") or "v1beta1",
                                visibility_interval=float(o.get("visibility_interval") or 2.0), **common)
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(self.client, volcano=bool(o.get("volcano")), volcano_queue=o.get("volcano_queue"),
                                 pods_ready_timeout=float(o.get("pods_ready_timeout") or 300.0),
                                 start_concurrency=int(o.get("start_concurrency", 16)), **k8s, **common)
