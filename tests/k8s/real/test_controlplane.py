"""The harness is real: the real kube-scheduler places Jobs' Pods on the stand-in's GPU nodes, the
real Job controller and garbage collector act on them, the stand-in runs their commands as real
processes, pods/log goes through the API server to the stand-in's kubelet endpoint, and the API
server restarts and forgets old resourceVersions like a real one."""

from __future__ import annotations

import sys
import time

import pytest

from jupyter_gpuqueue.backends.k8s_client import KubeApiError

from .conftest import H100_PRODUCT, wait_for

pytestmark = pytest.mark.kube


def job(name: str, code: str, *, gpus: int = 0, node_selector: dict | None = None,
        suspend: bool = False, annotations: dict | None = None) -> dict:
    res = {"cpu": "100m", "memory": "64Mi"}
    if gpus:
        res["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0, "suspend": suspend,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": node_selector or {},
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "main", "image": "python:3.11",
                                    "command": [sys.executable, "-c", code],
                                    "resources": {"requests": res, "limits": res}}],
                },
            },
        },
    }


def job_condition(kube, ns, name, cond):
    j = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
    return any(c["type"] == cond and c["status"] == "True"
               for c in (j.get("status") or {}).get("conditions") or [])


def job_pods(kube, ns, name):
    return kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"job-name={name}")[0]


def test_gpu_job_scheduled_on_h100_node_runs_and_completes(kube, node_agent, namespace):
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                job("hi", "print('hi'); import sys; sys.exit(0)", gpus=1,
                    node_selector={"nvidia.com/gpu.product": H100_PRODUCT}))
    wait_for(lambda: job_condition(kube, namespace, "hi", "Complete"), 30, 0.1, "Job Complete")
    (pod,) = job_pods(kube, namespace, "hi")
    assert pod["spec"]["nodeName"] == "node-b"
    assert pod["status"]["phase"] == "Succeeded"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    # pods/log: API server -> the stand-in's kubelet endpoint (client cert, CA-verified)
    name = pod["metadata"]["name"]
    log = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", raw=True)
    assert log == b"hi\n"


def test_failing_job_records_exit_code(kube, node_agent, namespace):
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                job("boom", "import sys; print('bye'); sys.exit(3)"))
    wait_for(lambda: job_condition(kube, namespace, "boom", "Failed"), 30, 0.1, "Job Failed")
    (pod,) = job_pods(kube, namespace, "boom")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")


def test_job_deleted_in_background_kills_its_process(kube, node_agent, namespace):
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                job("sleeper", "import time; print('up', flush=True); time.sleep(300)"))

    def running():
        pods = job_pods(kube, namespace, "sleeper")
        return pods if pods and pods[0]["status"].get("phase") == "Running" else None

    (pod,) = wait_for(running, 30, 0.1, "Running pod")
    uid = pod["metadata"]["uid"]
    (worker,) = [w for w in node_agent.workers() if w.uid == uid]
    assert worker.proc is not None and worker.proc.poll() is None
    killed = node_agent.counters()["killed"]
    kube.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/sleeper",
                propagation_policy="Background")
    wait_for(lambda: not job_pods(kube, namespace, "sleeper"), 30, 0.1, "garbage collection")
    assert worker.proc.poll() is not None  # SIGTERMed by the stand-in
    assert worker.proc.returncode == -15
    assert node_agent.counters()["killed"] > killed


def test_pod_log_options_and_waiting_container(kube, node_agent, namespace):
    code = "for i in range(5): print('line', i)"
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job("logs", code))
    wait_for(lambda: job_condition(kube, namespace, "logs", "Complete"), 30, 0.1, "Complete")
    name = job_pods(kube, namespace, "logs")[0]["metadata"]["name"]
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    assert kube.request("GET", path, raw=True).count(b"\n") == 5
    assert kube.request("GET", path, query=[("tailLines", "2")], raw=True) == b"line 3\nline 4\n"
    assert kube.request("GET", path, query=[("limitBytes", "8")], raw=True) == b"line 0\nl"

    # a container that never starts (image pull "fails"): kubelet's 400, relayed by the API server
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                job("stuck", "print(1)",
                    annotations={"devcluster.gpuqueue.io/waiting-reason": "ImagePullBackOff"}))

    def waiting():
        pods = job_pods(kube, namespace, "stuck")
        cs = pods and (pods[0]["status"].get("containerStatuses") or [None])[0]
        return pods[0] if cs and "waiting" in cs["state"] else None

    stuck = wait_for(waiting, 30, 0.1, "waiting container")
    assert stuck["status"]["phase"] == "Pending"
    before = node_agent.server.requests
    with pytest.raises(KubeApiError) as err:
        kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{stuck['metadata']['name']}/log",
                     attempts=1)
    assert err.value.status == 400
    assert "is waiting to start: ImagePullBackOff" in err.value.message
    assert node_agent.server.requests > before  # the kubelet (stand-in) said it, not the API server


def test_suspended_job_gets_controller_labels(kube, namespace):
    created = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                          job("held", "print(1)", suspend=True))
    labels = created["spec"]["template"]["metadata"]["labels"]
    uid = created["metadata"]["uid"]
    assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == "held"
    assert created["spec"]["selector"]["matchLabels"] == {"batch.kubernetes.io/controller-uid": uid}
    time.sleep(0.5)
    assert job_pods(kube, namespace, "held") == []


def test_restart_apiserver_and_expired_watch(control_plane, kube, namespace):
    cms = f"/api/v1/namespaces/{namespace}/configmaps"
    _items, old_rv = kube.list(cms)
    for i in range(3):
        kube.create(cms, {"metadata": {"name": f"c{i}"}})
    t0 = time.monotonic()
    control_plane.restart_apiserver()

    def answered():
        try:
            return kube.list(cms)
        except KubeApiError as e:
            if e.status == 403:  # RBAC not loaded yet, for a moment
                return None
            raise

    items, _ = wait_for(answered, 15, 0.1, "an answer after the restart")
    assert {"c0", "c1", "c2"} <= {i["metadata"]["name"] for i in items}
    assert time.monotonic() - t0 < 20
    with pytest.raises(KubeApiError) as err:
        list(kube.watch(cms, old_rv, timeout_seconds=2))
    assert err.value.status == 410


def test_compact_etcd_expires_old_resource_versions(tmp_path):
    """With watches served by etcd (no watch cache), compaction makes older versions 410 Gone."""
    from jupyter_gpuqueue.devcluster import assets
    from jupyter_gpuqueue.devcluster.controlplane import ControlPlane

    reason = assets.missing_reason()
    if reason:
        pytest.skip(f"no Kubernetes control plane: {reason}")

    with ControlPlane(tmp_path / "cp", controllers=False, watch_cache=False) as cp:
        kube = cp.kube
        cp.ensure_namespace("w")
        cms = "/api/v1/namespaces/w/configmaps"
        _items, old_rv = kube.list(cms)
        kube.create(cms, {"metadata": {"name": "a"}})
        events = list(kube.watch(cms, old_rv, timeout_seconds=1))
        assert [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"] == ["a"]
        kube.create(cms, {"metadata": {"name": "b"}})
        rev = cp.compact_etcd()
        assert rev > int(old_rv)
        with pytest.raises(KubeApiError) as err:
            list(kube.watch(cms, old_rv, timeout_seconds=1))
        assert err.value.status == 410
