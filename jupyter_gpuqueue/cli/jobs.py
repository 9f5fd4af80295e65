"""The commands that talk to a running server (``GpuQueueClient``): submit (one job or a job
array), estimate, list, cancel, logs, queues, inventory, prices, info, and import-kueue (admins).

The argument parsing of job options (:func:`add_job_arguments`, :func:`request_from_args`) is
shared with the ``%gpujob`` magics.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any, Callable, Optional, TextIO

from ..errors import ValidationError
from .args import ArgumentParser, positive_int, read_source, server_client
from .text import (
    TERMINAL_STATES,
    duration,
    format_table,
    inventory_text,
    money,
    queues_text,
    workload_summary,
    workloads_table,
)

_INT_RE = re.compile(r"^\d+$")


def add_job_arguments(parser: argparse.ArgumentParser, *, target: bool = True) -> None:
    """Add the job options shared by ``submit``, ``estimate`` and ``%%gpujob``.

    ``target``: also add the positional SCRIPT_OR_COMMAND (the cell magic has none: the cell is the
    script).
    """
    if target:
        parser.add_argument(
            "target",
            nargs="*",
            metavar="SCRIPT_OR_COMMAND",
            help="a .py file (run with the server's Python, in its folder) followed by its "
            "arguments, or a command and its arguments. Our options may come before or after "
            "it; put '--' before the job to pass everything after it verbatim: "
            "submit --gpus 2 -- python train.py --name run1",
        )
    g = parser.add_argument_group("resources")
    g.add_argument(
        "--gpus",
        type=positive_int,
        metavar="N",
        help="whole GPUs for the job (default 1; ignored with --mig)",
    )
    g.add_argument(
        "--mig",
        metavar="PROFILE",
        help="one MIG slice instead of whole GPUs, e.g. 1g.10gb (see `jupyter gpuqueue info`)",
    )
    g.add_argument(
        "--flavor",
        metavar="FLAVOR",
        help="a ResourceFlavor, e.g. nvidia-a100, or 'any' (default: any the queue offers)",
    )
    g = parser.add_argument_group("queueing")
    g.add_argument(
        "--priority",
        metavar="CLASS",
        help="a PriorityClass / WorkloadPriorityClass name, e.g. development (default: the "
        "server's default)",
    )
    g.add_argument(
        "--max-runtime",
        metavar="DURATION",
        help="the job is stopped after this long; the estimated cost assumes it runs this "
        "long: 90s, 10m, 2h, 1d, or plain seconds (default: the server's, 1h)",
    )
    g.add_argument(
        "--queue",
        metavar="NS/LQ",
        help="the LocalQueue as namespace/name, e.g. team-a/team-a-queue (default: yours)",
    )
    g.add_argument(
        "--name",
        metavar="NAME",
        help="the workload name (a DNS-1123 label, ≤ 63 chars; default: generated)",
    )
    g = parser.add_argument_group("environment")
    g.add_argument(
        "--workdir",
        metavar="DIR",
        help="the job's working directory (default: the script's folder, else the server root)",
    )
    g.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra environment variable for the job (repeatable)",
    )


def request_from_args(
    args: argparse.Namespace,
    *,
    cwd: Optional[str] = None,
    command: Optional[list[str]] = None,
) -> dict:
    """The SubmitRequest dict for parsed job options.

    ``cwd``: the directory that relative paths (script, --workdir) are relative to (default: the
    current directory); they are sent as absolute paths. ``command``: an explicit argv (the cell
    magic); otherwise ``args.target`` gives a script (a ``.py`` first word) or a command (an
    empty target, as ``estimate`` allows, sends neither).
    Raises ValidationError naming ``env`` for a malformed --env.
    """
    cwd = os.path.abspath(cwd or os.getcwd())
    req: dict[str, Any] = {}
    if command is not None:
        req["command"] = list(command)
    elif not getattr(args, "target", None):
        pass  # an estimate: no script or command
    else:
        target = list(args.target)
        first = target[0]
        if first.endswith(".ipynb") and not first.startswith("-"):
            if len(target) > 1:
                raise ValidationError(f"a notebook takes parameters (-p NAME VALUE), not arguments: {target[1:]}",
                                      field="args")
            req["notebook"] = os.path.normpath(os.path.join(cwd, os.path.expanduser(first)))
        elif first.endswith(".py") and not first.startswith("-"):
            req["script"] = os.path.normpath(os.path.join(cwd, os.path.expanduser(first)))
            req["args"] = target[1:]
        else:
            req["command"] = target
    parameters = {name: parameter_value(value) for name, value in (getattr(args, "parameters", None) or [])}
    if parameters:
        if "notebook" not in req:
            raise ValidationError("parameters (-p) are for a notebook (.ipynb) job", field="parameters")
        req["parameters"] = parameters
    if args.mig:
        req["migProfile"] = args.mig
    else:
        req["gpus"] = args.gpus if args.gpus is not None else 1
    if args.flavor:
        req["flavor"] = args.flavor
    if args.priority:
        req["priorityClass"] = args.priority
    if args.max_runtime is not None:
        text = str(args.max_runtime).strip()
        if _INT_RE.match(text):
            req["maxRuntimeSeconds"] = int(text)
        else:
            req["maxRuntime"] = text
    if args.queue:
        req["localQueue"] = args.queue
    if args.name:
        req["name"] = args.name
    if args.workdir:
        req["workingDir"] = os.path.normpath(os.path.join(cwd, os.path.expanduser(args.workdir)))
    if args.env:
        env = {}
        for item in args.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValidationError(f"must be KEY=VALUE, got {item!r}", field="env")
            env[key] = value
        req["env"] = env
    return req


def parameter_value(text: str):
    """A ``-p NAME VALUE`` value as papermill's own ``-p`` reads it: an int, a float, ``True`` /
    ``False`` / ``None`` (any case), else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def sweep_requests(request: dict, sweeps: list) -> list[dict]:
    """One notebook SubmitRequest per combination of ``--sweep NAME V1,V2,...`` values (the
    product over names, in the order given), each with those values among its ``parameters``
    and a chosen name suffixed with ``-<index>``. ValidationError (field ``sweep``) for a sweep
    without a notebook, an empty value list, or more than 1,000 jobs."""
    if "notebook" not in request:
        raise ValidationError("--sweep varies a notebook's parameters: give a .ipynb", field="sweep")
    import itertools

    axes = []
    for name, values in sweeps:
        vals = [parameter_value(v.strip()) for v in str(values).split(",") if v.strip()]
        if not vals:
            raise ValidationError(f"no values for {name}", field="sweep")
        axes.append([(name, v) for v in vals])
    combos = list(itertools.product(*axes))
    if len(combos) > MAX_ARRAY_TASKS:
        raise ValidationError(f"at most {MAX_ARRAY_TASKS} jobs per sweep, got {len(combos)}", field="sweep")
    out = []
    for i, combo in enumerate(combos):
        r = dict(request, parameters={**request.get("parameters", {}), **dict(combo)})
        if request.get("name"):
            r["name"] = f"{request['name']}-{i}"
        out.append(r)
    return out


#: The job option of each SubmitRequest field (API name → the flag a user types).
JOB_FLAGS = {
    "gpus": "--gpus",
    "migProfile": "--mig",
    "flavor": "--flavor",
    "priorityClass": "--priority",
    "maxRuntimeSeconds": "--max-runtime",
    "maxRuntime": "--max-runtime",
    "localQueue": "--queue",
    "name": "--name",
    "workingDir": "--workdir",
    "env": "--env",
    "array": "--array",
    "sweep": "--sweep",
    "parameters": "-p",
    "kernel": "--kernel",
    "outputDir": "--output-dir",
    "notebook": "SCRIPT_OR_COMMAND",
    "script": "SCRIPT_OR_COMMAND",
    "command": "SCRIPT_OR_COMMAND",
    "args": "SCRIPT_OR_COMMAND",
    "target": "SCRIPT_OR_COMMAND",
}


def flag_for_field(field: Optional[str]) -> Optional[str]:
    """The option a user typed for an API field of a SubmitRequest (``"maxRuntimeSeconds"`` →
    ``"--max-runtime"``, ``"items[3].gpus"`` → ``"--gpus"``), or None for a field that is no job
    option (``namespace``, ``url``, a Kueue path)."""
    return JOB_FLAGS.get(flag_field(field)) if field else None


def flag_field(field: str) -> str:
    """A SubmitRequest field without the ``items[N].`` of a batch (``"items[3].gpus"`` → ``"gpus"``)."""
    return re.sub(r"^items\[\d+\]\.", "", str(field))


def error_text(error: Exception, command: Optional[str] = None) -> str:
    """An error as the CLI prints it. For ``submit`` / ``estimate`` (and the ``%%gpujob`` magic,
    ``command=None``) an error naming a SubmitRequest field names the flag instead:
    ``--max-runtime: must be at most 604800 seconds, got 900000`` rather than
    ``maxRuntimeSeconds: …``; any other error is ``str(error)``."""
    field = getattr(error, "field", None)
    message = getattr(error, "message", None)
    flag = flag_for_field(field) if command in (None, "submit", "estimate") else None
    if flag is None or message is None:
        return str(error)
    if message.startswith(f"{field}: "):  # the API's schema check repeats the field
        message = message[len(field) + 2:]
    if field != flag_field(field):  # one job of an array: say which
        return f"{flag} ({field}): {message}"
    return f"{flag}: {message}"


# -- commands ------------------------------------------------------------------------------------


ARRAY_TASK_ENV = "GPUQUEUE_ARRAY_TASK_ID"  # as Slurm's SLURM_ARRAY_TASK_ID
MAX_ARRAY_TASKS = 1000  # the API's SubmitBatch.maxItems


def parse_array(spec: str) -> list[int]:
    """Task ids of an array spec in ``sbatch --array`` syntax: ``0-9``, ``1,3,5``, ``0-15:4``
    (every 4th), combined with commas; in the order given, without repeats. ValidationError
    (field ``array``) for anything else, for a step ≤ 0, and above 1,000 tasks (Slurm's ``%N``
    throttle is not supported: the queue's quotas decide how many run at once)."""
    ids: dict[int, None] = {}
    for part in str(spec).split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+)(?::(\d+))?)?\s*", part)
        if not m:
            raise ValidationError(f"must be like 0-9, 1,3,5 or 0-15:4 (sbatch --array), got {spec!r}",
                                  field="array")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step <= 0:
            raise ValidationError(f"{part.strip()!r}: the range must go up with a step ≥ 1", field="array")
        if (last - first) // step + 1 + len(ids) > MAX_ARRAY_TASKS:
            raise ValidationError(f"at most {MAX_ARRAY_TASKS} tasks per array", field="array")
        ids.update(dict.fromkeys(range(first, last + 1, step)))
    return list(ids)


def array_requests(request: dict, task_ids: list[int]) -> list[dict]:
    """One SubmitRequest per task: ``GPUQUEUE_ARRAY_TASK_ID`` in its environment, and a chosen
    name suffixed with ``-<id>``."""
    out = []
    for i in task_ids:
        r = dict(request, env={**request.get("env", {}), ARRAY_TASK_ENV: str(i)})
        if request.get("name"):
            r["name"] = f"{request['name']}-{i}"
        out.append(r)
    return out


def cmd_submit(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    request = request_from_args(args)
    if getattr(args, "kernel", None):
        request["kernel"] = args.kernel
    if getattr(args, "output_dir", None):
        request["outputDir"] = os.path.abspath(os.path.expanduser(args.output_dir))
    batch = None
    if getattr(args, "array", None):
        batch = array_requests(request, parse_array(args.array))
    if getattr(args, "sweep", None):
        batch = [r for base in (batch or [request]) for r in sweep_requests(base, args.sweep)]
    if batch is not None:
        workloads = client.submit_many(batch)
        if args.wait:
            workloads = [client.wait(w["namespace"], w["name"]) for w in workloads]
        if args.json:
            out.write(json.dumps({"items": workloads}) + "\n")
        else:
            for w in workloads:
                print(workload_summary(w), file=out)
        return 1 if args.wait and any(w.get("state") != "Succeeded" for w in workloads) else 0
    wl = client.submit(request)
    if args.wait:
        if not args.json:
            print(workload_summary(wl), file=out)
            out.flush()
        wl = client.wait(wl["namespace"], wl["name"])
    if args.json:
        out.write(json.dumps(wl) + "\n")
    else:
        print(workload_summary(wl), file=out)
    if args.wait and wl.get("state") != "Succeeded":
        return 1
    return 0


def cmd_estimate(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    request = request_from_args(args)
    est = client.estimate(request)
    if args.json:
        out.write(json.dumps(est) + "\n")
        return 0
    hours = f"{float(est.get('gpuHours', 0)):.4g} GPU-hours"
    runtime = duration(est.get("maxRuntimeSeconds"))
    what = f"{est.get('quantity')} × {est.get('resource')}"
    if not est.get("flavor"):
        print(f"{what} for at most {runtime}: {hours}; no eligible flavor, no price", file=out)
    elif request.get("flavor") in (None, "", "any"):
        # the queue picks the flavor: the one it would pick now, and the range over those it could get
        low, high = est.get("costRangeUsd") or (est.get("costUsd"), est.get("costUsd"))
        span = f"; {money(low)}–{money(high)} on the flavors it could get" if low != high else ""
        print(f"{what} on any flavor for at most {runtime}: {hours}, {money(est.get('costUsd'))} on "
              f"{est['flavor']} ({money(est.get('pricePerHourUsd'))} per hour), the flavor the queue would "
              f"pick now{span}", file=out)
    else:
        print(f"{what} on {est['flavor']} for at most {runtime}: {hours}, {money(est.get('costUsd'))} "
              f"({money(est.get('pricePerHourUsd'))} per hour)", file=out)
    return 0


def cmd_list(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    states = [s for s in (args.state or "").split(",") if s] or None
    items = client.list(namespace=args.namespace, states=states, mine=not args.all)
    if args.json:
        out.write(json.dumps({"items": items}) + "\n")
        return 0
    if args.all:
        print(workloads_table(items, owner=True), file=out)
        return 0
    print(workloads_table(items) if items else "no workloads of yours", file=out)
    # Like kubectl's "No resources found in ... namespace", say what the filter hid and how to
    # see it (an admin's own list is often empty while the queue is full, issue 34 item 10).
    others = len(client.list(namespace=args.namespace, states=states)) - len(items)
    if others > 0:
        what = f"{others} more workload{'s' if others != 1 else ''} of other users"
        print(f"{what} not shown: `jupyter gpuqueue list --all` lists them", file=err)
    return 0


def cmd_cancel(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    wl = client.find(args.name, args.namespace)
    before = wl.get("state")
    wl = client.cancel(wl["namespace"], wl["name"])
    if args.json:
        out.write(json.dumps(wl) + "\n")
    elif before in TERMINAL_STATES:
        print(f"{wl['namespace']}/{wl['name']} had already finished: {wl.get('state')}", file=out)
    else:
        print(f"cancelled {wl['namespace']}/{wl['name']} (was {before})", file=out)
    return 0


def cmd_logs(args, out: TextIO, err: TextIO, stdin: TextIO, client=None, *, sleep=time.sleep) -> int:
    client = client or server_client(args)
    wl = client.find(args.name, args.namespace)
    ns, name = wl["namespace"], wl["name"]
    offset = 0
    while True:
        chunk = client.logs(ns, name, offset=offset)
        if chunk.get("text"):
            out.write(chunk["text"])
            out.flush()
        offset = int(chunk.get("nextOffset", offset))
        if not args.follow:
            if not chunk.get("eof", True):
                continue
            return 0
        if chunk.get("eof", True):
            state = client.get(ns, name).get("state")
            if state in TERMINAL_STATES:
                last = client.logs(ns, name, offset=offset)
                if last.get("text"):
                    out.write(last["text"])
                    out.flush()
                if last.get("eof", True):
                    return 0
                offset = int(last.get("nextOffset", offset))
                continue
            sleep(1.0)


def cmd_queues(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    q = client.queues()
    out.write((json.dumps(q) if args.json else queues_text(q)) + "\n")
    return 0


def cmd_inventory(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    inv = client.inventory()
    out.write((json.dumps(inv) if args.json else inventory_text(inv)) + "\n")
    return 0


def cmd_prices(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    p = client.prices()
    if args.json:
        out.write(json.dumps(p) + "\n")
        return 0
    rows = [[f, money(v)] for f, v in sorted((p.get("flavors") or {}).items())]
    rows.append(["(other flavors)", money(p.get("default"))])
    print(format_table(["FLAVOR", "USD/GPU-HOUR"], rows), file=out)
    print(f"a MIG slice costs its share of the GPU's {p.get('migSlicesPerGpu', 7)} slices", file=out)
    return 0


def cmd_info(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or server_client(args)
    i = client.info()
    if args.json:
        out.write(json.dumps(i) + "\n")
        return 0
    lqs = ", ".join(f"{lq['namespace']}/{lq['name']}" for lq in i.get("localQueues") or []) or "-"
    pcs = ", ".join(f"{p['name']} ({p['value']})" for p in i.get("priorityClasses") or []) or "-"
    print(f"user:              {i.get('user')} ({i.get('mode')}, jupyter_gpuqueue {i.get('version')})", file=out)
    print(f"LocalQueues:       {lqs} (default {i.get('defaultLocalQueue') or '-'})", file=out)
    print(f"flavors:           {', '.join(i.get('flavors') or []) or '-'}", file=out)
    print(f"MIG profiles:      {', '.join(i.get('migProfiles') or []) or '-'}", file=out)
    print(f"priority classes:  {pcs} (default {i.get('defaultPriorityClass') or '-'})", file=out)
    return 0


def cmd_import_kueue(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """Validate Kueue YAML here (Kueue's rules), then replace the server's configuration with it."""
    from .. import admin

    source, text = read_source(args.file, stdin)
    m = admin.load_import(text, source)  # ValidationError (exit 2) names the file, document and field
    answer = (client or server_client(args)).import_kueue(text, dry_run=args.dry_run)
    if args.json:
        out.write(json.dumps(answer) + "\n")
        return 0
    counts = ", ".join(f"{v} {k}" for k, v in admin.config_summary(m.config).items() if v)
    verb = "valid, not applied (--dry-run)" if answer.get("dryRun") else "imported; the next scheduling cycle uses it"
    print(f"{source}: {counts}: {verb}", file=out)
    for line in answer.get("ignored") or []:
        print(f"ignored: {line}", file=out)
    for line in answer.get("warnings") or []:
        print(f"warning: {line}", file=out)
    return 0


# -- their parsers ---------------------------------------------------------------------------------


def _add_submit(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "submit",
        parents=[server, as_json],
        help="queue a job: a .py script, a notebook (.ipynb) or a command",
        description="Queue a job in your team's LocalQueue. It starts when the queue admits it "
        "under quota, with CUDA_VISIBLE_DEVICES set to its GPUs or MIG device. Prints its name, "
        "state, queue position and estimated cost.",
        epilog="examples:\n  jupyter gpuqueue submit train.py --gpus 2 --max-runtime 2h\n"
        "  jupyter gpuqueue submit --mig 1g.10gb --max-runtime 10m -- python eval.py --fast\n"
        "  jupyter gpuqueue submit train.ipynb -p lr 0.01 -p epochs 3\n"
        "  jupyter gpuqueue submit train.ipynb --sweep lr 0.1,0.01 --sweep epochs 3,10",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_arguments(p)
    p.add_argument("--wait", action="store_true", help="wait until the job finishes; exit 1 unless it Succeeded")
    p.add_argument("--array", metavar="SPEC",
                   help="a job array, as sbatch --array: 0-9, 1,3,5 or 0-15:4; one job per task id "
                   f"(in its environment as {ARRAY_TASK_ENV}; --name gets -<id>), submitted all or nothing")
    g = p.add_argument_group("notebooks (papermill)")
    g.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"),
                   help="a notebook parameter, injected after the cell tagged 'parameters' (repeatable; "
                   "VALUE as papermill's -p reads it: int, float, True/False/None, else text)")
    g.add_argument("--sweep", nargs=2, action="append", default=[], metavar=("NAME", "VALUES"),
                   help="one notebook job per value of VALUES (comma-separated); several --sweep: every "
                   "combination; submitted all or nothing")
    g.add_argument("--kernel", metavar="NAME", help="the kernelspec (default: the notebook's own)")
    g.add_argument("--output-dir", metavar="DIR",
                   help="the folder for the executed notebook (default: the notebook's)")


def _add_estimate(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "estimate",
        parents=[server, as_json],
        help="what a job would cost (nothing is submitted)",
        description="Estimate a job's cost: requested GPUs × --max-runtime × the flavor's price "
        "per GPU-hour (of the flavor the queue would pick now when it is not chosen, with the range of the eligible flavors' costs). No "
        "script or command is needed; one given is ignored.",
        epilog="example:\n  jupyter gpuqueue estimate --gpus 2 --flavor nvidia-h100 --max-runtime 2h",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_arguments(p)


def _add_list(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "list",
        parents=[server, as_json],
        help="your workloads, newest first (--all: every one you may see)",
        description="List your workloads with their state, 1-based queue position, flavor and cost. "
                    "Only yours, even for a queue admin: when others' are hidden, a line on stderr says how "
                    "many and that --all lists them (your teams', everyone's for an admin).",
    )
    p.add_argument("--all", action="store_true",
                   help="every workload you may see (your teams', everyone's for a queue admin), with its owner")
    p.add_argument("--namespace", metavar="NS", help="only this namespace (team)")
    p.add_argument("--state", metavar="STATES", help="only these states, comma-separated, e.g. Pending,Running")


def _add_cancel(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "cancel",
        parents=[server, as_json],
        help="cancel one of your workloads",
        description="Cancel a workload: a pending one leaves the queue, a running one is stopped "
        "(and billed up to now).",
    )
    p.add_argument("name", metavar="NAME", help="the workload's name (or namespace/name)")
    p.add_argument("--namespace", metavar="NS", help="its namespace, if the name is ambiguous")


def _add_logs(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "logs",
        parents=[server],
        help="print a job's output",
        description="Print the job's combined stdout and stderr.",
    )
    p.add_argument("name", metavar="NAME", help="the workload's name (or namespace/name)")
    p.add_argument("--namespace", metavar="NS", help="its namespace, if the name is ambiguous")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing output until the job finishes")


def _add_queues(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    sub.add_parser(
        "queues",
        parents=[server, as_json],
        help="ClusterQueues: quota, usage, borrowing and who waits in what order",
    )


def _add_inventory(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    sub.add_parser(
        "inventory",
        parents=[server, as_json],
        help="GPUs and MIG slices: free, total, and which job holds each",
    )


def _add_prices(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    sub.add_parser("prices", parents=[server, as_json], help="USD per GPU-hour per flavor")


def _add_import_kueue(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "import-kueue",
        parents=[server, as_json],
        help="replace the server's queue configuration with Kueue YAML (admins)",
        description="Validate the file as Kueue would (an error names the document, field and "
        "reason, and changes nothing), then replace the running server's whole configuration "
        "with it; the next scheduling cycle uses it and the change is in the audit log. Refused "
        "when it drops a queue that active workloads use.",
    )
    p.add_argument("file", metavar="FILE", help="Kueue YAML; '-' reads stdin")
    p.add_argument("--dry-run", action="store_true", help="validate on the server too, change nothing")


def _add_info(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    sub.add_parser(
        "info",
        parents=[server, as_json],
        help="you, your LocalQueues, flavors, MIG profiles and priority classes",
    )


COMMANDS: dict[str, Callable[..., int]] = {
    "submit": cmd_submit,
    "estimate": cmd_estimate,
    "list": cmd_list,
    "cancel": cmd_cancel,
    "logs": cmd_logs,
    "queues": cmd_queues,
    "inventory": cmd_inventory,
    "prices": cmd_prices,
    "import-kueue": cmd_import_kueue,
    "info": cmd_info,
}


PARSERS: dict[str, Callable[..., None]] = {
    "submit": _add_submit,
    "estimate": _add_estimate,
    "list": _add_list,
    "cancel": _add_cancel,
    "logs": _add_logs,
    "queues": _add_queues,
    "inventory": _add_inventory,
    "prices": _add_prices,
    "import-kueue": _add_import_kueue,
    "info": _add_info,
}
