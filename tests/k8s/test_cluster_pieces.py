"""The pieces under the service: manifests (schema-valid), the cluster inventory, the informer's
410 handling, Volcano gangs, transport errors."""

from __future__ import annotations

import glob
import os

import kubernetes_validate
import pytest
import yaml

from jupyter_gpuqueue.backends.base import LaunchSpec
from jupyter_gpuqueue.backends.k8s_client import KubeApiError, KubeClient
from jupyter_gpuqueue.backends.k8s_informer import Informer
from jupyter_gpuqueue.backends.k8s_jobs import JobRequest, build_job, build_podgroup, manifest_spec
from jupyter_gpuqueue.backends.kubernetes import KubernetesBackend
from jupyter_gpuqueue.engine.manifests import parse_workload_document
from jupyter_gpuqueue.engine.model import ClusterConfig, PriorityClass, ResourceFlavor, Taint, Toleration
from jupyter_gpuqueue.inventory.kubernetes import load_cluster_inventory

from .conftest import wait_for

EXAMPLES = "/work/shared/examples"
K8S_VERSION = "1.33"


def _config() -> ClusterConfig:
    c = ClusterConfig()
    c.resource_flavors["h100"] = ResourceFlavor(
        "h100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        node_taints=[Taint("nvidia.com/gpu", "present", "NoSchedule")],
        tolerations=[Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")])
    c.priority_classes["high"] = PriorityClass("high", 1000)
    return c


ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [
    {"name": "main", "flavors": {"nvidia.com/gpu": "h100"}, "resourceUsage": {"nvidia.com/gpu": 2}, "count": 2}]}


def _form_request(**kw) -> JobRequest:
    spec = {"podSets": [{"name": "main", "count": 2, "requests": {"nvidia.com/gpu": 1, "cpu": 500, "memory": 2**33}}],
            "command": ["python", "train.py", "--epochs", "3"], "env": {"SEED": "1"}, "maxRuntimeSeconds": 3600,
            "source": "form", "workingDir": "/tmp"}
    return JobRequest(uid="u-1", namespace="team-a", name="train-x", local_queue="q", spec=spec,
                      priority_class="high", **kw)


def test_generated_jobs_validate_against_the_openapi_schema():
    job = build_job(_form_request(admission=ADMISSION), _config(), image="busybox:1.36")
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": "8Gi", "nvidia.com/gpu": "1"} == c["resources"]["limits"]
    assert job["spec"]["parallelism"] == 2 and job["spec"]["activeDeadlineSeconds"] == 3600
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Volcano variant: schedulerName + group annotation, and the PodGroup.
    vjob = build_job(_form_request(admission=ADMISSION), _config(), image="busybox:1.36", volcano=True)
    kubernetes_validate.validate(vjob, K8S_VERSION, strict=True)
    pg = build_podgroup(_form_request(), vjob, "job-uid")
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["minResources"]["nvidia.com/gpu"] == "2"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == "job-uid"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))))
def test_example_jobs_become_valid_jobs(path):
    """Every batch/v1 Job among the project's real inputs, turned into what the backend creates."""
    from jupyter_gpuqueue.engine.errors import ManifestError

    from jupyter_gpuqueue.engine.manifests import load_text

    text = open(path).read()
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    config = ClusterConfig()
    for d in docs:  # the file's own queueing objects, each one that is valid
        if d.get("kind") != "Job":
            try:
                config.merge(load_text(yaml.safe_dump(d), path).config)
            except ManifestError:
                pass
    n = 0
    for doc in docs:
        if doc.get("kind") != "Job" or doc.get("apiVersion") != "batch/v1":
            continue
        # A submission needs a LocalQueue label; give the examples that lack one.
        doc.setdefault("metadata", {}).setdefault("labels", {}).setdefault("kueue.x-k8s.io/queue-name", "q")
        try:
            wl = parse_workload_document(doc, config, "manifest", 0)
        except ManifestError:
            continue  # rejected at submission already (as Kueue's webhook would)
        if wl is None:
            continue
        req = JobRequest(uid="u", namespace=wl.namespace, name=wl.name, local_queue=wl.queue_name,
                         spec=manifest_spec(doc, wl), priority_class=wl.priority_class)
        job = build_job(req, config)
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)
        assert job["spec"]["suspend"] is True
        n += 1
    if n == 0:
        pytest.skip("no valid batch/v1 Job in this file")


def test_a_manifest_that_is_not_a_job_is_refused_with_the_field():
    from jupyter_gpuqueue.errors import ValidationError

    with pytest.raises(ValidationError) as e:
        manifest_spec({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}, None)
    assert e.value.field == "kind" and "batch/v1 Jobs" in e.value.message


def test_inventory_from_nodes_with_gfd_labels_taints_and_other_pods(cluster, apiserver):
    cluster.add_node("a100-0", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "4",
                                       "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.strategy": "mixed",
                                       "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-3g.40gb.count": "2"},
                     allocatable={"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
                     taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    cluster.add_node("l4-0", labels={"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "8"},
                     allocatable={"nvidia.com/gpu": "8"}, unschedulable=True)
    cluster.add_node("cpu-0", allocatable={})
    cluster.add_node("down-0", allocatable={"nvidia.com/gpu": "1"}, ready=False)
    # Someone else's pods hold 1 whole A100 and one 1g.10gb slice; a finished one holds nothing.
    cluster.add_pod("other", "notebook", node="a100-0", requests={"nvidia.com/gpu": "1"})
    cluster.add_pod("other", "mig-user", node="a100-0", requests={"nvidia.com/mig-1g.10gb": "1"})
    cluster.add_pod("other", "done", node="l4-0", requests={"nvidia.com/gpu": "8"}, phase="Succeeded")
    cluster.add_pod("team-a", "ours", node="l4-0", requests={"nvidia.com/gpu": "2"},
                    labels={"app.kubernetes.io/managed-by": "jupyter-gpuqueue"})
    inv = load_cluster_inventory(KubeClient(apiserver.api_client()))
    assert inv.source == "kubernetes"
    nodes = {n.name: n for n in inv.nodes}
    assert sorted(nodes) == ["a100-0", "down-0", "l4-0"]  # no GPU, no entry
    a = nodes["a100-0"]
    whole = [g for g in a.gpus if g.mig is None]
    migs = [d for g in a.gpus if g.mig for d in g.mig]
    assert len(whole) == 1 and whole[0].product == "NVIDIA-A100-SXM4-80GB" and whole[0].memory_mib == 81920
    assert sorted(d.profile for d in migs) == ["1g.10gb"] * 6 + ["3g.40gb"] * 2
    assert all(sum(d.slices for d in g.mig) <= 7 for g in a.gpus if g.mig)
    assert len([g for g in a.gpus if g.mig]) == 2  # the 2 physical GPUs not offered whole
    assert [(t.key, t.effect) for t in a.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert len(nodes["l4-0"].gpus) == 8  # our own pod is the engine's business; the finished one is gone
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in [(t.key, t.effect) for t in nodes["l4-0"].taints]
    assert ("node.kubernetes.io/not-ready", "NoSchedule") in [(t.key, t.effect) for t in nodes["down-0"].taints]
    assert nodes["l4-0"].labels["nvidia.com/gpu.product"] == "NVIDIA-L4"


def test_informer_relists_after_410_gone(cluster, apiserver):
    client = KubeClient(apiserver.api_client())
    inf = Informer(client, "/apis/batch/v1/jobs", "app=x", watch_timeout=1, name="t").start()
    try:
        assert inf.wait_synced(5)
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {"app": "x"}},
               "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                               "containers": [{"name": "c", "image": "busybox"}]}}}}
        client.create("/apis/batch/v1/namespaces/team-a/jobs", job)
        wait_for(lambda: inf.get("team-a", "j"))  # delivered by the open watch
        cluster.drop_watches(hold=True)  # connection lost; meanwhile j goes, k comes, history is compacted
        cluster.delete(("batch", "jobs"), "team-a", "j", {"propagationPolicy": "Background"})
        client.create("/apis/batch/v1/namespaces/team-a/jobs", {**job, "metadata": {"name": "k", "labels": {"app": "x"}}})
        cluster.compact()
        cluster.release_watches()  # the watch from our last version is answered 410: list again
        wait_for(lambda: inf.relists >= 2 and inf.get("team-a", "k") and not inf.get("team-a", "j"), timeout=6)
        assert inf.last_error is not None and inf.last_error.status == 410
        watches = [q for m, p, q in cluster.requests if q.get("watch") == "true"]
        assert watches[0]["resourceVersion"] and watches[0]["labelSelector"] == "app=x"
    finally:
        inf.stop()


def test_transport_errors_carry_the_status(cluster, apiserver):
    client = KubeClient(apiserver.api_client(), backoff_base=0.001)
    with pytest.raises(KubeApiError) as e:
        client.get("/apis/batch/v1/namespaces/team-a/jobs/nope")
    assert e.value.status == 404 and e.value.reason == "NotFound" and 'jobs.batch "nope" not found' in e.value.message
    cluster.fail_next("GET", "/jobs/nope", 503, times=10)
    with pytest.raises(KubeApiError) as e:
        client.get("/apis/batch/v1/namespaces/team-a/jobs/nope")
    assert e.value.status == 503
    assert len([1 for m, p, _ in cluster.requests if p.endswith("/jobs/nope")]) == 1 + client.attempts
    with pytest.raises(KubeApiError) as e:
        client.create("/apis/batch/v1/namespaces/missing/jobs", {"apiVersion": "batch/v1", "kind": "Job",
                                                                  "metadata": {"name": "x"}, "spec": {}})
    assert e.value.status == 404 and 'namespaces "missing" not found' in e.value.message


def test_volcano_gang_creates_a_podgroup_and_binds_all_or_nothing(cluster, apiserver):
    cluster.add_node("g", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     allocatable={"nvidia.com/gpu": "2"},
                     taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    be = KubernetesBackend(apiserver.api_client(), config=_config(), image="busybox:1.36", volcano=True)
    try:
        req = _form_request(admission=ADMISSION)
        launch = LaunchSpec(uid="u-1", key="team-a/train-x", argv=[], cwd="/", workload={
            "namespace": "team-a", "name": "train-x", "localQueue": "q", "priorityClass": "high",
            "spec": req.spec, "admission": ADMISSION})
        be.start(launch)
        pg = cluster.get(("scheduling.volcano.sh", "podgroups"), "team-a", "train-x-pg")
        job = cluster.get(("batch", "jobs"), "team-a", "train-x")
        assert pg["spec"]["minMember"] == 2 and pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        tmpl = job["spec"]["template"]
        assert tmpl["spec"]["schedulerName"] == "volcano"
        assert tmpl["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "train-x-pg"
        cluster.step(3)
        pods = cluster.list(("", "pods"), "team-a")
        assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
        wait_for(lambda: [s for s in be.poll() if s.state == "Running"])
        # Deleting the Job (cancel) garbage-collects its pods and the PodGroup.
        be.stop("u-1", "cancelled")
        cluster.step(3)
        assert cluster.get(("scheduling.volcano.sh", "podgroups"), "team-a", "train-x-pg") is None
        done = wait_for(lambda: [s for s in be.poll() if s.state == "Failed"])
        assert done[0].message == "cancelled" and not cluster.list(("", "pods"), "team-a")
    finally:
        be.close()


def test_job_deleted_without_propagation_policy_orphans_its_pods(cluster, apiserver):
    """The fake does what the API does (batch/v1 Jobs default to orphaning), which is why the backend
    always sends propagationPolicy: Background."""
    client = KubeClient(apiserver.api_client())
    cluster.add_node("n", allocatable={})
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "o"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
    client.create("/apis/batch/v1/namespaces/team-a/jobs", job)
    cluster.step(2)
    client.request("DELETE", "/apis/batch/v1/namespaces/team-a/jobs/o")
    cluster.step(2)
    pods = cluster.list(("", "pods"), "team-a")
    assert len(pods) == 1 and not pods[0]["metadata"].get("ownerReferences")


def test_gpus_of_our_jobs_and_of_lease_notebooks_are_not_counted_as_used_by_others():
    """After a restart the engine holds the devices of our Jobs and of restored notebook leases
    already; only other Pods' GPUs are taken off the Nodes' allocatable."""
    from jupyter_gpuqueue.inventory.kubernetes import used_by_others

    def pod(name, labels):
        return {"metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
                "status": {"phase": "Running"}}
    pods = [pod("foreign", {}),
            pod("our-job", {"app.kubernetes.io/managed-by": "jupyter-gpuqueue"}),
            pod("jupyter-alice", {"app.kubernetes.io/managed-by": "kubespawner", "gpuqueue.io/workload": "lease-alice"})]
    assert used_by_others(pods) == {"gpu-1": {"nvidia.com/gpu": 2}}
