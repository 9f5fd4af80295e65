"""Replay benchmarks (not tests): Kueue's performance-test workloads and the full Philly trace.

    .venv/bin/python benchmarks/bench_replay.py                  # baseline, large-scale, philly
    .venv/bin/python benchmarks/bench_replay.py baseline --profile   # + the 20 hottest functions
    .venv/bin/python benchmarks/bench_replay.py philly --trace ../shared/traces/philly.csv

Targets (2-core machine): ``--kueue-perf baseline`` (15,000 workloads, 30 ClusterQueues) <= 5 s
wall; ``large-scale`` (50,000 workloads, 1,000 ClusterQueues) <= 30 s (Kueue's own harness: 351 s
and 1,179 s); the full Philly replay (82,247 jobs over 109 days, examples/philly/queues.yaml)
<= 60 s. Each figure is the wall time of the whole replay as ``jupyter gpuqueue replay`` runs it
(building workloads, simulating, metrics), measured here, outside the engine.

Speed against a reference commit, on the same machine (a ratio, not a wall time: the machine's
speed and load change, the ratio of two runs taken together much less)::

    git worktree add /tmp/ref 827ecbb
    .venv/bin/python benchmarks/bench_replay.py baseline --reference /tmp/ref --rounds 5
    .venv/bin/python benchmarks/bench_replay.py baseline --max-ratio 1.05   # later, against it

``--reference DIR`` runs the replay of the checkout in DIR and of this one alternately, each in a
fresh Python, ``--rounds`` times, and prints the medians and their ratio (CPU time of the replay,
and wall time); the decisions must be the same (the simulation's counts: cycles, admissions,
preemptions, end time), or it fails. The reference's medians are stored in
``benchmarks/reference/replay-<machine>.json`` (the machine: host name, CPU model, cores); a later
run without ``--reference`` on the same machine prints its CPU time as a ratio to the stored one.
``--max-ratio R``: exit status 1 when the ratio is above R.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from jupyter_gpuqueue import replay as rp  # noqa: E402

DEFAULT_TRACE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "philly.csv")
DEFAULT_CONFIG = os.path.join(ROOT, "examples", "philly", "queues.yaml")
TARGETS = {"baseline": 5.0, "large-scale": 30.0, "philly": 60.0}


REFERENCE_DIR = os.path.join(ROOT, "benchmarks", "reference")

# One replay in a fresh Python, of the package in the checkout given as argv[1]: JSON on stdout.
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jupyter_gpuqueue
assert jupyter_gpuqueue.__file__.startswith(sys.argv[1]), jupyter_gpuqueue.__file__
from jupyter_gpuqueue import replay as rp
t, c = time.perf_counter(), time.process_time()
report = rp.replay_kueue_perf(sys.argv[2])
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "simulation": report["simulation"]}))
"""


def machine() -> str:
    """This machine, for the stored reference: host name, CPU model, cores."""
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{platform.node()} / {model} / {os.cpu_count()} cores"


def _reference_path() -> str:
    import hashlib

    return os.path.join(REFERENCE_DIR, f"replay-{hashlib.sha1(machine().encode()).hexdigest()[:12]}.json")


def _commit(path: str) -> str:
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _child(path: str, name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, path, name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_by_side(name: str, ref: str, rounds: int) -> float:
    """The replay ``name`` of the checkout ``ref`` and of this one, alternately ``rounds`` times;
    prints the medians and returns the ratio of CPU times (this / reference). Stores the
    reference's medians for this machine. SystemExit when the decisions differ."""
    runs: dict[str, list[dict]] = {"reference": [], "this": []}
    for i in range(rounds):
        for label, path in (("reference", ref), ("this", ROOT)) if i % 2 == 0 else (("this", ROOT), ("reference", ref)):
            runs[label].append(_child(path, name))
    sims = {json.dumps(r["simulation"], sort_keys=True) for rs in runs.values() for r in rs}
    if len(sims) != 1:
        raise SystemExit(f"{name}: the decisions differ between the reference and this checkout: {sims}")
    med = {label: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "wall")} for label, rs in runs.items()}
    ratio = med["this"]["cpu"] / med["reference"]["cpu"]
    print(f"==> {name}, {rounds} rounds side by side (medians): reference {_commit(ref)} "
          f"cpu {med['reference']['cpu']:.2f} s wall {med['reference']['wall']:.2f} s; this {_commit(ROOT)} "
          f"cpu {med['this']['cpu']:.2f} s wall {med['this']['wall']:.2f} s; ratio {ratio:.3f} (cpu), "
          f"{med['this']['wall'] / med['reference']['wall']:.3f} (wall)")
    stored = {}
    if os.path.exists(_reference_path()):
        with open(_reference_path(), encoding="utf-8") as f:
            stored = json.load(f)
    stored.update(machine=machine(), commit=_commit(ref))
    stored.setdefault("benchmarks", {})[name] = {**med["reference"], "rounds": rounds, "at": time.time(),
                                                  "simulation": runs["reference"][0]["simulation"]}
    os.makedirs(REFERENCE_DIR, exist_ok=True)
    with open(_reference_path(), "w", encoding="utf-8") as f:
        json.dump(stored, f, indent=1, sort_keys=True)
    return ratio


def against_stored(name: str, rounds: int) -> "float | None":
    """This checkout's replay ``name`` (median CPU time of ``rounds`` fresh runs) as a ratio to the
    reference stored for this machine; None when none is stored."""
    if not os.path.exists(_reference_path()):
        print(f"{name}: no reference stored for this machine ({machine()}): run with --reference DIR first")
        return None
    with open(_reference_path(), encoding="utf-8") as f:
        stored = json.load(f)
    ref = stored.get("benchmarks", {}).get(name)
    if ref is None:
        print(f"{name}: no reference stored for it on this machine")
        return None
    runs = [_child(ROOT, name) for _ in range(rounds)]
    if any(r["simulation"] != ref["simulation"] for r in runs):
        raise SystemExit(f"{name}: the decisions differ from the reference {stored['commit']}'s")
    cpu = statistics.median(r["cpu"] for r in runs)
    ratio = cpu / ref["cpu"]
    print(f"==> {name}: cpu {cpu:.2f} s = {ratio:.3f} x the reference {stored['commit']} on this machine "
          f"({ref['cpu']:.2f} s, stored)")
    return ratio


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
    ap.add_argument("--reference", metavar="DIR", help="a checkout of the reference commit: side by side with it")
    ap.add_argument("--rounds", type=int, default=3, help="fresh runs of each side (medians are compared)")
    ap.add_argument("--max-ratio", type=float, help="exit 1 when this checkout's CPU time / the reference's is above")
    args = ap.parse_args()
    which = args.which or ["baseline", "large-scale", "philly"]
    if args.reference or args.max_ratio:
        worst = 0.0
        for name in which:
            if name == "philly":
                ap.error("--reference / --max-ratio: Kueue's workloads only (baseline, large-scale)")
            ratio = (side_by_side(name, os.path.abspath(args.reference), args.rounds) if args.reference
                     else against_stored(name, args.rounds))
            worst = max(worst, ratio or 0.0)
        if args.max_ratio and worst > args.max_ratio:
            print(f"slower than the reference: {worst:.3f} > {args.max_ratio}")
            return 1
        return 0
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
