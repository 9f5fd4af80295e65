"""The HTTP fake (``tests/k8s/fake_apiserver.py``, kept for fast tests) and the real kube-apiserver
v1.28.7 answer the same, on what the real-server tests found the fake got wrong: the labels the
API server adds to a Job's pod template and the 422 for an update that drops them, ``startTime``
kept on suspend and reset on resume, scheduling directives frozen while it is set, the Status
reasons the backend branches on, and the Job controller's ``FailedCreate`` event for a missing
PriorityClass (found through a field selector). Each test runs once on each."""

from __future__ import annotations

import copy
import sys
import time
import uuid

import pytest

from jupyter_gpuqueue.backends.k8s_client import KubeApiError, KubeClient

from ..fake_apiserver import FakeApiServer, FakeCluster
from .kubetools import wait_for

PY = sys.executable
H100 = "NVIDIA-H100-SXM5-80GB"


class Api:
    """One API server for a test: ``client`` (admin), ``ns`` (a fresh namespace), ``kind``."""

    def __init__(self, kind: str, client: KubeClient, ns: str, make_denied):
        self.kind, self.client, self.ns, self._make_denied = kind, client, ns, make_denied

    def jobs(self, name: str = "") -> str:
        return f"/apis/batch/v1/namespaces/{self.ns}/jobs" + (f"/{name}" if name else "")

    def denied_client(self) -> KubeClient:
        """A client that may list pods only (``jobs`` are forbidden to it)."""
        return self._make_denied()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.kube)])
def api(request):
    ns = f"agree-{uuid.uuid4().hex[:8]}"
    if request.param == "fake":
        cluster = FakeCluster()
        cluster.add_namespace(ns)
        cluster.add_node("gpu", labels={"nvidia.com/gpu.product": H100}, allocatable={"nvidia.com/gpu": "4"})
        cluster.now = time.time()
        srv = FakeApiServer(cluster).start()
        cluster.run_controllers(0.02, real_time=True)

        def denied():
            cluster.deny("get", "jobs")
            return KubeClient(srv.api_client())
        try:
            yield Api("fake", KubeClient(srv.api_client()), ns, denied)
        finally:
            cluster.stopping = True
            srv.stop()
        return
    cp = request.getfixturevalue("control_plane")
    request.getfixturevalue("node_agent")
    cp.ensure_namespace(ns, timeout=90)

    def denied():
        return KubeClient(cp.service_account_client("kube-system", f"agree-{ns}", [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]))
    try:
        yield Api("real", cp.kube, ns, denied)
    finally:
        try:
            cp.kube.delete(f"/api/v1/namespaces/{ns}")
        except KubeApiError:
            pass


def _job(name: str, *, suspend: bool = True, priority_class: str = "") -> dict:
    spec = {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
            "containers": [{"name": "main", "image": "busybox", "command": [PY, "-c", "import time; time.sleep(600)"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"suspend": suspend, "backoffLimit": 0, "template": {"metadata": {"labels": {"ours": "1"}},
                                                                          "spec": spec}}}


def test_generated_template_labels_and_the_422_for_dropping_them(api):
    job = api.client.create(api.jobs(), _job("labels"))
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "ours": "1", "controller-uid": uid, "job-name": "labels",
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "labels"}
    for _ in range(20):  # the Job controller may write its status meanwhile (409: read again)
        dropped = api.client.get(api.jobs("labels"))
        dropped["spec"]["template"]["metadata"]["labels"] = {"ours": "1"}  # what the resume used to send
        with pytest.raises(KubeApiError) as e:
            api.client.replace(api.jobs("labels"), dropped)
        if e.value.status != 409:
            break
    err = e.value
    assert (err.status, err.reason) == (422, "Invalid")
    assert [(c["field"], c["reason"]) for c in err.causes] == [
        ("spec.template.metadata.labels[controller-uid]", "FieldValueRequired"),
        ("spec.template.metadata.labels[job-name]", "FieldValueRequired"),
        ("spec.template.metadata.labels[batch.kubernetes.io/controller-uid]", "FieldValueRequired"),
        ("spec.template.metadata.labels[batch.kubernetes.io/job-name]", "FieldValueRequired"),
        ("spec.template.metadata.labels", "FieldValueInvalid"),
        ("spec.template.metadata.labels", "FieldValueInvalid")]
    assert err.causes[0]["message"] == f"Required value: must be '{uid}'"
    assert err.message.startswith('Job.batch "labels" is invalid: [spec.template.metadata.labels[controller-uid]')
    assert "`selector` does not match template `labels`" in err.message


def _suspended(job: dict) -> bool:
    return any(c["type"] == "Suspended" and c["status"] == "True" for c in (job.get("status") or {}).get("conditions") or [])


def _update(api, path: str, mutate, subresource: str = "") -> dict:
    """Read-modify-write of ``path`` (``/status`` with ``subresource``), again on 409 Conflict (the
    Job controller writes the Job's status meanwhile). Errors other than 409 are raised."""
    for _ in range(20):
        cur = api.client.get(path)
        mutate(cur)
        try:
            return api.client.replace(path + subresource, cur)
        except KubeApiError as err:
            if err.status != 409:
                raise
    raise AssertionError(f"{path}: kept conflicting")


def test_start_time_is_kept_on_suspend_and_reset_on_resume(api):
    api.client.create(api.jobs(), _job("st", suspend=False))
    job = wait_for(lambda: (lambda j: j if (j.get("status") or {}).get("startTime") else None)(
        api.client.get(api.jobs("st"))), timeout=30, what="startTime")
    first = job["status"]["startTime"]
    _update(api, api.jobs("st"), lambda j: j["spec"].__setitem__("suspend", True))
    job = wait_for(lambda: (lambda j: j if _suspended(j) else None)(api.client.get(api.jobs("st"))), timeout=30,
                   what="Suspended")
    assert job["status"]["startTime"] == first  # v1.28 keeps it (Kueue clears it itself)
    with pytest.raises(KubeApiError) as e:  # directives frozen while startTime is set
        _update(api, api.jobs("st"),
                lambda j: j["spec"]["template"]["spec"].__setitem__("nodeSelector", {"nvidia.com/gpu.product": "other"}))
    assert e.value.status == 422 and e.value.causes[0]["field"] == "spec.template"
    assert "field is immutable" in e.value.message
    # Kueue's ResetStatus, through the status subresource
    job = _update(api, api.jobs("st"), lambda j: j["status"].pop("startTime", None), "/status")
    assert "startTime" not in job["status"]

    def resume(j):  # now the directives may change, with the resume
        j["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": H100, "zone": "a"}
        j["spec"]["suspend"] = False
    job = _update(api, api.jobs("st"), resume)
    assert job["spec"]["template"]["spec"]["nodeSelector"]["zone"] == "a"
    time.sleep(1.1)  # metav1.Time has whole seconds
    job = wait_for(lambda: (lambda j: j if (j.get("status") or {}).get("startTime") else None)(
        api.client.get(api.jobs("st"))), timeout=30, what="startTime after the resume")
    assert job["status"]["startTime"] >= first


def test_status_reasons(api):
    api.client.create(api.jobs(), _job("reasons"))
    with pytest.raises(KubeApiError) as e:
        api.client.create(api.jobs(), _job("reasons"))
    assert (e.value.status, e.value.reason, e.value.message) == (409, "AlreadyExists", 'jobs.batch "reasons" already exists')
    stale: dict = {}

    def label(job):  # the version read before this write goes stale by it
        stale.clear()
        stale.update(copy.deepcopy(job))
        job["metadata"].setdefault("labels", {})["x"] = "1"
    _update(api, api.jobs("reasons"), label)  # (the Job controller may write its status first)
    stale["metadata"].setdefault("labels", {})["x"] = "2"
    with pytest.raises(KubeApiError) as e:
        api.client.replace(api.jobs("reasons"), stale)
    assert (e.value.status, e.value.reason) == (409, "Conflict")
    assert "the object has been modified" in e.value.message
    with pytest.raises(KubeApiError) as e:
        api.client.get(api.jobs("nope"))
    assert (e.value.status, e.value.reason, e.value.message) == (404, "NotFound", 'jobs.batch "nope" not found')
    with pytest.raises(KubeApiError) as e:
        api.denied_client().get(api.jobs("reasons"))
    assert (e.value.status, e.value.reason) == (403, "Forbidden")
    assert 'jobs.batch "reasons" is forbidden' in e.value.message or "jobs.batch is forbidden" in e.value.message


def test_failed_create_event_for_a_missing_priority_class(api):
    job = api.client.create(api.jobs(), _job("nopc", suspend=False, priority_class="no-such-class"))

    def event():
        items, _ = api.client.list(f"/api/v1/namespaces/{api.ns}/events",
                                   field_selector="involvedObject.kind=Job,reason=FailedCreate")
        return [e for e in items if e["involvedObject"]["uid"] == job["metadata"]["uid"]]
    [ev] = wait_for(event, timeout=30, what="a FailedCreate event")[:1]
    assert ev["type"] == "Warning"
    assert ev["message"] == 'Error creating: pods "nopc-" is forbidden: no PriorityClass with name no-such-class was found'
    assert ev["involvedObject"]["name"] == "nopc" and ev["source"]["component"] == "job-controller"
    pods, _ = api.client.list(f"/api/v1/namespaces/{api.ns}/pods")
    assert not pods
