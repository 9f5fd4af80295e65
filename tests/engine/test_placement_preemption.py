"""Preemption for placement: the quota fits, but the devices are held by lower-priority workloads.

Kueue admits by quota and leaves nodes to kube-scheduler, whose DefaultPreemption then evicts
lower-priority pods on one node per pod (``SelectVictimsOnNode``: remove every lower-priority pod,
check the fit, reprieve the most important first; ``pickOneNodeForPreemption``: the node whose
victims have the lowest highest priority, then the lowest sum of priorities, then the fewest). We
are both, so the engine does it when placement, not quota, blocks a workload, within the rules of
the preemptor's ClusterQueue (docs/engine.md, "Where we differ from Kueue"). Issue 15, item 8.
"""

from __future__ import annotations

from jupyter_gpuqueue.engine.model import (
    ANY,
    GPU,
    LOWER_PRIORITY,
    NEVER,
    ClusterQueuePreemption,
    GpuDevice,
    Inventory,
    Node,
    PodSet,
    PriorityClass,
    Workload,
)
from jupyter_gpuqueue.engine.preemption import IN_NODE_PLACEMENT
from jupyter_gpuqueue.engine.scheduler import Scheduler

from builders import admitted, make_config, make_cq, wl

PREEMPT = ClusterQueuePreemption(within_cluster_queue=LOWER_PRIORITY, reclaim_within_cohort=ANY)


def node(name, n, flavor="a100"):
    return Node(name, {"gpu": flavor}, gpus=[GpuDevice(i, f"GPU-{name}-{i}") for i in range(n)])


def cq(name, nominal, *, cohort="research", preemption=PREEMPT, **kw):
    return make_cq(name, [("a100", nominal)], cohort=cohort, preemption=preemption, **kw)


def gang(cq_name, name, pods, gpus_each, *, prio=0):
    w = wl(cq_name, name, gpus_each, prio=prio)
    w.pod_sets = [PodSet("workers", pods, {GPU: gpus_each})]
    return w


def devices_of(s: Scheduler, name: str) -> list[tuple[str, str]]:
    w = next(w for k, w in s.admitted.items() if k.endswith("/" + name))
    return [(p.node, d) for p in w.admission.placements for d in p.devices]


def run(s: Scheduler, now: float = 0.0):
    """One cycle; returns the victims chosen, as names."""
    return [p.victim.split("/")[1] for p in s.schedule(now).preempted]


# -- the issue's scenario --------------------------------------------------------------------------


def test_a_high_priority_job_preempts_a_development_notebook_holding_the_devices_it_needs():
    # team-a 4 + team-b 3 = 7 A100s of quota in the cohort, but 6 on the node: the quota of both
    # fits, the devices do not.
    s = Scheduler(make_config(cq("a", 4), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "notebook", 1, prio=1000))
    s.run_until_stable(0)
    assert admitted(s) == {"notebook"}
    s.add_workload(wl("a", "high", 6, prio=100000))
    r = s.schedule(1)
    assert [(p.victim, p.preemptor, p.reason, p.victim_cluster_queue) for p in r.preempted] == [
        ("ns-b/notebook", "ns-a/high", IN_NODE_PLACEMENT, "b")]
    assert s.reason("ns-a/high") == ("Pending", "Pending the preemption of 1 workload(s)")

    # While the notebook stops: no second preemption, and the five free GPUs are kept for the
    # preemptor (nominated): a lower-priority job does not take them.
    s.add_workload(wl("b", "low", 1, prio=10))
    for t in (2, 3):
        assert run(s, t) == []
    assert admitted(s) == {"notebook"}
    assert s.reason("ns-a/high") == ("Pending", "Pending the preemption of 1 workload(s)")
    assert s.reason("ns-b/low")[0] == "PlacementFailed"

    s.evict("ns-b/notebook", 4)
    s.run_until_stable(4, evict_at_once=False)
    assert admitted(s) == {"high"}
    assert sorted(d for _, d in devices_of(s, "high")) == ["0", "1", "2", "3", "4", "5"]
    # the notebook waits for devices; it preempts nobody (nothing of lower priority runs)
    assert s.reason("ns-b/notebook")[0] == "PlacementFailed"
    assert s.workloads["ns-b/notebook"].evictions == 1


def test_no_preemption_when_quota_and_devices_fit_or_when_nothing_of_lower_priority_runs():
    s = Scheduler(make_config(cq("a", 4), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "b1", 1, prio=100))
    s.add_workload(wl("a", "a1", 5, prio=100))
    s.run_until_stable(0)
    assert admitted(s) == {"b1", "a1"}
    s.add_workload(wl("a", "same", 1, prio=100))  # equal priority: kube-scheduler preempts only lower
    assert run(s, 1) == []
    assert s.reason("ns-a/same")[0] == "PlacementFailed"


# -- kube-scheduler's choice of victims and node ----------------------------------------------------


def test_victims_are_the_fewest_and_least_important_on_one_node():
    # n1: low-a (1) holds 2 GPUs, mid-a (5) holds 2; n2: low-b and low-c (1) hold 1 each, mid-b (5) 2.
    # A 2-GPU pod: on n1 mid-a is reprieved (the most important first) and low-a is the victim; on
    # n2 both low-b and low-c are. Same highest priority (1); the lower sum of priorities, n1, wins.
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 4), node("n2", 4)]))
    for name, gpus, prio in [("low-a", 2, 1), ("mid-a", 2, 5), ("low-b", 1, 1), ("low-c", 1, 1), ("mid-b", 2, 5)]:
        s.add_workload(wl("a", name, gpus, prio=prio))
        s.run_until_stable(0)
    assert {n for n, _ in devices_of(s, "low-a")} == {n for n, _ in devices_of(s, "mid-a")} != {
        n for n, _ in devices_of(s, "low-b")}
    s.add_workload(wl("a", "high", 2, prio=10))
    assert run(s, 1) == ["low-a"]


def test_the_node_with_the_lowest_highest_priority_victim_wins_over_fewer_victims():
    # n1: one workload of priority 5 holds both GPUs; n2: two of priority 1 hold one each.
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 2), node("n2", 2)]))
    s.add_workload(wl("a", "mid", 2, prio=5))
    s.run_until_stable(0)
    s.add_workload(wl("a", "low-1", 1, prio=1))
    s.add_workload(wl("a", "low-2", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 2, prio=10))
    assert sorted(run(s, 1)) == ["low-1", "low-2"]


def test_a_gang_preempts_on_every_node_its_pods_need_or_not_at_all():
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 4), node("n2", 4)]))
    for name, gpus in [("fill-1", 3), ("fill-2", 3), ("small-1", 1), ("small-2", 1)]:
        s.add_workload(wl("a", name, gpus, prio=1))
        s.run_until_stable(0)
    s.add_workload(gang("a", "gang", 2, 4, prio=10))  # 2 pods × 4 GPUs: both nodes emptied
    assert sorted(run(s, 1)) == ["fill-1", "fill-2", "small-1", "small-2"]
    for name in ("fill-1", "fill-2", "small-1", "small-2"):
        s.evict(f"ns-a/{name}", 2)
    s.run_until_stable(2, evict_at_once=False)
    assert "gang" in admitted(s)
    assert sorted(n for n, _ in devices_of(s, "gang")) == ["n1"] * 4 + ["n2"] * 4


def test_a_gang_that_cannot_be_placed_whole_preempts_nobody():
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 4), node("n2", 4)]))
    s.add_workload(wl("a", "low", 4, prio=1))
    s.add_workload(wl("a", "higher", 1, prio=50))  # on the other node; not preemptible by the gang
    s.run_until_stable(0)
    s.add_workload(gang("a", "gang", 2, 4, prio=10))
    assert run(s, 1) == []
    assert admitted(s) == {"low", "higher"}
    assert s.reason("ns-a/gang")[0] == "PlacementFailed"


def test_a_victim_spanning_nodes_is_evicted_once_and_frees_both():
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 2), node("n2", 2)]))
    s.add_workload(gang("a", "spread", 2, 2, prio=1))
    s.run_until_stable(0)
    s.add_workload(gang("a", "gang", 2, 2, prio=10))
    assert run(s, 1) == ["spread"]


def test_unneeded_victims_of_earlier_pods_are_reprieved_over_the_whole_gang():
    # n1: a (priority 1) and b (5) hold one GPU each; n2: w (2) holds both. Pod by pod, pod 1 of the
    # 2 × 1-GPU gang evicts a on n1 (the lowest victim), pod 2 then needs w's node. With w gone both
    # pods fit on n2, so a is reprieved: the gang evicts only w.
    s = Scheduler(make_config(cq("a", 20, cohort=None)), Inventory([node("n1", 2), node("n2", 2)]))
    for name, gpus, prio in [("a", 1, 1), ("b", 1, 5), ("w", 2, 2)]:
        s.add_workload(wl("a", name, gpus, prio=prio))
        s.run_until_stable(0)
    assert {n for n, _ in devices_of(s, "w")} == {"n2"}
    s.add_workload(gang("a", "gang", 2, 1, prio=10))
    assert run(s, 1) == ["w"]


# -- within the rules of the preemptor's ClusterQueue ---------------------------------------------


def test_within_cluster_queue_never_and_reclaim_never_preempt_nothing():
    policy = ClusterQueuePreemption(within_cluster_queue=NEVER, reclaim_within_cohort=NEVER)
    s = Scheduler(make_config(cq("a", 4, preemption=policy), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("a", "mine", 1, prio=1))
    s.add_workload(wl("b", "theirs", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 5, prio=100))
    assert run(s, 1) == []
    assert s.reason("ns-a/high")[0] == "PlacementFailed"


def _three_queues(policy, *, a_quota=5):
    # a and b share the cohort (5 + 3 = 8 A100s of quota for 6 devices); `lone` has none.
    cfg = make_config(cq("a", a_quota, preemption=policy), cq("b", 3), cq("lone", 2, cohort=None))
    s = Scheduler(cfg, Inventory([node("n1", 6)]))
    s.add_workload(wl("lone", "outside", 1, prio=1))
    s.add_workload(wl("b", "theirs", 1, prio=1))
    s.add_workload(wl("a", "mine", 1, prio=2))
    s.run_until_stable(0)
    assert admitted(s) == {"outside", "theirs", "mine"}
    return s


def test_within_cluster_queue_only_preempts_its_own_queue():
    policy = ClusterQueuePreemption(within_cluster_queue=LOWER_PRIORITY, reclaim_within_cohort=NEVER)
    s = _three_queues(policy)
    s.add_workload(wl("a", "high", 4, prio=100))
    assert run(s, 1) == ["mine"]

    s = _three_queues(policy)
    s.add_workload(wl("a", "high", 5, prio=100))  # would need `theirs` or `outside` too: not allowed
    assert run(s, 1) == []
    assert s.reason("ns-a/high")[0] == "PlacementFailed"


def test_reclaim_within_cohort_preempts_other_queues_of_the_cohort_only():
    policy = ClusterQueuePreemption(within_cluster_queue=NEVER, reclaim_within_cohort=LOWER_PRIORITY)
    s = _three_queues(policy)
    s.add_workload(wl("a", "high", 4, prio=100))
    assert run(s, 1) == ["theirs"]

    s = _three_queues(policy)
    s.add_workload(wl("a", "high", 5, prio=100))  # needs `mine` or `outside` as well: neither allowed
    assert run(s, 1) == []
    assert s.reason("ns-a/high")[0] == "PlacementFailed"


def test_both_rules_together_take_the_least_important():
    s = _three_queues(PREEMPT)
    s.add_workload(wl("a", "high", 4, prio=100))  # theirs (1) before mine (2); never outside
    assert run(s, 1) == ["theirs"]
    s = _three_queues(PREEMPT)
    s.add_workload(wl("a", "high", 5, prio=100))
    assert sorted(run(s, 1)) == ["mine", "theirs"]


def test_a_priority_class_with_preemption_policy_never_does_not_preempt():
    cfg = make_config(cq("a", 4), cq("b", 3))
    cfg.priority_classes["polite"] = PriorityClass("polite", 100, preemption_policy="Never")
    s = Scheduler(cfg, Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "notebook", 1, prio=1))
    s.run_until_stable(0)
    w = wl("a", "polite-job", 6, prio=100)
    w.priority_class, w.priority_class_kind = "polite", "PriorityClass"
    s.add_workload(w)
    assert run(s, 1) == []
    assert s.reason("ns-a/polite-job")[0] == "PlacementFailed"


def test_quota_preemption_is_unchanged_and_comes_first():
    # When quota blocks, Kueue's preemption decides (here: within the ClusterQueue, by quota), and
    # placement preemption is not involved.
    s = Scheduler(make_config(cq("a", 2, cohort=None)), Inventory([node("n1", 6)]))
    s.add_workload(wl("a", "low", 2, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 2, prio=10))
    r = s.schedule(1)
    assert [(p.victim, p.reason) for p in r.preempted] == [("ns-a/low", "InClusterQueue")]


def test_removing_a_waiting_preemptor_frees_its_nominated_devices():
    s = Scheduler(make_config(cq("a", 4), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "notebook", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 6, prio=100))
    assert run(s, 1) == ["notebook"]
    s.remove_workload("ns-a/high")
    assert s.allocator.nominated == {}
    s.add_workload(wl("b", "low", 1, prio=1))
    run(s, 2)
    assert "low" in admitted(s)


def test_a_higher_priority_workload_may_take_devices_nominated_to_a_lower_one():
    s = Scheduler(make_config(cq("a", 4), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "notebook", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 6, prio=100))
    assert run(s, 1) == ["notebook"]
    s.add_workload(wl("b", "urgent", 1, prio=1000))
    run(s, 2)
    assert "urgent" in admitted(s)


def test_run_until_stable_evicts_and_admits_the_preemptor():
    s = Scheduler(make_config(cq("a", 4), cq("b", 3)), Inventory([node("n1", 6)]))
    s.add_workload(wl("b", "notebook", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "high", 6, prio=100))
    s.run_until_stable(1)
    assert admitted(s) == {"high"}
    assert s.workloads["ns-b/notebook"].evictions == 1
    assert s.reason("ns-b/notebook")[0] == "PlacementFailed"


def test_workload_builder_is_a_workload():  # the helpers build what the scheduler takes
    assert isinstance(gang("a", "g", 2, 1), Workload)


# -- issue 34 item 8: quota above the hardware must not invert priorities ---------------------------

DEVELOPMENT, NORMAL, HIGH = 1000, 10000, 100000


def step(s: Scheduler, t: float) -> list[str]:
    """One cycle whose victims stop at once (as the live service reports them); their names."""
    r = s.schedule(t)
    for p in r.preempted:
        s.evict(p.victim, t)
    return [p.victim.split("/")[1] for p in r.preempted]


def issue_scene() -> Scheduler:
    """team-a's A100 quota (100) above the 6 GPUs: alice's 4-GPU and bob's 2-GPU experiment-normal
    jobs hold every GPU, alice's development notebook waits for a device (its quota fits)."""
    s = Scheduler(make_config(cq("a", 100), cq("b", 2)), Inventory([node("n1", 6)]))
    s.add_workload(wl("a", "alice-4gpu", 4, prio=NORMAL))
    s.add_workload(wl("b", "bob-2gpu", 2, prio=NORMAL))
    s.run_until_stable(0)
    s.add_workload(wl("a", "notebook", 1, prio=DEVELOPMENT))
    s.run_until_stable(1)
    assert admitted(s) == {"alice-4gpu", "bob-2gpu"}
    assert s.reason("ns-a/notebook")[0] == "PlacementFailed"
    return s


def test_the_gpus_freed_for_a_higher_priority_job_never_go_to_a_lower_priority_notebook():
    s = issue_scene()
    bob_devices = set(devices_of(s, "bob-2gpu"))
    s.add_workload(wl("a", "high-1gpu", 1, prio=HIGH))
    for t in range(2, 8):
        step(s, t)
    # the preemptor runs on a device its victim freed; the victim's other device waits for the
    # victim (experiment-normal), not for the development notebook
    assert admitted(s) == {"alice-4gpu", "high-1gpu"}
    assert set(devices_of(s, "high-1gpu")) <= bob_devices
    assert s.reason("ns-a/notebook")[0] == "PlacementFailed"
    assert s.workloads["ns-b/bob-2gpu"].evictions == 1
    # once the preemptor ends, the evicted job starts again on its GPUs, before the notebook
    s.remove_workload("ns-a/high-1gpu", 8)
    for t in range(9, 12):
        step(s, t)
    assert admitted(s) == {"alice-4gpu", "bob-2gpu"}
    assert set(devices_of(s, "bob-2gpu")) == bob_devices
    assert s.allocator.held == {}


def test_a_one_gpu_preemptor_evicts_the_smaller_of_equal_priority_victims():
    # the 4-GPU job started later: kube-scheduler's order alone (reprieve the earlier start) would
    # evict it, losing 4 GPUs of work and freeing 3 that the preemptor does not need
    s = Scheduler(make_config(cq("a", 100)), Inventory([node("n1", 6)]))
    s.add_workload(wl("a", "small", 2, prio=NORMAL))
    s.run_until_stable(0)
    s.add_workload(wl("a", "big", 4, prio=NORMAL))
    s.run_until_stable(1)
    s.add_workload(wl("a", "high", 1, prio=HIGH))
    assert step(s, 2) == ["small"]


def test_devices_held_for_an_evicted_job_go_to_higher_priority_work_without_another_preemption():
    s = issue_scene()
    s.add_workload(wl("a", "high-1gpu", 1, prio=HIGH))
    for t in range(2, 5):
        step(s, t)
    assert admitted(s) == {"alice-4gpu", "high-1gpu"}
    # a second high-priority job takes bob's other GPU (held for bob, of lower priority): no
    # preemption, the GPU is free; an equal-priority job of team-a does not take it
    s.add_workload(wl("a", "normal-1gpu", 1, prio=NORMAL))
    assert step(s, 5) == [] and "normal-1gpu" not in admitted(s)
    s.add_workload(wl("a", "high-again", 1, prio=HIGH))
    victims = []
    for t in range(6, 9):
        victims += step(s, t)
    assert victims == [] and "high-again" in admitted(s)


def test_what_is_held_for_an_evicted_job_is_forgotten_when_it_leaves_the_queue():
    s = issue_scene()
    s.add_workload(wl("a", "high-1gpu", 1, prio=HIGH))
    for t in range(2, 5):
        step(s, t)
    assert set(s.allocator.held) == {"ns-b/bob-2gpu"}
    s.remove_workload("ns-b/bob-2gpu", 5)  # cancelled while it waited
    assert s.allocator.held == {}
    for t in range(6, 9):
        step(s, t)
    assert "notebook" in admitted(s)


def test_what_is_held_for_an_evicted_job_survives_a_configuration_change_and_a_snapshot():
    from jupyter_gpuqueue.engine.snapshot import snapshot

    s = issue_scene()
    s.add_workload(wl("a", "high-1gpu", 1, prio=HIGH))
    for t in range(2, 5):
        step(s, t)
    held = dict(s.allocator.held)
    assert set(held) == {"ns-b/bob-2gpu"}
    assert snapshot(s).allocator.held == held  # the estimator's forward run keeps it too
    s.update_config(make_config(cq("a", 100), cq("b", 2)))  # an admin edits a quota
    assert s.allocator.held == held
    for t in range(5, 8):
        step(s, t)
    assert "notebook" not in admitted(s)


def test_a_preemptor_waits_for_the_devices_of_a_job_being_stopped_rather_than_preempting_another():
    # alice's 1-GPU job is being cancelled (the caller stops it: ``terminating``); the 1-GPU
    # experiment-high job waits for its GPU instead of evicting bob's 2-GPU job
    s = Scheduler(make_config(cq("a", 100), cq("b", 2)), Inventory([node("n1", 6)]))
    for name, queue, gpus in (("alice-3gpu", "a", 3), ("alice-1gpu", "a", 1), ("bob-2gpu", "b", 2)):
        s.add_workload(wl(queue, name, gpus, prio=NORMAL))
    s.run_until_stable(0)
    ending = set(devices_of(s, "alice-1gpu"))
    s.add_workload(wl("a", "notebook", 1, prio=DEVELOPMENT))
    s.terminating = {"ns-a/alice-1gpu"}
    s.add_workload(wl("a", "high-1gpu", 1, prio=HIGH))
    assert step(s, 1) == [] and step(s, 2) == []
    assert s.reason("ns-a/high-1gpu") == ("Pending", "Pending the end of 1 workload(s) being stopped, "
                                          "whose devices it will take")
    s.remove_workload("ns-a/alice-1gpu", 3)  # it stopped
    for t in range(4, 7):
        assert step(s, t) == []
    assert admitted(s) == {"alice-3gpu", "bob-2gpu", "high-1gpu"}
    assert set(devices_of(s, "high-1gpu")) == ending
    assert s.workloads["ns-b/bob-2gpu"].evictions == 0
