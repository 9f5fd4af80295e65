"""Fair sharing (Kueue pkg/cache/scheduler/fair_sharing.go, pkg/scheduler/fair_sharing_iterator.go,
preemption.go fairPreemptions): DRS values, the tournament, fair preemption."""

from __future__ import annotations

import math

from jupyter_gpuqueue.engine.fairsharing import dominant_resource_share, weighted_share
from jupyter_gpuqueue.engine.model import GPU, ClusterQueuePreemption, FairSharingConfig
from jupyter_gpuqueue.engine.scheduler import Scheduler

from builders import admitted, make_config, make_cq, wl


def fair(cfg, *strategies):
    cfg.fair_sharing = FairSharingConfig(enable=True, preemption_strategies=list(strategies) or
                                         ["LessThanOrEqualToFinalShare", "LessThanInitialShare"])
    return cfg


def test_drs_is_borrowed_over_lendable_in_thousandths_divided_by_weight():
    s = Scheduler(make_config(make_cq("a", [("a100", 10)], cohort="co"), make_cq("b", [("a100", 10)], cohort="co")))
    node = s.tree.cluster_queues["a"]
    node.add_usage(("a100", GPU), 15)
    assert dominant_resource_share(node, 1.0) == (0, 250.0)  # 5 borrowed of 20 lendable
    assert dominant_resource_share(node, 2.0) == (0, 125.0)
    assert weighted_share(dominant_resource_share(node, 0.0)) == math.inf  # weight 0 and borrowing
    assert dominant_resource_share(s.tree.cluster_queues["b"], 1.0) == (0, 0.0)  # not borrowing
    assert dominant_resource_share(s.tree.cluster_queues["b"], 1.0, {("a100", GPU): 12}) == (0, 100.0)


def _two_borrowers():
    cfg = make_config(make_cq("a", [("a100", 2)], cohort="co"), make_cq("b", [("a100", 2)], cohort="co"),
                      make_cq("c", [("a100", 6)], cohort="co"))
    return cfg


def _fill(s):
    s.add_workload(wl("a", "a-run", 5, prio=100))  # a borrows 3
    s.add_workload(wl("b", "b-run", 3, prio=100))  # b borrows 1
    s.add_workload(wl("c", "c-run", 1, prio=100))
    s.run_until_stable(0)
    assert admitted(s) == {"a-run", "b-run", "c-run"}  # 9 of 10 used: one GPU left


def test_without_fair_sharing_priority_decides_between_borrowers():
    s = Scheduler(_two_borrowers())
    _fill(s)
    s.add_workload(wl("a", "a-next", 1, prio=50))
    s.add_workload(wl("b", "b-next", 1, prio=1))
    s.schedule(1)
    assert "a-next" in admitted(s) and "b-next" not in admitted(s)


def test_with_fair_sharing_the_lower_share_after_admission_wins():
    s = Scheduler(fair(_two_borrowers()))
    _fill(s)
    s.add_workload(wl("a", "a-next", 1, prio=50))
    s.add_workload(wl("b", "b-next", 1, prio=1))
    s.schedule(1)
    # a would borrow 4 (share 4/10·1000 = 400... of lendable), b only 2: b goes first and takes the GPU.
    assert "b-next" in admitted(s) and "a-next" not in admitted(s)


def test_fair_sharing_weights_tilt_the_tournament():
    cfg = _two_borrowers()
    cfg.cluster_queues["a"].fair_sharing_weight = 4.0
    s = Scheduler(fair(cfg))
    _fill(s)
    s.add_workload(wl("a", "a-next", 1, prio=50))
    s.add_workload(wl("b", "b-next", 1, prio=1))
    s.schedule(1)
    assert "a-next" in admitted(s)


def test_fair_preemption_reclaims_from_the_queue_with_the_highest_share():
    a = make_cq("a", [("a100", 4)], cohort="co")
    a.preemption = ClusterQueuePreemption(reclaim_within_cohort="Any")
    b = make_cq("b", [("a100", 4)], cohort="co")
    s = Scheduler(fair(make_config(a, b)))
    for i in range(4):
        s.add_workload(wl("b", f"b{i}", 2, prio=1000))
    for _ in range(4):
        s.run_until_stable(0)
    assert len(admitted(s)) == 4  # b uses all 8, borrowing 4
    s.add_workload(wl("a", "mine", 2, prio=0))
    r = s.schedule(1)
    assert [(p.victim_cluster_queue, p.reason) for p in r.preempted] == [("b", "InCohortFairSharing")]


def test_fair_preemption_stops_when_the_victim_queue_would_fall_below_the_preemptor():
    # LessThanOrEqualToFinalShare only: a (already borrowing a lot) may not take from b when b
    # would end up with a lower share than a's new one.
    a = make_cq("a", [("a100", 2)], cohort="co")
    a.preemption = ClusterQueuePreemption(reclaim_within_cohort="Any")
    b = make_cq("b", [("a100", 2)], cohort="co")
    c = make_cq("c", [("a100", 6)], cohort="co")
    s = Scheduler(fair(make_config(a, b, c), "LessThanOrEqualToFinalShare"))
    s.add_workload(wl("a", "a-run", 6, prio=1))  # a borrows 4
    s.add_workload(wl("b", "b-run", 4, prio=1))  # b borrows 2
    s.run_until_stable(0)
    s.run_until_stable(0)
    assert admitted(s) == {"a-run", "b-run"}
    s.add_workload(wl("a", "a-more", 1, prio=1000))
    r = s.schedule(1)
    assert r.preempted == []
