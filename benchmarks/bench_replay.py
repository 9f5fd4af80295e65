"""Replay benchmarks (not tests): Kueue's performance-test workloads and the full Philly trace.

    .venv/bin/python benchmarks/bench_replay.py                  # baseline, large-scale, philly
    .venv/bin/python benchmarks/bench_replay.py baseline --profile   # + the 20 hottest functions
    .venv/bin/python benchmarks/bench_replay.py philly --trace ../shared/traces/philly.csv

Targets (2-core machine): ``--kueue-perf baseline`` (15,000 workloads, 30 ClusterQueues) <= 5 s
wall; ``large-scale`` (50,000 workloads, 1,000 ClusterQueues) <= 30 s (Kueue's own harness: 351 s
and 1,179 s); the full Philly replay (82,247 jobs over 109 days, examples/philly/queues.yaml)
<= 60 s. Each figure is the wall time of the whole replay as ``jupyter gpuqueue replay`` runs it
(building workloads, simulating, metrics), measured here, outside the engine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from jupyter_gpuqueue import replay as rp  # noqa: E402

DEFAULT_TRACE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "philly.csv")
DEFAULT_CONFIG = os.path.join(ROOT, "examples", "philly", "queues.yaml")
TARGETS = {"baseline": 5.0, "large-scale": 30.0, "philly": 60.0}


def run_one(name: str, args) -> None:
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    if name == "philly":
        with open(args.config, encoding="utf-8") as f:
            rc = rp.load_replay_config([(args.config, f.read())])
        trace = rp.read_trace_file(args.trace, limit=args.limit)
        wall = {"read": time.perf_counter() - t0}
        report = rp.replay_trace(trace, rc, source=os.path.basename(args.trace), wall=wall)
        text = rp.summary_text(report)
    else:
        report = rp.replay_kueue_perf(name)
        text = rp.kueue_perf_text(report)
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
    print(text, end="")
    print(f"==> {name}: {wall:.2f} s wall (target <= {TARGETS[name]:.0f} s); "
          f"simulation {report['wallTimeS']['simulate']:.2f} s, {report['simulation']['cycles']:,} cycles\n")
    if prof is not None:
        import pstats

        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="*", metavar="baseline|large-scale|philly")
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--limit", type=int, help="Philly: only the first N jobs")
    ap.add_argument("--profile", action="store_true", help="cProfile each run, print the hottest functions")
    args = ap.parse_args()
    which = args.which or ["baseline", "large-scale", "philly"]
    for name in which:
        if name not in TARGETS:
            ap.error(f"unknown benchmark {name!r}")
        if name == "philly" and not os.path.exists(args.trace):
            print(f"philly: skipped, no trace at {args.trace}")
            continue
        run_one(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
