"""Manifest loading and validation: the seed files, the demo cluster, and each of Kueue's and
Kubernetes' rules that the loader enforces."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from jupyter_gpuqueue.engine import model
from jupyter_gpuqueue.engine.errors import ManifestError
from jupyter_gpuqueue.engine.manifests import (
    Manifests,
    load_documents,
    load_text,
    parse_duration,
    parse_workload_document,
    parse_yaml_documents,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT.parent / "shared" / "examples"
DATA = Path(__file__).resolve().parent / "data"
DEMO = ROOT / "jupyter_gpuqueue" / "demo"
GI = 2**30

KUEUE = "kueue.x-k8s.io/v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def seed_text(name: str) -> str:
    path = EXAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_text()


def seed_docs(name: str) -> list:
    return [d for d in yaml.safe_load_all(seed_text(name)) if d is not None]


def reject(docs, field, reason, *, index=None, source="test.yaml") -> ManifestError:
    """Load ``docs`` (a list of dicts, or YAML text) and expect a ManifestError at ``field``."""
    with pytest.raises(ManifestError) as err:
        if isinstance(docs, str):
            load_text(docs, source)
        else:
            load_documents(docs, source)
    e = err.value
    assert e.field == field, str(e)
    assert reason in e.reason, str(e)
    assert e.source == source
    if index is not None:
        assert e.index == index, str(e)
    return e


# --- builders ------------------------------------------------------------------------------


def rq(name, nominal, **limits):
    return {"name": name, "nominalQuota": nominal, **limits}


def cq(name="cq", **spec):
    spec.setdefault("resourceGroups", [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [rq("nvidia.com/gpu", 4)]}]}
    ])
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def group(covered, *flavors):
    return {"coveredResources": list(covered), "flavors": list(flavors)}


def fq(name, *resources):
    return {"name": name, "resources": list(resources)}


def lq(name="q", namespace="team-a", cluster_queue="cq"):
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}


def container(name="main", requests=None, limits=None):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "python:3.11", "resources": resources}


def job(name="train", queue="q", namespace="team-a", gpus=1, labels=None, annotations=None, **spec):
    meta = {"name": name, "labels": {**({QUEUE_LABEL: queue} if queue else {}), **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    pod_spec = spec.pop("pod_spec", None) or {
        "restartPolicy": "Never",
        "containers": [container(limits={"nvidia.com/gpu": gpus})],
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {**spec, "template": {"spec": pod_spec}}}


def pc(name, value, **extra):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **extra}


def wpc(name, value):
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def workload_obj(name="wl", pod_sets=None, **spec):
    pod_sets = pod_sets if pod_sets is not None else [
        {"name": "main", "count": 2, "template": {"spec": {"containers": [container(limits={"nvidia.com/gpu": 1})]}}}
    ]
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queueName": "q", "podSets": pod_sets, **spec}}


# --- the seed files ------------------------------------------------------------------------


def test_seed000_kueue_setup_is_rejected_for_its_h100_flavor():
    e = reject(seed_text("seed000-kueue-setup.yaml"), "spec.resourceGroups[0].flavors[1].resources",
               "must have the same number of resources as the coveredResources", index=2,
               source="seed000-kueue-setup.yaml")
    assert (e.kind, e.name) == ("ClusterQueue", "ml-training-cluster")
    text = str(e)
    for part in ("seed000-kueue-setup.yaml", "document 2", "ClusterQueue/ml-training-cluster",
                 "spec.resourceGroups[0].flavors[1].resources"):
        assert part in text


def test_seed000_kueue_setup_resources_out_of_order_are_rejected():
    docs = seed_docs("seed000-kueue-setup.yaml")
    # Fix only the h100 flavor: the a100 flavor still lists nvidia.com/gpu first.
    docs[2]["spec"]["resourceGroups"][0]["flavors"][1]["resources"] = [
        rq("cpu", 256), rq("memory", "2Ti"), rq("nvidia.com/gpu", 32)]
    e = reject(docs, "spec.resourceGroups[0].flavors[0].resources[0].name",
               "must match the name in coveredResources", index=2)
    assert '"nvidia.com/gpu"' in e.reason


def test_seed000_kueue_setup_job_names_an_undefined_priority_class():
    docs = seed_docs("seed000-kueue-setup.yaml")
    flavors = docs[2]["spec"]["resourceGroups"][0]["flavors"]
    flavors[0]["resources"] = [flavors[0]["resources"][i] for i in (1, 2, 0)]
    flavors[1]["resources"] = [rq("cpu", 256), rq("memory", "2Ti"), rq("nvidia.com/gpu", 32)]
    e = reject(docs, "metadata.labels[kueue.x-k8s.io/priority-class]", 'Not found: "high-priority"', index=4)
    assert (e.kind, e.name) == ("Job", "llama-finetune-v3")


def test_seed000_kueue_setup_corrected_copy_loads():
    m = load_text((DATA / "seed000-kueue-setup.corrected.yaml").read_text(), "seed000-corrected")
    c = m.config
    assert set(c.resource_flavors) == {"a100-80gb", "h100-80gb"}
    a100 = c.resource_flavors["a100-80gb"]
    assert a100.node_labels == {"accelerator": "nvidia-a100-80gb"}
    assert a100.tolerations == [model.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    q = c.cluster_queues["ml-training-cluster"]
    assert q.cohort == "ml-org" and q.queueing_strategy == model.BEST_EFFORT_FIFO
    assert q.namespace_selector is None  # unset: Kueue matches no namespace
    assert q.preemption.reclaim_within_cohort == model.ANY
    assert q.preemption.within_cluster_queue == model.LOWER_PRIORITY
    a100_quotas = {r.name: r for r in q.resource_groups[0].flavors[0].resources}
    assert a100_quotas["cpu"].nominal_quota == 512_000  # millicores
    assert a100_quotas["memory"].nominal_quota == 4 * 2**40
    assert a100_quotas["nvidia.com/gpu"] == model.ResourceQuota("nvidia.com/gpu", 64, borrowing_limit=16, lending_limit=16)
    assert c.local_queues["team-a/team-a-training"].cluster_queue == "ml-training-cluster"
    [wl] = m.workloads
    assert (wl.namespace, wl.name, wl.queue_name) == ("team-a", "llama-finetune-v3", "team-a-training")
    assert wl.pod_sets == [model.PodSet(name="main", count=2,
                                        requests={"cpu": 32_000, "memory": 256 * GI, "nvidia.com/gpu": 8})]
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (100000, "high-priority", "WorkloadPriorityClass")
    assert m.ignored == [] and m.warnings == []


def test_seed000_priority_classes_load():
    m = load_text(seed_text("seed000-priority-classes.yaml"), "seed000-priority-classes.yaml")
    pcs = m.config.priority_classes
    assert {n: p.value for n, p in pcs.items()} == {
        "production-retrain": 1000000, "experiment-high": 100000, "experiment-normal": 10000, "development": 1000}
    assert pcs["development"].preemption_policy == "Never"
    assert pcs["experiment-high"].preemption_policy == "PreemptLowerPriority"
    assert m.config.default_priority_class() is None
    assert m.workloads == [] and m.ignored == []


def test_seed001_jobs_without_queue_label_and_quotas_are_ignored():
    m = load_text(seed_text("seed001-jobs-and-quotas.yaml"), "seed001")
    assert m.workloads == []
    assert m.ignored == [
        "batch/v1/Job default/pytorch-training",
        "batch/v1/Job default/distributed-training",
        "v1/ResourceQuota ml-team/gpu-quota",
        "v1/LimitRange ml-team/gpu-limits",
    ]


def with_queue(doc, queue="ml-queue"):
    doc = copy.deepcopy(doc)
    doc["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    return doc


def test_seed001_jobs_with_a_queue_label_become_workloads():
    docs = [with_queue(d) if d["kind"] == "Job" else d for d in seed_docs("seed001-jobs-and-quotas.yaml")]
    m = load_documents(docs, "seed001")
    single, multi = m.workloads
    assert (single.namespace, single.name, single.queue_name) == ("default", "pytorch-training", "ml-queue")
    assert single.pod_sets == [model.PodSet(
        name="main", count=1, requests={"nvidia.com/gpu": 1, "memory": 32 * GI},
        node_selector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"})]
    assert multi.pod_sets[0].count == 4
    assert multi.pod_sets[0].requests == {"nvidia.com/gpu": 2, "memory": 64 * GI}
    assert (single.priority, multi.priority) == (0, 0)
    assert [w.creation_time for w in m.workloads] == [0.0, 1.0]  # FIFO by position in the file
    assert m.ignored == ["v1/ResourceQuota ml-team/gpu-quota", "v1/LimitRange ml-team/gpu-limits"]


def test_seed002_priority_class_loads_and_its_unlabelled_job_is_ignored():
    m = load_text(seed_text("seed002-priority-job.yaml"), "seed002")
    assert m.config.priority_classes["training-high"].value == 1000
    assert m.ignored == ["batch/v1/Job default/gpt-finetune-v3"]


def test_seed002_job_is_rejected_by_kubernetes_once_managed_restart_policy_missing():
    pclass, job_doc = seed_docs("seed002-priority-job.yaml")
    reject([pclass, with_queue(job_doc)], "spec.template.spec.restartPolicy",
           'Unsupported value: "Always" (the default when unset)', index=1)


def test_seed002_job_gets_its_priority_from_the_pod_priority_class():
    pclass, job_doc = seed_docs("seed002-priority-job.yaml")
    job_doc = with_queue(job_doc)
    job_doc["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    # The class may come after the job in the stream.
    [wl] = load_documents([job_doc, pclass], "seed002").workloads
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (1000, "training-high", "PriorityClass")
    assert wl.pod_sets[0].requests == {"nvidia.com/gpu": 4}  # the request defaults to the limit


def test_seed003_kueue_setup_is_rejected_for_borrowing_without_cohort():
    e = reject(seed_text("seed003-kueue-setup.yaml"), "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
               "must be nil when cohort is empty", index=3, source="seed003-kueue-setup.yaml")
    assert (e.kind, e.name) == ("ClusterQueue", "gpu-cluster")


def test_seed003_kueue_setup_corrected_copy_loads():
    m = load_text((DATA / "seed003-kueue-setup.corrected.yaml").read_text(), "seed003-corrected")
    c = m.config
    assert list(c.resource_flavors) == ["nvidia-a100", "nvidia-h100", "nvidia-l4"]
    q = c.cluster_queues["gpu-cluster"]
    assert q.cohort == "gpu-cohort"
    assert q.namespace_selector == model.LabelSelector()  # {}: every namespace
    assert q.namespace_selector.matches({"kubernetes.io/metadata.name": "anything"})
    a100 = {r.name: r for r in q.resource_groups[0].flavors[0].resources}
    assert a100["memory"] == model.ResourceQuota("memory", 2**40, borrowing_limit=512 * GI)
    assert a100["cpu"].borrowing_limit == 128_000
    assert set(c.local_queues) == {"ml-research/ml-research-queue", "ml-production/ml-production-queue"}
    [wl] = m.workloads
    assert wl.pod_sets == [model.PodSet(name="main", count=4,
                                        requests={"nvidia.com/gpu": 8, "cpu": 32_000, "memory": 128 * GI})]
    assert wl.queue_name == "ml-research-queue" and wl.creation_time == 6.0


@pytest.mark.parametrize("seed, entry", [
    ("seed000-volcano-job.yaml", "batch.volcano.sh/v1alpha1/Job ml-training/distributed-training-v5"),
    ("seed003-volcano-job.yaml", "batch.volcano.sh/v1alpha1/Job ml-research/pytorch-distributed"),
])
def test_volcano_seeds_without_queue_label_are_ignored(seed, entry):
    m = load_text(seed_text(seed), seed)
    assert m.ignored == [entry] and m.workloads == []


def test_volcano_seed000_gang_becomes_one_pod_set_per_task():
    [doc] = seed_docs("seed000-volcano-job.yaml")
    [wl] = load_documents([with_queue(doc)], "v").workloads
    assert wl.pod_sets == [model.PodSet(
        name="worker", count=2, requests={"cpu": 32_000, "memory": 256 * GI, "nvidia.com/gpu": 8},
        node_selector={"accelerator": "nvidia-a100-80gb"})]  # minAvailable 2 of 2: all or nothing


def test_volcano_seed003_master_and_workers():
    [doc] = seed_docs("seed003-volcano-job.yaml")
    [wl] = load_documents([with_queue(doc)], "v").workloads
    assert [(p.name, p.count, p.requests, p.min_count) for p in wl.pod_sets] == [
        ("master", 1, {"nvidia.com/gpu": 1}, None), ("worker", 3, {"nvidia.com/gpu": 1}, None)]
    assert wl.total_requests() == {"nvidia.com/gpu": 4}


def test_kubeflow_seed004_is_ignored_without_and_loaded_with_queue_labels():
    m = load_text(seed_text("seed004-kubeflow-jobs.yaml"), "seed004")
    assert m.ignored == ["kubeflow.org/v1/TFJob default/bert-large-train",
                         "kubeflow.org/v1/PyTorchJob default/resnet50-classify"]
    tf, pt = load_documents([with_queue(d) for d in seed_docs("seed004-kubeflow-jobs.yaml")], "seed004").workloads
    assert tf.pod_sets == [model.PodSet(name="worker", count=4, requests={"nvidia.com/gpu": 1})]
    assert pt.pod_sets == [model.PodSet(name="worker", count=8, requests={"nvidia.com/gpu": 1})]


# --- the demo cluster ----------------------------------------------------------------------


def test_demo_cluster_loads():
    m = load_text((DEMO / "cluster.yaml").read_text(), "cluster.yaml")
    c = m.config
    assert m.workloads == [] and m.ignored == [] and m.warnings == []
    assert {n: ns.labels for n, ns in c.namespaces.items()} == {
        "team-a": {"gpuqueue.io/team": "team-a"}, "team-b": {"gpuqueue.io/team": "team-b"}}
    assert list(c.resource_flavors) == ["nvidia-a100", "nvidia-h100", "nvidia-l4", "nvidia-a100-mig"]
    assert c.resource_flavors["nvidia-a100-mig"].node_labels == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig.strategy": "mixed"}
    assert {k: v.cluster_queue for k, v in c.local_queues.items()} == {
        "team-a/team-a-queue": "team-a-cq", "team-b/team-b-queue": "team-b-cq"}
    expected = {
        "team-a-cq": {("nvidia-a100", "nvidia.com/gpu"): 4, ("nvidia-h100", "nvidia.com/gpu"): 0,
                      ("nvidia-l4", "nvidia.com/gpu"): 2, ("nvidia-a100-mig", "nvidia.com/mig-1g.10gb"): 4,
                      ("nvidia-a100-mig", "nvidia.com/mig-2g.20gb"): 1, ("nvidia-a100-mig", "nvidia.com/mig-3g.40gb"): 1},
        "team-b-cq": {("nvidia-a100", "nvidia.com/gpu"): 2, ("nvidia-h100", "nvidia.com/gpu"): 4,
                      ("nvidia-l4", "nvidia.com/gpu"): 2, ("nvidia-a100-mig", "nvidia.com/mig-1g.10gb"): 3,
                      ("nvidia-a100-mig", "nvidia.com/mig-2g.20gb"): 1, ("nvidia-a100-mig", "nvidia.com/mig-3g.40gb"): 0},
    }
    for name, quotas in expected.items():
        q = c.cluster_queues[name]
        assert q.cohort == "research" and q.queueing_strategy == model.BEST_EFFORT_FIFO
        assert q.preemption.reclaim_within_cohort == model.ANY
        assert q.preemption.within_cluster_queue == model.LOWER_PRIORITY
        team = name.removesuffix("-cq")
        assert q.namespace_selector.matches(c.namespace_labels(team))
        other = "team-b" if team == "team-a" else "team-a"
        assert not q.namespace_selector.matches(c.namespace_labels(other))
        assert [rg.covered_resources for rg in q.resource_groups] == [
            ["cpu", "memory", "nvidia.com/gpu"],
            ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]]
        got = {(f.name, r.name): r.nominal_quota for rg in q.resource_groups for f in rg.flavors
               for r in f.resources if r.name != "cpu" and r.name != "memory"}
        assert got == quotas
        assert all(r.borrowing_limit is None and r.lending_limit is None
                   for rg in q.resource_groups for f in rg.flavors for r in f.resources)
    pcs = c.priority_classes
    assert [(p.name, p.value) for p in pcs.values()] == [
        ("production-retrain", 1000000), ("experiment-high", 100000), ("experiment-normal", 10000),
        ("development", 1000)]
    assert c.default_priority_class().name == "experiment-normal"


def test_demo_quotas_match_the_demo_inventory():
    """The cohort's nominal quotas are exactly the devices of inventory.yaml, flavor by flavor."""
    config = load_text((DEMO / "cluster.yaml").read_text(), "cluster.yaml").config
    inventory = yaml.safe_load((DEMO / "inventory.yaml").read_text())
    devices: dict[tuple[str, str], int] = {}
    for node in inventory["nodes"]:
        for gpu in node["gpus"]:
            if gpu.get("mig"):
                for mig in gpu["mig"]:
                    key = ("nvidia-a100-mig", "nvidia.com/mig-" + mig["profile"])
                    devices[key] = devices.get(key, 0) + 1
            else:
                flavor = [f.name for f in config.resource_flavors.values()
                          if f.node_labels == {"nvidia.com/gpu.product": node["labels"]["nvidia.com/gpu.product"]}]
                assert len(flavor) == 1, node["name"]
                devices[(flavor[0], "nvidia.com/gpu")] = devices.get((flavor[0], "nvidia.com/gpu"), 0) + 1
    cohort: dict[tuple[str, str], int] = {}
    for q in config.cluster_queues.values():
        for rg in q.resource_groups:
            for f in rg.flavors:
                for r in f.resources:
                    if model.is_device_resource(r.name):
                        cohort[(f.name, r.name)] = cohort.get((f.name, r.name), 0) + r.nominal_quota
    assert cohort == devices
    uuids = [g["uuid"] for n in inventory["nodes"] for g in n["gpus"]]
    uuids += [m["uuid"] for n in inventory["nodes"] for g in n["gpus"] for m in g.get("mig") or []]
    assert len(set(uuids)) == len(uuids) == 16 + 10
    assert all(re.fullmatch(r"(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in uuids)


# --- ClusterQueue resource groups ----------------------------------------------------------


def test_flavor_resources_must_match_covered_resources_in_count():
    doc = cq(resourceGroups=[group(["cpu", "nvidia.com/gpu"], fq("f", rq("cpu", 1)))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources",
           "must have the same number of resources as the coveredResources")


def test_flavor_resources_must_follow_covered_resources_order():
    doc = cq(resourceGroups=[group(["cpu", "nvidia.com/gpu"], fq("f", rq("nvidia.com/gpu", 1), rq("cpu", 1)))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].name", "must match the name in coveredResources")


def test_flavor_listed_twice_in_a_group():
    doc = cq(resourceGroups=[group(["nvidia.com/gpu"], fq("f", rq("nvidia.com/gpu", 1)), fq("f", rq("nvidia.com/gpu", 1)))])
    reject([doc], "spec.resourceGroups[0].flavors[1]", "Duplicate value")


def test_flavor_in_two_resource_groups():
    doc = cq(resourceGroups=[
        group(["nvidia.com/gpu"], fq("a100", rq("nvidia.com/gpu", 1))),
        group(["nvidia.com/mig-1g.10gb"], fq("a100", rq("nvidia.com/mig-1g.10gb", 7))),
    ])
    reject([doc], "spec.resourceGroups[1].flavors[0].name", "each flavor can only form part of one resource group")


def test_resource_covered_by_two_groups():
    doc = cq(resourceGroups=[
        group(["nvidia.com/gpu"], fq("a", rq("nvidia.com/gpu", 1))),
        group(["nvidia.com/gpu"], fq("b", rq("nvidia.com/gpu", 1))),
    ])
    reject([doc], "spec.resourceGroups[1].coveredResources[0]", 'Duplicate value: "nvidia.com/gpu"')


def test_at_most_16_resource_groups():
    groups = [group([f"example.com/r{i}"], fq(f"f{i}", rq(f"example.com/r{i}", 1))) for i in range(17)]
    reject([cq(resourceGroups=groups)], "spec.resourceGroups", "Too many: 17: must have at most 16 items")
    load_documents([cq(resourceGroups=groups[:16])], "ok")


def test_at_most_64_flavors_and_64_resources():
    flavors = [fq(f"f{i}", rq("nvidia.com/gpu", 1)) for i in range(65)]
    reject([cq(resourceGroups=[group(["nvidia.com/gpu"], *flavors)])], "spec.resourceGroups[0].flavors",
           "must have at most 64 items")
    names = [f"example.com/r{i}" for i in range(65)]
    reject([cq(resourceGroups=[group(names, fq("f", *[rq(n, 1) for n in names]))])],
           "spec.resourceGroups[0].coveredResources", "must have at most 64 items")


def test_empty_covered_resources_and_flavors():
    reject([cq(resourceGroups=[group([], fq("f", rq("cpu", 1)))])], "spec.resourceGroups[0].coveredResources",
           "Required value")
    reject([cq(resourceGroups=[group(["cpu"])])], "spec.resourceGroups[0].flavors", "Required value")


def test_borrowing_limit_needs_a_cohort():
    doc = cq(resourceGroups=[group(["nvidia.com/gpu"], fq("f", rq("nvidia.com/gpu", 4, borrowingLimit=2)))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit", "must be nil when cohort is empty")
    doc["spec"]["cohort"] = "research"
    [q] = load_documents([doc], "ok").config.cluster_queues.values()
    assert q.resource_groups[0].flavors[0].resources[0].borrowing_limit == 2


def test_lending_limit_needs_a_cohort_and_at_most_nominal_quota():
    doc = cq(resourceGroups=[group(["nvidia.com/gpu"], fq("f", rq("nvidia.com/gpu", 4, lendingLimit=2)))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit", "must be nil when cohort is empty")
    doc["spec"]["cohort"] = "research"
    doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = 5
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
           "must be less than or equal to the nominalQuota")
    doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = 4
    [q] = load_documents([doc], "ok").config.cluster_queues.values()
    assert q.resource_groups[0].flavors[0].resources[0].lending_limit == 4


@pytest.mark.parametrize("key", ["nominalQuota", "borrowingLimit", "lendingLimit"])
def test_negative_quotas_are_rejected(key):
    resource = rq("nvidia.com/gpu", 4)
    resource[key] = -1
    doc = cq(cohort="research", resourceGroups=[group(["nvidia.com/gpu"], fq("f", resource))])
    reject([doc], f"spec.resourceGroups[0].flavors[0].resources[0].{key}", "must be greater than or equal to 0")


def test_malformed_quota_quantity():
    doc = cq(resourceGroups=[group(["memory"], fq("f", rq("memory", "16GB")))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "quantities must match")


def test_nominal_quota_is_required():
    doc = cq(resourceGroups=[group(["memory"], fq("f", {"name": "memory"}))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "Required value")


def test_covered_resource_names_are_qualified_names():
    doc = cq(resourceGroups=[group(["nvidia.com/gpu/x"], fq("f", rq("nvidia.com/gpu/x", 1)))])
    reject([doc], "spec.resourceGroups[0].coveredResources[0]", "a qualified name must consist of")


# --- names, enums, required fields ---------------------------------------------------------


@pytest.mark.parametrize("doc, field, reason", [
    (cq(name="GPU_Cluster"), "metadata.name", "a lowercase RFC 1123 subdomain"),
    (cq(name="a" * 254), "metadata.name", "must be no more than 253 characters"),
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team.a"}}, "metadata.name",
     "a lowercase RFC 1123 label"),
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t" * 64}}, "metadata.name",
     "must be no more than 63 characters"),
    (lq(namespace="Team-A"), "metadata.namespace", "a lowercase RFC 1123 label"),
    (cq(cohort="Research"), "spec.cohort", "a lowercase RFC 1123 subdomain"),
    (lq(cluster_queue="CQ"), "spec.clusterQueue", "a lowercase RFC 1123 subdomain"),
    (job(name="Train"), "metadata.name", "a lowercase RFC 1123 subdomain"),
    (job(queue="Bad Queue"), "metadata.labels[kueue.x-k8s.io/queue-name]", "a valid label must be"),
    (job(queue="q_1"), "metadata.labels[kueue.x-k8s.io/queue-name]", "a lowercase RFC 1123 subdomain"),
])
def test_names_must_be_dns_1123(doc, field, reason):
    reject([doc], field, reason)


def test_cluster_scoped_names_may_have_dots_but_namespaces_may_not():
    m = load_documents([cq(name="gpu.cluster"), {"apiVersion": KUEUE, "kind": "ResourceFlavor",
                                                  "metadata": {"name": "nvidia.a100"}}], "ok")
    assert set(m.config.cluster_queues) == {"gpu.cluster"}
    assert set(m.config.resource_flavors) == {"nvidia.a100"}


@pytest.mark.parametrize("spec, field", [
    ({"queueingStrategy": "FIFO"}, "spec.queueingStrategy"),
    ({"preemption": {"reclaimWithinCohort": "Always"}}, "spec.preemption.reclaimWithinCohort"),
    ({"preemption": {"withinClusterQueue": "Any"}}, "spec.preemption.withinClusterQueue"),
    ({"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Any"}}},
     "spec.preemption.borrowWithinCohort.policy"),
    ({"flavorFungibility": {"whenCanBorrow": "Preempt"}}, "spec.flavorFungibility.whenCanBorrow"),
    ({"flavorFungibility": {"whenCanPreempt": "Borrow"}}, "spec.flavorFungibility.whenCanPreempt"),
    ({"stopPolicy": "Stop"}, "spec.stopPolicy"),
])
def test_enum_values_are_checked(spec, field):
    reject([cq(**spec)], field, "Unsupported value")


def test_priority_class_preemption_policy_enum():
    reject([pc("p", 1, preemptionPolicy="Sometimes")], "preemptionPolicy", "Unsupported value")


def test_enum_values_load_into_the_model():
    doc = cq(queueingStrategy="StrictFIFO", stopPolicy="Hold",
             preemption={"reclaimWithinCohort": "LowerPriority", "withinClusterQueue": "LowerOrNewerEqualPriority",
                         "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}},
             flavorFungibility={"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "Preempt"})
    [q] = load_documents([doc], "ok").config.cluster_queues.values()
    assert q.queueing_strategy == model.STRICT_FIFO and q.stop_policy == "Hold"
    assert q.preemption == model.ClusterQueuePreemption(
        within_cluster_queue=model.LOWER_OR_NEWER_EQUAL_PRIORITY, reclaim_within_cohort=model.LOWER_PRIORITY,
        borrow_within_cohort=model.BorrowWithinCohort(model.LOWER_PRIORITY, 100))
    assert q.flavor_fungibility == model.FlavorFungibility(model.TRY_NEXT_FLAVOR, model.PREEMPT)


def test_borrow_within_cohort_needs_reclaim_within_cohort():
    doc = cq(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}})
    reject([doc], "spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")


def test_v1beta2_spellings():
    doc = cq(cohortName="research", flavorFungibility={"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"})
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    [q] = load_documents([doc], "ok").config.cluster_queues.values()
    assert q.cohort == "research"
    assert q.flavor_fungibility == model.FlavorFungibility(model.BORROW, model.PREEMPT)
    doc["spec"]["cohort"] = doc["spec"].pop("cohortName")  # v1beta1's name is unknown in v1beta2
    reject([doc], "spec.cohort", 'unknown field "spec.cohort"')


def test_local_queue_needs_namespace_and_cluster_queue():
    doc = lq()
    del doc["metadata"]["namespace"]
    reject([doc], "metadata.namespace", "Required value")
    doc = lq()
    doc["spec"] = {}
    reject([doc], "spec.clusterQueue", "Required value")


@pytest.mark.parametrize("doc, field, reason", [
    ("just a string", None, "a document must be a Kubernetes object"),
    ({"kind": "ClusterQueue", "metadata": {"name": "x"}}, "apiVersion", "Required value"),
    ({"apiVersion": KUEUE, "metadata": {"name": "x"}}, "kind", "Required value"),
    ({"apiVersion": KUEUE, "kind": "ClusterQueue"}, "metadata", "Required value"),
    ({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {}}, "metadata.name", "Required value"),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "x"}}, "metadata.name", "Required value"),
    ({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": 7}}, "metadata.name", "must be a string"),
    ({"apiVersion": "kueue.x-k8s.io/v1", "kind": "ClusterQueue", "metadata": {"name": "x"}}, "apiVersion",
     'Unsupported value: "kueue.x-k8s.io/v1"'),
])
def test_document_shape(doc, field, reason):
    reject([doc], field, reason, index=0)


def test_duplicate_objects_are_rejected_with_both_positions():
    e = reject([cq(), lq(), cq()], "metadata.name", "ClusterQueue cq is already defined in document 0", index=2)
    assert (e.kind, e.name) == ("ClusterQueue", "cq")
    reject([lq(), lq()], "metadata.name", "LocalQueue team-a/q is already defined in document 0", index=1)
    reject([job(), job()], "metadata.name", "the workload team-a/train is already defined by the Job in document 0")
    # same name, other kind or other namespace: fine
    m = load_documents([cq(name="x"), {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "x"}},
                        lq(namespace="team-a"), lq(namespace="team-b")], "ok")
    assert set(m.config.local_queues) == {"team-a/q", "team-b/q"}


def test_dangling_references_are_kept_as_kueue_does():
    """Kueue marks these inactive instead of rejecting them."""
    m = load_documents([lq(cluster_queue="missing-cq"), cq(cohort="no-such-cohort")], "ok")
    assert m.config.local_queues["team-a/q"].cluster_queue == "missing-cq"
    q = m.config.cluster_queues["cq"]
    assert q.flavor_names() == ["f"] and "f" not in m.config.resource_flavors
    assert q.cohort == "no-such-cohort" and m.config.cohorts == {}


def test_unknown_fields_are_rejected_like_kubectl_strict_validation():
    doc = cq(resourceGroups=[group(["cpu"], fq("f", {"name": "cpu", "nominalQuata": 1}))])
    reject([doc], "spec.resourceGroups[0].flavors[0].resources[0].nominalQuata", 'unknown field')
    bad_job = job()
    bad_job["spec"]["template"]["spec"]["containers"][0]["resources"]["request"] = {"cpu": 1}
    reject([bad_job], "spec.template.spec.containers[0].resources.request", "unknown field")


# --- YAML ----------------------------------------------------------------------------------


def test_yaml_syntax_error_names_the_line_and_document():
    text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: [unclosed\n"
    e = reject(text, None, "invalid YAML", index=1)
    assert "line" in e.reason


def test_repeated_yaml_key_is_rejected():
    text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n"
    reject(text, None, "found duplicate key 'name'", index=0)
    with pytest.raises(ManifestError, match="duplicate key"):
        parse_yaml_documents(text, "<request>")
    merged = "base: &b {x: 1}\nover:\n  <<: *b\n  x: 2\n"  # a merge key may be overridden
    assert parse_yaml_documents(merged) == [{"base": {"x": 1}, "over": {"x": 2}}]


def test_empty_documents_are_skipped_and_not_counted():
    text = "# just a comment\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: 3\n"
    reject(text, "kind", "must be a string", index=1)


def test_list_kind_is_expanded():
    doc = {"apiVersion": "v1", "kind": "List", "items": [cq(), cq(name="BAD")]}
    e = reject([doc], "items[1].metadata.name", "RFC 1123", index=0)
    assert (e.kind, e.name) == ("ClusterQueue", "BAD")
    m = load_documents([{"apiVersion": "v1", "kind": "List", "items": [cq(), lq()]}], "ok")
    assert set(m.config.cluster_queues) == {"cq"} and set(m.config.local_queues) == {"team-a/q"}


# --- resource flavors, cohorts, selectors --------------------------------------------------


def test_resource_flavor_taints_and_tolerations():
    rf = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "spot"},
          "spec": {"nodeLabels": {"cloud.example.com/spot": "true"},
                   "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
                   "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}}
    f = load_documents([rf], "ok").config.resource_flavors["spot"]
    assert f.node_taints == [model.Taint("spot", "true", "NoSchedule")]
    assert f.tolerations == [model.Toleration("spot", "Exists", "", "NoSchedule")]
    bad = copy.deepcopy(rf)
    bad["spec"]["nodeTaints"][0]["effect"] = "Sometimes"
    reject([bad], "spec.nodeTaints[0].effect", "supported taint effect values")
    bad = copy.deepcopy(rf)
    bad["spec"]["tolerations"] = [{"operator": "Equal", "value": "x"}]
    reject([bad], "spec.tolerations[0].operator", "operator must be Exists when `key` is empty")
    bad = copy.deepcopy(rf)
    bad["spec"]["nodeLabels"] = {f"k{i}": "v" for i in range(9)}
    reject([bad], "spec.nodeLabels", "must have at most 8 items")
    bad = copy.deepcopy(rf)
    bad["spec"]["nodeTaints"].append({"key": "spot", "value": "false", "effect": "NoSchedule"})
    reject([bad], "spec.nodeTaints[1]", "taints must be unique by key and effect pair")


def test_namespace_selector_is_validated():
    reject([cq(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In"}]})],
           "spec.namespaceSelector.matchExpressions[0].values", "must be specified when `operator` is 'In'")
    reject([cq(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Is", "values": ["a"]}]})],
           "spec.namespaceSelector.matchExpressions[0].operator", "not a valid selector operator")
    [q] = load_documents([cq(namespaceSelector={"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["a", "b"]}]})], "ok").config.cluster_queues.values()
    assert q.namespace_selector.matches({"team": "b"}) and not q.namespace_selector.matches({"team": "c"})


def test_cohort_kind():
    cohort = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "research"},
              "spec": {"parentName": "org", "fairSharing": {"weight": "0.5"},
                       "resourceGroups": [group(["nvidia.com/gpu"], fq("f", rq("nvidia.com/gpu", 2, lendingLimit=4)))]}}
    c = load_documents([cohort], "ok").config.cohorts["research"]
    assert c.parent == "org" and c.fair_sharing_weight == 0.5  # a cohort may lend more than its own quota
    assert c.resource_groups[0].flavors[0].resources[0].lending_limit == 4
    orphan = copy.deepcopy(cohort)
    del orphan["spec"]["parentName"]
    reject([orphan], "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit", "must be nil when parent is empty")
    old = copy.deepcopy(cohort)
    old["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    old["spec"]["parent"] = old["spec"].pop("parentName")
    assert load_documents([old], "ok").config.cohorts["research"].parent == "org"
    negative = copy.deepcopy(cohort)
    negative["spec"]["fairSharing"]["weight"] = -1
    reject([negative], "spec.fairSharing.weight", "must be greater than or equal to 0")


def test_configuration_fair_sharing():
    conf = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
            "fairSharing": {"enable": True, "preemptionStrategies": ["LessThanInitialShare"]}}
    fs = load_documents([conf], "ok").config.fair_sharing
    assert fs.enable and fs.preemption_strategies == ["LessThanInitialShare"]
    conf["fairSharing"]["preemptionStrategies"] = ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]
    reject([conf], "fairSharing.preemptionStrategies", "Unsupported value")
    assert not load_documents([], "empty").config.fair_sharing.enable


def test_unsupported_kueue_fields_are_accepted_with_a_warning():
    m = load_documents([cq(admissionChecks=["prov"]), dict(lq(), spec={"clusterQueue": "cq", "stopPolicy": "Hold"})],
                       "w.yaml")
    assert len(m.warnings) == 2
    assert m.warnings[0].startswith("w.yaml: document 0: ClusterQueue/cq: spec.admissionChecks: ignored")
    assert "document 1: LocalQueue/q: spec.stopPolicy" in m.warnings[1]


# --- priority classes ----------------------------------------------------------------------


def test_job_priority_resolution_order():
    docs = [
        wpc("urgent", 5000), pc("urgent", 7), pc("normal", 100, globalDefault=True), pc("batch", 10),
        job("by-label", labels={"kueue.x-k8s.io/priority-class": "urgent"}),  # WorkloadPriorityClass first
        job("by-label-pc", labels={"kueue.x-k8s.io/priority-class": "batch"}),  # else a PriorityClass
        job("by-template", pod_spec={"priorityClassName": "batch", "restartPolicy": "Never",
                                     "containers": [container(limits={"nvidia.com/gpu": 1})]}),
        job("by-default"),
        job("system", pod_spec={"priorityClassName": "system-node-critical", "restartPolicy": "Never",
                                "containers": [container(limits={"nvidia.com/gpu": 1})]}),
    ]
    got = {w.name: (w.priority, w.priority_class, w.priority_class_kind) for w in load_documents(docs, "ok").workloads}
    assert got == {
        "by-label": (5000, "urgent", "WorkloadPriorityClass"),
        "by-label-pc": (10, "batch", "PriorityClass"),
        "by-template": (10, "batch", "PriorityClass"),
        "by-default": (100, "normal", "PriorityClass"),
        "system": (2000001000, "system-node-critical", "PriorityClass"),
    }
    [plain] = load_documents([job()], "ok").workloads
    assert (plain.priority, plain.priority_class) == (0, None)


def test_unknown_priority_classes_name_the_field():
    reject([job(labels={"kueue.x-k8s.io/priority-class": "nope"})],
           "metadata.labels[kueue.x-k8s.io/priority-class]", 'Not found: "nope"', index=0)
    bad = job(pod_spec={"priorityClassName": "nope", "restartPolicy": "Never", "containers": [container()]})
    e = reject([cq(), bad], "spec.template.spec.priorityClassName", 'Not found: "nope"', index=1)
    assert (e.kind, e.name) == ("Job", "train")


def test_priority_class_rules():
    reject([pc("a", 1, globalDefault=True), pc("b", 2, globalDefault=True)], "globalDefault",
           "PriorityClass a is already marked as default. Only one default can exist", index=1)
    reject([pc("huge", 1_000_000_001)], "value", "maximum allowed value of a user defined priority is 1000000000")
    reject([pc("system-mine", 5)], "metadata.name", "reserved for system use only")
    reject([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}}],
           "value", "Required value")
    reject([wpc("w", "high")], "value", "must be an integer")


# --- jobs -----------------------------------------------------------------------------------


def test_job_without_queue_label_is_ignored_not_an_error():
    m = load_documents([job(queue=None, namespace=None)], "ok")
    assert m.workloads == [] and m.ignored == ["batch/v1/Job default/train"]


def test_job_queue_name_annotation_and_default_namespace():
    doc = job(queue=None, namespace=None, annotations={QUEUE_LABEL: "legacy"})
    [wl] = load_documents([doc], "ok").workloads
    assert (wl.namespace, wl.queue_name) == ("default", "legacy")


def test_job_pod_count_is_parallelism_capped_by_completions():
    [a, b, c] = load_documents([job("a"), job("b", parallelism=4, completions=2), job("c", parallelism=3)], "ok").workloads
    assert [w.pod_sets[0].count for w in (a, b, c)] == [1, 2, 3]
    reject([job(parallelism=-1)], "spec.parallelism", "must be greater than or equal to 0")
    reject([job(parallelism=2**31)], "spec.parallelism", "must be less than or equal to 2147483647")
    reject([job(parallelism="2")], "spec.parallelism", "must be an integer")


def test_job_labels_max_exec_time_and_min_parallelism():
    doc = job(parallelism=4, labels={"kueue.x-k8s.io/max-exec-time-seconds": "600"},
              annotations={"kueue.x-k8s.io/job-min-parallelism": "2"})
    [wl] = load_documents([doc], "ok").workloads
    assert wl.maximum_execution_time_seconds == 600
    assert wl.pod_sets[0].min_count == 2
    assert wl.labels["kueue.x-k8s.io/max-exec-time-seconds"] == "600"
    reject([job(labels={"kueue.x-k8s.io/max-exec-time-seconds": "0"})],
           "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]", "should be greater than 0")
    reject([job(labels={"kueue.x-k8s.io/max-exec-time-seconds": "ten"})],
           "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]", "invalid syntax")
    reject([job(parallelism=4, annotations={"kueue.x-k8s.io/job-min-parallelism": "4"})],
           "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]", "should be between 0 and 3")


def test_job_creation_timestamp_orders_fifo():
    early = job("early")
    early["metadata"]["creationTimestamp"] = "2024-05-01T09:30:00Z"
    late = job("late")
    [a, b] = load_documents([early, late], "ok").workloads
    assert a.creation_time == 1714555800.0 and b.creation_time == 1.0
    bad = job()
    bad["metadata"]["creationTimestamp"] = "yesterday"
    reject([bad], "metadata.creationTimestamp", "RFC 3339")


def test_pod_requests_follow_kubernetes():
    pod = {
        "restartPolicy": "Never",
        "containers": [container("a", requests={"cpu": "500m", "memory": "1Gi"}),
                       container("b", requests={"cpu": 1}, limits={"cpu": 2, "nvidia.com/gpu": 2})],
        "initContainers": [container("init", requests={"cpu": 4, "memory": "512Mi"})],
        "overhead": {"cpu": "100m"},
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    [wl] = load_documents([job(pod_spec=pod)], "ok").workloads
    ps = wl.pod_sets[0]
    # cpu: max(0.5 + 1, 4) + 0.1 overhead; memory: max(1Gi, 512Mi); gpu: the limit (request defaulted)
    assert ps.requests == {"cpu": 4100, "memory": GI, "nvidia.com/gpu": 2}
    assert ps.node_selector == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert ps.tolerations == [model.Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")]


def test_sidecar_init_containers_add_to_the_pod():
    pod = {"restartPolicy": "Never",
           "containers": [container("main", requests={"cpu": 1})],
           "initContainers": [dict(container("proxy", requests={"cpu": 1}), restartPolicy="Always"),
                              container("setup", requests={"cpu": 3})]}
    [wl] = load_documents([job(pod_spec=pod)], "ok").workloads
    assert wl.pod_sets[0].requests == {"cpu": 4000}  # max(1 + 1 sidecar, 1 sidecar + 3)


@pytest.mark.parametrize("resources, field, reason", [
    ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
     "spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]", "must be equal to nvidia.com/gpu limit of 2"),
    ({"requests": {"nvidia.com/gpu": 1}},
     "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]", "Limit must be set for non overcommitable resources"),
    ({"limits": {"nvidia.com/gpu": "0.5"}},
     "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]", "must be an integer"),
    ({"requests": {"cpu": 4}, "limits": {"cpu": 2}},
     "spec.template.spec.containers[0].resources.requests[cpu]", "must be less than or equal to cpu limit of 2"),
    ({"requests": {"cpu": -1}}, "spec.template.spec.containers[0].resources.requests[cpu]",
     "must be greater than or equal to 0"),
    ({"requests": {"gpu": 1}}, "spec.template.spec.containers[0].resources.requests[gpu]",
     "must be a standard resource for containers"),
    ({"requests": {"memory": "1GB"}}, "spec.template.spec.containers[0].resources.requests[memory]",
     "quantities must match"),
])
def test_container_resource_rules(resources, field, reason):
    pod = {"restartPolicy": "Never", "containers": [dict(container(), resources=resources)]}
    reject([job(pod_spec=pod)], field, reason)


def test_job_needs_containers():
    reject([job(pod_spec={"restartPolicy": "Never", "containers": []})], "spec.template.spec.containers",
           "Required value")


# --- Volcano and Kubeflow ------------------------------------------------------------------


def volcano(tasks, **spec):
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "team-a", "labels": {QUEUE_LABEL: "q"}},
            "spec": {"tasks": tasks, **spec}}


def task(name, replicas):
    return {"name": name, "replicas": replicas,
            "template": {"spec": {"containers": [container(limits={"nvidia.com/gpu": 1})]}}}


def test_volcano_rules():
    [wl] = load_documents([volcano([task("w", 4)], minAvailable=2)], "ok").workloads
    assert wl.pod_sets[0].min_count == 2  # one task: a partial gang is its minCount
    reject([volcano([task("w", 2)], minAvailable=3)], "spec.minAvailable", "should not be greater than total replicas")
    reject([volcano([task("w", 1), task("w", 1)])], "spec.tasks[1].name", "duplicated task name w")
    reject([volcano([])], "spec.tasks", "No task specified in job spec")
    reject([volcano([task(f"t{i}", 1) for i in range(9)])], "spec.tasks", "must have at most 8 items")
    reject([volcano([task("w", -1)])], "spec.tasks[0].replicas", "must be greater than or equal to 0")


def test_kubeflow_rules():
    pt = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
          "metadata": {"name": "pt", "namespace": "team-a", "labels": {QUEUE_LABEL: "q"}},
          "spec": {"pytorchReplicaSpecs": {
              "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                  container("pytorch", limits={"nvidia.com/gpu": 1})]}}},
              "Master": {"replicas": 1, "template": {"spec": {"containers": [
                  container("pytorch", limits={"nvidia.com/gpu": 1})]}}}}}}
    [wl] = load_documents([pt], "ok").workloads
    assert [(p.name, p.count) for p in wl.pod_sets] == [("master", 1), ("worker", 2)]  # Kueue's order
    bad = copy.deepcopy(pt)
    bad["spec"]["pytorchReplicaSpecs"]["Launcher"] = bad["spec"]["pytorchReplicaSpecs"]["Worker"]
    reject([bad], "spec.pytorchReplicaSpecs", 'Unsupported value: "Launcher"')
    bad = copy.deepcopy(pt)
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    reject([bad], "spec.pytorchReplicaSpecs[Worker].template.spec.containers", "there is no container named pytorch")
    bad = copy.deepcopy(pt)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    reject([bad], "spec.pytorchReplicaSpecs[Master].replicas", "there must be only 1 Master replica")


# --- kueue Workload objects ----------------------------------------------------------------


def test_workload_object_with_admission_starts_admitted():
    doc = workload_obj(priority=50, priorityClassName="batch", priorityClassSource="kueue.x-k8s.io/workloadpriorityclass",
                       maximumExecutionTimeSeconds=3600)
    doc["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"nvidia.com/gpu": "nvidia-a100"}, "resourceUsage": {"nvidia.com/gpu": "2"},
         "count": 2}]}}
    [wl] = load_documents([doc], "ok").workloads
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (50, "batch", "WorkloadPriorityClass")
    assert wl.maximum_execution_time_seconds == 3600
    assert wl.admission == model.Admission(cluster_queue="cq", pod_set_assignments=[
        model.PodSetAssignment("main", {"nvidia.com/gpu": "nvidia-a100"}, {"nvidia.com/gpu": 2}, 2)])


def test_workload_admission_rules():
    doc = workload_obj()
    doc["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "other", "resourceUsage": {"nvidia.com/gpu": "2"}}]}}
    reject([doc], "status.admission.podSetAssignments[0].name", 'Not found: "other"')
    doc["status"]["admission"]["podSetAssignments"][0] = {"name": "main", "count": 2,
                                                          "resourceUsage": {"nvidia.com/gpu": "3"}}
    reject([doc], "status.admission.podSetAssignments[0].resourceUsage[nvidia.com/gpu]", "is not a multiple of 2")


@pytest.mark.parametrize("pod_sets, spec, field, reason", [
    ([{"name": "main", "count": -1}], {}, "spec.podSets[0].count", "must be greater than or equal to 0"),
    ([{"name": "main", "count": 2**31}], {}, "spec.podSets[0].count", "must be less than or equal to 2147483647"),
    ([{"name": "main", "count": 2, "minCount": 3}], {}, "spec.podSets[0]", "minCount should be positive and less or equal to count"),
    ([{"name": "main", "count": 2, "minCount": 0}], {}, "spec.podSets[0].minCount", "must be greater than or equal to 1"),
    ([{"name": f"p{i}", "count": 1} for i in range(9)], {}, "spec.podSets", "must have at most 8 items"),
    ([{"name": "a", "count": 2, "minCount": 1}, {"name": "b", "count": 2, "minCount": 1}], {}, "spec.podSets",
     "at most one podSet can use minCount"),
    ([{"name": "a", "count": 1}, {"name": "a", "count": 1}], {}, "spec.podSets[1]", "Duplicate value"),
    ([{"name": "Main", "count": 1}], {}, "spec.podSets[0].name", "a lowercase RFC 1123 label"),
    ([], {}, "spec.podSets", "Required value"),
    ([{"name": "main", "count": 1}], {"priorityClassName": "x"}, "spec", "priority should not be nil when priorityClassName is set"),
    ([{"name": "main", "count": 1}], {"maximumExecutionTimeSeconds": 0}, "spec.maximumExecutionTimeSeconds",
     "must be greater than or equal to 1"),
])
def test_workload_pod_set_rules(pod_sets, spec, field, reason):
    for ps in pod_sets:
        ps.setdefault("template", {"spec": {"containers": [container(limits={"nvidia.com/gpu": 1})]}})
    reject([workload_obj(pod_sets=pod_sets, **spec)], field, reason)


def workload_with(*containers):
    return workload_obj(pod_sets=[{"name": "main", "count": 1, "template": {"spec": {"containers": list(containers)}}}])


def test_workload_pod_templates_are_validated_as_kueue_does_not_as_pods():
    """A Workload's PodSet templates are not Pods: Kueue's webhook (ValidateWorkload) refuses only
    the reserved ``pods`` request, and the CRD schema does not restrict resource names. A resource
    named ``gpu`` (Kueue's own tests use it), container names that are not DNS labels, fractional
    extended resources and requests without limits are accepted."""
    [wl] = load_documents([workload_with(container(requests={"gpu": 1, "cpu": 1}))], "ok").workloads
    assert wl.pod_sets[0].requests == {"gpu": 1, "cpu": 1000}
    [wl] = load_documents([workload_with(container("Main_1", requests={"example.com/gpu": "0.5"}),
                                         container("", requests={"nvidia.com/gpu": 2}))], "ok").workloads
    assert wl.pod_sets[0].requests == {"example.com/gpu": 1, "nvidia.com/gpu": 2}  # rounded up, as ResourceValue
    assert wl.invalid_resources is None
    reject([workload_with(container(requests={"pods": 1}))],
           "spec.podSets[0].template.spec.containers[0].resources.requests[pods]",
           'Invalid value: "pods": the key is reserved for internal kueue use')
    reject([workload_with({"image": "python:3.11"})], "spec.podSets[0].template.spec.containers[0].name",
           "Required value")
    reject([workload_with(container(requests={"gpu": "x"}))],
           "spec.podSets[0].template.spec.containers[0].resources.requests[gpu]", "quantities must match")


def workload_template(**spec):
    spec.setdefault("containers", [container(requests={"nvidia.com/gpu": 1})])
    return workload_obj(pod_sets=[{"name": "main", "count": 1, "template": {"spec": spec}}])


TPL = "spec.podSets[0].template.spec."


# What the Workload CRD schema (kueue.x-k8s.io_workloads.yaml, v0.14.8) and Kueue's webhook accept in a
# PodSet template; each was checked against a real kube-apiserver with Kueue's CRDs installed.
@pytest.mark.parametrize("spec", [
    {"containers": []},  # required, but may be empty
    {"containers": [container("a"), container("b")], "initContainers": [container("a")]},  # unique per list
    {"nodeSelector": {"a/b/c": "not a label!"}},
    {"tolerations": [{"key": "", "operator": "Foo", "effect": "Bar", "value": "x y", "tolerationSeconds": 5}]},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-mem", "operator": "Gt", "values": ["40"]}]}]}}}},
    {"priorityClassName": "Not_A_Name"},  # a Workload's priority is its own spec.priority
])
def test_workload_templates_accept_what_kueue_accepts(spec):
    [wl] = load_documents([workload_template(**spec)], "ok").workloads
    assert wl.invalid_resources is None


@pytest.mark.parametrize("spec, field, reason", [
    ({"containers": [container("a"), container("a")]}, TPL + "containers[1]", 'Duplicate value: {"name": "a"}'),
    ({"initContainers": [container("i"), container("i")]}, TPL + "initContainers[1]", "Duplicate value"),
    ({"containers": None}, TPL + "containers", "Required value"),
    ({"initContainers": [container("i", requests={"pods": 1})]}, TPL + "initContainers[0].resources.requests[pods]",
     "the key is reserved for internal kueue use"),
    ({"nodeSelector": {"gpu": 1}}, TPL + "nodeSelector[gpu]", "must be a string"),
    ({"tolerations": [{"key": 1}]}, TPL + "tolerations[0].key", "must be a string"),
    ({"tolerations": [{"key": "k", "color": "red"}]}, TPL + "tolerations[0].color", "unknown field"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     TPL + "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", "Required value"),
])
def test_workload_templates_refuse_what_kueue_refuses(spec, field, reason):
    if spec.get("containers", []) is None:
        spec = {k: v for k, v in spec.items() if k != "containers"}
        doc = workload_obj(pod_sets=[{"name": "main", "count": 1, "template": {"spec": spec}}])
    else:
        doc = workload_template(**spec)
    reject([doc], field, reason)


def expression(key="gpu", operator="In", values=None):
    e = {"key": key, "operator": operator}
    if values is not None:
        e["values"] = values
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [e]}]}}}}


EXPR = TPL + "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"


@pytest.mark.parametrize("spec, field, reason", [
    (expression(operator="Foo"), EXPR + ".operator", 'Unsupported value: "Foo"'),
    (expression(values=[]), EXPR + ".values", "for 'in', 'notin' operators, values set can't be empty"),
    (expression(operator="Exists", values=["a"]), EXPR + ".values", "values set must be empty for exists"),
    (expression(operator="Gt", values=["1", "2"]), EXPR + ".values", "exactly one value is required"),
    (expression(operator="Lt", values=["x"]), EXPR + ".values[0]", "the value must be an integer"),
    (expression(key="a/b/c", values=["x"]), EXPR + ".key", "a qualified name must consist of"),
    (expression(values=["not a label!"]), EXPR + ".values[0]", "a valid label must be"),
])
def test_workload_node_affinity_kueue_cannot_parse_is_refused(spec, field, reason):
    """The CRD schema accepts these (only key and operator are required); Kueue's flavor assigner
    cannot parse them (nodeaffinity → labels.NewRequirement) and fails the workload's flavor
    assignment; the engine, which has no failed assignment, refuses them with the parser's words."""
    e = reject([workload_template(**spec)], field, reason)
    assert "Kueue accepts it in a Workload, but its flavor assignment cannot parse it" in e.reason
    missing = expression()
    del missing["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["operator"]
    reject([workload_template(**missing)], EXPR + ".operator", "Required value")  # the schema's own


def test_workload_requests_above_limits_are_accepted_and_never_admitted():
    """Kueue creates such a Workload; its scheduler leaves it pending with ValidateResources'
    message (initContainers first, as Kueue lists them), so it is kept, with that message."""
    over = container("main", requests={"cpu": "2", "nvidia.com/gpu": 2}, limits={"cpu": "1", "nvidia.com/gpu": 1})
    [wl] = load_documents([workload_template(containers=[over])], "ok").workloads
    assert wl.invalid_resources == (
        "resources validation failed: spec.podSets[0].template.spec.containers[0]: Invalid value: "
        '[]v1.ResourceName{"cpu", "nvidia.com/gpu"}: requests must not exceed its limits')
    init = container("init", requests={"memory": "2Gi"}, limits={"memory": "1Gi"})
    [wl] = load_documents([workload_template(containers=[over], initContainers=[init])], "ok").workloads
    assert wl.invalid_resources.startswith(
        "resources validation failed: [spec.podSets[0].template.spec.initContainers[0]: Invalid value: "
        '[]v1.ResourceName{"memory"}: requests must not exceed its limits, spec.podSets[0].template.spec.containers[0]')
    # A negative limit below a request is the same case (the request is not negative).
    [wl] = load_documents([workload_template(containers=[container(requests={"cpu": 1}, limits={"cpu": -1})])],
                          "ok").workloads
    assert wl.invalid_resources and '[]v1.ResourceName{"cpu"}' in wl.invalid_resources
    # Requests at their limits, or limits alone (they stand in for the requests), are valid.
    [wl] = load_documents([workload_template(containers=[container(requests={"cpu": 1}, limits={"cpu": 1}),
                                                         container("b", limits={"cpu": 2})])], "ok").workloads
    assert wl.invalid_resources is None and wl.pod_sets[0].requests == {"cpu": 3000}


@pytest.mark.parametrize("spec, field", [
    ({"containers": [container(requests={"nvidia.com/gpu": -1})]}, "containers[0].resources.requests[nvidia.com/gpu]"),
    ({"containers": [container(limits={"cpu": "-500m"})]}, "containers[0].resources.limits[cpu]"),
    ({"initContainers": [container("i", requests={"memory": "-1Gi"}, limits={"memory": "1Gi"})]},
     "initContainers[0].resources.requests[memory]"),
    ({"overhead": {"cpu": "-1"}}, "overhead[cpu]"),
])
def test_workload_negative_quantities_are_refused_with_the_reason(spec, field):
    """Kueue's schema accepts a sign and no webhook looks; charging the negative quantity would
    free quota that is in use, so the engine refuses it and says why."""
    e = reject([workload_template(**spec)], TPL + field, "must be greater than or equal to 0")
    assert "Kueue would charge the negative quantity and free quota that is in use" in e.reason


def test_workload_admission_resource_usage_rules():
    doc = workload_obj(pod_sets=[{"name": "main", "count": 1, "template": {"spec": {"containers": [
        container(requests={"gpu": 1})]}}}])
    doc["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"gpu": "a100"}, "resourceUsage": {"gpu": "1"}, "count": 1}]}}
    [wl] = load_documents([doc], "ok").workloads
    assert wl.admission.pod_set_assignments[0].resource_usage == {"gpu": 1}
    doc["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {"gpu": "-1"}
    reject([doc], "status.admission.podSetAssignments[0].resourceUsage[gpu]", "free quota that is in use")


@pytest.mark.parametrize("resources, field, reason", [
    ({"requests": {"gpu": 1}}, "requests[gpu]", "must be a standard resource for containers"),
    ({"requests": {"pods": 1}}, "requests[pods]", "must be a standard resource for containers"),
    ({"requests": {"example.com/gpu": "0.5"}, "limits": {"example.com/gpu": "0.5"}}, "limits[example.com/gpu]",
     "must be an integer"),
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "requests[cpu]", "must be less than or equal to cpu limit"),
    ({"requests": {"cpu": "-1"}}, "requests[cpu]", "must be greater than or equal to 0"),
])
def test_job_pod_templates_keep_the_pod_rules(resources, field, reason):
    """The same requests in the pod templates of batch/v1 Jobs, Volcano and Kubeflow jobs are
    refused: the API server validates those as Pods."""
    c = dict(container("pytorch"), resources=resources)
    reject([job(pod_spec={"restartPolicy": "Never", "containers": [c]})],
           "spec.template.spec.containers[0].resources." + field, reason)
    reject([volcano([{"name": "w", "replicas": 1, "template": {"spec": {"containers": [c]}}}])],
           "spec.tasks[0].template.spec.containers[0].resources." + field, reason)
    pt = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
          "metadata": {"name": "pt", "namespace": "team-a", "labels": {QUEUE_LABEL: "q"}},
          "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [c]}}}}}}
    reject([pt], "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources." + field, reason)


@pytest.mark.parametrize("pod_spec, field, reason", [
    ({"nodeSelector": {"a/b/c": "x"}}, "nodeSelector", "a qualified name must consist of"),
    ({"tolerations": [{"key": "k", "operator": "Foo"}]}, "tolerations[0].operator", 'Unsupported value: "Foo"'),
    (expression(key="a/b/c", values=["x"]), "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms[0].matchExpressions[0].key", "a qualified name must consist of"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}},
     "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
     "must have at least one node selector term"),
    ({"containers": [container("a")], "initContainers": [container("a")]}, "initContainers[0].name", "Duplicate value"),
])
def test_job_pod_templates_keep_the_api_servers_scheduling_rules(pod_spec, field, reason):
    """What a Workload's template may hold, a Job's may not: the API server validates a Pod's
    nodeSelector (labels), tolerations (ValidateTolerations), node affinity
    (ValidateNodeSelectorRequirement) and container names (unique across both lists)."""
    spec = {"restartPolicy": "Never", "containers": [container(limits={"nvidia.com/gpu": 1})], **pod_spec}
    reject([job(pod_spec=spec)], "spec.template.spec." + field, reason)


# --- parse_workload_document ---------------------------------------------------------------


def demo_config() -> model.ClusterConfig:
    return load_text((DEMO / "cluster.yaml").read_text(), "cluster.yaml").config


def test_parse_workload_document_resolves_against_the_live_config():
    config = demo_config()
    before = copy.deepcopy(config)
    wl = parse_workload_document(job(labels={"kueue.x-k8s.io/priority-class": "experiment-high"}), config, "<request>")
    assert (wl.priority, wl.priority_class) == (100000, "experiment-high")
    default = parse_workload_document(job(), config)
    assert (default.priority, default.priority_class) == (10000, "experiment-normal")  # the globalDefault
    assert config == before  # nothing changed


def test_parse_workload_document_ignored_and_errors():
    config = demo_config()
    assert parse_workload_document(job(queue=None), config) is None
    assert parse_workload_document({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, config) is None
    with pytest.raises(ManifestError) as err:
        parse_workload_document(cq(), config, "<request>", 3)
    assert (err.value.field, err.value.source, err.value.index) == ("kind", "<request>", 3)
    assert "ClusterQueue is not a workload" in err.value.reason
    with pytest.raises(ManifestError) as err:
        parse_workload_document(job(labels={"kueue.x-k8s.io/priority-class": "nope"}), config, "<request>", 0)
    assert str(err.value) == ('<request>: document 0: Job/train: metadata.labels[kueue.x-k8s.io/priority-class]: '
                              'Not found: "nope": no WorkloadPriorityClass or PriorityClass has this name')


def test_load_text_returns_manifests():
    m = load_text("", "empty")
    assert isinstance(m, Manifests) and m.workloads == [] and m.config == model.ClusterConfig()


# --- parse_duration ------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("10m", 600), ("1h30m", 5400), ("2d", 172800), ("1.5h", 5400), (600, 600), ("600", 600),
    ("1d2h3m4s", 93784), (60.0, 60),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text, "maxRuntime") == seconds


@pytest.mark.parametrize("text, reason", [
    ("0", "must be greater than 0"), ("-5m", "not a duration"), (0, "must be greater than 0"),
    ("10 minutes", "not a duration"), ("", "not a duration"), ("1.5s", "whole number of seconds"),
    (True, "a duration such as"), (None, "a duration such as"), ("99999999999s", "must be at most 2147483647"),
    ([10], "must be a string or a number"),
])
def test_parse_duration_rejects(text, reason):
    with pytest.raises(ManifestError) as err:
        parse_duration(text, "maxRuntime")
    assert err.value.field == "maxRuntime" and reason in err.value.reason
