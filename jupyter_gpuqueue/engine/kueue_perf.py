"""Kueue's own scheduler performance-test workloads, generated for the simulator.

A faithful port of Kueue's generator (kubernetes-sigs/kueue ``test/performance/scheduler/``):

* ``configs/baseline/generator.yaml``: 5 cohorts × 6 ClusterQueues, ``nominalQuota: 20``,
  ``borrowingLimit: 100``, ``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``;
  per ClusterQueue 350 *small* (request 1, runs 200 ms, priority 50, one every 100 ms), 100
  *medium* (5, 500 ms, 100, every 500 ms) and 50 *large* (20, 1,000 ms, 200, every 1,200 ms):
  15,000 workloads.
* ``configs/large-scale/generator.yaml`` (the 10 × 100 version, commit f6517b0c): 10 cohorts ×
  100 ClusterQueues, same quotas and policies; per ClusterQueue 35 small (1, 150 ms, 50, every
  60 ms), 11 medium (5, 350 ms, 100, every 300 ms), 4 large (20, 700 ms, 200, every 700 ms):
  50,000 workloads.

What the generator builds (``runner/generator/generator.go``): one ResourceFlavor ``rf``; per
ClusterQueue ``cq-<queueSetIdx>-<i>-cohort-<c>`` (cohort ``cohort-<c>``) one flavor with one
resource, ``cpu``, quantities as written (``request: 1`` = 1 CPU = 1000m), a Namespace and a
LocalQueue of the same name, and ``BestEffortFIFO`` (Kueue's default). Each *workloads set* of a
ClusterQueue is one goroutine that waits ``creationIntervalMs`` *before* each creation: the k-th
workload (0-based) of a set is created at ``(k + 1) × creationIntervalMs``. A workload is
``<class>-<setIdx>-<k>-0`` with one PodSet of one pod requesting the class's CPU, priority as
given, and labels carrying its class and run time.

How it runs (``runner/controller/controller.go``): once a workload is Admitted the runner marks
it Finished ``runtimeMs`` after the (last) admission; an evicted workload is requeued and, when
admitted again, runs its whole run time again — the simulator's default.

What is measured (``runner/recorder/recorder.go``, ``checker/checker_test.go``):

* **time to admission** of a workload: from its creation to its (last) transition to Admitted;
  the class figure is the mean (``AverageTimeToAdmissionMs``);
* **ClusterQueue usage** of a class of ClusterQueues: Σ ∫ usage dt (quota in use, borrowed
  included: ``status.flavorsUsage``) over the class's ClusterQueues, divided by Σ nominal quota ×
  the monitoring time (first to last ClusterQueue event: here from 0 to the last completion),
  in percent.

Kueue's published means (5 trial runs each; the baseline's ``rangespec.yaml`` comments and the
large-scale calibration) are kept in :data:`PUBLISHED` for side-by-side reports. They were taken on
a real API server (envtest) with minimalkueue, so their times include API round trips, the
runner's reconcile latency and the scheduler's real cycle time; this simulator's cycles are free
unless ``cycle_seconds`` says otherwise, so its times to admission are those of an infinitely fast
control plane with Kueue's decisions.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from .model import (
    ANY,
    BEST_EFFORT_FIFO,
    CPU,
    LOWER_PRIORITY,
    ClusterConfig,
    ClusterQueue,
    ClusterQueuePreemption,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from .simulator import SimJob

FLAVOR = "rf"  # generator.go defaultResourceFlavorName
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
RUNNING_TIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
MILLI = 1000  # canonical cpu unit: millicores


@dataclass(frozen=True)
class WorkloadClass:
    """One ``workloadsSets[]`` entry with its single workload template: ``count`` workloads of
    class ``name``, one created every ``creation_interval_ms``, each requesting ``request`` CPUs
    and running ``runtime_ms`` once admitted, at ``priority``."""

    name: str
    count: int
    creation_interval_ms: int
    runtime_ms: int
    priority: int
    request: int


@dataclass(frozen=True)
class PublishedFigures:
    """Kueue's published means for a scenario: ``usage_percent`` (ClusterQueue class ``cq``),
    ``time_to_admission_s`` per workload class, ``wall_s`` of its harness."""

    usage_percent: float
    time_to_admission_s: dict
    wall_s: float
    source: str


@dataclass(frozen=True)
class Scenario:
    """A generator configuration: ``cohorts`` × ``queues_per_cohort`` ClusterQueues, each with
    ``nominal_quota`` / ``borrowing_limit`` CPUs, the preemption policies, and ``classes``."""

    name: str
    cohorts: int
    queues_per_cohort: int
    nominal_quota: int
    borrowing_limit: Optional[int]
    reclaim_within_cohort: str
    within_cluster_queue: str
    classes: tuple
    published: PublishedFigures
    source: str

    @property
    def cluster_queues(self) -> int:
        return self.cohorts * self.queues_per_cohort

    @property
    def workloads(self) -> int:
        return self.cluster_queues * sum(c.count for c in self.classes)


BASELINE = Scenario(
    name="baseline",
    cohorts=5,
    queues_per_cohort=6,
    nominal_quota=20,
    borrowing_limit=100,
    reclaim_within_cohort=ANY,
    within_cluster_queue=LOWER_PRIORITY,
    classes=(
        WorkloadClass("small", 350, 100, 200, 50, 1),
        WorkloadClass("medium", 100, 500, 500, 100, 5),
        WorkloadClass("large", 50, 1200, 1000, 200, 20),
    ),
    published=PublishedFigures(
        usage_percent=55.9,
        time_to_admission_s={"large": 16.5, "medium": 76.8, "small": 215.5},
        wall_s=351.0,
        source="kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/rangespec.yaml",
    ),
    source="kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml",
)

LARGE_SCALE = Scenario(
    name="large-scale",
    cohorts=10,
    queues_per_cohort=100,
    nominal_quota=20,
    borrowing_limit=100,
    reclaim_within_cohort=ANY,
    within_cluster_queue=LOWER_PRIORITY,
    classes=(
        WorkloadClass("small", 35, 60, 150, 50, 1),
        WorkloadClass("medium", 11, 300, 350, 100, 5),
        WorkloadClass("large", 4, 700, 700, 200, 20),
    ),
    published=PublishedFigures(
        usage_percent=38.6,
        time_to_admission_s={"large": 105.6, "medium": 256.4, "small": 700.4},
        wall_s=1179.0,
        source="kubernetes-sigs/kueue test/performance/scheduler/configs/large-scale/rangespec.yaml",
    ),
    source="kubernetes-sigs/kueue test/performance/scheduler/configs/large-scale/generator.yaml @ f6517b0c",
)

SCENARIOS = {BASELINE.name: BASELINE, LARGE_SCALE.name: LARGE_SCALE}


def cluster_queue_name(cohort: int, queue: int, queue_set: int = 0) -> str:
    """generator.go: ``fmt.Sprintf("%s-%d-%d-%s", className, queueSetIdx, queueIndex, cohortName)``."""
    return f"cq-{queue_set}-{queue}-cohort-{cohort}"


def build_config(scenario: Scenario) -> ClusterConfig:
    """The ResourceFlavor, ClusterQueues, Namespaces and LocalQueues of ``scenario``."""
    cfg = ClusterConfig()
    cfg.resource_flavors[FLAVOR] = ResourceFlavor(FLAVOR)
    bl = None if scenario.borrowing_limit is None else scenario.borrowing_limit * MILLI
    for c in range(scenario.cohorts):
        for i in range(scenario.queues_per_cohort):
            name = cluster_queue_name(c, i)
            cfg.cluster_queues[name] = ClusterQueue(
                name=name,
                cohort=f"cohort-{c}",
                queueing_strategy=BEST_EFFORT_FIFO,
                namespace_selector=LabelSelector(),
                resource_groups=[
                    ResourceGroup(
                        [CPU],
                        [FlavorQuotas(FLAVOR, [ResourceQuota(CPU, scenario.nominal_quota * MILLI, bl)])],
                    )
                ],
                preemption=ClusterQueuePreemption(
                    within_cluster_queue=scenario.within_cluster_queue,
                    reclaim_within_cohort=scenario.reclaim_within_cohort,
                ),
            )
            cfg.namespaces[name] = Namespace(name, {"kueue.x-k8s.io/performance-scheduler-cleanup": "true"})
            cfg.local_queues[f"{name}/{name}"] = LocalQueue(name, name, name)
    return cfg


def generate_jobs(scenario: Scenario) -> list[SimJob]:
    """Every workload of ``scenario`` as a :class:`SimJob` (``tag`` = class name), in creation
    order (ties: ClusterQueue order, then set order). Times in seconds from the start."""
    jobs: list[tuple[int, int, SimJob]] = []
    seq = 0
    for c in range(scenario.cohorts):
        for i in range(scenario.queues_per_cohort):
            cq = cluster_queue_name(c, i)
            for set_idx, wc in enumerate(scenario.classes):
                for k in range(wc.count):
                    t_ms = (k + 1) * wc.creation_interval_ms
                    t = t_ms / 1000.0
                    name = f"{wc.name}-{set_idx}-{k}-0"
                    wl = Workload(
                        namespace=cq,
                        name=name,
                        queue_name=cq,
                        pod_sets=[PodSet("main", 1, {CPU: wc.request * MILLI})],
                        priority=wc.priority,
                        creation_time=t,
                        uid=f"{cq}/{name}",
                        labels={CLASS_LABEL: wc.name, RUNNING_TIME_LABEL: str(wc.runtime_ms)},
                    )
                    seq += 1
                    jobs.append((t_ms, seq, SimJob(wl, t, wc.runtime_ms / 1000.0, tag=wc.name)))
    jobs.sort(key=lambda x: (x[0], x[1]))
    return [j for _, _, j in jobs]


def summarize(scenario: Scenario, jobs: Iterable[SimJob], end_time: Optional[float] = None) -> dict:
    """Kueue's summary figures over finished ``jobs``.

    Returns ``{"clusterQueueUsagePercent": float, "timeToAdmissionS": {class: mean s},
    "timeToFinishS": {class: mean s}, "evictions": {class: int}, "workloads": {class: int},
    "unadmitted": int, "monitoringTimeS": float}``. ``end_time``: the end of the monitoring window
    (default: the last finish)."""
    used = 0.0  # cpu-millicore seconds
    last = 0.0
    admit: dict[str, list[float]] = {}
    finish: dict[str, list[float]] = {}
    evictions: dict[str, int] = {}
    counts: dict[str, int] = {}
    unadmitted = 0
    for job in jobs:
        cls = str(job.tag)
        counts[cls] = counts.get(cls, 0) + 1
        evictions[cls] = evictions.get(cls, 0) + job.evictions
        for run in job.runs:
            end = run.end if run.end is not None else end_time
            if end is None:
                continue
            q = sum(v for _, v in run.usage)
            used += q * (end - run.start)
        if job.last_admit_time is None:
            unadmitted += 1
            continue
        admit.setdefault(cls, []).append(job.last_admit_time - job.submit_time)
        if job.finish_time is not None:
            finish.setdefault(cls, []).append(job.finish_time - job.submit_time)
            last = max(last, job.finish_time)
    window = end_time if end_time is not None else last
    nominal = scenario.cluster_queues * scenario.nominal_quota * MILLI
    usage = 100.0 * used / (nominal * window) if window > 0 else 0.0
    order = [c.name for c in scenario.classes]
    return {
        "clusterQueueUsagePercent": usage,
        "timeToAdmissionS": {c: _mean(admit.get(c, [])) for c in order},
        "timeToFinishS": {c: _mean(finish.get(c, [])) for c in order},
        "evictions": {c: evictions.get(c, 0) for c in order},
        "workloads": {c: counts.get(c, 0) for c in order},
        "unadmitted": unadmitted,
        "monitoringTimeS": window,
    }


def _mean(xs: list[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


__all__ = [
    "BASELINE",
    "LARGE_SCALE",
    "SCENARIOS",
    "PublishedFigures",
    "Scenario",
    "WorkloadClass",
    "build_config",
    "cluster_queue_name",
    "generate_jobs",
    "summarize",
]
