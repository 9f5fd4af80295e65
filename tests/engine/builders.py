"""Builders for engine tests: ClusterQueues, configs and workloads in a few words."""

from __future__ import annotations

from jupyter_gpuqueue.engine.model import (
    GPU,
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from jupyter_gpuqueue.engine.scheduler import Scheduler


def make_cq(name, quotas, *, cohort=None, strategy="BestEffortFIFO", resource=GPU, selector=True, **kw):
    """quotas: [(flavor, nominal, borrowingLimit, lendingLimit)] for one resource."""
    flavors = []
    for q in quotas:
        f, nominal, bl, ll = (list(q) + [None, None])[:4]
        flavors.append(FlavorQuotas(f, [ResourceQuota(resource, nominal, bl, ll)]))
    return ClusterQueue(
        name=name,
        cohort=cohort,
        queueing_strategy=strategy,
        namespace_selector=LabelSelector() if selector else None,
        resource_groups=[ResourceGroup([resource], flavors)],
        **kw,
    )


def make_config(*cqs, flavors=("a100", "h100")):
    cfg = ClusterConfig()
    for f in flavors:
        cfg.resource_flavors[f] = ResourceFlavor(f, node_labels={"gpu": f})
    for cq in cqs:
        cfg.cluster_queues[cq.name] = cq
        ns = f"ns-{cq.name}"
        cfg.local_queues[f"{ns}/q"] = LocalQueue(ns, "q", cq.name)
    return cfg


_t = [0.0]


def wl(cq, name, gpus, *, prio=0, count=1, t=None, resource=GPU, **ps_kw):
    _t[0] += 1
    return Workload(
        namespace=f"ns-{cq}", name=name, queue_name="q",
        pod_sets=[PodSet("main", count, {resource: gpus}, **ps_kw)],
        priority=prio, creation_time=_t[0] if t is None else t, uid=name,
    )


def admitted(s: Scheduler) -> set[str]:
    return {k.split("/")[1] for k in s.admitted}


def flavor_of(s: Scheduler, name: str) -> str:
    w = next(w for k, w in s.admitted.items() if k.endswith("/" + name))
    return w.admission.pod_set_assignments[0].flavors[GPU]
