"""Issue 33: the Kubernetes backend when things go wrong, on the real control plane (kube-apiserver,
kube-controller-manager, kube-scheduler v1.28.7; nodes played by the stand-in): a lost node, Pods
that never become Ready, a role without ``jobs/status``, a deleted PriorityClass, finished Jobs
removed after their TTL. The queue's service account has the ClusterRole of docs/kubernetes.md
unless a test takes a rule away."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from jupyter_gpuqueue.backends.k8s_client import KubeApiError
from jupyter_gpuqueue.backends.k8s_status import parse_time
from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.service import FAILED, PENDING, RUNNING, SUCCEEDED

from .kubetools import A100, H100, KubeQueue, documented_cluster_role, rules_without, wait_for

pytestmark = pytest.mark.kube

PY = sys.executable


def rec(svc, name: str) -> dict:
    return svc.get_workload("team-a", name)


def state_is(svc, name: str, *states: str):
    def check():
        return rec(svc, name)["state"] in states
    check.__name__ = f"{name} in {states}"
    return check


def _force_delete_pods(cp, ns: str) -> None:
    for p in cp.kube.list(f"/api/v1/namespaces/{ns}/pods")[0]:
        try:
            cp.kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}",
                            body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        except KubeApiError:
            pass


def test_a_role_without_jobs_status_is_said_at_start_and_on_the_preempted_workload(control_plane, node_agent,
                                                                                   tmp_path):
    """The start-up check names every verb the role lacks (``GET /info``: clusterAccess); a
    preemption goes on without ``update jobs/status`` (the Job is suspended, its Pods go, the
    preemptor runs), the victim's message names the missing permission, and its re-admission
    onto another flavor, which needs it, fails saying so: no silent hang."""
    q = KubeQueue(control_plane, tmp_path, rules=rules_without(documented_cluster_role(), "jobs/status"))
    try:
        svc = q.service()
        access = wait_for(lambda: (lambda a: a if a["checked"] else None)(svc.info("alice")["clusterAccess"]),
                          what="the access check")
        assert access["missing"] == ["get batch/jobs/status", "update batch/jobs/status", "patch batch/jobs/status"]
        t0 = time.monotonic()
        svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(600)"], "gpus": 2,
                    "flavor": "any", "priorityClass": "gq-low"}, user="alice")
        wait_for(state_is(svc, "low", RUNNING), step=svc.tick)
        svc.submit({"name": "high", "command": [PY, "-c", "import time; time.sleep(5)"], "gpus": 2,
                    "flavor": "nvidia-a100", "priorityClass": "gq-high"}, user="alice")
        wait_for(state_is(svc, "high", RUNNING, SUCCEEDED), step=svc.tick, timeout=120, what="the preemptor runs")
        assert time.monotonic() - t0 < 120
        # The victim was suspended and requeued; its re-admission onto nvidia-h100 needs the
        # Job's status.startTime cleared, which the role forbids: it fails, naming the permission.
        wait_for(state_is(svc, "low", FAILED), step=svc.tick, timeout=120)
        low = rec(svc, "low")
        assert low["evictions"] == 1 and "jobs/status" in low["message"] and "forbidden" in low["message"]
        assert not [p for p in q.pods("low") if p["status"].get("phase") == "Running"]
    finally:
        q.close()


def test_a_lost_node_requeues_its_job_which_runs_on_another_node(control_plane, node_agent, tmp_path):
    """A node's kubelet stops (``lose_node``: no heartbeats, its processes gone, nothing said):
    the node lifecycle controller marks it Unknown; the workload's Pods are not Ready, so after
    the recovery timeout it is evicted (Kueue's PodsReadyTimeout, message naming the node) and
    requeued; its billing ended when the node stopped being Ready; it runs on another A100 node
    and Succeeds."""
    q = KubeQueue(control_plane, tmp_path)
    spare = None
    try:
        svc = q.service(pods_ready_timeout=120, pods_ready_recovery_timeout=2, requeue_backoff_base=1)
        manifest = textwrap.dedent(f"""
            apiVersion: batch/v1
            kind: Job
            metadata: {{name: survivor, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: q}}}}
            spec:
              template:
                spec:
                  restartPolicy: Never
                  containers:
                  - name: main
                    image: busybox:1.36
                    command: [{PY}, -c, "import os, time; n = os.environ['NODE']; time.sleep(600 if n == 'node-a' else 2); print('done on', n)"]
                    env: [{{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}]
                    resources: {{limits: {{nvidia.com/gpu: 1}}}}
            """)
        svc.submit_manifest(manifest, user="alice")
        wait_for(state_is(svc, "survivor", RUNNING), step=svc.tick)
        [pod] = q.pods("survivor")
        assert pod["spec"]["nodeName"] == "node-a"
        job = q.job("survivor")
        assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
        spare = "node-a-spare"
        node_agent.add_node(spare, allocatable={"nvidia.com/gpu": "2"},
                            labels={"nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "2"})
        node_agent.lose_node("node-a")

        def unknown_since():
            ready = [c for c in control_plane.kube.get("/api/v1/nodes/node-a")["status"]["conditions"]
                     if c["type"] == "Ready"][0]
            return parse_time(ready["lastTransitionTime"]) if ready["status"] != "True" else None

        lost_at = wait_for(unknown_since, timeout=90, what="node-a not Ready")
        wait_for(lambda: rec(svc, "survivor")["evictions"] == 1, step=svc.tick, timeout=60, what="evicted")
        evicted = rec(svc, "survivor")
        [entry] = evicted["preemptions"]["history"]
        assert entry["reason"] == "PodsReadyTimeout" and "node-a" in entry["message"]
        assert abs(entry["at"] - lost_at) <= 2  # billed until its Pod stopped running, not until now
        assert "node-a" in (evicted["message"] or "") and "PodsReady timeout" in evicted["message"]
        try:
            wait_for(state_is(svc, "survivor", SUCCEEDED), step=svc.tick, timeout=120)
        except AssertionError:
            import json
            r, j = rec(svc, "survivor"), q.job("survivor")
            print("REC", r["state"], r["reason"], r["message"], r["evictions"])
            print("JOB", json.dumps({"spec": {k: v for k, v in j["spec"].items() if k != "template"}, "status": j["status"]}))
            for p in q.pods("survivor"):
                print("POD", p["metadata"]["name"], p["metadata"].get("deletionTimestamp"), p["spec"].get("nodeName"),
                      json.dumps(p["status"].get("conditions")), p["status"].get("phase"))
            raise
        done = rec(svc, "survivor")
        assert done["evictions"] == 1
        ran = [p for p in q.pods("survivor") if p["status"].get("phase") == "Succeeded"]
        assert [p["spec"]["nodeName"] for p in ran] == [spare]
        assert "done on node-a-spare" in svc.read_log("team-a", "survivor", user="alice")["text"]
        assert "node-a" in done["preemptions"]["history"][0]["message"]  # the node named in its history
    finally:
        node_agent.set_heartbeat("node-a", True)
        if spare:
            node_agent.remove_node(spare)
        _force_delete_pods(control_plane, q.ns)
        q.close()
        wait_for(lambda: not control_plane.kube.get("/api/v1/nodes/node-a")["spec"].get("taints"), timeout=90,
                 what="node-a Ready and untainted again")


def test_an_admitted_job_whose_pod_cannot_be_scheduled_is_evicted_at_the_timeout_and_stops_billing(
        control_plane, node_agent, tmp_path):
    """The H100s taken by a Pod outside the queue after the service read its inventory: the
    admitted job's Pod is Unschedulable; at ``pods_ready_timeout`` the workload is evicted
    (PodsReadyTimeout), its Job suspended, and it waits out its requeuing backoff in the queue,
    its cost no longer growing."""
    q = KubeQueue(control_plane, tmp_path)
    try:
        svc = q.service(pods_ready_timeout=4, requeue_backoff_base=600)
        control_plane.kube.create(f"/api/v1/namespaces/{q.ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h100-hog"},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
                     "containers": [{"name": "x", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "4"}},
                                     "command": [PY, "-c", "import time; time.sleep(600)"]}]}})
        wait_for(lambda: control_plane.kube.get(f"/api/v1/namespaces/{q.ns}/pods/h100-hog")["status"].get("phase")
                 == "Running", what="the H100s taken")
        svc.submit({"name": "stuck", "command": [PY, "-c", "print('ran')"], "gpus": 1, "flavor": "nvidia-h100"},
                   user="alice")
        wait_for(lambda: "unschedulable" in (rec(svc, "stuck")["message"] or ""), step=svc.tick,
                 what="Unschedulable shown")
        assert rec(svc, "stuck")["state"] == "Admitted"
        wait_for(lambda: rec(svc, "stuck")["evictions"] == 1, step=svc.tick, timeout=60, what="evicted")
        r = rec(svc, "stuck")
        assert r["state"] == PENDING and r["reason"] == "PodsReadyTimeout"
        assert "Exceeded the PodsReady timeout" in r["message"] and "backoff 600 s" in r["message"]
        assert "not scheduled" in r["message"] and "Insufficient nvidia.com/gpu" in r["message"]
        assert q.job("stuck")["spec"]["suspend"] is True
        wait_for(lambda: not q.pods("stuck"), what="its Pod deleted by the Job controller")
        cost = r["costUsd"]
        assert cost > 0
        for _ in range(10):
            svc.tick()
            time.sleep(0.2)
        assert rec(svc, "stuck")["costUsd"] == cost and rec(svc, "stuck")["state"] == PENDING
        # The queue restarts during the backoff: the workload still waits it out (its requeueState
        # is in the ledger, as Kueue keeps it in the Workload's status), neither admitted at once
        # nor counted evicted again; its Job stays suspended and its cost stays what it was.
        message = r["message"]
        q.close_service(svc)
        svc = q.service(pods_ready_timeout=4, requeue_backoff_base=600)
        for _ in range(10):
            svc.tick()
            time.sleep(0.2)
        r = rec(svc, "stuck")
        assert (r["state"], r["reason"], r["evictions"], r["costUsd"]) == (PENDING, "PodsReadyTimeout", 1, cost), r
        assert "backoff 600 s" in r["message"] and r["message"] == message
        assert q.job("stuck")["spec"]["suspend"] is True and not q.pods("stuck")
    finally:
        # the H100s free again before the next test's service reads its inventory
        _force_delete_pods(control_plane, q.ns)
        q.close()
        wait_for(lambda: not [p for p in control_plane.kube.list("/api/v1/pods")[0]
                              if p["metadata"]["name"] == "h100-hog"], what="the hog gone")


def test_nothing_is_admitted_onto_cordoned_nodes(control_plane, node_agent, tmp_path):
    """The inventory follows the Nodes (the backend's Node watch): every H100 node cordoned after
    the service started, an H100 job waits unadmitted (no Job created, no cost), and runs once the
    node is uncordoned."""
    q = KubeQueue(control_plane, tmp_path)
    try:
        svc = q.service()
        control_plane.kube.merge_patch("/api/v1/nodes/node-b", {"spec": {"unschedulable": True}})
        wait_for(lambda: any(t.key == "node.kubernetes.io/unschedulable" for n in svc.inventory.nodes
                             if n.name == "node-b" for t in n.taints), step=svc.tick, what="the cordon followed")
        svc.submit({"name": "waits", "command": [PY, "-c", "print('ran')"], "gpus": 1, "flavor": "nvidia-h100"},
                   user="alice")
        for _ in range(10):
            svc.tick()
            time.sleep(0.1)
        assert rec(svc, "waits")["state"] == PENDING and q.job("waits") is None
        control_plane.kube.merge_patch("/api/v1/nodes/node-b", {"spec": {"unschedulable": False}})
        wait_for(state_is(svc, "waits", SUCCEEDED), step=svc.tick)
    finally:
        control_plane.kube.merge_patch("/api/v1/nodes/node-b", {"spec": {"unschedulable": False}})
        q.close()


def test_finished_jobs_are_removed_after_their_ttl_and_deleted_priority_classes_refused(control_plane,
                                                                                        node_agent, tmp_path):
    q = KubeQueue(control_plane, tmp_path)
    try:
        control_plane.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": "gq-doomed"}, "value": 50})
        svc = q.service(job_ttl_seconds=2)
        wait_for(lambda: svc.k8s.priority_classes.get("", "gq-doomed"), what="the PriorityClass watched")
        svc.submit({"name": "brief", "command": [PY, "-c", "print('hi')"], "gpus": 1,
                    "priorityClass": "gq-doomed"}, user="alice")
        job = wait_for(lambda: q.job("brief"), step=svc.tick, what="the Job")
        assert job["spec"]["ttlSecondsAfterFinished"] == 2
        wait_for(state_is(svc, "brief", SUCCEEDED), step=svc.tick)
        assert rec(svc, "brief")["exitCode"] == 0
        wait_for(lambda: q.job("brief") is None and not q.pods("brief"), timeout=60,
                 what="the finished Job and its Pod removed by the TTL-after-finished controller")
        control_plane.kube.delete("/apis/scheduling.k8s.io/v1/priorityclasses/gq-doomed")
        wait_for(lambda: svc.k8s.priority_classes.get("", "gq-doomed") is None, timeout=5,
                 what="the deletion seen by the watch")
        with pytest.raises(ValidationError) as e:  # answered 400 by the REST API
            svc.submit({"name": "late", "command": ["true"], "gpus": 1, "priorityClass": "gq-doomed"},
                       user="alice")
        assert e.value.field == "priorityClass" and "gq-doomed" in e.value.message
        assert q.job("late") is None
    finally:
        q.close()


def test_a_pod_deleted_by_hand_holds_its_gpus_until_it_is_gone(control_plane, node_agent, tmp_path):
    """A running job's Pod deleted with ``kubectl delete pod`` (grace 3 s; the process ignores
    SIGTERM): while the Pod object exists, terminating, the workload keeps its quota and nothing
    else is admitted onto its GPUs; once it is gone the workload fails saying its Pod was deleted,
    ended at the container's ``finishedAt``, and the next job runs."""
    q = KubeQueue(control_plane, tmp_path)
    try:
        svc = q.service()
        stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        svc.submit({"name": "victim", "command": [PY, "-c", stubborn], "gpus": 2, "flavor": "nvidia-a100"},
                   user="alice")
        wait_for(state_is(svc, "victim", RUNNING), step=svc.tick)
        svc.submit({"name": "next", "command": [PY, "-c", "print('next')"], "gpus": 2, "flavor": "nvidia-a100"},
                   user="alice")
        [pod] = q.pods("victim")
        path = f"/api/v1/namespaces/{q.ns}/pods/{pod['metadata']['name']}"
        control_plane.kube.request("DELETE", path, body={"kind": "DeleteOptions", "apiVersion": "v1",
                                                         "gracePeriodSeconds": 3})
        seen_terminating, finished = False, None
        while True:
            svc.tick()
            try:
                cur = control_plane.kube.get(path)
            except KubeApiError as err:
                assert err.status == 404
                break
            seen_terminating = seen_terminating or bool(cur["metadata"].get("deletionTimestamp"))
            term = ((cur["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated")
            finished = parse_time(term["finishedAt"]) if term else finished
            assert rec(svc, "victim")["state"] == RUNNING and rec(svc, "next")["state"] == PENDING
            time.sleep(0.1)
        assert seen_terminating
        wait_for(state_is(svc, "victim", FAILED), step=svc.tick)
        v = rec(svc, "victim")
        assert f"its Pod {pod['metadata']['name']} was deleted" in v["message"] and v["exitCode"] == 137
        if finished is not None:  # the container's end, as the stand-in (kubelet) wrote it
            assert v["finishedAt"] == max(finished, v["startedAt"])
        wait_for(state_is(svc, "next", SUCCEEDED), step=svc.tick)
        [npod] = q.pods("next")  # started after the victim's container ended
        assert parse_time(npod["status"]["startTime"]) >= v["finishedAt"]
    finally:
        q.close()


def test_a_refused_delete_is_said_on_the_workload_and_its_job_keeps_its_quota(control_plane, node_agent, tmp_path):
    """A role without ``delete jobs``: a cancel's DELETE is answered 403; after three refusals
    the workload's message names the verb and resource (not a silent hang), the Job still runs
    and keeps its GPUs (the truth), and the delete goes on being retried."""
    rules = [dict(r, verbs=[v for v in r["verbs"] if v != "delete"]) if r["resources"] == ["jobs"] else r
             for r in documented_cluster_role()["rules"]]
    q = KubeQueue(control_plane, tmp_path, rules=rules)
    try:
        svc = q.service()
        access = wait_for(lambda: (lambda a: a if a["checked"] else None)(svc.info("alice")["clusterAccess"]),
                          what="the access check")
        assert access["missing"] == ["delete batch/jobs"]
        svc.submit({"name": "sticky", "command": [PY, "-c", "import time; time.sleep(600)"], "gpus": 2,
                    "flavor": "nvidia-a100"}, user="alice")
        wait_for(state_is(svc, "sticky", RUNNING), step=svc.tick)
        svc.cancel("team-a", "sticky", user="alice")
        msg = wait_for(lambda: (lambda m: m if "may not delete batch/jobs" in m else None)(
            rec(svc, "sticky")["message"] or ""), step=svc.tick, timeout=60, what="the refusal said")
        assert "forbidden" in msg and "refused 3 times" in msg
        assert q.job("sticky") is not None and [p for p in q.pods("sticky") if p["status"].get("phase") == "Running"]
        assert svc.k8s.running()
        svc.submit({"name": "after", "command": ["true"], "gpus": 2, "flavor": "nvidia-a100"}, user="alice")
        for _ in range(5):
            svc.tick()
            time.sleep(0.1)
        assert rec(svc, "after")["state"] == PENDING  # the A100 quota is still held
    finally:
        for svc in list(q.services):
            q.close_service(svc)
        control_plane.kube.delete(f"/apis/batch/v1/namespaces/{q.ns}/jobs/sticky")
        q.close()
