"""The shared job stream of ``shared/reference/slurm.md``, its cluster, and the ideal makespans.

Both systems run exactly the same jobs: Python ``random.Random(seed)`` (42), and for job i in
0..N-1 the draws in this order: ``team = rng.choice(TEAMS)``, ``gpus = rng.randint(1, 8)`` (all on
one node), ``rng.random()`` (a dev-QOS draw, unused), ``tlimit = rng.choice([1, 2, 5])`` minutes
(the user's over-estimated limit); every job runs ``sleep 1``.

Cluster: ``nodes`` × ``gpus_per_node`` A100s (16 × 8); teams team-a / team-b / team-c with
nominal quotas 64 / 48 / 32 GPUs: either in one cohort with unlimited borrowing, or without a
cohort (a hard cap, as Slurm's ``GrpTRES=gres/gpu=N``). No preemption (Kueue's default policies:
``Never``), as Slurm's GrpTRES does not preempt either.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Optional

import yaml

TEAMS = ("team-a", "team-b", "team-c")
QUOTAS = {"team-a": 64, "team-b": 48, "team-c": 32}  # nominal GPUs (Slurm: GrpTRES gres/gpu)
FAIRSHARE = {"team-a": 50, "team-b": 30, "team-c": 20}  # Slurm's fair-share (not used by ours)
FLAVOR = "nvidia-a100"
PRODUCT_LABEL = "NVIDIA-A100-SXM4-80GB"
COHORT = "lab"


@dataclass(frozen=True)
class Job:
    """One job of the stream: ``index`` (0-based), ``team``, ``gpus`` (1-8, one node),
    ``time_limit_minutes`` (1, 2 or 5: the limit the user gives; the job itself sleeps 1 s)."""

    index: int
    team: str
    gpus: int
    time_limit_minutes: int

    @property
    def local_queue(self) -> str:
        """``namespace/name`` of the team's LocalQueue."""
        return f"{self.team}/{self.team}-queue"


def job_stream(n: int, seed: int = 42) -> list[Job]:
    """The first ``n`` jobs of the shared stream (same seed and draw order as slurm.md)."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        team = rng.choice(list(TEAMS))
        gpus = rng.randint(1, 8)
        rng.random()  # the dev-QOS draw: drawn to keep the order, unused without a dev share
        tlimit = rng.choice([1, 2, 5])
        jobs.append(Job(i, team, gpus, tlimit))
    return jobs


def ideal_makespan(jobs: list[Job], *, borrowing: bool, capacity: int, runtime: float = 1.0,
                   quotas: Optional[dict[str, int]] = None) -> float:
    """Lower bound of the makespan in seconds: the GPU-seconds of the stream over the capacity
    (``capacity`` GPUs; with ``borrowing``), else the slowest team's GPU-seconds over its own
    quota (``min(quota, capacity)``). 69.7 s / 97.2 s for the 2,000-job stream on 128 GPUs."""
    quotas = quotas or QUOTAS
    if borrowing:
        return sum(j.gpus for j in jobs) * runtime / capacity
    worst = 0.0
    for team, quota in quotas.items():
        work = sum(j.gpus for j in jobs if j.team == team) * runtime
        worst = max(worst, work / min(quota, capacity))
    return worst


def inventory_yaml(nodes: int = 16, gpus_per_node: int = 8) -> str:
    """A static inventory (``inventory/static.py``): ``gpu01..gpuNN`` with ``gpus_per_node`` A100s
    each, deterministic fake UUIDs (uuid5 of the node and index)."""
    doc = {"nodes": []}
    for n in range(1, nodes + 1):
        name = f"gpu{n:02d}"
        gpus = []
        for i in range(gpus_per_node):
            u = uuid.uuid5(uuid.NAMESPACE_URL, f"https://gpuqueue.invalid/bench/{name}/gpu{i}")
            gpus.append({"index": i, "uuid": f"GPU-{u}", "product": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920})
        doc["nodes"].append({"name": name, "labels": {"nvidia.com/gpu.product": PRODUCT_LABEL}, "gpus": gpus})
    return yaml.safe_dump(doc, sort_keys=False)


def cluster_yaml(*, borrowing: bool, quotas: Optional[dict[str, int]] = None, hold: bool = False) -> str:
    """Kueue YAML: one ResourceFlavor (A100), and per team a Namespace, a ClusterQueue with the
    team's nominal quota of ``nvidia.com/gpu`` (BestEffortFIFO) and a LocalQueue
    ``<team>/<team>-queue``. ``borrowing``: the ClusterQueues share the cohort ``lab`` with no
    borrowingLimit; else no cohort (each team capped at its quota). ``hold``: every ClusterQueue
    has ``stopPolicy: Hold`` (it queues and admits nothing until an admin sets it to ``None``)."""
    quotas = quotas or QUOTAS
    docs: list[dict] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": PRODUCT_LABEL}}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "normal"},
         "value": 1000, "globalDefault": True, "description": "every job of the stream"},
    ]
    for team, quota in quotas.items():
        spec: dict = {
            "namespaceSelector": {"matchLabels": {"gpuqueue.io/team": team}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": FLAVOR, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": quota}]}]}],
        }
        if borrowing:
            spec = {"cohort": COHORT, **spec}
        if hold:
            spec["stopPolicy"] = "Hold"
        docs += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": {"gpuqueue.io/team": team}}},
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": f"{team}-cq"},
             "spec": spec},
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
             "metadata": {"name": f"{team}-queue", "namespace": team}, "spec": {"clusterQueue": f"{team}-cq"}},
        ]
    return yaml.safe_dump_all(docs, sort_keys=False)


def submit_request(job: Job, command: list[str]) -> dict:
    """The SubmitRequest (docs/rest-api.md) of ``job`` running ``command``."""
    return {"localQueue": job.local_queue, "gpus": job.gpus, "command": list(command),
            "maxRuntimeSeconds": job.time_limit_minutes * 60}
