"""Property-based tests (hypothesis) of the engine's invariants over random configurations and
random sequences of arrivals, completions and preemptions:

- usage never exceeds what the quotas allow, and the live quota tree always equals one rebuilt from
  the admitted workloads (nothing leaks through simulated removals, holds or reservations);
- no workload is admitted twice, or admitted and pending at once;
- under StrictFIFO (without preemption) no workload is admitted while a workload of the same
  ClusterQueue that is ahead of it in queue order is still pending;
- a preemption's victim set is minimal: no victim could stay with the preemptor still fitting.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuqueue.engine.model import (
    GPU,
    BorrowWithinCohort,
    ClusterConfig,
    ClusterQueue,
    ClusterQueuePreemption,
    FairSharingConfig,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from jupyter_gpuqueue.engine.preemption import add_usage, remove_usage, workload_fits
from jupyter_gpuqueue.engine.queues import order_key
from jupyter_gpuqueue.engine.quota import QuotaTree
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions

FLAVORS = ("f1", "f2")


@st.composite
def configs(draw):
    cfg = ClusterConfig()
    for f in FLAVORS:
        cfg.resource_flavors[f] = ResourceFlavor(f)
    n_cq = draw(st.integers(2, 4))
    strict = draw(st.integers(0, 3)) == 0  # a quarter of the configurations: StrictFIFO without preemption
    for i in range(n_cq):
        flavors = []
        for f in FLAVORS:
            nominal = draw(st.integers(0, 4))
            cohort = i < n_cq - 1 or draw(st.booleans())
            bl = draw(st.one_of(st.none(), st.integers(0, 4))) if cohort else None
            ll = draw(st.one_of(st.none(), st.integers(0, nominal))) if cohort else None
            flavors.append(FlavorQuotas(f, [ResourceQuota(GPU, nominal, bl, ll)]))
        has_cohort = all(
            q.borrowing_limit is not None or q.lending_limit is not None for fq in flavors for q in fq.resources
        ) or i < n_cq - 1
        pre = ClusterQueuePreemption(
            within_cluster_queue=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])),
            reclaim_within_cohort=draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
            borrow_within_cohort=BorrowWithinCohort(
                draw(st.sampled_from(["Never", "LowerPriority"])), draw(st.one_of(st.none(), st.integers(0, 5)))
            ),
        )
        if strict:
            pre = ClusterQueuePreemption()
        cq = ClusterQueue(
            name=f"cq{i}",
            cohort="co" if has_cohort else None,
            resource_groups=[ResourceGroup([GPU], flavors)],
            queueing_strategy="StrictFIFO" if strict else draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"])),
            namespace_selector=LabelSelector(),
            preemption=pre,
        )
        if not has_cohort:
            for fq in flavors:
                for q in fq.resources:
                    q.borrowing_limit = q.lending_limit = None
        cfg.cluster_queues[cq.name] = cq
        cfg.local_queues[f"ns{i}/q"] = LocalQueue(f"ns{i}", "q", cq.name)
    if not strict and draw(st.booleans()):
        cfg.fair_sharing = FairSharingConfig(enable=True)
    return cfg


_submit = st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 4), st.integers(0, 3),
                   st.integers(1, 2), st.booleans())
_finish = st.tuples(st.just("finish"), st.integers(0, 50))
# Mostly arrivals, so that queues fill up and preemption has work to do.
events = st.lists(st.one_of(_submit, _submit, _submit, _finish), min_size=1, max_size=30)


def check_invariants(s: Scheduler) -> None:
    # No double admission; admitted and pending are disjoint.
    pending = set()
    for q in s.queues.values():
        keys = list(q.ordered_keys())
        assert len(keys) == len(set(keys))
        pending.update(keys)
    assert not (pending & set(s.admitted))
    # The live tree equals one rebuilt from the admitted workloads.
    fresh = QuotaTree(s.config)
    for key, wl in s.admitted.items():
        add_usage(fresh.cluster_queues[wl.admission.cluster_queue], s.usage_of[key])
    for name, node in s.tree.cluster_queues.items():
        live = {k: v for k, v in node.usage.items() if v}
        rebuilt = {k: v for k, v in fresh.cluster_queues[name].usage.items() if v}
        assert live == rebuilt, name
    for name, node in s.tree.cohorts.items():
        assert {k: v for k, v in node.usage.items() if v} == {k: v for k, v in fresh.cohorts[name].usage.items() if v}
    # Usage never exceeds what quotas allow.
    for node in s.tree.roots():
        for fr, u in node.usage.items():
            assert u <= node.subtree_quota.get(fr, 0), (node.name, fr)
    for name, node in s.tree.cluster_queues.items():
        for fr, u in node.usage.items():
            bl = node.borrowing_limit.get(fr)
            if bl is not None:
                assert u <= node.nominal.get(fr, 0) + bl, (name, fr)
            if node.parent is None:
                assert u <= node.nominal.get(fr, 0)


def check_minimal(s: Scheduler, preempted) -> None:
    by_preemptor: dict[str, list] = {}
    for p in preempted:
        by_preemptor.setdefault(p.preemptor, []).append(p)
    for pk, ps in by_preemptor.items():
        victims = [p.victim for p in ps]
        req = ps[0].request
        node = s.tree.cluster_queues[s.cluster_queue_name(s.workloads[pk])]
        gone = [(s.tree.cluster_queues[s.admitted_cq[v]], s.usage_of[v]) for v in victims]
        for n, u in gone:
            remove_usage(n, u)
        borrows = any(node.borrowing_with(fr, v) for fr, v in req.items())
        assert workload_fits(req, node, True)
        for i, (n, u) in enumerate(gone):
            add_usage(n, u)  # put victim i back
            assert not workload_fits(req, node, borrows), f"victim {victims[i]} was not needed"
            remove_usage(n, u)
        for n, u in gone:
            add_usage(n, u)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), events, st.sampled_from([1, 3]))
def test_invariants_hold_under_random_arrivals_finishes_and_preemptions(cfg, evs, heads):
    s = Scheduler(cfg, options=SchedulerOptions(heads_per_cluster_queue=heads))
    seq = 0
    now = 0.0
    for ev in evs:
        now += 1.0
        if ev[0] == "submit":
            _, cqi, gpus, prio, count, partial = ev
            cqi %= len(cfg.cluster_queues)
            seq += 1
            ps = PodSet("main", count, {GPU: gpus}, min_count=1 if partial and count > 1 else None)
            s.add_workload(Workload(f"ns{cqi}", f"w{seq}", "q", [ps], priority=prio, creation_time=now, uid=f"{seq:04d}"))
        else:
            keys = sorted(s.admitted)
            if keys:
                s.remove_workload(keys[ev[1] % len(keys)])
        for _ in range(200):
            before_pending = {name: list(q.ordered_keys()) for name, q in s.queues.items()}
            r = s.schedule(now)
            check_invariants(s)
            check_minimal(s, r.preempted)
            for wl in r.admitted:
                cq = wl.admission.cluster_queue
                if cfg.cluster_queues[cq].queueing_strategy == "StrictFIFO":
                    ahead = before_pending[cq][: before_pending[cq].index(wl.key)]
                    assert all(k in s.admitted for k in ahead), f"{wl.key} admitted ahead of {ahead}"
            for p in r.preempted:
                if p.victim in s.admitted:
                    s.evict(p.victim, now)
            check_invariants(s)
            if r.heads == 0 or not r.changed:
                break


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 100, allow_nan=False)), min_size=1, max_size=40))
def test_positions_match_a_full_sort_of_the_queue(items):
    from jupyter_gpuqueue.engine.queues import ClusterQueueQueue

    q = ClusterQueueQueue("cq")
    wls = []
    for i, (prio, t) in enumerate(items):
        w = Workload("ns", f"w{i}", "q", [PodSet("main", 1, {GPU: 1})], priority=prio, creation_time=t, uid=f"{i:03d}")
        q.push(w, "ns/q" if i % 2 else "ns/q2")
        wls.append(w)
    ordered = sorted(wls, key=order_key)
    for pos, w in enumerate(ordered):
        assert q.position(w.key)[0] == pos
    lq = [w for w in ordered if int(w.name[1:]) % 2]
    for pos, w in enumerate(lq):
        assert q.position(w.key)[1] == pos


@st.composite
def preempting_configs(draw):
    cfg = draw(configs())
    for cq in cfg.cluster_queues.values():
        cq.queueing_strategy = "BestEffortFIFO"
        cq.preemption = ClusterQueuePreemption(
            within_cluster_queue=draw(st.sampled_from(["LowerPriority", "LowerOrNewerEqualPriority"])),
            reclaim_within_cohort=draw(st.sampled_from(["LowerPriority", "Any"])),
            borrow_within_cohort=BorrowWithinCohort(
                draw(st.sampled_from(["Never", "LowerPriority"])), draw(st.one_of(st.none(), st.integers(0, 20)))
            ),
        )
    return cfg


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preempting_configs(), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=3, max_size=25))
def test_preemption_victim_sets_are_minimal_and_quota_holds(cfg, arrivals):
    """Each arrival has a higher priority than all before it, so queues preempt constantly."""
    s = Scheduler(cfg)
    preemptions = 0
    for i, (cqi, gpus) in enumerate(arrivals):
        cqi %= len(cfg.cluster_queues)
        s.add_workload(Workload(f"ns{cqi}", f"w{i}", "q", [PodSet("main", 1, {GPU: gpus})], priority=i,
                                creation_time=float(i), uid=f"{i:04d}"))
        for _ in range(200):
            r = s.schedule(float(i))
            check_invariants(s)
            check_minimal(s, r.preempted)
            preemptions += len(r.preempted)
            for p in r.preempted:
                assert s.admitted[p.victim].priority < s.workloads[p.preemptor].priority or p.reason != "InClusterQueue" \
                    or cfg.cluster_queues[p.victim_cluster_queue].preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
                s.evict(p.victim, float(i))
            check_invariants(s)
            if r.heads == 0 or not r.changed:
                break
