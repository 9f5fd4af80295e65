"""``jupyter gpuqueue bench submit | drain | panels | eta | k8s``: the command line of the live benchmarks.

Without ``--url`` each benchmark starts its own server (:class:`.server.BenchServer`: a real
``jupyter server`` with token auth, SQLite ledger, local backend) with the stream's cluster
(16 × 8 A100s, team quotas 64 / 48 / 32; ``--nodes`` / ``--gpus-per-node`` for smaller
inventories) and stops it afterwards. With ``--url`` / ``--token`` it uses that server as it is.
The figures go to stdout as text, and as JSON with ``--json FILE``. Exit status 0 when every
check passed (every submission acknowledged once, every job succeeded), 1 otherwise, 2 on bad
arguments. Timings are reported, never checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TextIO


def add_bench_parser(sub, server_parent) -> None:
    """Add ``bench`` with its three benchmarks to the ``jupyter gpuqueue`` subparsers ``sub``."""
    from ..cli.args import ArgumentParser, positive_int

    p = sub.add_parser(
        "bench",
        help="benchmarks of the live service: submit, drain, panels, eta, k8s (BENCHMARKS.md)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bsub = p.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=ArgumentParser)
    bsub.required = True

    common = ArgumentParser(add_help=False)
    g = common.add_argument_group("server")
    g.add_argument("--url", help="a running server's base URL (default: start one)")
    g.add_argument("--token", help="its token")
    g.add_argument("--nodes", type=positive_int, default=16, help="nodes of the started server's inventory (16)")
    g.add_argument("--gpus-per-node", type=positive_int, default=8, help="A100s per node (8)")
    g.add_argument("--cycle-interval", type=float, default=0.5,
                   help="GpuQueueApp.cycle_interval of the started server, seconds (0.5, the default)")
    g.add_argument("--keep", action="store_true", help="keep the started server's folder (ledger, logs)")
    g.add_argument("--profile", metavar="FILE", help="run the started server under cProfile, write its profile here")
    g.add_argument("--db-url", metavar="URL",
                   help="the started server's ledger (GpuQueueApp.db_url), e.g. postgresql+psycopg://…; "
                   "default: SQLite in its folder")
    g.add_argument("--no-estimates", action="store_true",
                   help="start the server with GpuQueueApp.estimate_start_times = False (the baseline "
                   "of what estimated start times cost)")
    common.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    common.add_argument("--seed", type=int, default=42, help="seed of the job stream (42, as slurm.md)")

    s = bsub.add_parser("submit", parents=[common], help="N submissions from C concurrent REST clients",
                        description="N submissions through the REST API from C concurrent clients (each "
                        "waits for its acknowledgement before the next); submissions/s and the time until "
                        "every workload has an admission or a position.")
    s.add_argument("--n", type=positive_int, default=10000, help="submissions (10000)")
    s.add_argument("--clients", type=positive_int, default=8, help="concurrent clients (8)")
    s.add_argument("--batch", type=positive_int, default=1,
                   help="submissions per request (1: one SubmitRequest each; more: SubmitBatch "
                   "{\"items\": [...]}, as a sweep or a job array would send them)")
    s.add_argument("--command", dest="job_command", default=None,
                   help="the jobs' command (default 'sleep 600': jobs do not finish during the run, as "
                   "slurm.md submitted into a DOWN partition; 'sleep 1' lets them churn)")

    d = bsub.add_parser("drain", parents=[common], help="the shared job stream run to completion",
                        description="The job stream of slurm.md (2,000 jobs of 1-8 GPUs, sleep 1 each) "
                        "submitted and run to completion by the local backend; makespan against the "
                        "ideal, GPU utilisation, job starts/s, wait per team.")
    d.add_argument("--n", type=positive_int, default=2000, help="jobs (2000)")
    d.add_argument("--clients", type=positive_int, default=8, help="concurrent submitting clients (8)")
    b = d.add_mutually_exclusive_group()
    b.add_argument("--borrowing", dest="borrowing", action="store_true", default=True,
                   help="the teams' ClusterQueues share one cohort, borrowing unlimited (default)")
    b.add_argument("--no-borrowing", dest="borrowing", action="store_false",
                   help="no cohort: each team is capped at its nominal quota (Slurm's GrpTRES)")
    d.add_argument("--both", action="store_true", help="run with and then without borrowing")
    d.add_argument("--backlog", action="store_true",
                   help="submit into held ClusterQueues (stopPolicy: Hold), release them (an admin change) once "
                   "every job is acknowledged and time the makespan from there: every job waits at once, "
                   "however fast the submissions went (a server started here only)")

    pn = bsub.add_parser("panels", parents=[common], help="event-stream subscribers during a drain",
                         description="CLIENTS websocket subscribers (panels), each also querying a "
                         "pending workload's position every second, while `bench drain` runs.")
    pn.add_argument("--clients", type=positive_int, default=100, help="subscribers (100)")
    pn.add_argument("--n", type=positive_int, default=2000, help="jobs of the drain (2000)")
    pn.add_argument("--query-interval", type=float, default=1.0, help="seconds between a panel's position queries")
    b = pn.add_mutually_exclusive_group()
    b.add_argument("--borrowing", dest="borrowing", action="store_true", default=True)
    b.add_argument("--no-borrowing", dest="borrowing", action="store_false")

    e = bsub.add_parser("eta", parents=[common], help="estimated start times on a live queue (issue 35)",
                        description="A seeded stream of jobs (9 scripts at 20-90 %% of their declared "
                        "maximum, bursty arrivals, a few high-priority jobs and cancels) on 8 GPUs shared "
                        "by 3 teams in a cohort, through the REST API of a started server; the jobs really "
                        "sleep. Coverage, error at submission and at half the wait, range coverage, each "
                        "against the rate baseline, and the estimator's cost (bench/eta.py).")
    e.add_argument("--n", type=positive_int, default=80, help="jobs (80)")
    e.add_argument("--time-scale", type=float, default=1.0,
                   help="run times ×this (1.0: declared maxima 8-36 s; the default run takes ~5 min)")
    e.add_argument("--mean-gap", type=float, default=2.0, help="mean seconds between jobs (bursts) (2.0)")
    e.add_argument("--poll-interval", type=float, default=1.0, help="seconds between reads of the pending list")
    e.add_argument("--rate-blend", type=float, default=None,
                   help="GpuQueueApp.estimate_rate_blend of the started server (default: its default)")

    k = bsub.add_parser("k8s", help="the Kubernetes backend against a real control plane",
                        description="N workloads run as batch/v1 Jobs on a real kube-apiserver, "
                        "kube-controller-manager and kube-scheduler (v1.28.7, started here from "
                        "../shared/kube-assets or $GPUQUEUE_KUBE_ASSETS) with GPU nodes played by the "
                        "node stand-in: admissions/s, submission to Job created, to Running, to "
                        "Succeeded (p50/p99), API requests per workload, errors.")
    k.add_argument("--n", type=positive_int, default=2000, help="workloads (2000)")
    k.add_argument("--nodes", type=positive_int, default=25, help="GPU nodes (25)")
    k.add_argument("--gpus-per-node", type=positive_int, default=80,
                   help="GPUs per node (80: quota for every workload at once)")
    k.add_argument("--batch", type=positive_int, default=50, help="submissions per batch (50)")
    k.add_argument("--clients", type=positive_int, default=4, help="concurrent submitters (4)")
    k.add_argument("--backlog", action="store_true",
                   help="queue every workload behind a held ClusterQueue (stopPolicy: Hold), then release it "
                   "(an admin change) and time the admissions from there")
    k.add_argument("--command", dest="job_command", default="sleep 1", help="the jobs' command ('sleep 1')")
    k.add_argument("--start-concurrency", type=positive_int, default=16,
                   help="Jobs created at a time by the backend's workers (16, kube_start_concurrency's default)")
    k.add_argument("--kube-api-qps", type=positive_int, default=500,
                   help="client QPS of the controller-manager and scheduler (500; upstream default 20)")
    k.add_argument("--keep", action="store_true", help="keep the cluster's folder (logs)")
    k.add_argument("--repeat", type=positive_int, default=1,
                   help="run it this many times, each on a fresh control plane, then the figures side by side "
                   "(BENCHMARKS.md measures 3 runs); with --json, a list")
    k.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")


def _server(args, *, borrowing: bool = True, hold: bool = False):
    from . import stream
    from .server import BenchServer, ExternalServer

    if args.url:
        return ExternalServer(args.url, args.token)
    return BenchServer(config_yaml=stream.cluster_yaml(borrowing=borrowing, hold=hold),
                       inventory_yaml=stream.inventory_yaml(args.nodes, args.gpus_per_node),
                       cycle_interval=args.cycle_interval, keep=args.keep, profile_path=args.profile,
                       extra_config=_extra_config(args))


def _extra_config(args) -> dict:
    """GpuQueueApp traits of the started server that the options set."""
    extra: dict = {}
    if getattr(args, "no_estimates", False):
        extra["estimate_start_times"] = False
    if getattr(args, "db_url", None):
        extra["db_url"] = args.db_url
    return extra


def _write_json(args, data, out: TextIO) -> None:
    if not args.json:
        return
    text = json.dumps(data, indent=1, default=str)
    if args.json == "-":
        out.write(text + "\n")
    else:
        with open(args.json, "w") as f:
            f.write(text + "\n")


def cmd_bench(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``bench submit | drain | panels`` (see the module docstring)."""
    import shlex

    from .drain import format_drain, run_drain
    from .panels import format_panels, run_panels
    from .submit import format_submit, run_submit

    if args.bench == "k8s":
        from ..devcluster.assets import missing_reason
        from .k8s import format_k8s, format_k8s_runs, run_k8s_bench

        reason = missing_reason()
        if reason:
            print(f"bench k8s: no Kubernetes control plane: {reason}", file=err)
            return 2
        runs = []
        for i in range(args.repeat):
            r = run_k8s_bench(args.n, nodes=args.nodes, gpus_per_node=args.gpus_per_node, batch=args.batch,
                              clients=args.clients, backlog=args.backlog, start_concurrency=args.start_concurrency,
                              command=shlex.split(args.job_command), kube_api_qps=args.kube_api_qps, keep=args.keep)
            runs.append(r)
            if args.repeat > 1:
                print(f"run {i + 1} of {args.repeat}", file=out)
            print(format_k8s(r), file=out, flush=True)
        if args.repeat > 1:
            print(format_k8s_runs(runs), file=out)
        _write_json(args, runs if args.repeat > 1 else runs[0], out)
        return 0 if all(r["errorCount"] == 0 and r["succeeded"] == args.n for r in runs) else 1
    if args.bench == "eta":
        from . import stream as _stream
        from .eta import cluster_yaml, format_eta, run_eta
        from .server import BenchServer, ExternalServer

        extra = _extra_config(args)
        if args.rate_blend is not None:
            extra["estimate_rate_blend"] = args.rate_blend
        server = ExternalServer(args.url, args.token) if args.url else BenchServer(
            config_yaml=cluster_yaml(), inventory_yaml=_stream.inventory_yaml(1, 8),
            cycle_interval=args.cycle_interval, keep=args.keep, profile_path=args.profile, extra_config=extra)
        with server:
            r = run_eta(server, n=args.n, seed=args.seed, time_scale=args.time_scale, mean_gap=args.mean_gap,
                        poll_interval=args.poll_interval, cycle_interval=args.cycle_interval)
        r["rateBlend"] = args.rate_blend
        print(format_eta(r), file=out)
        _write_json(args, r, out)
        return 0 if r["errorCount"] == 0 else 1
    capacity = args.nodes * args.gpus_per_node
    if args.bench == "submit":
        command = shlex.split(args.job_command) if args.job_command else None
        with _server(args) as server:
            r = asyncio.run(run_submit(server, n=args.n, clients=args.clients, command=command, seed=args.seed,
                                       batch=args.batch))
        print(format_submit(r), file=out)
        _write_json(args, r, out)
        ok = r["errorCount"] == 0 and r["acknowledged"] == args.n and r["distinctUids"] == args.n
        return 0 if ok else 1
    if args.bench == "drain":
        if args.backlog and args.url:
            print("bench drain: --backlog holds the queues of a server started here; not with --url "
                  "(it would replace that server's configuration)", file=err)
            return 2
        results = []
        for borrowing in ((True, False) if args.both else (args.borrowing,)):
            with _server(args, borrowing=borrowing, hold=args.backlog) as server:
                r = asyncio.run(run_drain(server, n=args.n, borrowing=borrowing, clients=args.clients,
                                          seed=args.seed, capacity=capacity, backlog=args.backlog))
            print(format_drain(r), file=out)
            results.append(r)
        _write_json(args, results if args.both else results[0], out)
        ok = all(r["errorCount"] == 0 and r["succeeded"] == r["jobs"] for r in results)
        return 0 if ok else 1
    if args.bench == "panels":
        extra = ["--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node)]
        with _server(args, borrowing=args.borrowing) as server:
            r = asyncio.run(run_panels(server, clients=args.clients, n=args.n, borrowing=args.borrowing,
                                       query_interval=args.query_interval, drain_args=extra))
        print(format_panels(r), file=out)
        _write_json(args, r, out)
        drain_ok = r["drain"] is not None and r["drain"]["succeeded"] == r["drain"]["jobs"]
        ok = (drain_ok and r["queryErrors"] == 0 and r["streamErrorCount"] == 0
              and r["workloadEventsPerClientMin"] == r["workloadEventsPerClientMax"])
        return 0 if ok else 1
    raise AssertionError(args.bench)  # pragma: no cover
