"""The Kubernetes backend on the real control plane (kube-apiserver, kube-controller-manager and
kube-scheduler v1.28.7, etcd; GPU nodes played by the node stand-in, which runs each Pod's command
as a real process): the queue's service account has exactly the ClusterRole of
docs/kubernetes.md. Each test gets a fresh namespace (team ``team-a`` is mapped to it)."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from jupyter_gpuqueue.backends.k8s_client import KubeApiError, KubeClient
from jupyter_gpuqueue.backends.k8s_jobs import MANAGED_BY_LABEL, QUEUE_LABEL, UID_LABEL
from jupyter_gpuqueue.errors import Forbidden, ValidationError
from jupyter_gpuqueue.service import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED

from .kubetools import A100, H100, KubeQueue, documented_cluster_role, rules_without, wait_for

pytestmark = pytest.mark.kube

PY = sys.executable


@pytest.fixture
def queue(control_plane, node_agent, tmp_path):
    q = KubeQueue(control_plane, tmp_path)
    yield q
    q.close()


def rec(svc, name: str) -> dict:
    return svc.get_workload("team-a", name)


def state_is(svc, name: str, *states: str):
    def check():
        return rec(svc, name)["state"] in states
    check.__name__ = f"{name} in {states}"
    return check


def product_of(queue, pod: dict) -> str:
    return queue.node_of(pod)["metadata"]["labels"]["nvidia.com/gpu.product"]


def test_form_job_runs_on_its_flavors_node_with_labels_priority_and_limits(queue):
    svc = queue.service()
    assert svc.inventory.source == "kubernetes"
    v = svc.submit({"name": "train", "command": [PY, "-c", "print('hello from the pod')"], "gpus": 1,
                    "flavor": "nvidia-h100", "priorityClass": "gq-low", "maxRuntimeSeconds": 600},
                   user="alice")
    assert v["state"] == PENDING
    wait_for(lambda: queue.job("train"), step=svc.tick, what="the Job")
    job = queue.job("train")
    assert job["spec"]["suspend"] is False  # created running with the admission's directives
    assert job["metadata"]["labels"][QUEUE_LABEL] == "q" and job["metadata"]["labels"][UID_LABEL] == v["uid"]
    tmpl = job["spec"]["template"]
    assert tmpl["metadata"]["labels"][MANAGED_BY_LABEL] == "jupyter-gpuqueue"
    assert tmpl["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
    ps = tmpl["spec"]
    assert ps["priorityClassName"] == "gq-low"
    assert ps["nodeSelector"] == {"nvidia.com/gpu.product": H100}
    c = ps["containers"][0]
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert job["spec"]["activeDeadlineSeconds"] == 600 and job["spec"]["backoffLimit"] == 0
    wait_for(state_is(svc, "train", SUCCEEDED), step=svc.tick)
    [pod] = queue.pods("train")
    assert product_of(queue, pod) == H100  # the real scheduler placed it on an H100 node
    assert pod["spec"]["priority"] == 100  # Pod admission resolved the PriorityClass
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    done = rec(svc, "train")
    assert done["exitCode"] == 0 and done["costUsd"] > 0 and done["admission"]["podSetAssignments"][0][
        "flavors"]["nvidia.com/gpu"] == "nvidia-h100"
    log = svc.read_log("team-a", "train", user="alice")  # pods/log through the API server
    assert "hello from the pod" in log["text"] and log["eof"]


def test_manifest_job_failure_reports_the_exit_code(queue):
    svc = queue.service()
    manifest = textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: fails, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: q}}}}
        spec:
          backoffLimit: 0
          template:
            spec:
              restartPolicy: Never
              containers:
              - name: main
                image: busybox:1.36
                command: [{PY}, -c, "import sys; print('exiting'); sys.exit(3)"]
                resources: {{limits: {{nvidia.com/gpu: 1}}}}
        """)
    [v] = svc.submit_manifest(manifest, user="alice")
    wait_for(state_is(svc, "fails", FAILED), step=svc.tick)
    done = rec(svc, "fails")
    assert done["exitCode"] == 3 and "exit code 3" in done["message"] and "BackoffLimitExceeded" in done["message"]
    [pod] = queue.pods("fails")
    assert pod["status"]["phase"] == "Failed"


def test_cancel_deletes_the_job_and_the_garbage_collector_its_pods(queue, node_agent):
    svc = queue.service()
    svc.submit({"name": "long", "command": [PY, "-c", "import time; time.sleep(600)"], "gpus": 1}, user="alice")
    wait_for(state_is(svc, "long", RUNNING), step=svc.tick)
    [pod] = queue.pods("long")
    killed = node_agent.counters()["killed"]
    svc.cancel("team-a", "long", user="alice")
    wait_for(lambda: queue.job("long") is None and not queue.pods("long"), step=svc.tick, what="Job and Pod gone")
    assert node_agent.counters()["killed"] > killed  # the stand-in stopped the process
    assert rec(svc, "long")["state"] == CANCELLED
    # the backend forgets the run at a poll that looks at it (one that sees it changed, or the 1 s sweep)
    wait_for(lambda: not svc.backend.running(), step=svc.tick, what="the cancelled run forgotten")


def test_preempted_job_is_readmitted_on_another_flavor_and_its_pod_moves(queue):
    """Issue 12, item 2: a victim admitted on nvidia-a100, re-admitted on nvidia-h100, must run on
    an H100 node (v1.28 keeps status.startTime on suspend; the queue clears it, as Kueue does)."""
    svc = queue.service()
    svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(600)"], "gpus": 2,
                "flavor": "any", "priorityClass": "gq-low"}, user="alice")
    wait_for(state_is(svc, "low", RUNNING), step=svc.tick)
    [first] = queue.pods("low")
    assert product_of(queue, first) == A100
    svc.submit({"name": "high", "command": [PY, "-c", "import time; time.sleep(2)"], "gpus": 2,
                "flavor": "nvidia-a100", "priorityClass": "gq-high"}, user="alice")
    wait_for(state_is(svc, "high", RUNNING, SUCCEEDED), step=svc.tick)
    wait_for(state_is(svc, "low", RUNNING), step=svc.tick)
    low = rec(svc, "low")
    assert low["evictions"] == 1
    assert low["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "nvidia-h100"
    job = queue.job("low")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": H100}
    pods = [p for p in queue.pods("low") if p["status"].get("phase") == "Running"]
    assert len(pods) == 1 and pods[0]["metadata"]["uid"] != first["metadata"]["uid"]
    assert product_of(queue, pods[0]) == H100  # where the queue charges H100 quota and price


def test_submission_errors_come_from_the_api_server(queue, control_plane):
    svc = queue.service()
    bad = textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: bad, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: q}}}}
        spec:
          template:
            spec:
              restartPolicy: Always
              containers: [{{name: main, image: busybox, command: [{PY}], resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
        """)
    with pytest.raises(ValidationError) as e:  # the server-side dry run's 422
        svc.submit_manifest(bad, user="alice")
    assert e.value.field == "spec.template.spec.restartPolicy" and "Unsupported value" in e.value.message
    # Item 6: a team namespace missing in the cluster is a 400 naming metadata.namespace.
    svc_missing = queue.service(namespaces={"team-a": f"{queue.ns}-absent"})
    with pytest.raises(ValidationError) as e:
        svc_missing.submit({"name": "nowhere", "command": ["true"], "gpus": 1}, user="alice")
    assert e.value.field == "metadata.namespace" and "not found" in e.value.message
    # Item 4: a PriorityClass the queue knows but the cluster lacks is refused at submission.
    with pytest.raises(ValidationError) as e:
        svc.submit({"name": "absent-pc", "command": ["true"], "gpus": 1, "priorityClass": "gq-absent"},
                   user="alice")
    assert e.value.field == "priorityClass" and "gq-absent" in e.value.message
    assert queue.job("absent-pc") is None and queue.job("bad") is None


def test_a_job_that_cannot_create_pods_shows_why_and_gives_its_quota_back(queue, control_plane):
    """Item 4: the PriorityClass is deleted after submission; the Job controller's FailedCreate is
    shown; at pods_ready_timeout the workload is evicted (PodsReadyTimeout), which frees its quota,
    and with requeuingStrategy.backoffLimitCount 0 it fails at once and its Job is deleted."""
    control_plane.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": "gq-doomed"}, "value": 50})
    svc = queue.service(pods_ready_timeout=4, requeue_backoff_limit=0)
    svc.submit({"name": "doomed", "command": ["true"], "gpus": 2, "flavor": "nvidia-a100",
                "priorityClass": "gq-doomed"}, user="alice")
    control_plane.kube.delete("/apis/scheduling.k8s.io/v1/priorityclasses/gq-doomed")
    wait_for(lambda: "FailedCreate" in (rec(svc, "doomed")["message"] or ""), step=svc.tick,
             what="FailedCreate in the workload's message")
    assert rec(svc, "doomed")["state"] == "Admitted"
    assert "no PriorityClass with name gq-doomed was found" in rec(svc, "doomed")["message"]
    svc.submit({"name": "next", "command": ["true"], "gpus": 2, "flavor": "nvidia-a100"}, user="alice")
    svc.tick()
    assert rec(svc, "next")["state"] == PENDING  # the doomed Job still holds the A100 quota
    wait_for(state_is(svc, "doomed", FAILED), step=svc.tick, timeout=30)
    assert "PodsReadyTimeout" in rec(svc, "doomed")["message"] and "FailedCreate" in rec(svc, "doomed")["message"]
    assert rec(svc, "doomed")["reason"] == "RequeuingLimitExceeded"
    wait_for(state_is(svc, "next", SUCCEEDED), step=svc.tick)  # the quota was given back
    wait_for(lambda: queue.job("doomed") is None, what="the doomed Job deleted")


def test_logs_need_pods_log_and_a_missing_grant_is_a_403(control_plane, node_agent, tmp_path):
    role = documented_cluster_role()
    assert any("pods/log" in r["resources"] for r in role["rules"])  # item 3: documented
    q = KubeQueue(control_plane, tmp_path, rules=rules_without(role, "pods/log"))
    try:
        svc = q.service()
        svc.submit({"name": "talks", "command": [PY, "-c", "print('secret output')"], "gpus": 1}, user="alice")
        wait_for(state_is(svc, "talks", SUCCEEDED), step=svc.tick)
        with pytest.raises(Forbidden) as e:
            svc.read_log("team-a", "talks", user="alice")
        assert "pods/log" in e.value.message or "forbidden" in e.value.message
    finally:
        q.close()


def test_inventory_is_read_from_nodes_less_other_pods_gpus(queue, control_plane):
    control_plane.kube.create(f"/api/v1/namespaces/{queue.ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "someone-else"},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
                 "containers": [{"name": "x", "image": "busybox", "command": [PY, "-c", "import time; time.sleep(600)"],
                                 "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}})
    pod = wait_for(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
        control_plane.kube.get(f"/api/v1/namespaces/{queue.ns}/pods/someone-else")), what="the foreign Pod")
    node = pod["spec"]["nodeName"]
    alloc = int(control_plane.kube.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["nvidia.com/gpu"])
    svc = queue.service()
    [inv] = [n for n in svc.inventory.nodes if n.name == node]
    assert len([g for g in inv.gpus if g.mig is None]) == alloc - 3
    assert inv.labels["nvidia.com/gpu.product"] == H100


def test_a_403_right_after_an_outage_is_retried_then_final(control_plane, node_agent):
    """Item 5: the client treats a 403 within ``forbidden_grace`` of a connection error as
    transient (RBAC still loading after a restart), and as final afterwards. The API server's
    outage and its answers are real; the client's clock is the test's, so that the API server's
    restart (over 4 s on a loaded machine) does not use up the grace."""
    now = [1000.0]
    api = control_plane.service_account_client("kube-system", "gq-no-nodes", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    client = KubeClient(api, forbidden_grace=20.0, attempts=1, monotonic=lambda: now[0])
    with pytest.raises(KubeApiError) as e:
        client.get("/api/v1/nodes")
    assert e.value.status == 403 and not e.value.retryable  # no outage: final
    control_plane.stop_component("kube-apiserver")
    try:
        with pytest.raises(KubeApiError) as e:
            client.get("/api/v1/pods")
        assert e.value.status == 0
    finally:
        control_plane.start_component("kube-apiserver")
    wait_for(lambda: _answers(client), timeout=60, what="the API server back")
    now[0] += 19.0
    with pytest.raises(KubeApiError) as e:
        client.get("/api/v1/nodes")
    assert e.value.status == 403 and e.value.retryable  # within the grace: transient
    now[0] += 1.5
    with pytest.raises(KubeApiError) as e:
        client.get("/api/v1/nodes")
    assert e.value.status == 403 and not e.value.retryable  # after it: final


def _answers(client: KubeClient) -> bool:
    try:
        client.get("/api/v1/pods", query=[("limit", "1")])
        return True
    except KubeApiError as err:
        return err.status not in (0, 500, 503)


def test_a_start_during_an_api_server_restart_runs_and_watches_relist_after_410(queue, control_plane):
    """Items 5 and 7, and a ``410 Gone`` relist: the API server goes down while a job is admitted;
    its start is retried (through the 403 window after the restart) and it runs; etcd is compacted
    so the informers' next watch is too old and they list again; the watch backoff is back at its
    base once events flow."""
    svc = queue.service()
    svc.k8s.client.backoff_base = 0.05
    svc.submit({"name": "before", "command": [PY, "-c", "import time; time.sleep(3)"], "gpus": 1}, user="alice")
    wait_for(state_is(svc, "before", RUNNING), step=svc.tick)
    relists = svc.k8s.jobs.relists
    control_plane.stop_component("kube-apiserver")
    try:
        svc.submit({"name": "during", "command": [PY, "-c", "print('made it')"], "gpus": 1}, user="alice")
        for _ in range(20):
            svc.tick()  # the start fails (no API server): deferred, not failed
            time.sleep(0.05)
        assert rec(svc, "during")["state"] in ("Admitted", PENDING)
        control_plane.compact_etcd()
    finally:
        control_plane.start_component("kube-apiserver")
    wait_for(state_is(svc, "during", SUCCEEDED), step=svc.tick, timeout=120)
    try:
        wait_for(state_is(svc, "before", SUCCEEDED), step=svc.tick, timeout=60)
    except AssertionError:
        import json
        print("JOB", json.dumps(queue.job("before").get("status"), indent=1))
        print("PODS", json.dumps([p["status"] for p in queue.pods("before")], indent=1))
        print("REC", rec(svc, "before"))
        print("INFORMER", svc.k8s.jobs.get(queue.ns, "before"))
        raise
    assert "made it" in svc.read_log("team-a", "during", user="alice")["text"]  # found by label if need be
    assert svc.k8s.jobs.relists > relists  # listed again (410 Gone, or the stream failed)
    assert svc.k8s.jobs.backoff == svc.k8s.jobs.BASE_BACKOFF
    assert len([j for j in queue.get(f"/apis/batch/v1/namespaces/{queue.ns}/jobs")["items"]]) == 2


def test_pods_that_cannot_start_are_shown_while_admitted(queue, control_plane):
    """A Pod the scheduler cannot place (another Pod took the H100s after the service read its
    inventory) and one whose image cannot be pulled (the node stand-in keeps its container
    waiting): each reason is shown on the admitted workload, as docs/kubernetes.md says; once the
    GPUs are free the first one runs. (A Job that no node's labels match waits as PlacementFailed
    instead: the engine places Pods on the Nodes it read.)"""
    svc = queue.service()
    control_plane.kube.create(f"/api/v1/namespaces/{queue.ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h100-hog"},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
                 "containers": [{"name": "x", "image": "busybox", "command": [PY, "-c", "import time; time.sleep(600)"],
                                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}})
    wait_for(lambda: control_plane.kube.get(f"/api/v1/namespaces/{queue.ns}/pods/h100-hog")["status"].get("phase")
             == "Running", what="the H100s taken")
    pulling = textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: pulling, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: q}}}}
        spec:
          template:
            metadata: {{annotations: {{devcluster.gpuqueue.io/waiting-reason: ImagePullBackOff}}}}
            spec:
              restartPolicy: Never
              nodeSelector: {{nvidia.com/gpu.product: {A100}}}
              containers: [{{name: main, image: no.such/image, command: [{PY}, -c, "pass"],
                            resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
        """)
    svc.submit({"name": "squeezed", "command": [PY, "-c", "print('ran')"], "gpus": 1, "flavor": "nvidia-h100"},
               user="alice")
    svc.submit_manifest(pulling, user="alice")
    wait_for(lambda: "unschedulable" in (rec(svc, "squeezed")["message"] or ""), step=svc.tick,
             what="Unschedulable in the message")
    assert "Insufficient nvidia.com/gpu" in rec(svc, "squeezed")["message"]
    wait_for(lambda: "ImagePullBackOff" in (rec(svc, "pulling")["message"] or ""), step=svc.tick,
             what="ImagePullBackOff in the message")
    assert rec(svc, "squeezed")["state"] == rec(svc, "pulling")["state"] == "Admitted"
    control_plane.kube.delete(f"/api/v1/namespaces/{queue.ns}/pods/h100-hog")
    wait_for(state_is(svc, "squeezed", SUCCEEDED), step=svc.tick)


def test_maximum_run_time_ends_the_job_and_its_pod(queue):
    """maxRuntimeSeconds: the Job's activeDeadlineSeconds (the Job controller) and the queue's own
    limit both end a job that runs too long; whichever comes first, the Pod is gone and the
    workload failed, saying why."""
    svc = queue.service()
    svc.submit({"name": "overrun", "command": [PY, "-c", "import time; time.sleep(600)"], "gpus": 1,
                "maxRuntimeSeconds": 3}, user="alice")
    wait_for(state_is(svc, "overrun", RUNNING), step=svc.tick)
    wait_for(state_is(svc, "overrun", FAILED), step=svc.tick, timeout=60)
    done = rec(svc, "overrun")
    assert done["reason"] == "MaximumExecutionTimeExceeded" or "DeadlineExceeded" in (done["message"] or "")
    wait_for(lambda: not [p for p in queue.pods("overrun") if p["status"].get("phase") == "Running"],
             what="no Pod of it running")
