"""The event-driven simulator (engine/simulator.py) and Kueue's performance-test generator
(engine/kueue_perf.py). Every expectation is computed by hand in the test's docstring or comments.
All small: the whole module runs in about a second."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jupyter_gpuqueue.engine import kueue_perf
from jupyter_gpuqueue.engine.model import (
    ANY,
    CPU,
    GPU,
    LOWER_PRIORITY,
    STRICT_FIFO,
    Admission,
    ClusterConfig,
    ClusterQueue,
    ClusterQueuePreemption,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions
from jupyter_gpuqueue.engine.simulator import SimJob, SimulationError, Simulator


def make_config(*cqs):
    """cqs: (name, nominal GPUs, cohort, strategy, preemption) → one LocalQueue ``<name>/q`` each."""
    cfg = ClusterConfig()
    cfg.resource_flavors["gpu"] = ResourceFlavor("gpu")
    for name, nominal, cohort, strategy, preemption in cqs:
        cfg.cluster_queues[name] = ClusterQueue(
            name=name,
            cohort=cohort,
            queueing_strategy=strategy,
            namespace_selector=LabelSelector(),
            resource_groups=[ResourceGroup([GPU], [FlavorQuotas("gpu", [ResourceQuota(GPU, nominal)])])],
            preemption=preemption or ClusterQueuePreemption(),
        )
        cfg.local_queues[f"{name}/q"] = LocalQueue(name, "q", name)
    return cfg


def job(ns, name, submit, gpus, run, priority=0):
    wl = Workload(ns, name, "q", [PodSet("main", 1, {GPU: gpus})], priority=priority, creation_time=submit,
                  uid=f"{submit:012.3f}-{name}")
    return SimJob(wl, submit, run, tag=ns)


def run_sim(cfg, jobs, **kw):
    """Requeues at once (``requeue_batch_seconds=0``) unless ``options`` says otherwise."""
    opts = kw.pop("options", None) or SchedulerOptions(requeue_batch_seconds=0)
    sim = Simulator(Scheduler(cfg, None, opts), **kw)
    sim.add_jobs(jobs)
    sim.run()
    return sim


def times(sim, key):
    j = sim.jobs[key]
    return j.first_admit_time, j.finish_time


def test_fifo_queueing_hand_computed():
    """One ClusterQueue of 2 GPUs. A (t=0, 2 GPUs, 10 s) runs 0–10. B (t=1, 1 GPU, 5 s) and
    C (t=2, 1 GPU, 3 s) wait for A: both admitted at 10; B ends 15, C ends 13."""
    cfg = make_config(("cq", 2, None, "BestEffortFIFO", None))
    sim = run_sim(cfg, [job("cq", "a", 0, 2, 10), job("cq", "b", 1, 1, 5), job("cq", "c", 2, 1, 3)])
    assert times(sim, "cq/a") == (0, 10)
    assert times(sim, "cq/b") == (10, 15)
    assert times(sim, "cq/c") == (10, 13)
    assert sim.jobs["cq/b"].queueing_delay == 9
    assert sim.jobs["cq/c"].completion_time == 11
    assert sim.stats.arrivals == 3 and sim.stats.completions == 3 and sim.stats.admissions == 3
    assert sim.stats.end_time == 15
    # Runs record the interval, the ClusterQueue and the quota used.
    run = sim.jobs["cq/a"].runs[0]
    assert (run.start, run.end, run.cluster_queue, run.usage) == (0, 10, "cq", ((("gpu", GPU), 2),))
    assert not sim.scheduler.admitted and not sim.scheduler.workloads


def test_requeue_batch_period_wakes_the_simulator():
    """Kueue requeues parked workloads through a delaying workqueue (requeueBatchPeriod 1 s): with
    the scheduler's default batch, B (parked at 1) comes back 1 s after A's completion at 10, at
    11, although no event is due then. C (StrictFIFO is not involved) the same."""
    cfg = make_config(("cq", 2, None, "BestEffortFIFO", None))
    sim = run_sim(cfg, [job("cq", "a", 0, 2, 10), job("cq", "b", 1, 1, 5), job("cq", "c", 2, 1, 3)],
                  options=SchedulerOptions(requeue_batch_seconds=1.0))
    assert times(sim, "cq/b") == (11, 16)
    assert times(sim, "cq/c") == (11, 14)
    assert sim.stats.end_time == 16


def test_best_effort_fifo_lets_smaller_jobs_pass_strict_fifo_does_not():
    """Quota 2. A (0, 1 GPU, 10 s); B (1, 2 GPUs, 5 s) does not fit; C (2, 1 GPU, 4 s) does.
    BestEffortFIFO: C runs 2–6 while B waits; B runs 10–15.
    StrictFIFO: B blocks the head: B runs 10–15, C (1 GPU, quota full) waits until 15, ends 19."""
    jobs = lambda: [job("cq", "a", 0, 1, 10), job("cq", "b", 1, 2, 5), job("cq", "c", 2, 1, 4)]  # noqa: E731
    best = run_sim(make_config(("cq", 2, None, "BestEffortFIFO", None)), jobs())
    assert times(best, "cq/c") == (2, 6)
    assert times(best, "cq/b") == (10, 15)
    strict = run_sim(make_config(("cq", 2, None, STRICT_FIFO, None)), jobs())
    assert times(strict, "cq/b") == (10, 15)
    assert times(strict, "cq/c") == (15, 19)


def test_borrowing_and_reclaim_preemption_restart_from_beginning():
    """Cohort of two ClusterQueues with 2 GPUs each; b reclaims (reclaimWithinCohort: Any).
    t=0: a submits four 1-GPU jobs of 10 s: all run, two on b's lent quota.
    t=5: b submits two 1-GPU jobs of 10 s: two of a's borrowing jobs are preempted at 5, b's run
    5–15. The victims restart from the beginning: they are re-admitted when a's other two finish
    at 10 (within a's nominal quota) and end at 20."""
    reclaim = ClusterQueuePreemption(reclaim_within_cohort=ANY)
    cfg = make_config(("a", 2, "co", "BestEffortFIFO", reclaim), ("b", 2, "co", "BestEffortFIFO", reclaim))
    jobs = [job("a", f"a{i}", 0, 1, 10) for i in range(4)] + [job("b", f"b{i}", 5, 1, 10) for i in range(2)]
    sim = run_sim(cfg, jobs)
    assert sim.stats.preemptions == 2
    assert [times(sim, f"b/b{i}") for i in range(2)] == [(5, 15), (5, 15)]
    finishes = sorted(sim.jobs[f"a/a{i}"].finish_time for i in range(4))
    assert finishes == [10, 10, 20, 20]
    victims = [sim.jobs[p.victim] for p in sim.preemptions]
    assert all(v.evictions == 1 and len(v.runs) == 2 and v.runs[0].preempted for v in victims)
    assert all(v.runs[0].end == 5 and v.runs[1].start == 10 for v in victims)
    assert {p.preemptor.split("/")[0] for p in sim.preemptions} == {"b"}
    assert all(p.lost == 5 for p in sim.preemptions)
    # With --resume-preempted the victims only need their last 5 s: they end at 15.
    sim = run_sim(cfg, [job("a", f"a{i}", 0, 1, 10) for i in range(4)]
                  + [job("b", f"b{i}", 5, 1, 10) for i in range(2)], resume_preempted=True)
    assert sorted(sim.jobs[f"a/a{i}"].finish_time for i in range(4)) == [10, 10, 15, 15]
    assert all(p.lost == 0 for p in sim.preemptions)


def test_priority_preemption_within_cluster_queue():
    """Quota 1, withinClusterQueue LowerPriority. low (0, prio 0, 10 s) runs; high (3, prio 10,
    2 s) preempts it at 3 and runs 3–5; low restarts at 5 and ends at 15."""
    cfg = make_config(("cq", 1, None, "BestEffortFIFO", ClusterQueuePreemption(within_cluster_queue=LOWER_PRIORITY)))
    sim = run_sim(cfg, [job("cq", "low", 0, 1, 10, 0), job("cq", "high", 3, 1, 2, 10)])
    assert times(sim, "cq/high") == (3, 5)
    assert sim.jobs["cq/low"].runs[0].end == 3
    assert times(sim, "cq/low") == (0, 15)
    assert sim.jobs["cq/low"].last_admit_time == 5
    assert sim.stats.preemptions == 1


def test_cycle_seconds_bounds_throughput():
    """Quota 3, three 1-GPU jobs at t=0, one head per ClusterQueue per cycle (Kueue). Free
    cycles: all admitted at 0. With cycles of 0.5 s: admitted at 0, 0.5 and 1.0."""
    cfg = make_config(("cq", 3, None, "BestEffortFIFO", None))
    mk = lambda: [job("cq", f"j{i}", 0, 1, 10) for i in range(3)]  # noqa: E731
    free = run_sim(cfg, mk())
    assert [free.jobs[f"cq/j{i}"].first_admit_time for i in range(3)] == [0, 0, 0]
    assert free.stats.cycles == 4  # 3 admitting + 1 empty at t=0; at t=10 nothing is pending
    assert (free.stats.instants, free.stats.skipped_instants) == (2, 1)
    slow = run_sim(cfg, mk(), cycle_seconds=0.5)
    assert [slow.jobs[f"cq/j{i}"].first_admit_time for i in range(3)] == [0, 0.5, 1.0]
    assert [slow.jobs[f"cq/j{i}"].finish_time for i in range(3)] == [10, 10.5, 11.0]
    more_heads = run_sim(cfg, mk(), cycle_seconds=0.5, options=SchedulerOptions(heads_per_cluster_queue=3, requeue_batch_seconds=0))
    assert [more_heads.jobs[f"cq/j{i}"].first_admit_time for i in range(3)] == [0, 0, 0]


def test_event_times_meet_at_one_instant_and_zero_run_time():
    """0.1 + 0.2 and 0.3 are one instant (rounded to the microsecond): the job finishing at
    0.1 + 0.2 frees the quota for the one submitted at 0.3 in the same instant. A job of run time
    0 finishes the moment it is admitted."""
    cfg = make_config(("cq", 1, None, "BestEffortFIFO", None))
    sim = run_sim(cfg, [job("cq", "a", 0.1, 1, 0.2), job("cq", "b", 0.3, 1, 0.0), job("cq", "c", 0.3, 1, 1)])
    assert times(sim, "cq/b") == (0.3, 0.3)
    assert times(sim, "cq/c") == (0.3, 1.3)


def test_run_until_and_add_later():
    cfg = make_config(("cq", 1, None, "BestEffortFIFO", None))
    sim = Simulator(Scheduler(cfg, None, SchedulerOptions(requeue_batch_seconds=0)))
    sim.add_job(job("cq", "a", 0, 1, 10))
    sim.add_job(job("cq", "b", 5, 1, 10))
    sim.run(until=7)
    assert sim.jobs["cq/a"].finish_time is None and sim.next_event_time() == 10 and sim.now == 7
    assert sim.scheduler.position("cq/b") == (0, 0)
    sim.add_job(job("cq", "c", 8, 1, 1))
    sim.run()
    assert times(sim, "cq/b") == (10, 20) and times(sim, "cq/c") == (20, 21)
    with pytest.raises(ValueError, match="already exists"):
        sim.add_job(job("cq", "a", 30, 1, 1))
    with pytest.raises(ValueError, match="run time"):
        sim.add_job(job("cq", "z", 30, 1, -1))


# -- the protocol, with a scripted scheduler -----------------------------------------------------


@dataclass
class _P:
    victim: str
    preemptor: str
    reason: str = "InClusterQueue"


@dataclass
class _R:
    admitted: list = field(default_factory=list)
    preempted: list = field(default_factory=list)
    heads: int = 0
    changed: bool = False


class _Ping:
    """Admits x, then forever: y preempts x, x is re-admitted, ... (a livelock)."""

    def __init__(self):
        self.workloads, self.admitted, self.n = {}, {}, 0

    def add_workload(self, wl):
        self.workloads[wl.key] = wl

    def remove_workload(self, key, now=None):
        self.admitted.pop(key, None)
        return self.workloads.pop(key, None)

    def evict(self, key, now):
        wl = self.admitted.pop(key)
        wl.admission = None
        return wl

    def schedule(self, now):
        self.n += 1
        x = self.workloads["ns/x"]
        if "ns/x" not in self.admitted:
            x.admission = Admission("cq", [PodSetAssignment("main", {GPU: "gpu"}, {GPU: 1}, 1)])
            self.admitted["ns/x"] = x
            return _R(admitted=[x], heads=1, changed=True)
        return _R(preempted=[_P("ns/x", "ns/y")], heads=1, changed=True)


def test_livelock_is_reported_not_looped():
    sched = _Ping()
    sim = Simulator(sched)
    sim.add_job(SimJob(Workload("ns", "x", "q", [PodSet("main", 1, {GPU: 1})]), 0, 10))
    with pytest.raises(SimulationError, match="livelock.*ns/x preempted 4 times"):
        sim.run()
    assert sched.n < 20


def test_max_cycles_per_instant():
    class Busy(_Ping):
        def schedule(self, now):
            return _R(heads=1, changed=True)

    sim = Simulator(Busy(), max_cycles_per_instant=50)
    sim.add_job(SimJob(Workload("ns", "x", "q", [PodSet("main", 1, {GPU: 1})]), 0, 1))
    with pytest.raises(SimulationError, match="50 scheduling cycles"):
        sim.run()


# -- Kueue's performance-test generator ----------------------------------------------------------


def test_kueue_perf_baseline_shape():
    sc = kueue_perf.BASELINE
    assert (sc.cluster_queues, sc.workloads) == (30, 15_000)
    cfg = kueue_perf.build_config(sc)
    assert len(cfg.cluster_queues) == 30 and len(cfg.local_queues) == 30
    cohorts = {cq.cohort for cq in cfg.cluster_queues.values()}
    assert cohorts == {f"cohort-{c}" for c in range(5)}
    cq = cfg.cluster_queues["cq-0-5-cohort-4"]
    rq = cq.resource_groups[0].flavors[0].resources[0]
    assert (cq.resource_groups[0].flavors[0].name, rq.name, rq.nominal_quota, rq.borrowing_limit) == (
        "rf", CPU, 20_000, 100_000)
    assert (cq.preemption.reclaim_within_cohort, cq.preemption.within_cluster_queue) == (ANY, LOWER_PRIORITY)
    assert cq.queueing_strategy == "BestEffortFIFO"
    assert cfg.local_queues["cq-0-5-cohort-4/cq-0-5-cohort-4"].cluster_queue == "cq-0-5-cohort-4"

    jobs = kueue_perf.generate_jobs(sc)
    assert len(jobs) == 15_000
    per = {}
    for j in jobs:
        per.setdefault((j.workload.namespace, j.tag), []).append(j)
    assert {k[1]: len(v) for k, v in per.items() if k[0] == "cq-0-0-cohort-0"} == {
        "small": 350, "medium": 100, "large": 50}
    smalls = per[("cq-0-0-cohort-0", "small")]
    assert (smalls[0].submit_time, smalls[-1].submit_time) == (0.1, 35.0)  # (k+1) × 100 ms
    larges = per[("cq-0-0-cohort-0", "large")]
    assert (larges[0].submit_time, larges[-1].submit_time) == (1.2, 60.0)
    big = larges[0]
    assert (big.run_time, big.workload.priority, big.workload.pod_sets[0].requests) == (1.0, 200, {CPU: 20_000})
    assert big.workload.name == "large-2-0-0" and big.workload.queue_name == "cq-0-0-cohort-0"
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_kueue_perf_large_scale_shape():
    sc = kueue_perf.LARGE_SCALE
    assert (sc.cohorts, sc.queues_per_cohort, sc.cluster_queues, sc.workloads) == (10, 100, 1_000, 50_000)
    assert [(c.name, c.count, c.creation_interval_ms, c.runtime_ms, c.priority, c.request) for c in sc.classes] == [
        ("small", 35, 60, 150, 50, 1), ("medium", 11, 300, 350, 100, 5), ("large", 4, 700, 700, 200, 20)]
    assert sc.published.time_to_admission_s == {"large": 105.6, "medium": 256.4, "small": 700.4}


def test_kueue_perf_summarize_hand_computed():
    """A tiny scenario: 1 cohort × 1 ClusterQueue of 20 CPUs; one large (20 CPUs, 1 s) at 1.2 s and
    one small (1 CPU, 0.2 s) at 0.1 s. small runs 0.1–0.3, large 1.2–2.2. Usage = (1·0.2 + 20·1) /
    (20 × 2.2) = 20.2 / 44 = 45.9 %."""
    sc = kueue_perf.Scenario(
        name="tiny", cohorts=1, queues_per_cohort=1, nominal_quota=20, borrowing_limit=100,
        reclaim_within_cohort=ANY, within_cluster_queue=LOWER_PRIORITY,
        classes=(kueue_perf.WorkloadClass("small", 1, 100, 200, 50, 1),
                 kueue_perf.WorkloadClass("large", 1, 1200, 1000, 200, 20)),
        published=kueue_perf.BASELINE.published, source="test",
    )
    sim = Simulator(Scheduler(kueue_perf.build_config(sc), None, SchedulerOptions(requeue_batch_seconds=0)))
    sim.add_jobs(kueue_perf.generate_jobs(sc))
    sim.run()
    s = kueue_perf.summarize(sc, sim.jobs.values())
    assert s["clusterQueueUsagePercent"] == pytest.approx(100 * 20.2 / 44)
    assert s["timeToAdmissionS"] == {"small": 0.0, "large": 0.0}
    assert s["timeToFinishS"] == pytest.approx({"small": 0.2, "large": 1.0})
    assert s["monitoringTimeS"] == pytest.approx(2.2)
    assert s["workloads"] == {"small": 1, "large": 1} and s["unadmitted"] == 0
