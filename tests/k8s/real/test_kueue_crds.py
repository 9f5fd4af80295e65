"""What the Kueue mode reads and what the project writes, checked by Kueue v0.14.8's own CRDs
(OpenAPI schemas and CEL ``x-kubernetes-validations``) in the real kube-apiserver v1.28.7.

- The fake Kueue of ``tests/k8s/fake_apiserver.py`` (what ``tests/k8s/test_kueue_delegation.py``
  and ``backends/kueue.py`` are tested against) builds and updates ``Workload`` objects: pending
  (``QuotaReserved=False``), admitted (``QuotaReserved``/``Admitted`` with ``status.admission``),
  evicted, admitted again, finished. The same objects are created in the real API server (spec
  with a create, status through the ``status`` subresource, each step an update of the previous
  one, so CEL transition rules run too), owned by the real Job the backend sent.
- The demo configuration ``jupyter_gpuqueue/demo/cluster.yaml`` is created object by object, and
  the output of ``jupyter-gpuqueue export-kueue`` for it is applied as ``kubectl apply
  --server-side`` would.
- Invalid objects are refused by the CEL rules (so validation is on).

Every write uses ``fieldValidation=Strict`` (kubectl's default): a field the CRD does not declare
is an error, not silently pruned."""

from __future__ import annotations

import calendar
import copy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jupyter_gpuqueue.backends.k8s_client import KubeApiError
from jupyter_gpuqueue.backends.kueue import admission_from_kueue
from jupyter_gpuqueue.devcluster import assets

from ..conftest import wait_for as fake_wait_for
from ..test_kueue_delegation import kueue, step  # noqa: F401 (fixture)
from ..test_service_kubernetes import make_service, rec_of  # noqa: F401 (fixture)
from .kubetools import KubeQueue, wait_for

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[3]
DEMO_CLUSTER = REPO / "jupyter_gpuqueue" / "demo" / "cluster.yaml"
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
STRICT = [("fieldValidation", "Strict")]
# Namespaced first where they are needed, cluster-scoped objects before what refers to them.
ORDER = ["Namespace", "PriorityClass", "WorkloadPriorityClass", "ResourceFlavor", "Cohort",
         "ClusterQueue", "LocalQueue"]
PLURALS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
           "WorkloadPriorityClass": "workloadpriorityclasses", "Cohort": "cohorts", "Workload": "workloads"}


def collection(doc: dict) -> str:
    """The collection path of ``doc`` (POST target)."""
    kind, md = doc["kind"], doc["metadata"]
    if kind == "Namespace":
        return "/api/v1/namespaces"
    if kind == "PriorityClass":
        return "/apis/scheduling.k8s.io/v1/priorityclasses"
    if kind == "LocalQueue" or kind == "Workload":
        return f"{KUEUE}/namespaces/{md['namespace']}/{PLURALS[kind]}"
    return f"{KUEUE}/{PLURALS[kind]}"


def object_path(doc: dict) -> str:
    return f"{collection(doc)}/{doc['metadata']['name']}"


@pytest.fixture(scope="module")
def crds(control_plane):
    """Kueue v0.14.8's CRDs, installed once (kept for the rest of the session)."""
    d = assets.kueue_crds_dir()
    if d is None:
        pytest.skip("Kueue's CRDs are not in the assets folder")
    names = control_plane.install_crds(d)
    assert "workloads.kueue.x-k8s.io" in names and "clusterqueues.kueue.x-k8s.io" in names
    return names


@pytest.fixture(scope="module")
def created(control_plane, crds):
    """Objects this module created, deleted at its end (the cluster is shared by the session: a
    globalDefault PriorityClass left behind would change every later pod's priority)."""
    made: list[dict] = []
    yield made
    kube = control_plane.kube
    for doc in reversed(made):
        try:
            kube.delete(object_path(doc))
        except KubeApiError as e:
            if e.status != 404:
                raise


def strip_server_fields(obj: dict, namespace: str) -> dict:
    """``obj`` as a client would send it: no uid, resourceVersion, creationTimestamp,
    generation or status; in ``namespace``."""
    out = copy.deepcopy(obj)
    md = out["metadata"]
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
              "deletionTimestamp", "selfLink"):
        md.pop(k, None)
    md["namespace"] = namespace
    out.pop("status", None)
    return out


# --------------------------------------------------------------------------------------------------
# (a) the fake Kueue's Workloads


def test_the_fake_kueues_workloads_are_valid_kueue_workloads(make_service, kueue, control_plane, crds,  # noqa: F811
                                                            namespace):
    cluster = kueue
    svc = make_service("kueue")
    drive = step(svc, cluster)
    # One priority from a WorkloadPriorityClass (label), one from a PriorityClass (pod spec).
    svc.submit({"name": "first", "command": ["sleep", "60"], "gpus": 1, "priorityClass": "wl-normal"}, user="alice")
    svc.submit({"name": "second", "command": ["sleep", "60"], "gpus": 1, "priorityClass": "low"}, user="alice")
    fake_wait_for(lambda: all(_fake_wl(cluster, n) for n in ("first", "second")), step=drive)

    snapshots: dict[str, list[tuple[str, dict]]] = {"first": [], "second": []}

    def snap(name: str, what: str) -> None:
        snapshots[name].append((what, copy.deepcopy(cluster.kueue_workload("team-a", name))))

    snap("first", "pending")
    cluster.kueue_set_pending("team-a", "second", "couldn't assign flavors to pod set main: insufficient unused quota")
    snap("second", "pending with Kueue's message")
    cluster.kueue_admit("team-a", "first", "cq", {"nvidia.com/gpu": "a100"})
    fake_wait_for(lambda: rec_of(svc, "first")["state"] == "Running", step=drive)
    snap("first", "admitted")
    cluster.advance(60)
    cluster.kueue_evict("team-a", "first")
    fake_wait_for(lambda: rec_of(svc, "first")["state"] == "Pending", step=drive)
    snap("first", "evicted")
    cluster.advance(60)
    cluster.kueue_admit("team-a", "first", "cq", {"nvidia.com/gpu": "a100"})
    fake_wait_for(lambda: rec_of(svc, "first")["state"] == "Running", step=drive)
    snap("first", "admitted again")
    cluster.finish_pods("team-a", "first", 0)
    fake_wait_for(lambda: rec_of(svc, "first")["state"] == "Succeeded", step=drive)
    cluster.step()
    snap("first", "finished")
    cluster.kueue_admit("team-a", "second", "cq", {"nvidia.com/gpu": "a100"})
    snap("second", "admitted")

    def conds(obj: dict) -> dict:
        return {c["type"]: c["status"] for c in obj["status"]["conditions"]}

    assert [(what, conds(obj)) for what, obj in snapshots["first"]] == [
        ("pending", {"QuotaReserved": "False"}),
        ("admitted", {"QuotaReserved": "True", "Admitted": "True"}),
        ("evicted", {"QuotaReserved": "False", "Admitted": "False", "Evicted": "True"}),
        ("admitted again", {"QuotaReserved": "True", "Admitted": "True", "Evicted": "False"}),
        ("finished", {"QuotaReserved": "True", "Admitted": "True", "Evicted": "False", "Finished": "True"})]

    kube = control_plane.kube
    for name, steps in snapshots.items():
        # The Job as the backend sent it, created for real (suspended: Kueue does not run here).
        job = sent_job(cluster, name, namespace)
        real_job = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job, query=STRICT)
        assert real_job["spec"]["suspend"] is True

        first_what, first = steps[0]
        wl = strip_server_fields(first, namespace)
        wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = real_job["metadata"]["uid"]
        for ref in wl["metadata"].get("ownerReferences") or []:
            ref["uid"] = real_job["metadata"]["uid"]
        path = collection(wl)
        try:
            real = kube.create(path, wl, query=STRICT)
        except KubeApiError as e:
            pytest.fail(f"Workload of {name} ({first_what}) refused: {e.field_message()}")
        assert real["spec"]["podSets"] == wl["spec"]["podSets"] or _same_pod_sets(real, wl)
        assert (real["spec"]["priorityClassName"], real["spec"]["priorityClassSource"], real["spec"]["priority"]) == {
            "first": ("wl-normal", "kueue.x-k8s.io/workloadpriorityclass", 500),
            "second": ("low", "scheduling.k8s.io/priorityclass", 100)}[name]
        for what, obj in steps:
            cur = kube.get(f"{path}/{real['metadata']['name']}")
            cur["status"] = copy.deepcopy(obj["status"])
            try:
                real = kube.replace(f"{path}/{real['metadata']['name']}/status", cur, query=STRICT)
            except KubeApiError as e:
                pytest.fail(f"status of the Workload of {name} ({what}) refused: {e.field_message()}")
            assert real["status"]["conditions"] == obj["status"]["conditions"], what
            assert real["status"].get("admission") == obj["status"].get("admission"), what
            # What the backend reads of it, read back from the real server.
            adm = real["status"].get("admission")
            if adm:
                conv = admission_from_kueue(adm, real["spec"]["podSets"])
                assert conv["clusterQueue"] == "cq" and conv["podSetAssignments"][0]["count"] == 1
                assert conv["podSetAssignments"][0]["resourceUsage"] == {"nvidia.com/gpu": 1}


GENERATED_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")


def sent_job(cluster, name: str, namespace: str) -> dict:
    """The Job the backend POSTed to the fake (its first body; the fake records it after its own
    defaulting, which is undone here: generated selector and template labels), in ``namespace``."""
    body = next(b for b in cluster.received if b.get("kind") == "Job" and b["metadata"]["name"] == name)
    job = strip_server_fields(body, namespace)
    job["spec"].pop("selector", None)
    labels = job["spec"]["template"].get("metadata", {}).get("labels") or {}
    for k in GENERATED_LABELS:
        labels.pop(k, None)
    return job


def _fake_wl(cluster, name):
    try:
        return cluster.kueue_workload("team-a", name)
    except KeyError:
        return None


def _same_pod_sets(real: dict, sent: dict) -> bool:
    """The API server may add defaults, never drop what was sent."""
    def contains(a, b):
        if isinstance(b, dict):
            return isinstance(a, dict) and all(k in a and contains(a[k], v) for k, v in b.items())
        if isinstance(b, list):
            return isinstance(a, list) and len(a) == len(b) and all(contains(x, y) for x, y in zip(a, b))
        return a == b
    return contains(real["spec"]["podSets"], sent["spec"]["podSets"])


# --------------------------------------------------------------------------------------------------
# (b) the demo configuration and its export


def demo_documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(DEMO_CLUSTER.read_text()) if d]


def exported_documents() -> list[dict]:
    """``jupyter-gpuqueue export-kueue --config <demo cluster.yaml>``, run as a user runs it."""
    script = Path(sys.executable).parent / "jupyter-gpuqueue"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter_gpuqueue.cli"]
    out = subprocess.run(argv + ["export-kueue", "--config", str(DEMO_CLUSTER)], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict]) -> list[dict]:
    unknown = {d["kind"] for d in docs} - set(ORDER)
    assert not unknown, f"kinds this test does not know how to create: {unknown}"
    return sorted(docs, key=lambda d: ORDER.index(d["kind"]))


def test_the_demo_configuration_and_its_export_are_accepted(control_plane, crds, created):
    kube = control_plane.kube
    demo = by_kind(demo_documents())
    assert {d["kind"] for d in demo} >= {"Namespace", "PriorityClass", "ResourceFlavor", "ClusterQueue", "LocalQueue"}
    for doc in demo:
        try:
            obj = kube.create(collection(doc), doc, query=STRICT)
        except KubeApiError as e:
            if e.status == 409 and doc["kind"] in ("Namespace", "PriorityClass"):
                # left by another test module of this session (PriorityClass values are immutable)
                existing = kube.get(object_path(doc))
                assert existing.get("value") == doc.get("value"), (doc, existing)
                continue
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} of the demo cluster.yaml refused: "
                        f"{e.field_message()}")
        created.append(doc)
        if doc["kind"] in ("ClusterQueue", "ResourceFlavor", "LocalQueue"):
            # nothing the CRD does not know was dropped
            assert _contains(obj["spec"], doc["spec"]), (doc["kind"], doc["metadata"]["name"])

    kueue_kinds = {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert {d["kind"] for d in created} >= kueue_kinds  # created here, not found already there

    exported = by_kind(exported_documents())
    assert {(d["kind"], d["metadata"]["name"]) for d in exported} == {(d["kind"], d["metadata"]["name"]) for d in demo}
    for doc in exported:
        # kubectl apply --server-side: a create or an update of what is there (transition rules run)
        try:
            obj = kube.request("PATCH", object_path(doc), body=doc, content_type="application/apply-patch+yaml",
                               query=STRICT + [("fieldManager", "jupyter-gpuqueue-export"), ("force", "true")])
        except KubeApiError as e:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} of export-kueue refused: {e.field_message()}")
        assert any(m["manager"] == "jupyter-gpuqueue-export" and m["operation"] == "Apply"
                   for m in obj["metadata"]["managedFields"])
        if "spec" in doc:
            assert _contains(obj["spec"], doc["spec"]), (doc["kind"], doc["metadata"]["name"])
    # The export describes the same queues: quotas as the API server canonicalises them.
    for doc in exported:
        if doc["kind"] == "ClusterQueue":
            (demo_cq,) = [d for d in demo
                          if (d["kind"], d["metadata"]["name"]) == ("ClusterQueue", doc["metadata"]["name"])]
            assert _quotas(doc) == _quotas(demo_cq)


def _quotas(cq: dict) -> dict:
    from kubernetes.utils import parse_quantity

    return {(f["name"], r["name"]): parse_quantity(str(r["nominalQuota"]))
            for rg in cq["spec"]["resourceGroups"] for f in rg["flavors"] for r in f["resources"]}


def _contains(a, b) -> bool:
    """``a`` (from the API server) holds everything of ``b`` (sent); quantities compare by value."""
    if isinstance(b, dict):
        return isinstance(a, dict) and all(k in a and _contains(a[k], v) for k, v in b.items())
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(_contains(x, y) for x, y in zip(a, b))
    if a != b and isinstance(b, (int, str)) and isinstance(a, (int, str)):
        from kubernetes.utils import parse_quantity

        try:
            return parse_quantity(str(a)) == parse_quantity(str(b))
        except ValueError:
            return False
    return a == b


# --------------------------------------------------------------------------------------------------
# (c) validation is on: what Kueue's CEL rules refuse


def test_kueues_cel_rules_refuse_invalid_objects(control_plane, crds, namespace):
    kube = control_plane.kube

    def refused(method, path, body, *, query=STRICT):
        with pytest.raises(KubeApiError) as err:
            kube.request(method, path, body=body, query=query, attempts=1)
        assert err.value.status == 422, err.value
        return err.value.message

    # ClusterQueue: borrowingLimit without a cohort.
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 1}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "t-no-cohort"},
          "spec": {"namespaceSelector": {}, "resourceGroups": [
              {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "nvidia-a100", "resources": [gpus]}]}]}}
    assert "borrowingLimit must be nil when cohort is empty" in refused("POST", f"{KUEUE}/clusterqueues", cq)
    # ... and a flavor that does not list every covered resource.
    cq2 = copy.deepcopy(cq)
    cq2["metadata"]["name"] = "t-uncovered"
    cq2["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    del cq2["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"]
    assert "flavors must have the same number of resources as the coveredResources" in refused(
        "POST", f"{KUEUE}/clusterqueues", cq2)

    # Workload: priorityClassName without priority; an admission of the wrong number of pod sets;
    # the queue changed while quota is reserved (a transition rule: oldSelf).
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "w", "namespace": namespace},
          "spec": {"queueName": "q", "priorityClassName": "low",
                   "podSets": [{"name": "main", "count": 1, "template": pod}]}}
    path = f"{KUEUE}/namespaces/{namespace}/workloads"
    assert "priority should not be nil when priorityClassName is set" in refused("POST", path, wl)
    wl["spec"]["priority"] = 100
    obj = kube.create(path, wl, query=STRICT)
    assert obj["spec"]["priorityClassSource"] == "" and obj["spec"]["active"] is True  # CRD defaults
    cond = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "reserved",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}
    psa = {"name": "main", "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "1"}, "count": 1}
    obj["status"] = {"conditions": [cond],
                     "admission": {"clusterQueue": "cq", "podSetAssignments": [psa, {**psa, "name": "x"}]}}
    assert "podSetAssignments must have the same number of podSets as the spec" in refused(
        "PUT", f"{path}/w/status", obj)
    obj["status"]["admission"]["podSetAssignments"] = [psa]
    obj = kube.replace(f"{path}/w/status", obj, query=STRICT)
    obj["spec"]["queueName"] = "other"
    assert "field is immutable" in refused("PUT", f"{path}/w", obj)
    # A condition field metav1.Condition does not have (what the fake used to write).
    obj = kube.get(f"{path}/w")
    obj["status"]["conditions"][0]["lastProbeTime"] = "2026-01-01T00:00:00Z"
    with pytest.raises(KubeApiError) as err:
        kube.request("PUT", f"{path}/w/status", body=obj, query=STRICT, attempts=1)
    assert err.value.status == 400 and 'unknown field "status.conditions[0].lastProbeTime"' in err.value.message


# --------------------------------------------------------------------------------------------------
# (d) the Kueue mode's backend reads Workloads as the real API server serves them


def test_the_kueue_backend_follows_workloads_served_by_the_real_api_server(control_plane, crds, tmp_path):
    """A service in the ``kueue`` mode (service account: the documented ClusterRole) against the
    real API server, Kueue played by the test with Workloads the CRDs accept: the suspended Job is
    created on submission; Kueue's pending message, its admission (ClusterQueue, flavors, time)
    and its eviction show in the service. Without Kueue's visibility API positions are unknown."""
    from jupyter_gpuqueue.service import create_service

    q = KubeQueue(control_plane, tmp_path)
    svc = None
    try:
        svc = create_service(
            config_paths=[str(tmp_path / "cluster.yaml")], inventory_path=None,
            db_url=f"sqlite:///{tmp_path / 'ledger.sqlite'}", root_dir=str(tmp_path), data_dir=str(tmp_path / "state"),
            prices={"nvidia-a100": 2.21, "nvidia-h100": 3.75}, stop_grace_seconds=0, default_local_queue="team-a/q",
            backend="kueue", kubernetes={"api_client": q.api_client, "image": "busybox:1.36",
                                         "namespaces": {"team-a": q.ns}, "visibility_interval": 0.2})
        svc.restore()
        assert svc.delegated
        svc.submit({"name": "k1", "command": [sys.executable, "-c", "print(1)"], "gpus": 1, "priorityClass": "gq-low"},
                   user="alice")
        job = wait_for(lambda: q.job("k1"), step=svc.tick, timeout=30, what="the Job")
        assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"

        kube = control_plane.kube
        path = f"{KUEUE}/namespaces/{q.ns}/workloads"
        uid = job["metadata"]["uid"]
        template = copy.deepcopy(job["spec"]["template"])
        template["metadata"].pop("creationTimestamp", None)  # null, as the API server writes it
        wl = kube.create(path, {  # as Kueue's job reconciler builds it (jobframework constructWorkload)
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "job-k1-abcde", "namespace": q.ns, "labels": {"kueue.x-k8s.io/job-uid": uid},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "k1", "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": "q", "priorityClassName": "gq-low", "priority": 100,
                     "priorityClassSource": "scheduling.k8s.io/priorityclass",
                     "podSets": [{"name": "main", "count": 1, "template": template}]}}, query=STRICT)

        def set_status(conds: list[tuple], admission=None):
            cur = kube.get(f"{path}/job-k1-abcde")
            old = {c["type"]: c for c in (cur.get("status") or {}).get("conditions") or []}
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            new = []
            for typ, status, reason, message in conds:
                keep = old.get(typ) if old.get(typ, {}).get("status") == status else None
                new.append({"type": typ, "status": status, "reason": reason, "message": message,
                            "observedGeneration": cur["metadata"]["generation"],
                            "lastTransitionTime": keep["lastTransitionTime"] if keep else now})
            cur["status"] = {"conditions": new, **({"admission": admission} if admission else {})}
            return kube.replace(f"{path}/job-k1-abcde/status", cur, query=STRICT)

        def rec():
            return svc.get_workload("team-a", "k1")

        msg = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
               "in flavor nvidia-a100")
        set_status([("QuotaReserved", "False", "Pending", msg)])
        wait_for(lambda: rec()["message"] == msg, step=svc.tick, timeout=30, what="Kueue's pending message")
        assert rec()["state"] == "Pending" and rec()["positionInLocalQueue"] is None  # no visibility API here

        admission = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "nvidia-h100"},
             "resourceUsage": {"nvidia.com/gpu": "1"}}]}
        t0 = time.time()
        adm = set_status([("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                          ("Admitted", "True", "Admitted", "The workload is admitted")], admission)
        wait_for(lambda: rec()["state"] == "Admitted", step=svc.tick, timeout=30, what="Admitted")
        r = rec()
        assert r["admission"]["clusterQueue"] == "cq"
        assert r["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "nvidia-h100"}
        admitted_at = next(c for c in adm["status"]["conditions"] if c["type"] == "Admitted")["lastTransitionTime"]
        # billing starts at the Admitted condition's time (whole seconds on the API server)
        assert r["admittedAt"] == calendar.timegm(time.strptime(admitted_at, "%Y-%m-%dT%H:%M:%SZ"))
        assert t0 - 1 <= r["admittedAt"] <= t0 + 1

        set_status([("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload"),
                    ("Admitted", "False", "NoReservation", "The workload has no reservation"),
                    ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x)"),
                    ("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload (UID: x)")])
        wait_for(lambda: rec()["state"] == "Pending", step=svc.tick, timeout=30, what="requeued")
        assert rec()["evictions"] == 1 and "Preempted to accommodate" in rec()["message"]
        assert wl["metadata"]["name"] == "job-k1-abcde"
    finally:
        if svc is not None:
            q.services.append(svc)
        q.close()
