"""QueueService with the Kubernetes backend against the fake API server (real HTTP, the official
client): submit → Job created suspended → unsuspended on admission → Running → Succeeded, billed;
preemption by suspension and requeue; restart reconciliation by label; API errors surfaced."""

from __future__ import annotations

import threading

import pytest

from jupyter_gpuqueue.backends.k8s_jobs import QUEUE_LABEL, UID_LABEL
from jupyter_gpuqueue.errors import Conflict, Forbidden, ValidationError
from jupyter_gpuqueue.service import FAILED, PENDING, RUNNING, SUCCEEDED, create_service

from .conftest import wait_for

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
  nodeTaints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: cq}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: wl-normal}
value: 500
"""

TAKEN_MANIFEST = """
apiVersion: batch/v1
kind: Job
metadata: {name: taken-too, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, resources: {limits: {nvidia.com/gpu: 1}}}]
"""

GPU_NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2",
                   "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.strategy": "none"}
TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


@pytest.fixture
def make_service(tmp_path, cluster, apiserver):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    cluster.add_node("gpu-1", labels=GPU_NODE_LABELS, allocatable={"nvidia.com/gpu": "2"}, taints=TAINT)
    cluster.add_node("cpu-1", allocatable={})
    made = []

    def make(backend: str = "kubernetes", **opts):
        svc = create_service(config_paths=[str(tmp_path / "cluster.yaml")], inventory_path=None,
                             db_url=f"sqlite:///{tmp_path / 'ledger.sqlite'}", root_dir=str(tmp_path),
                             data_dir=str(tmp_path / "state"), prices={"a100": 3.6}, stop_grace_seconds=0,
                             default_local_queue="team-a/q", backend=backend,
                             kubernetes={"api_client": apiserver.api_client(), "image": "busybox:1.36",
                                         "visibility_interval": 0.05,
                                         # step by step: Jobs created on the service's thread
                                         # (the default, 8 workers, in the tests below and in tests/k8s/real)
                                         "start_concurrency": 0, **opts})
        svc.clock = lambda: cluster.now
        svc.k8s = getattr(svc.backend, "inner", svc.backend)  # LeaseBackend wraps it
        svc.k8s.clock = lambda: cluster.now
        svc.restore()
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.backend.close()
        svc.ledger.close()


def rec_of(svc, name):
    return svc.get_workload("team-a", name)


def drive(svc, cluster):
    def step():
        cluster.step()
        svc.tick()
    return step


def test_form_job_runs_end_to_end_and_is_billed(make_service, cluster):
    svc = make_service()
    assert svc.inventory.source == "kubernetes" and [n.name for n in svc.inventory.nodes] == ["gpu-1"]
    v = svc.submit({"name": "train", "command": ["python", "-c", "print(42)"], "gpus": 1,
                    "priorityClass": "low", "maxRuntimeSeconds": 7200}, user="alice")
    assert v["state"] == PENDING
    svc.tick()  # admits and starts
    job = cluster.get(("batch", "jobs"), "team-a", "train")
    assert job is not None
    posts = [b for b in cluster.received if b["kind"] == "Job"]
    assert len(posts) == 2  # the dry run at submission, then the Job itself on admission ...
    assert posts[1]["spec"]["suspend"] is False  # ... created running, with the flavor's directives
    assert job["spec"]["suspend"] is False
    labels = job["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "q" and labels[UID_LABEL] == v["uid"]
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "low"
    assert pod_spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec["tolerations"]
    c = pod_spec["containers"][0]
    assert c["command"] == ["python", "-c", "print(42)"] and c["image"] == "busybox:1.36"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"} == c["resources"]["requests"]
    assert rec_of(svc, "train")["state"] == "Admitted"  # until a pod runs
    admitted_at = cluster.now
    cluster.advance(5)
    wait_for(lambda: rec_of(svc, "train")["state"] == RUNNING, step=drive(svc, cluster))
    pods = cluster.list(("", "pods"), "team-a")
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == "gpu-1"
    cluster.advance(1800)
    assert cluster.finish_pods("team-a", "train", 0) == 1
    wait_for(lambda: rec_of(svc, "train")["state"] == SUCCEEDED, step=drive(svc, cluster))
    done = rec_of(svc, "train")
    assert done["exitCode"] == 0
    assert done["admittedAt"] == admitted_at
    # 1 GPU at 3.6 USD/h from admission to completion (1805 s).
    assert done["costUsd"] == pytest.approx(3.6 * 1805 / 3600, rel=1e-6)
    assert cluster.schema_errors == []


def test_workload_priority_class_becomes_kueue_label(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "wpc", "command": ["true"], "gpus": 1, "priorityClass": "wl-normal"}, user="alice")
    svc.tick()
    job = cluster.get(("batch", "jobs"), "team-a", "wpc")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "wl-normal"
    assert "priorityClassName" not in job["spec"]["template"]["spec"]


def test_preemption_suspends_the_job_and_requeues(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "low-job", "command": ["sleep", "1000"], "gpus": 2, "priorityClass": "low"}, user="alice")
    wait_for(lambda: rec_of(svc, "low-job")["state"] == RUNNING, step=drive(svc, cluster))
    cluster.advance(60)
    svc.submit({"name": "high-job", "command": ["sleep", "1"], "gpus": 1, "priorityClass": "high"}, user="alice")
    svc.tick()  # preempts low-job: suspension, not deletion
    low_job = cluster.get(("batch", "jobs"), "team-a", "low-job")
    assert low_job["spec"]["suspend"] is True
    assert rec_of(svc, "high-job")["state"] == PENDING  # quota is not released before the pods are gone
    wait_for(lambda: rec_of(svc, "high-job")["state"] in ("Admitted", RUNNING), step=drive(svc, cluster))
    low = rec_of(svc, "low-job")
    assert low["state"] == PENDING and low["evictions"] == 1  # requeued (reason: why it waits now)
    assert low["costUsd"] == pytest.approx(2 * 3.6 * 60 / 3600, rel=0.05)
    low_job = cluster.get(("batch", "jobs"), "team-a", "low-job")
    assert low_job is not None and "startTime" not in low_job["status"]  # cleared by us, as Kueue does
    # its pods are gone (the real Job controller labels them job-name and batch.kubernetes.io/job-name,
    # tests/k8s/real/test_controlplane.py; the fake does the same)
    assert not [p for p in cluster.list(("", "pods"), "team-a")
                if "low-job" in (p["metadata"]["labels"].get("job-name"),
                                 p["metadata"]["labels"].get("batch.kubernetes.io/job-name"))]
    # high-job finishes; low-job is admitted again: the same Job is unsuspended.
    wait_for(lambda: rec_of(svc, "high-job")["state"] == RUNNING, step=drive(svc, cluster))
    cluster.finish_pods("team-a", "high-job", 0)
    wait_for(lambda: rec_of(svc, "low-job")["state"] == RUNNING, step=drive(svc, cluster))
    assert cluster.get(("batch", "jobs"), "team-a", "low-job")["spec"]["suspend"] is False
    cluster.finish_pods("team-a", "low-job", 3)
    wait_for(lambda: rec_of(svc, "low-job")["state"] == FAILED, step=drive(svc, cluster))
    assert rec_of(svc, "low-job")["exitCode"] == 3


def test_cancel_deletes_with_background_propagation(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "c1", "command": ["sleep", "1000"], "gpus": 1}, user="alice")
    wait_for(lambda: rec_of(svc, "c1")["state"] == RUNNING, step=drive(svc, cluster))
    svc.cancel("team-a", "c1", user="alice")
    deletes = [q for m, path, q in cluster.requests if m == "DELETE" and "/jobs/c1" in path]
    assert deletes
    wait_for(lambda: not cluster.list(("", "pods"), "team-a") and "c1" not in [
        r["name"] for r in svc.records.values()], step=drive(svc, cluster))
    assert cluster.get(("batch", "jobs"), "team-a", "c1") is None
    assert rec_of(svc, "c1")["state"] == "Cancelled"


def test_restart_reconciles_by_label(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "r1", "command": ["sleep", "1000"], "gpus": 1}, user="alice")
    svc.submit({"name": "r2", "command": ["sleep", "1000"], "gpus": 1}, user="alice")
    wait_for(lambda: rec_of(svc, "r1")["state"] == RUNNING and rec_of(svc, "r2")["state"] == RUNNING,
             step=drive(svc, cluster))
    svc.backend.close()
    svc.ledger.close()
    # While the service is down: r1 finishes, r2's Job is deleted by someone.
    cluster.finish_pods("team-a", "r1", 0)
    cluster.step(2)
    cluster.delete(("batch", "jobs"), "team-a", "r2", {"propagationPolicy": "Background"})
    cluster.step(2)
    svc2 = make_service()
    assert sorted(svc2.backend.running()) == [rec_of(svc2, "r1")["uid"]]
    wait_for(lambda: rec_of(svc2, "r1")["state"] == SUCCEEDED, step=drive(svc2, cluster))
    r2 = rec_of(svc2, "r2")
    assert r2["state"] == FAILED and "no longer exists" in r2["message"]
    # Quota was never over-committed: both GPUs are free again, a new job runs.
    svc2.submit({"name": "r3", "command": ["true"], "gpus": 2}, user="alice")
    wait_for(lambda: rec_of(svc2, "r3")["state"] == RUNNING, step=drive(svc2, cluster))


def test_manifest_job_runs_as_is(make_service, cluster):
    svc = make_service()
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: from-yaml
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:24.05-py3
        command: [torchrun, train.py]
        resources:
          limits: {nvidia.com/gpu: 1}
"""
    [v] = svc.submit_manifest(manifest, user="alice")
    assert v["command"] == ["torchrun", "train.py"]
    wait_for(lambda: rec_of(svc, "from-yaml")["state"] == RUNNING, step=drive(svc, cluster))
    job = cluster.get(("batch", "jobs"), "team-a", "from-yaml")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "nvcr.io/nvidia/pytorch:24.05-py3" and c["name"] == "trainer"
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert len([p for p in cluster.list(("", "pods"), "team-a") if p["spec"].get("nodeName")]) == 2
    cluster.finish_pods("team-a", "from-yaml", 0)
    wait_for(lambda: rec_of(svc, "from-yaml")["state"] == SUCCEEDED, step=drive(svc, cluster))


def test_422_is_shown_with_the_api_servers_message(make_service, cluster):
    """At submission (server-side dry run) the user gets a 400 naming the field; at admission a
    422 fails the workload with the API server's message."""
    svc = make_service()
    manifest = """
apiVersion: batch/v1
kind: Job
metadata: {name: no-image, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, command: ["true"], resources: {limits: {nvidia.com/gpu: 1}}}]
"""
    with pytest.raises(ValidationError) as e:
        svc.submit_manifest(manifest, user="alice")
    assert e.value.field == "spec.template.spec.containers[0].image"
    assert 'Job.batch "no-image" is invalid: spec.template.spec.containers[0].image: Required value' in e.value.message
    assert svc.list_workloads() == []  # nothing acknowledged
    assert [q for m, p, q in cluster.requests if m == "POST" and q.get("dryRun") == "All"]
    assert cluster.get(("batch", "jobs"), "team-a", "no-image") is None
    svc.submit({"name": "later", "command": ["true"], "gpus": 1}, user="alice")
    cluster.fail_next("POST", "/namespaces/team-a/jobs", 422, reason="Invalid",
                      message='Job.batch "later" is invalid: spec.template.spec.containers[0].resources: quota')
    svc.tick()
    v = rec_of(svc, "later")
    assert v["state"] == FAILED and 'Job.batch "later" is invalid' in v["message"]


def test_403_fails_the_workload_with_the_reason(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "denied", "command": ["true"], "gpus": 1}, user="alice")
    cluster.deny("create", "jobs", "team-a")
    svc.tick()
    v = rec_of(svc, "denied")
    assert v["state"] == FAILED and 'cannot create resource "jobs" in API group "batch"' in v["message"]
    with pytest.raises(Forbidden):  # the dry run is denied too: refused at submission
        svc.submit({"name": "after", "command": ["true"], "gpus": 2}, user="alice")
    assert not any(svc.scheduler.usage("cq").values())  # the failed one released its quota


def test_5xx_is_retried_with_backoff_and_the_job_still_starts(make_service, cluster):
    svc = make_service()
    svc.k8s.client.backoff_base = 0.001
    cluster.fail_next("POST", "/jobs", 503, times=2)  # absorbed by the in-call retries
    svc.submit({"name": "flaky", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    assert cluster.get(("batch", "jobs"), "team-a", "flaky") is not None
    cluster.fail_next("POST", "/jobs", 500, times=6)  # outlasts them: retried from poll, later
    svc.submit({"name": "flakier", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    assert cluster.get(("batch", "jobs"), "team-a", "flakier") is None
    assert rec_of(svc, "flakier")["state"] == "Admitted"  # not failed: quota held, start pending
    cluster.advance(2)  # past the backoff delay
    wait_for(lambda: rec_of(svc, "flakier")["state"] == RUNNING, step=drive(svc, cluster))


def test_409_conflict_on_update_rereads_and_retries(make_service, cluster):
    svc = make_service(volcano=True)  # created suspended (its PodGroup first), then resumed
    cluster.fail_next("PUT", "/jobs/conflicted", 409, times=2, message="the object has been modified")
    svc.submit({"name": "conflicted", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    assert cluster.get(("batch", "jobs"), "team-a", "conflicted")["spec"]["suspend"] is False
    gets = [p for m, p, _ in cluster.requests if m == "GET" and p.endswith("/jobs/conflicted")]
    assert len(gets) == 2  # the first try resumes the Job as created; each retry reads it again


def test_a_foreign_job_of_the_same_name_is_not_adopted(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "taken", "command": ["true"], "gpus": 1}, user="alice")
    cluster.create(("batch", "jobs"), "team-a", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "taken"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "x", "image": "busybox"}]}}}})
    svc.tick()
    v = rec_of(svc, "taken")
    assert v["state"] == FAILED and "already exists" in v["message"] and "not this workload's" in v["message"]
    assert cluster.get(("batch", "jobs"), "team-a", "taken")["spec"]["suspend"] is True  # left alone
    cluster.create(("batch", "jobs"), "team-a", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "taken-too"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "x", "image": "busybox"}]}}}})
    with pytest.raises(Conflict):  # a new submission of a taken name is refused at once (dry run)
        svc.submit_manifest(TAKEN_MANIFEST, user="alice")


def test_pod_problems_are_shown_while_admitted(make_service, cluster):
    svc = make_service()
    svc.submit({"name": "badimage", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    cluster.step()  # pod created, bound
    cluster.set_waiting("team-a", "badimage", "ImagePullBackOff", 'Back-off pulling image "busybox:1.36"')
    wait_for(lambda: "ImagePullBackOff" in (rec_of(svc, "badimage")["message"] or ""), step=svc.tick)


def test_restart_between_create_and_resume_resumes_the_job(make_service, cluster):
    """The service stopped after creating the Job (suspended) but before resuming it: the ledger
    says admitted, so the adopted Job is resumed (its quota is held by the restored engine)."""
    svc = make_service(volcano=True)  # created suspended (its PodGroup first), then resumed
    svc.k8s.client.backoff_base = 0.001
    cluster.fail_next("PUT", "/jobs/half", 503, times=100)  # the resume never gets through ...
    svc.submit({"name": "half", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    assert cluster.get(("batch", "jobs"), "team-a", "half")["spec"]["suspend"] is True
    assert rec_of(svc, "half")["state"] == "Admitted"
    svc.backend.close()  # ... and the service goes down
    svc.ledger.close()
    cluster.faults.clear()
    svc2 = make_service()
    assert cluster.get(("batch", "jobs"), "team-a", "half")["spec"]["suspend"] is False
    wait_for(lambda: rec_of(svc2, "half")["state"] == RUNNING, step=drive(svc2, cluster))


def test_a_team_namespace_missing_in_the_cluster_is_refused_at_submission(make_service, cluster, tmp_path):
    svc = make_service(namespaces={"team-a": "ml-team-a"})  # mapped to a namespace that does not exist
    with pytest.raises(ValidationError) as e:
        svc.submit({"name": "nowhere", "command": ["true"], "gpus": 1}, user="alice")
    assert e.value.field == "metadata.namespace" and 'namespaces "ml-team-a" not found' in e.value.message
    cluster.add_namespace("ml-team-a")
    svc.submit({"name": "mapped", "command": ["true"], "gpus": 1}, user="alice")
    svc.tick()
    assert cluster.get(("batch", "jobs"), "ml-team-a", "mapped") is not None
    assert rec_of(svc, "mapped")["namespace"] == "team-a"  # the team's view is unchanged


def test_a_gpujob_cell_runs_in_the_mounted_home(make_service, cluster, tmp_path):
    """%%gpujob submits [python, <cell file>] in the kernel's folder; with the operator's pod
    template mounting the user's home, the Job runs that very file there."""
    template = {"volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{owner_safe}"}}],
                "containers": [{"volumeMounts": [{"name": "home", "mountPath": str(tmp_path)}]}],
                "securityContext": {"runAsUser": 1000}}
    svc = make_service(pod_template=template)
    cell = tmp_path / ".gpujob" / "cell-1.py"
    cell.parent.mkdir()
    cell.write_text("print('hello from the cell')\n")
    import sys

    svc.submit({"name": "cell", "command": [sys.executable, str(cell)], "workingDir": str(tmp_path), "gpus": 1},
               user="Alice.Smith")
    wait_for(lambda: rec_of(svc, "cell")["state"] == RUNNING, step=drive(svc, cluster))
    pod_spec = cluster.get(("batch", "jobs"), "team-a", "cell")["spec"]["template"]["spec"]
    assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "claim-alice-smith"
    c = pod_spec["containers"][0]
    assert c["command"] == [sys.executable, str(cell)] and c["workingDir"] == str(tmp_path)
    assert c["volumeMounts"] == [{"name": "home", "mountPath": str(tmp_path)}]
    assert pod_spec["securityContext"] == {"runAsUser": 1000}


def test_restart_while_the_api_server_is_unreachable_keeps_the_run(make_service, cluster, apiserver, tmp_path):
    svc = make_service()
    svc.submit({"name": "steady", "command": ["sleep", "1000"], "gpus": 1}, user="alice")
    wait_for(lambda: rec_of(svc, "steady")["state"] == RUNNING, step=drive(svc, cluster))
    svc.backend.close()
    svc.ledger.close()
    from jupyter_gpuqueue.backends.k8s_client import KubeClient
    from jupyter_gpuqueue.backends.kubernetes import KubernetesBackend

    be = KubernetesBackend(KubeClient(apiserver.api_client(), attempts=1), start_informers=False, sync_timeout=0.01)
    cluster.fail_next("GET", "/apis/batch/v1/jobs", 503, times=1)
    from jupyter_gpuqueue.backends.base import RunInfo

    info = RunInfo.from_json(svc.ledger.find_workload("team-a", "steady")["run"])
    assert be.adopt(rec_of(svc, "steady")["uid"], info) is True  # not given up on
    assert be._runs[rec_of(svc, "steady")["uid"]].name == "steady"


def test_an_unreachable_cluster_is_a_clear_startup_error(tmp_path):
    from jupyter_gpuqueue.errors import ValidationError as VE
    from kubernetes import client

    with pytest.raises(VE) as e:
        create_service(config_paths=None, inventory_path=None, db_url=f"sqlite:///{tmp_path / 'l.sqlite'}",
                       root_dir=str(tmp_path), data_dir=str(tmp_path), backend="kubernetes",
                       kubernetes={"api_client": client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))})
    assert e.value.field == "backend" and "cannot read the cluster's Nodes" in e.value.message


def test_async_start_records_the_run_only_once_the_job_exists(make_service, cluster):
    """start_concurrency > 0: the Job is created by a worker; a restart before that happened finds
    no run on record and starts the workload again (a Job is created, once), rather than looking
    for a Job that was never created and failing the workload."""
    svc = make_service(start_concurrency=4)
    svc.k8s.client.backoff_base = 0.001
    cluster.fail_next("POST", "/namespaces/team-a/jobs", 503, times=1000)  # no create gets through ...
    svc.submit({"name": "early", "command": ["true"], "gpus": 1}, user="alice")
    wait_for(lambda: svc.k8s._runs and not next(iter(svc.k8s._runs.values())).inflight, step=svc.tick)
    assert rec_of(svc, "early")["state"] == "Admitted"
    assert svc.ledger.find_workload("team-a", "early")["run"] is None  # not on record yet
    svc.backend.close()  # ... and the service goes down
    svc.ledger.close()
    cluster.faults.clear()
    svc2 = make_service(start_concurrency=4)
    wait_for(lambda: rec_of(svc2, "early")["state"] == RUNNING, step=drive(svc2, cluster))
    assert svc2.ledger.find_workload("team-a", "early")["run"]["exitPath"] == "kubernetes:jobs/team-a/early"
    assert len([j for j in cluster.list(("batch", "jobs"), "team-a") if j["metadata"]["name"] == "early"]) == 1


def test_async_start_cancelled_in_flight_deletes_the_job_it_created(make_service, cluster):
    svc = make_service(start_concurrency=4)
    gate = threading.Event()
    original = svc.k8s._create_and_resume

    def slow(run, job):
        gate.wait(10)  # the create is in flight while the user cancels
        return original(run, job)
    svc.k8s._create_and_resume = slow
    svc.submit({"name": "quick-cancel", "command": ["sleep", "100"], "gpus": 1}, user="alice")
    svc.tick()
    assert next(iter(svc.k8s._runs.values())).inflight
    svc.cancel("team-a", "quick-cancel", user="alice")
    gate.set()
    wait_for(lambda: not svc.backend.running(), step=drive(svc, cluster))
    assert cluster.get(("batch", "jobs"), "team-a", "quick-cancel") is None  # created, then deleted
    assert rec_of(svc, "quick-cancel")["state"] == "Cancelled"
    assert not any(svc.scheduler.usage("cq").values())
