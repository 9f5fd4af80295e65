"""Helpers for the tests of the Kubernetes backend on the real control plane (``conftest.py``
starts it): the queue configuration the tests use, the documented ClusterRole read from
docs/kubernetes.md, a service bound to a fresh namespace, and waiting."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Callable, Optional

import yaml

from jupyter_gpuqueue.service import create_service

from ..conftest import wait_for as _wait_for

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "kubernetes.md"

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-SXM5-80GB"

# One ClusterQueue, two flavors with 2 GPUs of quota each: a low-priority "any" job lands on
# nvidia-a100 (the first flavor); a high-priority A100 job preempts it, and it is re-admitted on
# nvidia-h100 (issue 12, item 2).
CLUSTER_YAML = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: nvidia-a100}}
spec:
  nodeLabels: {{nvidia.com/gpu.product: {A100}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: nvidia-h100}}
spec:
  nodeLabels: {{nvidia.com/gpu.product: {H100}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: nvidia-a100
      resources: [{{name: nvidia.com/gpu, nominalQuota: 2}}]
    - name: nvidia-h100
      resources: [{{name: nvidia.com/gpu, nominalQuota: 2}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: q, namespace: team-a}}
spec: {{clusterQueue: cq}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: gq-low}}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: gq-high}}
value: 1000
---
# known to the queue, absent from the cluster (gq-doomed is created and deleted by a test)
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: gq-absent}}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: gq-doomed}}
value: 50
"""

PRIORITY_CLASSES = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gq-low"}, "value": 100},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gq-high"}, "value": 1000},
]

_seq = itertools.count(1)


def documented_cluster_role() -> dict:
    """The ClusterRole of docs/kubernetes.md's RBAC section, exactly as documented."""
    text = DOCS.read_text()
    section = text.split("## RBAC", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    for doc in yaml.safe_load_all(block):
        if doc and doc.get("kind") == "ClusterRole":
            return doc
    raise AssertionError("docs/kubernetes.md has no ClusterRole")


def rules_without(role: dict, resource: str) -> list[dict]:
    """The role's rules less ``resource`` (e.g. ``pods/log``)."""
    out = []
    for rule in role["rules"]:
        res = [r for r in rule["resources"] if r != resource]
        if res:
            out.append({**rule, "resources": res})
    return out


def wait_for(predicate: Callable, timeout: float = 60.0, step: Optional[Callable] = None,
             interval: float = 0.05, what: str = ""):
    """``tests/k8s/conftest.wait_for`` with the real cluster's pace (60 s, 50 ms by default)."""
    return _wait_for(predicate, timeout, step, interval, what)


class KubeQueue:
    """Services of one test: the queue's Jobs go to a fresh namespace ``ns`` of the real cluster
    (the team ``team-a`` is mapped to it), with the service account's rules ``rules`` (the
    documented ClusterRole by default)."""

    def __init__(self, control_plane, tmp_path: Path, rules: Optional[list] = None):
        self.cp = control_plane
        self.tmp = tmp_path
        n = next(_seq)
        self.ns = f"gq-{n}-{int(time.time()) % 100000}"
        control_plane.ensure_namespace(self.ns, timeout=90)
        control_plane.apply(PRIORITY_CLASSES)
        role = documented_cluster_role()
        self.api_client = control_plane.service_account_client(
            "kube-system", f"gpuqueue-{self.ns}", rules if rules is not None else role["rules"])
        (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
        self.services = []

    def service(self, **opts):
        svc = create_service(
            config_paths=[str(self.tmp / "cluster.yaml")], inventory_path=None,
            db_url=f"sqlite:///{self.tmp / 'ledger.sqlite'}", root_dir=str(self.tmp),
            data_dir=str(self.tmp / "state"), prices={"nvidia-a100": 2.21, "nvidia-h100": 3.75},
            stop_grace_seconds=0, default_local_queue="team-a/q", backend="kubernetes",
            kubernetes={"api_client": opts.pop("api_client", self.api_client), "image": "busybox:1.36",
                        "namespaces": {"team-a": self.ns}, **opts})
        svc.k8s = getattr(svc.backend, "inner", svc.backend)  # LeaseBackend wraps it
        svc.restore()
        self.services.append(svc)
        return svc

    def close_service(self, svc) -> None:
        if svc in self.services:
            self.services.remove(svc)
        svc.backend.close()
        svc.ledger.close()

    def close(self) -> None:
        for svc in list(self.services):
            self.close_service(svc)
        from jupyter_gpuqueue.backends.k8s_client import KubeApiError

        try:  # the namespace controller deletes its Jobs and Pods (the node stand-in kills them)
            self.cp.kube.delete(f"/api/v1/namespaces/{self.ns}")
        except KubeApiError as err:
            if err.status != 404:
                raise

    # -- reading the cluster ---------------------------------------------------------------------
    def get(self, path: str) -> dict:
        return self.cp.kube.get(path)

    def job(self, name: str) -> Optional[dict]:
        from jupyter_gpuqueue.backends.k8s_client import KubeApiError

        try:
            return self.get(f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}")
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise

    def pods(self, job_name: Optional[str] = None) -> list[dict]:
        sel = f"?labelSelector=batch.kubernetes.io/job-name%3D{job_name}" if job_name else ""
        return self.get(f"/api/v1/namespaces/{self.ns}/pods{sel}")["items"]

    def node_of(self, pod: dict) -> dict:
        return self.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
