"""Pure pieces of issue 33: the ClusterRole the start-up check asks about is the documented one;
403 messages name verb and resource; Kueue's PodsReady of a Job; created Jobs carry a
podFailurePolicy only where batch/v1 allows it, and their TTL."""

from __future__ import annotations

from jupyter_gpuqueue.backends.k8s_client import KubeApiError
from jupyter_gpuqueue.backends.k8s_jobs import IGNORE_DISRUPTIONS, JobRequest, build_job
from jupyter_gpuqueue.backends.k8s_rbac import CLUSTER_ROLE_RULES, forbidden_what, required
from jupyter_gpuqueue.backends.k8s_status import pods_ready

from .real.kubetools import documented_cluster_role


def test_the_checked_rules_are_the_documented_cluster_role():
    documented = [(r["apiGroups"][0], tuple(r["resources"]), tuple(r["verbs"]))
                  for r in documented_cluster_role()["rules"]]
    assert documented == [(g, res, verbs) for g, res, verbs, _ in CLUSTER_ROLE_RULES]
    kube = required(["kubernetes"])
    assert ("batch", "jobs/status", "update") in kube and ("scheduling.k8s.io", "priorityclasses", "watch") in kube
    assert not [r for r in kube if r[0] in ("kueue.x-k8s.io", "scheduling.volcano.sh")]


def test_a_403_names_the_verb_and_resource():
    err = KubeApiError(403, "Forbidden", 'jobs.batch "low" is forbidden: User "system:serviceaccount:kube-system:gq" '
                       'cannot update resource "jobs/status" in API group "batch" in the namespace "ns"')
    assert forbidden_what(err) == "update batch/jobs/status"
    assert forbidden_what(KubeApiError(403, "Forbidden", 'pods "p" is forbidden: User "x" cannot get resource '
                                       '"pods/log" in API group "" in the namespace "n"')) == "get pods/log"
    assert forbidden_what(KubeApiError(403, "Forbidden", "denied by a webhook")) is None


def _pod(name, node, ready, phase="Running", deleting=False):
    md = {"name": name}
    if deleting:
        md["deletionTimestamp"] = "2026-11-28T03:50:32Z"
    return {"metadata": md, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "lastTransitionTime": "2026-11-28T03:50:00Z"}]}}


def _node(ready, at="2026-11-28T03:49:50Z"):
    return {"status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown",
                                       "lastTransitionTime": at}]}}


def test_pods_ready_as_kueue_counts_it():
    job = {"spec": {"parallelism": 2, "completions": 2}, "status": {}}
    nodes = {"a": _node(True), "b": _node(False)}
    ok, why, since = pods_ready(job, [_pod("p0", "a", True), _pod("p1", "a", True)], nodes)
    assert ok and not why
    ok, why, since = pods_ready(job, [_pod("p0", "a", True), _pod("p1", "b", True)], nodes)
    assert not ok and why == ["pod p1 on node b: the node is not Ready (Unknown)"] and since == 1795837790.0
    ok, why, _ = pods_ready(job, [], nodes)
    assert not ok and why == ["0 of 2 Pods ready"]
    ok, _, _ = pods_ready(job, [_pod("p0", "a", False, "Succeeded"), _pod("p1", "a", True)], nodes)
    assert ok  # succeeded + ready >= podsCount
    ok, why, _ = pods_ready({"spec": {"parallelism": 1}}, [_pod("p0", "a", True, deleting=True)], nodes)
    assert not ok and "terminating" in why[0]


def test_created_jobs_ignore_disruptions_and_carry_their_ttl():
    req = JobRequest(uid="u", namespace="ns", name="j", local_queue="q",
                     spec={"podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1}}], "command": ["true"]})
    job = build_job(req, None, image="busybox", ttl_seconds_after_finished=60)
    assert job["spec"]["podFailurePolicy"] == IGNORE_DISRUPTIONS and job["spec"]["ttlSecondsAfterFinished"] == 60
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "m"},
                "spec": {"ttlSecondsAfterFinished": 5, "template": {"spec": {
                    "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "x"}]}}}}
    req.spec = {"source": "manifest", "manifest": manifest, "podSets": []}
    job = build_job(req, None, ttl_seconds_after_finished=60)
    # batch/v1 validation: podFailurePolicy only with restartPolicy Never; the manifest's TTL is kept
    assert "podFailurePolicy" not in job["spec"] and job["spec"]["ttlSecondsAfterFinished"] == 5
    assert "ttlSecondsAfterFinished" not in build_job(req.__class__(**{**req.__dict__, "spec": {
        "podSets": [{"count": 1, "requests": {}}], "command": ["true"]}}), None, image="b")["spec"]


def _k8s_node(name, *, unschedulable=False, ready="True", gpus="2"):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100"}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": gpus}, "conditions": [{"type": "Ready", "status": ready}]}}


def test_the_inventory_follows_the_nodes():
    from jupyter_gpuqueue.engine.model import Inventory
    from jupyter_gpuqueue.engine.placement import DeviceAllocator
    from jupyter_gpuqueue.inventory.kubernetes import follow_nodes, node_from_k8s

    inv = Inventory(nodes=[node_from_k8s(_k8s_node("a")), node_from_k8s(_k8s_node("b"))], source="kubernetes")
    alloc = DeviceAllocator(inv)
    assert follow_nodes(inv, [_k8s_node("a"), _k8s_node("b")]) == ([], [])
    changed, added = follow_nodes(inv, [_k8s_node("a", unschedulable=True), _k8s_node("c")])
    assert changed == ["a", "b"] and [n.name for n in added] == ["c"]
    a, b = inv.nodes
    assert [t.key for t in a.taints] == ["node.kubernetes.io/unschedulable"]
    assert [t.key for t in b.taints] == ["node.kubernetes.io/unreachable"]  # deleted
    alloc.add_node(added[0])
    assert [n.name for n in inv.nodes] == ["a", "b", "c"] and alloc.totals("nvidia.com/gpu", inv.nodes) == (6, 6)
    changed, _ = follow_nodes(inv, [_k8s_node("a", ready="Unknown"), _k8s_node("b", ready="False"), _k8s_node("c")])
    assert [t.key for t in a.taints] == ["node.kubernetes.io/unreachable"]
    assert [t.key for t in b.taints] == ["node.kubernetes.io/not-ready"]
    follow_nodes(inv, [_k8s_node("a"), _k8s_node("b"), _k8s_node("c")])
    assert not a.taints and not b.taints
