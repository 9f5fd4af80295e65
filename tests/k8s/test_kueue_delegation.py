"""Kueue delegation: the engine does not admit; Jobs are created suspended with the queue label,
Kueue (simulated in the fake from its documented behaviour) admits and evicts them, and the service
shows Kueue's states and visibility-API positions and bills from Kueue's admission times."""

from __future__ import annotations

import pytest

from jupyter_gpuqueue.backends.k8s_jobs import QUEUE_LABEL
from jupyter_gpuqueue.backends.kueue import admission_from_kueue
from jupyter_gpuqueue.service import ADMITTED, PENDING, RUNNING, SUCCEEDED

from .conftest import wait_for
from .test_service_kubernetes import make_service, rec_of  # noqa: F401 (fixture)


@pytest.fixture
def kueue(cluster):
    cluster.kueue = True
    cluster.local_queues["team-a/q"] = "cq"
    cluster.kueue_flavor_labels["a100"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    cluster.kueue_flavor_tolerations["a100"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cluster.priorities.update({"low": 100, "high": 1000, "wl-normal": 500})
    return cluster


def step(svc, cluster):
    def f():
        cluster.step()
        svc.tick()
    return f


def test_kueue_admits_and_the_service_follows(make_service, kueue):
    cluster = kueue
    svc = make_service("kueue")
    assert svc.delegated
    a = svc.submit({"name": "first", "command": ["sleep", "60"], "gpus": 1, "priorityClass": "wl-normal"}, user="alice")
    step(svc, cluster)()
    step(svc, cluster)()
    cluster.advance(1)
    svc.submit({"name": "second", "command": ["sleep", "60"], "gpus": 1, "priorityClass": "wl-normal"}, user="alice")
    svc.tick()
    for name in ("first", "second"):
        job = cluster.get(("batch", "jobs"), "team-a", name)
        assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE_LABEL] == "q"
        assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "wl-normal"
        assert "nodeSelector" not in job["spec"]["template"]["spec"]  # Kueue injects it on admission
    # Positions come from Kueue's visibility API.
    wait_for(lambda: rec_of(svc, "second")["positionInLocalQueue"] == 1, step=step(svc, cluster))
    first = rec_of(svc, "first")
    assert (first["positionInClusterQueue"], first["positionInLocalQueue"]) == (0, 0)
    assert first["state"] == PENDING and first["reason"] == "Pending" and first["message"] == "waiting for quota"
    assert any("/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/team-a/localqueues/q/pendingworkloads" in p
               for _, p, _ in cluster.requests)
    cluster.kueue_set_pending("team-a", "second", "couldn't assign flavors to pod set main: insufficient unused quota")
    wait_for(lambda: "insufficient unused quota" in (rec_of(svc, "second")["message"] or ""), step=step(svc, cluster))
    # Kueue admits the first job: the service shows Kueue's admission and bills from its time.
    cluster.advance(10)
    admitted_at = cluster.now
    cluster.kueue_admit("team-a", "first", "cq", {"nvidia.com/gpu": "a100"})
    cluster.advance(5)
    wait_for(lambda: rec_of(svc, "first")["state"] in (ADMITTED, RUNNING), step=step(svc, cluster))
    first = rec_of(svc, "first")
    assert first["admittedAt"] == admitted_at
    assert first["admission"]["clusterQueue"] == "cq"
    assert first["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "a100"}
    assert first["positionInLocalQueue"] is None
    wait_for(lambda: rec_of(svc, "first")["state"] == RUNNING, step=step(svc, cluster))
    wait_for(lambda: rec_of(svc, "second")["positionInLocalQueue"] == 0, step=step(svc, cluster))
    # Estimated start times in the kueue mode: this engine run on the mirrored queues, approximate.
    svc.estimates.refresh_now()
    second = rec_of(svc, "second")
    assert second["estimateApproximate"] is True
    assert second["estimatedStartAt"] is not None and second["estimatedStartAt"] >= cluster.now - 1
    # The queues view mirrors Kueue's usage.
    cq = next(c for c in svc.queues()["clusterQueues"] if c["name"] == "cq")
    assert next(r for r in cq["resources"] if r["flavor"] == "a100")["usage"] == "1"
    # Kueue evicts it: requeued, billing stops at the eviction time.
    cluster.advance(600)
    evicted_at = cluster.now
    cluster.kueue_evict("team-a", "first")
    wait_for(lambda: rec_of(svc, "first")["state"] == PENDING, step=step(svc, cluster))
    first = rec_of(svc, "first")
    assert first["evictions"] == 1 and "Preempted to accommodate" in first["message"]
    assert first["costUsd"] == pytest.approx(3.6 * (evicted_at - admitted_at) / 3600, rel=1e-6)
    cluster.advance(100)
    assert rec_of(svc, "first")["costUsd"] == pytest.approx(3.6 * (evicted_at - admitted_at) / 3600, rel=1e-6)
    # Admitted again, runs to completion.
    readmitted_at = cluster.now
    cluster.kueue_admit("team-a", "first", "cq", {"nvidia.com/gpu": "a100"})
    wait_for(lambda: rec_of(svc, "first")["state"] == RUNNING, step=step(svc, cluster))
    cluster.advance(300)
    cluster.finish_pods("team-a", "first", 0)
    wait_for(lambda: rec_of(svc, "first")["state"] == SUCCEEDED, step=step(svc, cluster))
    total = (evicted_at - admitted_at) + (cluster.now - readmitted_at)
    assert rec_of(svc, "first")["costUsd"] == pytest.approx(3.6 * total / 3600, rel=1e-6)
    assert a["uid"] == rec_of(svc, "first")["uid"]
    # Kueue's controller (a thread of the fake) marks its Workload Finished on its own time
    wait_for(lambda: cluster.kueue_workload("team-a", "first")["status"]["conditions"][-1]["type"] == "Finished",
             timeout=30, step=step(svc, cluster))


def test_cancel_of_a_pending_delegated_job_deletes_it(make_service, kueue):
    cluster = kueue
    svc = make_service("kueue")
    svc.submit({"name": "gone", "command": ["true"], "gpus": 1}, user="alice")
    wait_for(lambda: cluster.get(("batch", "jobs"), "team-a", "gone") is not None, step=step(svc, cluster))
    svc.cancel("team-a", "gone", user="alice")
    wait_for(lambda: cluster.get(("batch", "jobs"), "team-a", "gone") is None, step=step(svc, cluster))
    wait_for(lambda: not svc.records, step=step(svc, cluster))
    assert rec_of(svc, "gone")["state"] == "Cancelled"


def test_restart_in_delegated_mode_keeps_kueue_state(make_service, kueue):
    cluster = kueue
    svc = make_service("kueue")
    svc.submit({"name": "k1", "command": ["true"], "gpus": 1}, user="alice")
    step(svc, cluster)()
    step(svc, cluster)()  # Job, then Kueue's Workload
    cluster.advance(1)  # Kueue orders equal priorities by creation time (then uid)
    svc.submit({"name": "k2", "command": ["true"], "gpus": 1}, user="alice")
    wait_for(lambda: rec_of(svc, "k2")["positionInLocalQueue"] == 1, step=step(svc, cluster))
    cluster.kueue_admit("team-a", "k1", "cq", {"nvidia.com/gpu": "a100"})
    wait_for(lambda: rec_of(svc, "k1")["state"] == RUNNING, step=step(svc, cluster))
    svc.backend.close()
    svc.ledger.close()
    jobs_before = {j["metadata"]["uid"] for j in cluster.list(("batch", "jobs"))}
    cluster.kueue_evict("team-a", "k1")  # while the service is down
    svc2 = make_service("kueue")
    wait_for(lambda: rec_of(svc2, "k1")["state"] == PENDING, step=step(svc2, cluster))
    assert rec_of(svc2, "k1")["evictions"] == 1
    wait_for(lambda: rec_of(svc2, "k2")["positionInLocalQueue"] is not None, step=step(svc2, cluster))
    assert {j["metadata"]["uid"] for j in cluster.list(("batch", "jobs"))} == jobs_before  # no duplicates


def test_kueue_admission_conversion():
    adm = {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"nvidia.com/gpu": "a100", "cpu": "default"},
         "resourceUsage": {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "16Gi"}}]}
    out = admission_from_kueue(adm, [{"name": "main", "count": 2}])
    psa = out["podSetAssignments"][0]
    assert psa["resourceUsage"] == {"nvidia.com/gpu": 2, "cpu": 1500, "memory": 16 * 2**30}
    assert psa["count"] == 2 and out["clusterQueue"] == "cq"


def test_without_the_visibility_api_positions_are_unknown(make_service, kueue):
    cluster = kueue
    cluster.deny("get", "localqueues/pendingworkloads")
    svc = make_service("kueue")
    svc.submit({"name": "v1", "command": ["true"], "gpus": 1}, user="alice")
    wait_for(lambda: rec_of(svc, "v1")["message"] == "waiting for quota", step=step(svc, cluster))
    wait_for(lambda: svc.k8s.visibility_error, step=step(svc, cluster))
    assert "forbidden" in svc.k8s.visibility_error
    v = rec_of(svc, "v1")
    assert v["state"] == PENDING and v["positionInLocalQueue"] is None


def test_a_notebook_lease_is_refused_when_kueue_admits(make_service, kueue):
    """A NotebookLease has no Job for Kueue to admit: in the Kueue mode it is refused at once,
    naming ``kind`` (a spawn would otherwise wait for an admission that never comes)."""
    from jupyter_gpuqueue.errors import ValidationError

    svc = make_service("kueue")
    with pytest.raises(ValidationError) as err:
        svc.submit({"name": "nb", "kind": "NotebookLease", "gpus": 1}, user="alice")
    assert err.value.field == "kind" and "Kueue admits notebook pods itself" in err.value.message
    assert svc.list_workloads() == [] and kueue.list(("batch", "jobs"), "team-a") == []

