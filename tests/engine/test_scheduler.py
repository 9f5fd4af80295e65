"""Admission by the scheduling cycle: quota, cohort borrowing and lending, ordering, queueing
strategies, positions, gangs and device placement. Each test states the Kueue rule it checks."""

from __future__ import annotations

import pytest

from jupyter_gpuqueue.engine.model import (
    GPU,
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    GpuDevice,
    Inventory,
    LabelSelector,
    LocalQueue,
    MigDevice,
    Namespace,
    Node,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Toleration,
    Workload,
)
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions

from builders import admitted, flavor_of, make_config, make_cq, wl


def test_admits_within_nominal_quota_and_queues_the_rest_with_kueue_message():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)])))
    for n, g in [("w1", 2), ("w2", 2), ("w3", 1)]:
        s.add_workload(wl("a", n, g))
    s.run_until_stable(0)
    assert admitted(s) == {"w1", "w2"}
    reason, message = s.reason("ns-a/w3")
    assert reason == "NoFit"
    assert message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100, 1 more needed"
    )
    assert s.position("ns-a/w3") == (0, 0)


def test_exceeds_max_quota_when_no_flavor_could_ever_fit():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)])))
    s.add_workload(wl("a", "huge", 5))
    s.run_until_stable(0)
    assert s.reason("ns-a/huge")[0] == "ExceedsMaxQuota"
    assert "request > maximum capacity (5 > 4)" in s.reason("ns-a/huge")[1]


def test_flavors_are_tried_in_cluster_queue_order():
    s = Scheduler(make_config(make_cq("a", [("a100", 2), ("h100", 2)])))
    for n in ["w1", "w2", "w3"]:
        s.add_workload(wl("a", n, 1))
    s.run_until_stable(0)
    assert [flavor_of(s, n) for n in ["w1", "w2", "w3"]] == ["a100", "a100", "h100"]


def test_cohort_borrowing_and_borrowing_limit():
    # b may borrow a's idle quota, but at most borrowingLimit 1 (Kueue resource_node.available).
    s = Scheduler(make_config(make_cq("a", [("a100", 4)], cohort="co"), make_cq("b", [("a100", 2, 1)], cohort="co")))
    s.add_workload(wl("b", "big", 3))
    s.add_workload(wl("b", "bigger", 4))
    s.run_until_stable(0)
    assert admitted(s) == {"big"}
    assert s.usage("b")[("a100", GPU)] == 3
    # "bigger" (4) can never fit: nominal 2 + borrowingLimit 1.
    assert s.reason("ns-b/bigger")[0] == "ExceedsMaxQuota"


def test_lending_limit_keeps_quota_for_the_lender():
    # a lends at most 1 of its 4: b (nominal 0) can borrow only 1.
    s = Scheduler(make_config(make_cq("a", [("a100", 4, None, 1)], cohort="co"), make_cq("b", [("a100", 0)], cohort="co")))
    s.add_workload(wl("b", "b1", 1))
    s.add_workload(wl("b", "b2", 1))
    s.run_until_stable(0)
    assert admitted(s) == {"b1"}
    # a still has its guaranteed 3 after lending 1.
    s.add_workload(wl("a", "a1", 3))
    s.run_until_stable(0)
    assert "a1" in admitted(s)


def test_borrowing_without_cohort_is_impossible():
    s = Scheduler(make_config(make_cq("a", [("a100", 1)]), make_cq("b", [("a100", 4)])))
    s.add_workload(wl("a", "w", 2))
    s.run_until_stable(0)
    assert s.reason("ns-a/w")[0] == "ExceedsMaxQuota"


def test_priority_then_fifo_order_and_positions():
    s = Scheduler(make_config(make_cq("a", [("a100", 1)])))
    s.add_workload(wl("a", "running", 1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "old-low", 1, prio=1))
    s.add_workload(wl("a", "new-high", 1, prio=10))
    s.add_workload(wl("a", "newer-low", 1, prio=1))
    s.run_until_stable(0)
    assert [s.position(f"ns-a/{n}")[0] for n in ["new-high", "old-low", "newer-low"]] == [0, 1, 2]
    s.remove_workload("ns-a/running")
    s.run_until_stable(0)
    assert admitted(s) == {"new-high"}
    assert s.position("ns-a/old-low") == (0, 0)


def test_local_queue_positions_are_a_view_of_the_cluster_queue():
    cfg = make_config(make_cq("a", [("a100", 0)], cohort=None))
    cfg.local_queues["ns-a/q2"] = LocalQueue("ns-a", "q2", "a")
    s = Scheduler(cfg)
    s.add_workload(wl("a", "x1", 1))
    w = wl("a", "y1", 1)
    w.queue_name = "q2"
    s.add_workload(w)
    s.add_workload(wl("a", "x2", 1))
    assert s.position("ns-a/x1") == (0, 0)
    assert s.position("ns-a/y1") == (1, 0)
    assert s.position("ns-a/x2") == (2, 1)


def test_best_effort_fifo_lets_smaller_workloads_past_a_blocked_head():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)])))
    s.add_workload(wl("a", "hold", 3))
    s.run_until_stable(0)
    s.add_workload(wl("a", "big", 2))
    s.add_workload(wl("a", "small", 1))
    s.run_until_stable(0)
    assert admitted(s) == {"hold", "small"}
    # The parked head comes back when quota is freed in its cohort tree.
    s.remove_workload("ns-a/hold")
    s.run_until_stable(0)
    assert "big" in admitted(s)


def test_strict_fifo_blocks_behind_the_head():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)], strategy="StrictFIFO")))
    s.add_workload(wl("a", "hold", 3))
    s.run_until_stable(0)
    s.add_workload(wl("a", "big", 2))
    s.add_workload(wl("a", "small", 1))
    s.run_until_stable(0)
    assert admitted(s) == {"hold"}
    assert s.reason("ns-a/big")[0] == "NoFit"


def test_one_head_per_cluster_queue_per_cycle_like_kueue():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)])))
    for i in range(3):
        s.add_workload(wl("a", f"w{i}", 1))
    r = s.schedule(0)
    assert len(r.admitted) == 1
    s2 = Scheduler(make_config(make_cq("a", [("a100", 4)])), options=SchedulerOptions(heads_per_cluster_queue=8))
    for i in range(3):
        s2.add_workload(wl("a", f"w{i}", 1))
    assert len(s2.schedule(0).admitted) == 3


def test_non_borrowing_entries_are_processed_before_borrowing_ones():
    # Both heads fit at nomination; b's borrows, a's does not, so a's goes first and b's no longer fits.
    s = Scheduler(make_config(make_cq("a", [("a100", 2)], cohort="co"), make_cq("b", [("a100", 0)], cohort="co")))
    s.add_workload(wl("b", "borrower", 2, prio=100))
    s.add_workload(wl("a", "owner", 2))
    r = s.schedule(0)
    assert [w.name for w in r.admitted] == ["owner"]
    assert s.reason("ns-b/borrower") == ("NoFit", "Workload no longer fits after processing another workload")


def test_namespace_selector_mismatch_is_misconfigured():
    cq = make_cq("a", [("a100", 4)])
    cq.namespace_selector = LabelSelector(match_labels={"team": "a"})
    cfg = make_config(cq)
    cfg.namespaces["ns-a"] = Namespace("ns-a", {"team": "b"})
    s = Scheduler(cfg)
    s.add_workload(wl("a", "w", 1))
    s.run_until_stable(0)
    assert s.reason("ns-a/w") == ("Misconfigured", "Workload namespace doesn't match ClusterQueue selector")


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_workload_with_requests_above_limits_is_never_admitted(strategy):
    # Kueue's scheduler (nominate: workload.ValidateResources, before flavor assignment) leaves it
    # pending with its message; in a StrictFIFO queue it stays the head and holds the rest back.
    s = Scheduler(make_config(make_cq("a", [("a100", 4)], strategy=strategy)))
    bad = wl("a", "bad", 1)
    bad.invalid_resources = "resources validation failed: spec.podSets[0].template.spec.containers[0]: " \
        'Invalid value: []v1.ResourceName{"cpu"}: requests must not exceed its limits'
    s.add_workload(bad)
    s.add_workload(wl("a", "next", 1))
    s.run_until_stable(0)
    assert s.reason("ns-a/bad") == ("Pending", bad.invalid_resources)
    assert admitted(s) == (set() if strategy == "StrictFIFO" else {"next"})


def test_a_toleration_with_an_operator_kubernetes_does_not_know_tolerates_nothing():
    # ToleratesTaint: "" and Equal compare values, Exists matches any value, anything else nothing.
    taint = Taint("spot", "true", "NoSchedule")
    assert Toleration("spot", "Equal", "true").tolerates(taint)
    assert Toleration("spot", "", "true").tolerates(taint)
    assert Toleration("spot", "Exists").tolerates(taint)
    assert not Toleration("spot", "Foo", "true").tolerates(taint)
    assert not Toleration("", "Foo", "").tolerates(taint)


def test_missing_local_queue_and_inactive_cluster_queue():
    cfg = make_config(make_cq("a", [("a100", 4), ("gone", 1)]))
    s = Scheduler(cfg)
    w = wl("a", "w", 1)
    w.queue_name = "nope"
    s.add_workload(w)
    s.add_workload(wl("a", "x", 1))
    s.run_until_stable(0)
    assert s.reason("ns-a/w") == ("Misconfigured", "LocalQueue ns-a/nope doesn't exist")
    assert s.reason("ns-a/x")[0] == "Inactive"
    assert admitted(s) == set()


def test_gang_of_pod_sets_is_admitted_all_or_nothing():
    s = Scheduler(make_config(make_cq("a", [("a100", 4)])))
    w = Workload("ns-a", "gang", "q", [PodSet("master", 1, {GPU: 1}), PodSet("worker", 2, {GPU: 2})], uid="g")
    s.add_workload(w)
    s.run_until_stable(0)
    assert admitted(s) == set()
    assert "previously considered podsets requests (1) + current podset request (4) > maximum capacity (4)" in s.reason("ns-a/gang")[1]


def test_flavor_taints_and_node_selector_restrict_flavors():
    cfg = make_config(make_cq("a", [("a100", 4), ("h100", 4)]))
    cfg.resource_flavors["a100"].node_taints = [Taint("reserved", "x", "NoSchedule")]
    s = Scheduler(cfg)
    s.add_workload(wl("a", "plain", 1))
    s.add_workload(wl("a", "tolerant", 1, tolerations=[Toleration("reserved", "Exists")]))
    s.add_workload(wl("a", "pinned", 1, node_selector={"gpu": "h100"}))
    for _ in range(3):
        s.schedule(0)
    assert flavor_of(s, "plain") == "h100"
    assert flavor_of(s, "tolerant") == "a100"
    assert flavor_of(s, "pinned") == "h100"


def test_when_can_borrow_try_next_flavor_prefers_a_flavor_without_borrowing():
    cq = make_cq("a", [("a100", 0), ("h100", 2)], cohort="co")
    cq.flavor_fungibility.when_can_borrow = "TryNextFlavor"
    s = Scheduler(make_config(cq, make_cq("b", [("a100", 4)], cohort="co")))
    s.add_workload(wl("a", "w", 1))
    s.run_until_stable(0)
    assert flavor_of(s, "w") == "h100"
    # With the default (Borrow) the first flavor that fits, by borrowing, is taken.
    cq2 = make_cq("a", [("a100", 0), ("h100", 2)], cohort="co")
    s2 = Scheduler(make_config(cq2, make_cq("b", [("a100", 4)], cohort="co")))
    s2.add_workload(wl("a", "w", 1))
    s2.run_until_stable(0)
    assert flavor_of(s2, "w") == "a100"


def test_pre_admitted_workloads_hold_quota():
    from jupyter_gpuqueue.engine.model import Admission, PodSetAssignment

    s = Scheduler(make_config(make_cq("a", [("a100", 2)])))
    w = wl("a", "old", 2)
    w.admission = Admission("a", [PodSetAssignment("main", {GPU: "a100"}, {GPU: 2}, 1)])
    s.add_workload(w)
    s.add_workload(wl("a", "new", 1))
    s.run_until_stable(0)
    assert admitted(s) == {"old"}


# -- placement -------------------------------------------------------------------------------------


def inventory():
    def gpus(n, start=0):
        return [GpuDevice(i, f"GPU-{i}") for i in range(start, start + n)]

    mig_gpu = GpuDevice(2, "GPU-2", mig=[MigDevice(f"MIG-{i}", "1g.10gb", 1) for i in range(7)])
    return Inventory(nodes=[
        Node("n1", {"gpu": "a100"}, gpus=gpus(2) + [mig_gpu]),
        Node("n2", {"gpu": "a100"}, gpus=gpus(4)),
        Node("n3", {"gpu": "h100"}, gpus=gpus(2)),
    ])


def test_placement_best_fit_keeps_whole_nodes_free():
    s = Scheduler(make_config(make_cq("a", [("a100", 8)])), inventory())
    s.add_workload(wl("a", "one", 1))
    s.run_until_stable(0)
    p = s.admitted["ns-a/one"].admission.placements
    assert [(x.node, x.devices) for x in p] == [("n1", ["0"])]
    s.add_workload(wl("a", "four", 4))
    s.run_until_stable(0)
    assert [(x.node, x.devices) for x in s.admitted["ns-a/four"].admission.placements] == [("n2", ["0", "1", "2", "3"])]


def test_quota_fits_but_no_node_has_the_devices_waits_with_placement_failed():
    s = Scheduler(make_config(make_cq("a", [("a100", 8)])), inventory())
    s.add_workload(wl("a", "three", 3))  # n2 has 4: fits there
    s.add_workload(wl("a", "two", 2))  # n1 has 2: fits there
    s.add_workload(wl("a", "again", 2))  # 1 left on n2: quota fits (5+2 ≤ 8) but no node has 2 free
    s.run_until_stable(0)
    assert admitted(s) == {"three", "two"}
    reason, message = s.reason("ns-a/again")
    assert reason == "PlacementFailed"
    assert "no node of flavor a100 has 2 × nvidia.com/gpu free" in message
    s.remove_workload("ns-a/two")
    s.run_until_stable(0)
    assert "again" in admitted(s)


def test_mig_slices_are_placed_as_devices():
    cq = make_cq("a", [("a100", 7)], resource="nvidia.com/mig-1g.10gb")
    s = Scheduler(make_config(cq), inventory())
    s.add_workload(wl("a", "slice", 1, resource="nvidia.com/mig-1g.10gb"))
    s.run_until_stable(0)
    (p,) = s.admitted["ns-a/slice"].admission.placements
    assert p.node == "n1" and p.devices[0].startswith("MIG-")
    assert s.allocator.totals("nvidia.com/mig-1g.10gb", s.inventory.nodes) == (6, 7)


def test_releasing_devices_requeues_placement_parked_workloads_of_other_cohorts():
    # Two ClusterQueues without a cohort share the same node: devices freed by one matter to the other.
    cfg = make_config(make_cq("a", [("h100", 2)]), make_cq("b", [("h100", 2)]))
    s = Scheduler(cfg, inventory())
    s.add_workload(wl("a", "a1", 2))
    s.run_until_stable(0)
    s.add_workload(wl("b", "b1", 1))
    s.run_until_stable(0)
    assert s.reason("ns-b/b1")[0] == "PlacementFailed"
    s.remove_workload("ns-a/a1")
    s.run_until_stable(0)
    assert "b1" in admitted(s)


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_run_until_stable_terminates(strategy):
    s = Scheduler(make_config(make_cq("a", [("a100", 1)], strategy=strategy)))
    for i in range(5):
        s.add_workload(wl("a", f"w{i}", 1))
    assert s.run_until_stable(0) < 10
    assert len(s.admitted) == 1
