"""Start-time estimates: the time of one ``estimate_starts`` over a deep queue (issue 14's budget:
10,000 pending workloads over 30 ClusterQueues in <= 250 ms).

The queue: Kueue's baseline performance configuration (5 cohorts x 6 ClusterQueues, nominalQuota
20 CPU, borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority), every
ClusterQueue full, 10,000 workloads pending on top (small / medium / large in Kueue's 7 : 2 : 1,
priorities 50 / 100 / 200), a history runtime model trained on 3,000 finished runs.

    .venv/bin/python benchmarks/bench_estimate.py [--pending N] [--repeat R] [--head N] [--full] [--profile]

Prints the wall time of: the snapshot (copy) alone; an estimate of every pending workload with
the first ``--head`` (10) of each ClusterQueue simulated and the rest extrapolated, with the range
(three forward runs) and without (one); the calibrated range (one forward run, then
``WaitCalibration.adjust`` for every estimate, its cache cold: right after an observation); with
``--full`` the whole queue simulated (one run).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import time

from jupyter_gpuqueue.engine import kueue_perf
from jupyter_gpuqueue.engine.calibration import WaitCalibration
from jupyter_gpuqueue.engine.estimate import estimate_starts
from jupyter_gpuqueue.engine.model import CPU, PodSet, Workload
from jupyter_gpuqueue.engine.runtime_model import HistoryRuntime
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions
from jupyter_gpuqueue.engine.snapshot import snapshot

CLASSES = [("small", 1000, 50, 200.0), ("medium", 5000, 100, 500.0), ("large", 20000, 200, 1000.0)]


def build(pending: int, seed: int = 1) -> tuple[Scheduler, HistoryRuntime, float]:
    cfg = kueue_perf.build_config(kueue_perf.SCENARIOS["baseline"])
    cqs = sorted(cfg.cluster_queues)
    sched = Scheduler(cfg, None, SchedulerOptions(requeue_batch_seconds=0.0))
    rng = random.Random(seed)
    model = HistoryRuntime(lambda w: (("prio", w.priority), ("all",)))
    for _ in range(3000):
        _, _, prio, rt = rng.choices(CLASSES, weights=[7, 2, 1])[0]
        model.observe_keys((("prio", prio), ("all",)), rng.expovariate(1 / rt))
    now = 100_000.0
    # Fill every ClusterQueue up to its nominal quota, then queue `pending` more.
    i = 0
    for cq in cqs:
        used = 0
        while used + 1000 <= 20000:
            sched.add_workload(Workload(namespace=cq, name=f"run{i}", queue_name=cq,
                                        pod_sets=[PodSet("main", 1, {CPU: 1000})], priority=50,
                                        creation_time=now - 5000 + i))
            used += 1000
            i += 1
    sched.run_until_stable(now - 100)
    for k in range(pending):
        cq = cqs[k % len(cqs)]
        _, cpu, prio, _ = rng.choices(CLASSES, weights=[7, 2, 1])[0]
        sched.add_workload(Workload(namespace=cq, name=f"w{k}", queue_name=cq,
                                    pod_sets=[PodSet("main", 1, {CPU: cpu})], priority=prio,
                                    creation_time=now - 50 + k * 0.001))
    sched.run_until_stable(now)
    return sched, model, now


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--head", type=int, default=10, help="exact_per_queue for the bounded figures (default 10)")
    ap.add_argument("--full", action="store_true", help="also time the whole queue simulated (slow)")
    ap.add_argument("--exact", action="store_true", help="also time compress=False (Kueue's walk)")
    args = ap.parse_args()
    sched, model, now = build(args.pending)
    pending = len(sched.workloads) - len(sched.admitted)
    print(f"{pending:,} pending, {len(sched.admitted):,} admitted, {len(sched.queues)} ClusterQueues")
    t, _ = timed(lambda: snapshot(sched, positions=False), args.repeat)
    print(f"snapshot (copy)                  {t * 1000:8.1f} ms")
    if args.full:
        t, est = timed(lambda: estimate_starts(sched, now, model, ranges=False), 1)
        done = sum(1 for e in est.values() if e.start_at is not None)
        print(f"whole queue, one forward run     {t * 1000:8.1f} ms  ({done:,} of {len(est):,} estimated)")
    for n in sorted({1, args.head}):
        t, est = timed(lambda: estimate_starts(sched, now, model, exact_per_queue=n), args.repeat)
        print(f"with the range, exact_per_queue={n:<4} {t * 1000:8.1f} ms  "
              f"({sum(1 for e in est.values() if e.extrapolated):,} extrapolated)")
        t, est = timed(lambda: estimate_starts(sched, now, model, ranges=False, exact_per_queue=n), args.repeat)
        print(f"one run, exact_per_queue={n:<4}      {t * 1000:8.1f} ms")
    cal = WaitCalibration()
    crng = random.Random(2)
    names = sorted(sched.config.cluster_queues)
    for i in range(3000):
        cq = names[i % len(names)]
        e = crng.uniform(60, 20000)
        cal.observe(cq, e, e * crng.lognormvariate(0, 0.5), float(i))
    for n in sorted({1, args.head}):
        def calibrated():
            cal.observe(names[0], 100.0, 120.0, 1e9)  # a start: the cache is cold
            est = estimate_starts(sched, now, model, ranges=False, exact_per_queue=n)
            for k, e in est.items():
                if e.start_at is not None:
                    p, lo, hi = cal.adjust(e.cq, e.start_at - now)
                    e.early, e.late = now + lo, now + hi
            return est

        t, _ = timed(calibrated, args.repeat)
        print(f"calibrated range, exact_per_queue={n:<4} {t * 1000:6.1f} ms  (one run + adjust)")
    if args.exact:
        t, _ = timed(lambda: estimate_starts(sched, now, model, ranges=False, compress=False), 1)
        print(f"one forward run, Kueue's walk    {t * 1000:8.1f} ms")
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        estimate_starts(sched, now, model, ranges=False)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
