"""Idle notebook GPU reclaim on a simulated day of notebook sessions and batch jobs (BENCHMARKS.md,
"Idle notebook reclaim").

    .venv/bin/python -m benchmarks.idle_day [--days 5] [--seed 1] [--gpus 16]

Every day is run twice through the engine's event-driven simulator (engine/simulator.py, the
scheduler the live service runs): without reclaim, and with the idle policy (``--timeout`` 30 min,
``--warn`` 10 min, ``--keeps`` 3). The same sessions and jobs (same seed) both times.

Assumptions of the generator (one lab, one ClusterQueue of ``--gpus`` GPUs, every workload at the
same priority, BestEffortFIFO, no preemption):

* **Notebook sessions**: arrive as a Poisson process from 08:00 to 18:00 at ``--sessions-per-hour``
  (4); each holds 1 GPU as a lease of at most 8 h (the demo's ``gpuqueue_max_runtime_seconds``).
  From its admission a session alternates active phases (exponential, mean 20 min: cells run, the
  server reports activity) and idle phases (exponential, mean 15 min: reading, meetings, lunch).
  Its working length is lognormal (median 2 h, σ 0.6). At the end: with probability
  ``--forget`` (0.35) the user walks away and leaves the server running until the lease's 8 h are
  over; otherwise the server is stopped 5 min after the last active phase.
* **Warnings**: a user in an idle phase *inside* the session sees the warning and clicks "Keep my
  GPU" with probability ``--keep-prob`` (0.5) per warning, at most ``--keeps`` times; a forgotten
  server is never kept. A session released while its user is away restarts when the user comes
  back: a new lease is submitted then for the rest of the session (it waits in the queue like any
  workload) — the cost of reclaiming too eagerly is counted.
* **Batch jobs**: Poisson over the 24 h at ``--jobs-per-hour`` (3); 1, 2, 4 or 8 GPUs with
  probabilities 0.5, 0.25, 0.2, 0.05; run time lognormal (median 1 h, σ 1.0, capped at 12 h).

Reported per day (means over ``--days``): GPU-hours reclaimed (the definition of service/idle.py:
1 GPU × from the release to the lease's scheduled end), GPU-hours of idle leases actually freed
(held-while-idle without reclaim − with), the batch jobs' waits (mean, p95, total), and how many
sessions were cut while their user was away.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass, field

from jupyter_gpuqueue.engine.model import (
    GPU,
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions
from jupyter_gpuqueue.engine.simulator import SimJob, Simulator

H = 3600.0
MAX_LEASE = 8 * H


@dataclass
class Session:
    """Phases from the lease's admission: [(kind, seconds)], kind "active" | "idle" | "tail"
    ("tail": after the work, either 5 min or until the lease's end when forgotten)."""

    name: str
    arrival: float
    phases: list[tuple[str, float]]
    forgotten: bool
    keep_draws: list[float] = field(default_factory=list)


def generate_day(rng: random.Random, args) -> tuple[list[Session], list[tuple[str, float, int, float]]]:
    sessions = []
    t = 8 * H
    i = 0
    while True:
        t += rng.expovariate(args.sessions_per_hour / H)
        if t >= 18 * H:
            break
        length = min(MAX_LEASE, rng.lognormvariate(math.log(2 * H), 0.6))
        phases, used, active = [], 0.0, True
        while used < length:
            d = min(length - used, rng.expovariate(1 / (20 * 60 if active else 15 * 60)))
            phases.append(("active" if active else "idle", d))
            used += d
            active = not active
        if phases[-1][0] == "idle":
            phases.pop()  # the work ends with its last active phase
        forgotten = rng.random() < args.forget
        phases.append(("tail", MAX_LEASE if forgotten else 5 * 60))
        sessions.append(Session(f"nb-{i}", t, phases, forgotten, [rng.random() for _ in range(64)]))
        i += 1
    jobs = []
    t = 0.0
    j = 0
    while True:
        t += rng.expovariate(args.jobs_per_hour / H)
        if t >= 24 * H:
            break
        gpus = rng.choices([1, 2, 4, 8], [0.5, 0.25, 0.2, 0.05])[0]
        run = min(12 * H, rng.lognormvariate(math.log(H), 1.0))
        jobs.append((f"job-{j}", t, gpus, run))
        j += 1
    return sessions, jobs


def hold(phases: list[tuple[str, float]], args, reclaim: bool, draws: list[float]):
    """How long one lease holds its GPU from its admission, capped at MAX_LEASE: ``(held,
    idle_held, cut, reclaimed)``: seconds held, seconds of them idle, (index, offset) of an idle
    release that cuts the session short (else None), whether the idle reclaim released it."""
    t = idle_held = 0.0
    draw = 0
    keeps = args.keeps
    for k, (kind, d) in enumerate(phases):
        if kind == "active":
            t += d
            if t >= MAX_LEASE:
                return MAX_LEASE, idle_held, None, False
            continue
        # idle (inside the session) or the tail (after it; the user is gone when forgotten)
        away = kind == "tail"
        clock = 0.0  # the idle clock, from the phase's start or the last keep
        start = t
        while reclaim:
            release = clock + args.timeout + args.warn
            if release >= d:
                break
            if not away and keeps > 0 and draws[draw % len(draws)] < args.keep_prob:
                draw += 1
                keeps -= 1
                clock += args.timeout + draws[draw % len(draws)] * args.warn  # kept during the warning
                draw += 1
                continue
            draw += 1
            end = min(MAX_LEASE, start + release)
            idle_held += end - start
            return end, idle_held, (None if kind == "tail" else (k, release)), end < MAX_LEASE
        end = min(MAX_LEASE, t + d)
        idle_held += end - t
        t = end
        if t >= MAX_LEASE:
            return MAX_LEASE, idle_held, None, False
    return t, idle_held, None, False


def workload(name: str, submit: float, gpus: int, ns: str) -> Workload:
    return Workload(ns, name, "q", [PodSet("main", 1, {GPU: gpus})], priority=1000, creation_time=submit,
                    uid=f"{submit:012.3f}-{name}")


def config(gpus: int) -> ClusterConfig:
    cfg = ClusterConfig()
    cfg.resource_flavors["gpu"] = ResourceFlavor("gpu")
    cfg.cluster_queues["lab"] = ClusterQueue(
        name="lab", namespace_selector=LabelSelector(),
        resource_groups=[ResourceGroup([GPU], [FlavorQuotas("gpu", [ResourceQuota(GPU, gpus)])])])
    for ns in ("notebooks", "batch"):
        cfg.local_queues[f"{ns}/q"] = LocalQueue(ns, "q", "lab")
    return cfg


def run_day(sessions: list[Session], jobs, args, reclaim: bool) -> dict:
    sim = Simulator(Scheduler(config(args.gpus), None, SchedulerOptions(requeue_batch_seconds=0)))
    for name, t, gpus, run in jobs:
        sim.add_job(SimJob(workload(name, t, gpus, "batch"), t, run, tag="batch"))
    pending: dict[str, tuple[Session, list]] = {}  # lease key -> (session, its phases)
    stats = {"reclaimed": 0.0, "idle_held": 0.0, "cut": 0, "releases": 0}

    def add_lease(s: Session, name: str, at: float, phases):
        held, idle_held, cut, reclaimed = hold(phases, args, reclaim, s.keep_draws)
        sim.add_job(SimJob(workload(name, at, 1, "notebooks"), at, held, tag=(s, phases, cut, idle_held, reclaimed)))
        pending[f"notebooks/{name}"] = (s, phases)

    for s in sessions:
        add_lease(s, s.name, s.arrival, s.phases)
    seen: set[str] = set()
    while sim.next_event_time() is not None:
        sim.run(until=sim.next_event_time())
        for key in list(pending):
            job = sim.jobs[key]
            if job.first_admit_time is None or key in seen:
                continue
            seen.add(key)
            s, phases, cut, idle_held, reclaimed = job.tag
            stats["idle_held"] += idle_held
            if reclaimed:  # 1 GPU × from the release to the lease's scheduled end (service/idle.py)
                stats["reclaimed"] += (MAX_LEASE - job.run_time) / H
                stats["releases"] += 1
            if cut is not None:
                k, offset = cut
                stats["cut"] += 1
                rest = phases[k + 1:]
                back = job.first_admit_time + sum(d for _k, d in phases[:k]) + phases[k][1]
                add_lease(s, f"{job.workload.name}-r", back, rest)
            del pending[key]
    waits = [j.queueing_delay for j in sim.jobs.values() if j.tag == "batch"]
    nb_waits = [j.queueing_delay for j in sim.jobs.values() if j.tag != "batch"]
    waits.sort()
    return {
        "reclaimedGpuHours": stats["reclaimed"], "idleHeldGpuHours": stats["idle_held"] / H,
        "releases": stats["releases"], "cut": stats["cut"],
        "batchWaitMeanMin": statistics.fmean(waits) / 60, "batchWaitP95Min": waits[int(0.95 * (len(waits) - 1))] / 60,
        "batchWaitTotalH": sum(waits) / H, "notebookWaitMeanMin": statistics.fmean(nb_waits) / 60,
        "sessions": len(sessions), "jobs": len(jobs),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpus", type=int, default=16)
    p.add_argument("--sessions-per-hour", type=float, default=4.0)
    p.add_argument("--jobs-per-hour", type=float, default=3.0)
    p.add_argument("--forget", type=float, default=0.35)
    p.add_argument("--keep-prob", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=30 * 60)
    p.add_argument("--warn", type=float, default=10 * 60)
    p.add_argument("--keeps", type=int, default=3)
    args = p.parse_args(argv)
    rows = []
    for d in range(args.days):
        sessions, jobs = generate_day(random.Random(args.seed * 1000 + d), args)
        off, on = run_day(sessions, jobs, args, False), run_day(sessions, jobs, args, True)
        rows.append((off, on))
        print(f"day {d + 1}: {len(sessions)} sessions, {len(jobs)} jobs; reclaimed {on['reclaimedGpuHours']:.1f} "
              f"GPU-h ({on['releases']} releases, {on['cut']} sessions cut); idle-held GPU-h "
              f"{off['idleHeldGpuHours']:.1f} -> {on['idleHeldGpuHours']:.1f}; batch wait mean "
              f"{off['batchWaitMeanMin']:.1f} -> {on['batchWaitMeanMin']:.1f} min, p95 {off['batchWaitP95Min']:.1f} -> "
              f"{on['batchWaitP95Min']:.1f} min, total {off['batchWaitTotalH']:.1f} -> {on['batchWaitTotalH']:.1f} h; "
              f"notebook wait mean {off['notebookWaitMeanMin']:.1f} -> {on['notebookWaitMeanMin']:.1f} min")

    def mean(side, key):
        return statistics.fmean(r[side][key] for r in rows)

    print(f"\nmeans over {args.days} days ({args.gpus} GPUs, timeout {args.timeout / 60:.0f} min, "
          f"warning {args.warn / 60:.0f} min, {args.keeps} keeps):")
    print("| | without reclaim | with reclaim |\n| --- | --- | --- |")
    for key, label in [("reclaimedGpuHours", "GPU-hours reclaimed (to the leases' scheduled ends)"),
                       ("releases", "idle releases"), ("cut", "sessions cut while their user was away"),
                       ("idleHeldGpuHours", "GPU-hours held by idle notebooks"),
                       ("batchWaitMeanMin", "batch wait, mean (min)"), ("batchWaitP95Min", "batch wait, p95 (min)"),
                       ("batchWaitTotalH", "batch wait, total (h)"),
                       ("notebookWaitMeanMin", "notebook wait, mean (min)")]:
        print(f"| {label} | {mean(0, key):.1f} | {mean(1, key):.1f} |")


if __name__ == "__main__":
    main()
