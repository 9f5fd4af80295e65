"""Engine micro-benchmarks (not tests): admission decisions per second on a cold queue, queue
position latency in a deep ClusterQueue, and peak memory with 50,000 workloads.

    .venv/bin/python benchmarks/bench_engine.py            # all three
    .venv/bin/python benchmarks/bench_engine.py decisions  # or: position, memory
    .venv/bin/python benchmarks/bench_engine.py decisions --profile   # + top functions (cProfile)

Targets (issue "A simulator with a clock", on a 2-core machine):

* cold queue of 50,000 pending workloads over 1,000 ClusterQueues: >= 10,000 admission
  decisions per second. Setup: Kueue's large-scale configuration (10 cohorts x 100 ClusterQueues,
  nominal 20 CPUs, borrowingLimit 100) with all its 50,000 workloads pending at t = 0; cycles run
  at t = 0 until one changes nothing. A *decision* is one head processed by a cycle (admitted,
  preempting, or requeued/parked with a reason): ``sum(result.heads)``.
* position of one workload in a 50,000-deep ClusterQueue: p99 <= 1 ms, no full sort per query
  (``Scheduler.position``; the latency at depth 5,000 is printed beside it to show the scaling).
* peak memory with 50,000 workloads <= 500 MB: the peak RSS (``ru_maxrss``) of a fresh Python
  process that builds the cold queue above, and of one that replays the whole large-scale
  workload (each in its own subprocess, so imports are counted and nothing else is).

Prints one line per figure; exit status 0.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jupyter_gpuqueue.engine import kueue_perf  # noqa: E402
from jupyter_gpuqueue.engine.model import GPU, ClusterConfig, ClusterQueue, FlavorQuotas, LabelSelector  # noqa: E402
from jupyter_gpuqueue.engine.model import LocalQueue, PodSet, ResourceFlavor, ResourceGroup, ResourceQuota  # noqa: E402
from jupyter_gpuqueue.engine.model import Workload  # noqa: E402
from jupyter_gpuqueue.engine.scheduler import Scheduler  # noqa: E402


def cold_queue() -> Scheduler:
    """Kueue's large-scale configuration with its 50,000 workloads pending."""
    sc = kueue_perf.LARGE_SCALE
    sched = Scheduler(kueue_perf.build_config(sc))
    for job in kueue_perf.generate_jobs(sc):
        sched.add_workload(job.workload)
    return sched


def bench_decisions(profile: bool = False) -> None:
    t0 = time.perf_counter()
    sched = cold_queue()
    t1 = time.perf_counter()
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    decisions = admitted = cycles = 0
    t2 = time.perf_counter()
    while True:
        r = sched.schedule(0.0)
        cycles += 1
        decisions += r.heads
        admitted += len(r.admitted)
        if r.heads == 0 or not (r.changed or r.admitted or getattr(r, "preempted", None)):
            break
    t3 = time.perf_counter()
    if prof is not None:
        prof.disable()
    wall = t3 - t2
    print(f"cold queue: 50,000 pending over 1,000 ClusterQueues (built in {t1 - t0:.2f} s)")
    print(f"  {decisions:,} decisions ({admitted:,} admitted) in {cycles:,} cycles, {wall:.2f} s: "
          f"{decisions / wall:,.0f} decisions/s (target >= 10,000)")
    if prof is not None:
        import pstats

        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def deep_queue(depth: int) -> tuple[Scheduler, list[str]]:
    cfg = ClusterConfig()
    cfg.resource_flavors["gpu"] = ResourceFlavor("gpu")
    cfg.cluster_queues["deep"] = ClusterQueue(
        name="deep", namespace_selector=LabelSelector(),
        resource_groups=[ResourceGroup([GPU], [FlavorQuotas("gpu", [ResourceQuota(GPU, 0)])])])
    for t in range(10):  # ten teams share the ClusterQueue
        cfg.local_queues[f"team-{t}/q"] = LocalQueue(f"team-{t}", "q", "deep")
    sched = Scheduler(cfg)
    rng = random.Random(1)
    keys = []
    for i in range(depth):
        wl = Workload(f"team-{i % 10}", f"wl-{i}", "q", [PodSet("main", 1, {GPU: 1})],
                      priority=rng.choice((0, 0, 0, 100)), creation_time=rng.random() * 86400, uid=f"{i:09d}")
        sched.add_workload(wl)
        keys.append(wl.key)
    return sched, keys


def bench_position() -> None:
    for depth in (5_000, 50_000):
        sched, keys = deep_queue(depth)
        rng = random.Random(2)
        sample = [rng.choice(keys) for _ in range(20_000)]
        lat = []
        pc = time.perf_counter
        for k in sample:
            a = pc()
            sched.position(k)
            lat.append(pc() - a)
        lat.sort()
        p50, p99, mx = lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1]
        print(f"position in a {depth:,}-deep ClusterQueue (10 LocalQueues), 20,000 queries: "
              f"p50 {p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us, max {mx * 1e6:.0f} us (target p99 <= 1 ms)")
    # Positions are consistent with the queue order.
    sched, keys = deep_queue(2_000)
    order = list(sched.pending_keys("deep"))
    assert all(sched.position(k)[0] == i for i, k in enumerate(order))


_MEM_CHILD = {
    "cold": "from benchmarks.bench_engine import cold_queue; s = cold_queue()",
    "replay": "from jupyter_gpuqueue.replay import replay_kueue_perf; replay_kueue_perf('large-scale')",
}


def bench_memory() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for what, code in _MEM_CHILD.items():
        script = (f"import sys, resource; sys.path.insert(0, {root!r}); {code}; "
                  "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root)
        kib = int(out.stdout.strip().splitlines()[-1])
        label = {"cold": "cold queue of 50,000 workloads", "replay": "large-scale replay (50,000 workloads)"}[what]
        print(f"peak RSS, {label}: {kib / 1024:.0f} MiB ({time.perf_counter() - t0:.1f} s; target <= 500 MB)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="*", metavar="decisions|position|memory")
    ap.add_argument("--profile", action="store_true", help="cProfile the decisions benchmark")
    args = ap.parse_args()
    which = args.which or ["decisions", "position", "memory"]
    for w in which:
        if w not in ("decisions", "position", "memory"):
            ap.error(f"unknown benchmark {w!r}")
    if "decisions" in which:
        bench_decisions(args.profile)
    if "position" in which:
        bench_position()
    if "memory" in which:
        bench_memory()
    return 0


if __name__ == "__main__":
    sys.exit(main())
