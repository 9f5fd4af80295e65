"""The run: a trace (or Kueue's performance workloads) replayed through the event-driven simulator,
and its report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ..engine import kueue_perf
from ..engine.model import ClusterConfig, Inventory
from ..engine.scheduler import Scheduler, SchedulerOptions
from ..engine.simulator import Simulator
from .trace import ReplayConfig, TraceJob, build_jobs
from .metrics import _sim_stats, trace_metrics
from .summary import _secs


@dataclass
class ReplayOptions:
    """``resume_preempted``: a preempted job keeps the time it ran (default: restarts);
    ``heads_per_cluster_queue``: workloads popped per ClusterQueue per cycle (Kueue: 1);
    ``cycle_seconds``: simulated cost of a scheduling cycle (default 0);
    ``requeue_batch_seconds``: parked workloads come back this long after quota is freed
    (Kueue's ``requeueBatchPeriod``, 1 s; 0: at once);
    ``max_gpus_per_pod``: pod size for large jobs; ``bin_seconds``: timeline bin (default: the
    span / 400, rounded to a whole minute, hour or day); ``limit``: replay only the first N jobs."""

    resume_preempted: bool = False
    heads_per_cluster_queue: int = 1
    cycle_seconds: float = 0.0
    requeue_batch_seconds: float = 1.0
    max_gpus_per_pod: int = 8
    bin_seconds: Optional[float] = None
    limit: Optional[int] = None


def make_simulator(config: ClusterConfig, inventory: Optional[Inventory], options: ReplayOptions) -> Simulator:
    """A :class:`Simulator` over a fresh :class:`Scheduler` of ``config`` with ``options``."""
    opts = SchedulerOptions(heads_per_cluster_queue=options.heads_per_cluster_queue)
    if hasattr(opts, "requeue_batch_seconds"):
        opts.requeue_batch_seconds = options.requeue_batch_seconds
    sched = Scheduler(config, inventory, opts)
    return Simulator(sched, resume_preempted=options.resume_preempted, cycle_seconds=options.cycle_seconds)


def replay_trace(
    trace: list[TraceJob],
    rc: ReplayConfig,
    *,
    inventory: Optional[Inventory] = None,
    options: Optional[ReplayOptions] = None,
    source: str = "<trace>",
    wall: Optional[dict] = None,
    eta=None,
) -> dict:
    """Replay ``trace`` against ``rc`` (and ``inventory``); returns the report (see the module
    docstring; :func:`summary_text` renders it). ``wall``: wall times measured so far (e.g.
    ``{"read": s}``), completed here. ``eta``: an :class:`~.eta.EtaOptions` adds the accuracy of
    estimated start times (``report["eta"]``, a second pass: :mod:`.eta`)."""
    options = options or ReplayOptions()
    wall = dict(wall or {})
    t0 = time.perf_counter()
    jobs = build_jobs(trace, rc, max_gpus_per_pod=options.max_gpus_per_pod, source=source)
    sim = make_simulator(rc.config, inventory, options)
    sim.add_jobs(jobs)
    t1 = time.perf_counter()
    sim.run()
    t2 = time.perf_counter()
    report = trace_metrics(sim, rc, bin_seconds=options.bin_seconds)
    t3 = time.perf_counter()
    wall["build"] = t1 - t0
    wall["simulate"] = t2 - t1
    wall["metrics"] = t3 - t2
    if eta is not None:
        from .eta import eta_report

        report["eta"] = eta_report(trace, rc, sim, make_simulator, inventory=inventory, options=options,
                                   eta=eta, source=source)
        wall["eta"] = time.perf_counter() - t3
    wall["total"] = sum(v for k, v in wall.items() if k != "total")
    report["trace"] = {
        "source": source,
        "jobs": len(trace),
        "tenants": len({t.tenant for t in trace}),
        "gpuHoursDemanded": sum(t.gpus * t.duration for t in trace) / 3600.0,
    }
    report["options"] = {
        "resumePreempted": options.resume_preempted,
        "headsPerClusterQueue": options.heads_per_cluster_queue,
        "cycleSeconds": options.cycle_seconds,
        "requeueBatchSeconds": options.requeue_batch_seconds,
        "maxGpusPerPod": options.max_gpus_per_pod,
        "inventory": inventory is not None,
    }
    report["wallTimeS"] = {k: round(v, 4) for k, v in wall.items()}
    return report


def replay_kueue_perf(name: str, options: Optional[ReplayOptions] = None) -> dict:
    """Run Kueue's performance-test scenario ``name`` (``baseline`` or ``large-scale``); returns
    ``{"scenario", "source", "clusterQueues", "workloads", "ours": kueue_perf.summarize(...),
    "kueue": published means, "simulation": counters, "wallTimeS": {...}}``."""
    options = options or ReplayOptions()
    scenario = kueue_perf.SCENARIOS[name]
    t0 = time.perf_counter()
    config = kueue_perf.build_config(scenario)
    jobs = kueue_perf.generate_jobs(scenario)
    sim = make_simulator(config, None, options)
    sim.add_jobs(jobs)
    t1 = time.perf_counter()
    sim.run()
    t2 = time.perf_counter()
    ours = kueue_perf.summarize(scenario, sim.jobs.values())
    t3 = time.perf_counter()
    pub = scenario.published
    return {
        "scenario": scenario.name,
        "source": scenario.source,
        "clusterQueues": scenario.cluster_queues,
        "workloads": scenario.workloads,
        "ours": ours,
        "kueue": {
            "clusterQueueUsagePercent": pub.usage_percent,
            "timeToAdmissionS": dict(pub.time_to_admission_s),
            "wallTimeS": pub.wall_s,
            "source": pub.source,
        },
        "options": {
            "resumePreempted": options.resume_preempted,
            "headsPerClusterQueue": options.heads_per_cluster_queue,
            "cycleSeconds": options.cycle_seconds,
            "requeueBatchSeconds": options.requeue_batch_seconds,
        },
        "simulation": _sim_stats(sim),
        "wallTimeS": {"build": round(t1 - t0, 4), "simulate": round(t2 - t1, 4),
                      "metrics": round(t3 - t2, 4), "total": round(t3 - t0, 4)},
    }


def kueue_perf_text(report: dict) -> str:
    """A short human summary of :func:`replay_kueue_perf`'s report."""
    ours, pub = report["ours"], report["kueue"]
    sim = report["simulation"]
    lines = [
        f"Kueue performance workload '{report['scenario']}': {report['workloads']:,} workloads, "
        f"{report['clusterQueues']:,} ClusterQueues ({report['source']})",
        f"{'':24}{'ours':>12}{'Kueue':>12}",
        f"{'ClusterQueue usage':24}{ours['clusterQueueUsagePercent']:>11.1f}%{pub['clusterQueueUsagePercent']:>11.1f}%",
    ]
    for cls, v in ours["timeToAdmissionS"].items():
        k = pub["timeToAdmissionS"].get(cls)
        lines.append(f"{'time to admission ' + cls:24}{_secs(v):>12}{_secs(k):>12}")
    lines.append(f"{'wall time':24}{_secs(report['wallTimeS']['total']):>12}{_secs(pub['wallTimeS']):>12}")
    lines.append(
        f"simulated {sim['endTimeS']:.1f} s: {sim['cycles']:,} cycles, {sim['admissions']:,} admissions, "
        f"{sim['preemptions']:,} preemptions (evictions by class: "
        + ", ".join(f"{c} {n:,}" for c, n in ours["evictions"].items())
        + ")"
    )
    return "\n".join(lines) + "\n"
