"""The offline tools, which need no server: ``simulate`` (Kueue manifests through the engine),
``replay`` (a job trace, or Kueue's performance workloads, in simulated time) and
``export-kueue`` (the configuration as Kueue YAML: from files offline, or the server's)."""

from __future__ import annotations

import argparse
import json
from typing import Callable, TextIO

from .args import PROG, ArgumentParser, UsageError, positive_int, read_source, server_client

def cmd_simulate(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from ..engine.errors import ManifestError
    from ..engine.simulate import simulate_text

    texts = [read_source(p, stdin) for p in args.files]
    try:
        result = simulate_text(texts)
    except ManifestError as e:
        print(f"{PROG} simulate: {e}", file=err)
        return 2
    out.write(json.dumps(result) + "\n")
    return 0


def cmd_replay(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``replay``: a job trace against a queue configuration, or Kueue's performance workloads,
    in simulated time (see :mod:`jupyter_gpuqueue.replay`). JSON on stdout (or ``--output``),
    the human summary on stderr (on stdout when ``--output`` is given)."""
    import time as _time

    from .. import replay as rp
    from ..engine.errors import ManifestError
    from ..engine.simulator import SimulationError

    options = rp.ReplayOptions(
        resume_preempted=args.resume_preempted,
        heads_per_cluster_queue=args.heads_per_cq,
        cycle_seconds=args.cycle_seconds,
        requeue_batch_seconds=args.requeue_batch_seconds,
        max_gpus_per_pod=args.max_gpus_per_pod,
        bin_seconds=args.bin_seconds,
        limit=args.limit,
    )
    if args.kueue_perf:
        if args.trace or args.config or args.inventory:
            raise UsageError("--kueue-perf takes no TRACE, --config or --inventory", field="kueue-perf")
        try:
            report = rp.replay_kueue_perf(args.kueue_perf, options)
        except SimulationError as e:
            print(f"{PROG} replay: simulation stopped: {e}", file=err)
            return 1
        text = rp.kueue_perf_text(report)
    else:
        if not args.trace:
            raise UsageError("a TRACE.csv (or --kueue-perf) is required", field="TRACE")
        if not args.config:
            raise UsageError("--config QUEUES.yaml is required with a trace", field="config")
        t0 = _time.perf_counter()
        texts = [read_source(p, stdin) for p in args.config]
        try:
            rc = rp.load_replay_config(texts)
        except ManifestError as e:
            print(f"{PROG} replay: {e}", file=err)
            return 2
        inventory = None
        if args.inventory:
            from ..inventory import load_inventory_file

            inventory = load_inventory_file(args.inventory)
        trace = rp.read_trace_file(args.trace, limit=args.limit)
        wall = {"read": _time.perf_counter() - t0}
        eta = None
        if args.eta:
            eta = rp.EtaOptions(runtime_model=args.runtime_model, sample=args.eta_sample or rp.EtaOptions().sample)
        elif args.runtime_model != "history" or args.eta_sample is not None:
            raise UsageError("--runtime-model and --eta-sample need --eta", field="eta")
        try:
            report = rp.replay_trace(trace, rc, inventory=inventory, options=options, source=args.trace, wall=wall,
                                     eta=eta)
        except SimulationError as e:
            print(f"{PROG} replay: simulation stopped: {e}", file=err)
            return 1
        text = rp.summary_text(report)
        if args.eta_plot:
            if "eta" not in report:
                raise UsageError("--eta-plot needs --eta", field="eta-plot")
            try:
                with open(args.eta_plot, "w", encoding="utf-8") as f:
                    f.write(rp.eta_plot_svg(report["eta"]))
            except OSError as e:
                raise UsageError(f"cannot write {args.eta_plot}: {e.strerror or e}", field="eta-plot") from None
        if args.plot:
            try:
                with open(args.plot, "w", encoding="utf-8") as f:
                    f.write(rp.plot_svg(report))
            except OSError as e:
                raise UsageError(f"cannot write {args.plot}: {e.strerror or e}", field="plot") from None
    payload = json.dumps(report, indent=None if args.output is None else 1) + "\n"
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(payload)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror or e}", field="output") from None
        if not args.quiet:
            out.write(text)
    else:
        out.write(payload)
        if not args.quiet:
            err.write(text)
    return 0


def cmd_export_kueue(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """The configuration as Kueue YAML: the running server's, or (``--config``) these files'."""
    from .. import admin

    if args.config:
        from ..engine.errors import ManifestError
        from ..engine.manifests import load_texts

        texts = [read_source(p, stdin) for p in args.config]
        try:
            m = load_texts(texts)
        except ManifestError as e:
            print(f"{PROG} export-kueue: {e}", file=err)
            return 2
        text = admin.config_to_yaml(m.config, "Kueue configuration from " + ", ".join(args.config))
    else:
        text = (client or server_client(args)).export_kueue()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror or e}", field="output") from None
    else:
        out.write(text)
    return 0


# -- their parsers ---------------------------------------------------------------------------------


def _add_simulate(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "simulate",
        help="run Kueue manifests through the scheduling engine offline (no server)",
        description="Load ResourceFlavors, ClusterQueues, LocalQueues, priority classes and "
        "workloads (Jobs, Kueue Workloads, ...) from the files and simulate how they are queued, "
        "admitted and preempted. Prints the result as JSON on stdout. An invalid manifest prints "
        "its file, document, field and reason on stderr and exits 2.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files; '-' reads stdin")


def _add_replay(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a job trace (or Kueue's performance workloads) in simulated time",
        description="Replay a GPU job trace through the scheduling engine in simulated time: "
        "arrivals, admissions, runs, preemptions, requeues and completions. Prints a JSON report "
        "(per team and overall: queueing delay, completion time, GPU utilization, borrowed "
        "GPU-hours, preemptions, Jain's fairness index, a timeline) on stdout and a short summary "
        "on stderr. With --kueue-perf, runs Kueue's own scheduler performance-test workload and "
        "compares with Kueue's published figures.",
        epilog="examples:\n  jupyter gpuqueue replay philly.csv --config examples/philly/queues.yaml "
        "--plot philly.svg -o philly.json\n  jupyter gpuqueue replay --kueue-perf baseline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", nargs="?", metavar="TRACE.csv",
                   help="job trace: columns job_id, tenant, submit_time_s, duration_s, num_gpus [, priority]")
    p.add_argument("--config", action="append", metavar="QUEUES.yaml",
                   help="Kueue YAML with the queues and the tenant mapping ConfigMap gpuqueue-replay-tenants "
                   "(repeatable)")
    p.add_argument("--inventory", metavar="FILE", help="static inventory YAML: place pods on GPUs too")
    p.add_argument("--kueue-perf", choices=("baseline", "large-scale"),
                   help="run Kueue's scheduler performance-test workload instead of a trace")
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON report here (summary to stdout)")
    p.add_argument("--plot", metavar="FILE.svg", help="write an SVG of utilization and queueing delay over time")
    p.add_argument("--bin-seconds", type=float, metavar="S", help="timeline bin width (default: span / 400)")
    p.add_argument("--resume-preempted", action="store_true",
                   help="a preempted job keeps the time it ran (default: it restarts from the beginning)")
    p.add_argument("--heads-per-cq", type=positive_int, default=1, metavar="N",
                   help="workloads considered per ClusterQueue per cycle (Kueue: 1)")
    p.add_argument("--cycle-seconds", type=float, default=0.0, metavar="S",
                   help="simulated time a scheduling cycle takes (default 0: cycles are free)")
    p.add_argument("--requeue-batch-seconds", type=float, default=1.0, metavar="S",
                   help="parked workloads come back S seconds after quota is freed (Kueue's "
                   "requeueBatchPeriod: 1; 0: at once)")
    p.add_argument("--max-gpus-per-pod", type=positive_int, default=8, metavar="N",
                   help="larger jobs become gangs of pods of at most N GPUs (default 8)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="replay only the first N jobs of the trace")
    p.add_argument("--eta", action="store_true",
                   help="also measure estimated start times: for each sampled waiting job, the estimate at its "
                   "submission and at 25/50/75%% of its wait, against the rate and oracle baselines (a second pass)")
    p.add_argument("--runtime-model", choices=("history", "declared", "oracle"), default="history",
                   help="run times the estimator assumes (with --eta; default history: per team and GPU count)")
    p.add_argument("--eta-sample", type=positive_int, metavar="K",
                   help="with --eta: estimate every K-th waiting job (default 200, which fits 10 minutes on the Philly trace; 1: all)")
    p.add_argument("--eta-plot", metavar="FILE.svg",
                   help="with --eta: write an SVG of the estimates' error distribution")
    p.add_argument("-q", "--quiet", action="store_true", help="no human summary")


def _add_export_kueue(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "export-kueue",
        parents=[server],
        help="print the queue configuration as Kueue YAML (admins; or offline from files)",
        description="Print the whole configuration (ResourceFlavors, Cohorts, ClusterQueues, "
        "LocalQueues, priority classes, Namespaces) as Kueue v1beta1 YAML that `kubectl apply` "
        "accepts: the running server's (needs the admin scope), or with --config the one these "
        "files define (offline, no server).",
    )
    p.add_argument("--config", action="append", metavar="FILE",
                   help="read the configuration from these Kueue YAML files instead of the server (repeatable)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the YAML here instead of stdout")


COMMANDS: dict[str, Callable[..., int]] = {
    "simulate": cmd_simulate,
    "replay": cmd_replay,
    "export-kueue": cmd_export_kueue,
}


PARSERS: dict[str, Callable[..., None]] = {
    "simulate": _add_simulate,
    "replay": _add_replay,
    "export-kueue": _add_export_kueue,
}
