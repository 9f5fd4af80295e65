"""Classical preemption (Kueue pkg/scheduler/preemption/preemption.go), rule by rule."""

from __future__ import annotations

import pytest
from jupyter_gpuqueue.engine.model import GPU, BorrowWithinCohort, ClusterQueuePreemption
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions

from builders import admitted, make_config, make_cq, wl


def preempting(cq, **policy):
    cq.preemption = ClusterQueuePreemption(**policy)
    return cq


def run(s, now=0.0):
    """One cycle; returns the victims chosen (not yet evicted)."""
    return [p.victim.split("/")[1] for p in s.schedule(now).preempted]


def test_lower_priority_victims_newest_admitted_first_and_minimal():
    s = Scheduler(make_config(preempting(make_cq("a", [("a100", 4)]), within_cluster_queue="LowerPriority")))
    for name, t in [("l1", 1.0), ("l2", 2.0), ("l3", 3.0), ("l4", 4.0)]:
        s.add_workload(wl("a", name, 1, prio=1))
        s.schedule(t)  # admitted one per cycle, at time t
    s.add_workload(wl("a", "hi", 2, prio=10))
    assert sorted(run(s, 10.0)) == ["l3", "l4"]  # the two most recently admitted
    assert s.reason("ns-a/hi")[1] == "Pending the preemption of 2 workload(s)"
    # Victims hold their quota until they are reported stopped; no new victims meanwhile.
    assert run(s, 11.0) == []
    s.evict("ns-a/l3", 12.0)
    s.evict("ns-a/l4", 12.0)
    s.run_until_stable(12.0)
    assert admitted(s) == {"l1", "l2", "hi"}
    assert s.workloads["ns-a/l3"].evictions == 1


def test_lower_or_newer_equal_priority_preempts_newer_equals_only():
    cq = preempting(make_cq("a", [("a100", 2)]), within_cluster_queue="LowerOrNewerEqualPriority")
    s = Scheduler(make_config(cq))
    s.add_workload(wl("a", "old", 2, prio=5, t=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "older-arrival", 2, prio=5, t=0.5))  # queued earlier than "old": may preempt it
    assert run(s) == ["old"]
    s2 = Scheduler(make_config(preempting(make_cq("a", [("a100", 2)]), within_cluster_queue="LowerOrNewerEqualPriority")))
    s2.add_workload(wl("a", "old", 2, prio=5, t=1))
    s2.run_until_stable(0)
    s2.add_workload(wl("a", "newer", 2, prio=5, t=2))
    assert run(s2) == []


def test_never_policy_does_not_preempt():
    s = Scheduler(make_config(make_cq("a", [("a100", 1)])))
    s.add_workload(wl("a", "low", 1, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "hi", 1, prio=100))
    assert run(s) == []
    assert s.reason("ns-a/hi")[0] == "NoFit"


def test_reclaim_only_from_borrowing_queues_and_lower_priority_when_asked():
    a = preempting(make_cq("a", [("a100", 2)], cohort="co"), reclaim_within_cohort="LowerPriority")
    b = make_cq("b", [("a100", 2)], cohort="co")
    s = Scheduler(make_config(a, b))
    s.add_workload(wl("b", "b-hi", 3, prio=100))  # borrows 1 from a
    s.add_workload(wl("b", "b-lo", 1, prio=1))  # borrows 1 more
    s.run_until_stable(0)
    s.run_until_stable(0)
    assert admitted(s) == {"b-hi", "b-lo"}
    s.add_workload(wl("a", "mine", 1, prio=50))
    assert run(s) == ["b-lo"]  # b-hi has higher priority than the preemptor: not a candidate


def test_reclaim_any_ignores_priority():
    a = preempting(make_cq("a", [("a100", 2)], cohort="co"), reclaim_within_cohort="Any")
    s = Scheduler(make_config(a, make_cq("b", [("a100", 0)], cohort="co")))
    s.add_workload(wl("b", "vip", 2, prio=1000))
    s.run_until_stable(0)
    s.add_workload(wl("a", "owner", 1, prio=0))
    assert run(s) == ["vip"]


def _bwc_cluster():
    policy = dict(reclaim_within_cohort="Any",
                  borrow_within_cohort=BorrowWithinCohort("LowerPriority", max_priority_threshold=10))
    a = preempting(make_cq("a", [("a100", 1)], cohort="co"), **policy)
    s = Scheduler(make_config(a, make_cq("b", [("a100", 0)], cohort="co"), make_cq("c", [("a100", 0)], cohort="co"),
                              make_cq("d", [("a100", 3)], cohort="co")))
    s.add_workload(wl("b", "cheap", 1, prio=5))  # borrowing, below the threshold (10)
    s.add_workload(wl("c", "dear", 1, prio=50))  # borrowing, above it
    s.add_workload(wl("d", "d-own", 1, prio=0))  # within d's nominal: never a candidate
    s.run_until_stable(0)
    assert admitted(s) == {"cheap", "dear", "d-own"}
    return s


def test_borrow_within_cohort_takes_victims_below_the_threshold_while_borrowing():
    s = _bwc_cluster()
    # a needs 2 = its nominal 1 + 1 borrowed; 1 is free; evicting "cheap" (5 < 11) makes room.
    s.add_workload(wl("a", "big", 2, prio=100))
    r = s.schedule(0)
    assert [(p.victim, p.reason) for p in r.preempted] == [("ns-b/cheap", "InCohortReclaimWhileBorrowing")]


def test_borrow_within_cohort_never_borrows_over_a_victim_above_the_threshold():
    s = _bwc_cluster()
    # a needs 3: it would have to evict "dear" (50 ≥ 11) too, and then it may not borrow: no victims.
    s.add_workload(wl("a", "bigger", 3, prio=100))
    assert run(s) == []


def test_preemptor_waits_for_victims_and_lower_entries_cannot_take_the_freed_quota():
    a = preempting(make_cq("a", [("a100", 2)]), within_cluster_queue="LowerPriority")
    s = Scheduler(make_config(a))
    s.add_workload(wl("a", "low", 2, prio=1))
    s.run_until_stable(0)
    s.add_workload(wl("a", "hi", 2, prio=10))
    assert run(s) == ["low"]
    s.evict("ns-a/low", 1.0)
    r = s.schedule(1.0)
    assert [w.name for w in r.admitted] == ["hi"]  # the preemptor, not its victim, gets the quota
    assert s.position("ns-a/low") == (0, 0)


def test_preemption_in_a_flavor_is_preferred_over_no_fit_elsewhere_and_reclaim_over_preempt():
    # Flavor a100 would need preemption in the own queue, h100 reclaim from a borrower: reclaim wins.
    a = preempting(make_cq("a", [("a100", 1), ("h100", 1)], cohort="co"),
                   within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    a.flavor_fungibility.when_can_preempt = "TryNextFlavor"
    b = make_cq("b", [("a100", 0), ("h100", 0)], cohort="co")
    s = Scheduler(make_config(a, b))
    s.add_workload(wl("a", "mine", 1, prio=1, node_selector={"gpu": "a100"}))
    s.run_until_stable(0)
    s.add_workload(wl("b", "borrower", 1, prio=1, node_selector={"gpu": "h100"}))
    s.run_until_stable(0)
    assert admitted(s) == {"mine", "borrower"}
    s.add_workload(wl("a", "hi", 1, prio=10))
    assert run(s) == ["borrower"]


def _livelock_config():
    """Kueue v0.14 livelock (the kind of kubernetes-sigs/kueue#2821): ``one`` reclaims with Any."""
    one = preempting(make_cq("one", [("a", 2), ("b", 0)], cohort="lab"),
                     within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    two = preempting(make_cq("two", [("a", 1), ("b", 2)], cohort="lab"),
                     within_cluster_queue="LowerOrNewerEqualPriority", reclaim_within_cohort="LowerPriority")
    return make_config(one, two, flavors=("a", "b"))


def _livelock_arrivals(s):
    # w4 (mid) preempts w0 (low) in its own queue while borrowing; w3 (mid, older, also
    # borrowing) is ordered first and takes the freed quota; w0 then reclaims it from w3
    # (reclaimWithinCohort: Any ignores priority), and w4 preempts w0 again.
    for i, (cq, gpus, prio) in enumerate([("one", 1, 0), ("one", 1, 100), ("one", 2, 100),
                                          ("two", 2, 100), ("one", 2, 100)]):
        s.add_workload(wl(cq, f"w{i}", gpus, prio=prio, t=float(i)))
        cycles = s.run_until_stable(0.0, max_cycles=60)
    return cycles


def test_kueue_order_can_livelock_and_preemptor_first_breaks_it():
    from jupyter_gpuqueue.engine.scheduler import SchedulerOptions

    kueue = Scheduler(_livelock_config(), options=SchedulerOptions(requeue_batch_seconds=0.0))
    assert _livelock_arrivals(kueue) == 60  # never settles: Kueue's decisions, cycle after cycle
    assert kueue.workloads["ns-one/w0"].evictions > 5

    ours = Scheduler(_livelock_config(), options=SchedulerOptions(requeue_batch_seconds=0.0, preemptor_first=True))
    assert _livelock_arrivals(ours) < 60
    assert admitted(ours) == {"w1", "w2", "w4"}  # the preemptor got the quota its victim freed
    assert ours.workloads["ns-one/w0"].evictions == 1
    assert ours.reason("ns-two/w3")[0] == "NoFit"


def _two_reclaimers(fair=False):
    """Two lenders ``a`` and ``b`` (1 GPU each, ``reclaimWithinCohort: Any``) whose quota the
    borrowers x and y of ``c`` (nominal 0) hold; each lender's owner comes back to reclaim it."""
    a = preempting(make_cq("a", [("a100", 1)], cohort="co"), reclaim_within_cohort="Any")
    b = preempting(make_cq("b", [("a100", 1)], cohort="co"), reclaim_within_cohort="Any")
    config = make_config(a, b, make_cq("c", [("a100", 0)], cohort="co"))
    config.fair_sharing.enable = fair
    s = Scheduler(config, options=SchedulerOptions(requeue_batch_seconds=0.0, preemptor_first=True))
    s.add_workload(wl("c", "x", 1, t=1.0))
    s.schedule(1.0)
    s.add_workload(wl("c", "y", 1, t=2.0))
    s.schedule(2.0)
    assert admitted(s) == {"x", "y"}
    return s


@pytest.mark.parametrize("fair", [False, True], ids=["classical", "fair-sharing"])
def test_each_reclaimer_takes_its_own_victim_and_gets_its_quota(fair):
    # Issue 33 item 7: reclaimer ra (older, lower priority) chose y; rb (higher priority) came a
    # cycle later. Had rb waited on y too (Kueue orders victims already being evicted first), y's
    # quota would have gone to rb (ordered first) and ra would have preempted x: both victims
    # recorded as preempted by ra, rb having taken y's quota.
    s = _two_reclaimers(fair)
    s.add_workload(wl("a", "ra", 1, prio=1, t=3.0))
    r = s.schedule(3.0)
    assert [(p.victim, p.preemptor) for p in r.preempted] == [("ns-c/y", "ns-a/ra")]
    s.add_workload(wl("b", "rb", 1, prio=5, t=4.0))
    r = s.schedule(4.0)
    # y is ra's: rb picks a victim of its own
    assert [(p.victim, p.preemptor) for p in r.preempted] == [("ns-c/x", "ns-b/rb")]
    s.evict("ns-c/y", 5.0)
    r = s.schedule(5.0)
    assert [w.name for w in r.admitted] == ["ra"]  # y's quota goes to ra, who preempted y
    assert r.preempted == []
    s.evict("ns-c/x", 6.0)
    s.run_until_stable(6.0)
    assert admitted(s) == {"ra", "rb"}
    assert s.workloads["ns-c/x"].evictions == s.workloads["ns-c/y"].evictions == 1


def test_a_victim_whose_preemptor_is_gone_is_taken_by_the_next_reclaimer():
    # y was chosen by ra, which was then deleted: y stops anyway; rb waits on it rather than
    # evicting x too.
    s = _two_reclaimers()
    s.add_workload(wl("a", "ra", 1, prio=1, t=3.0))
    assert run(s, 3.0) == ["y"]
    s.remove_workload("ns-a/ra")
    s.add_workload(wl("b", "rb", 1, prio=5, t=4.0))
    assert run(s, 4.0) == []
    s.evict("ns-c/y", 5.0)
    s.run_until_stable(5.0)
    assert admitted(s) == {"x", "rb"}
