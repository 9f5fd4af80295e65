"""``jupyter gpuqueue``: the command line of the GPU queue.

Console script ``jupyter-gpuqueue`` (so ``jupyter gpuqueue ...`` works). Subcommands::

    simulate FILE...          replay Kueue manifests through the engine offline; JSON on stdout
    replay TRACE.csv --config Q.yaml | replay --kueue-perf baseline|large-scale
                              replay a job trace (or Kueue's perf workloads) in simulated time
    submit SCRIPT_OR_COMMAND  queue a job (a .py file runs with the server's Python)
    estimate ...              what a job would cost, without submitting it
    list                      your workloads (--all: everyone's)
    cancel NAME               cancel one of your workloads
    logs NAME                 a job's output (--follow to stream it)
    queues | inventory | prices | info
    export-kueue [--config FILE]  the queue configuration as Kueue YAML (admins; offline from files)
    import-kueue FILE         replace the queue configuration with Kueue YAML (admins)
    bench submit|drain|panels benchmarks of the live service against a real server (BENCHMARKS.md)

Exit status: 0 on success; 2 on bad input or an error answer from the server (the message, naming
the field, goes to stderr); 1 when ``submit --wait`` ends in Failed or Cancelled; 130 on Ctrl-C.

The argument parsing of job options (:func:`add_job_arguments`, :func:`request_from_args`) is
shared with the ``%gpujob`` magics.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Callable, Optional, TextIO

from .errors import GpuQueueError, ValidationError

PROG = "jupyter gpuqueue"
TERMINAL_STATES = ("Succeeded", "Failed", "Cancelled")
_INT_RE = re.compile(r"^\d+$")


class UsageError(GpuQueueError):
    """Bad command-line arguments (exit status 2). ``usage`` is the parser's usage text."""

    reason = "Invalid"

    def __init__(self, message: str, field: Optional[str] = None, usage: str = ""):
        super().__init__(message, field)
        self.usage = usage


class HelpRequested(Exception):
    """``--help`` was given; ``text`` is the help to show (the magics display it)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` / :class:`HelpRequested` instead of
    exiting, so that the magics can show errors in a notebook. ``main`` turns them into exit 2 / 0."""

    def error(self, message: str):  # type: ignore[override]
        field = None
        m = re.match(r"argument ([^:]+):", message)
        if m:
            field = m.group(1).split("/")[-1].lstrip("-")
        raise UsageError(message, field=field, usage=self.format_usage())

    def exit(self, status: int = 0, message: Optional[str] = None):  # type: ignore[override]
        if status:
            raise UsageError((message or "").strip() or "invalid arguments", usage=self.format_usage())
        raise HelpRequested(message or "")

    def print_help(self, file: Optional[TextIO] = None) -> None:
        raise HelpRequested(self.format_help())


# -- argument types ------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ 0, got {value}")
    return value


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
    magic); otherwise ``args.target`` gives a script (a ``.py`` first word) or a command.
    Raises ValidationError naming ``env`` for a malformed --env.
    """
    cwd = os.path.abspath(cwd or os.getcwd())
    req: dict[str, Any] = {}
    if command is not None:
        req["command"] = list(command)
    else:
        target = list(args.target)
        first = target[0]
        if first.endswith(".py") and not first.startswith("-"):
            req["script"] = os.path.normpath(os.path.join(cwd, os.path.expanduser(first)))
            req["args"] = target[1:]
        else:
            req["command"] = target
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


# -- formatting ----------------------------------------------------------------------------------


def money(value: Any) -> str:
    """USD for people: cents (``$0.37``), or four decimals below a cent so that a short job does not
    read as free (``$0.0007``); ``-`` for None. The panel formats money the same way."""
    if value is None:
        return "-"
    v = float(value)
    if 0 < abs(v) < 0.01:
        return f"${v:.4f}"
    return f"${v:,.2f}"


def duration(seconds: Any) -> str:
    """A short human duration: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "-"
    s = int(max(0, float(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 and s < 600 else "")
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def position(workload: dict) -> str:
    """1-based position in the ClusterQueue (``-`` unless Pending)."""
    pos = workload.get("positionInClusterQueue")
    return "-" if pos is None else str(int(pos) + 1)


def assigned_flavor(workload: dict) -> str:
    """The flavor(s) assigned by admission, ``-`` before admission."""
    admission = workload.get("admission") or {}
    flavors: list[str] = []
    for psa in admission.get("podSetAssignments") or []:
        for f in (psa.get("flavors") or {}).values():
            if f not in flavors:
                flavors.append(f)
    return ",".join(flavors) or "-"


def requested(workload: dict) -> str:
    """What the workload asks for, e.g. ``2 × nvidia.com/gpu``."""
    parts = []
    for ps in workload.get("podSets") or []:
        count = int(ps.get("count", 1))
        for res, q in (ps.get("requests") or {}).items():
            if res == "nvidia.com/gpu" or res.startswith("nvidia.com/mig-"):
                short = res.replace("nvidia.com/", "")
                n = f"{q}" if count == 1 else f"{count}×{q}"
                parts.append(f"{n} {short}")
    return ", ".join(parts) or "-"


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)


def workload_summary(wl: dict) -> str:
    """One line: name, state, position, reason, estimated cost."""
    out = f"{wl['namespace']}/{wl['name']}: {wl.get('state')}"
    if wl.get("state") == "Pending":
        pos = position(wl)
        if pos != "-":
            out += f", position {pos} in {wl.get('clusterQueue') or 'its ClusterQueue'}"
        if wl.get("reason") and wl.get("reason") != "Pending":
            out += f" ({wl['reason']}: {wl.get('message') or ''})".replace(": )", ")")
    elif wl.get("visibleDevices"):
        out += f" on {assigned_flavor(wl)} [{wl['visibleDevices']}]"
    if wl.get("exitCode") is not None and wl.get("state") in TERMINAL_STATES:
        out += f", exit code {wl['exitCode']}"
    out += f"; estimated cost {money(wl.get('estimatedCostUsd'))}"
    if wl.get("state") in TERMINAL_STATES:
        out += f", cost {money(wl.get('costUsd'))}"
    elif wl.get("costUsd"):
        out += f", cost so far {money(wl.get('costUsd'))}"
    return out


def workloads_table(items: list[dict], *, now: Optional[float] = None, owner: bool = False) -> str:
    now = time.time() if now is None else now
    headers = ["NAMESPACE", "NAME", "STATE", "POS", "PRIORITY", "REQUEST", "FLAVOR", "AGE", "COST", "EST."]
    if owner:
        headers.append("OWNER")
    rows = []
    for w in items:
        row = [
            w.get("namespace"),
            w.get("name"),
            w.get("state"),
            position(w),
            w.get("priorityClass") or w.get("priority"),
            requested(w),
            assigned_flavor(w),
            duration(now - float(w.get("createdAt") or now)),
            money(w.get("costUsd")),
            money(w.get("estimatedCostUsd")),
        ]
        if owner:
            row.append(w.get("owner"))
        rows.append(row)
    if not rows:
        return "no workloads"
    return format_table(headers, rows)


def queues_text(q: dict) -> str:
    lines = []
    for cq in q.get("clusterQueues") or []:
        lines.append(
            f"ClusterQueue {cq['name']}  cohort={cq.get('cohort') or '-'}  "
            f"{cq.get('queueingStrategy', '')}  pending={cq.get('pendingWorkloads', 0)}  "
            f"admitted={cq.get('admittedWorkloads', 0)}"
        )
        rows = [
            [
                r.get("flavor"),
                r.get("resource"),
                r.get("nominalQuota"),
                "-" if r.get("borrowingLimit") is None else r.get("borrowingLimit"),
                "-" if r.get("lendingLimit") is None else r.get("lendingLimit"),
                r.get("usage"),
                r.get("borrowed"),
            ]
            for r in cq.get("resources") or []
        ]
        if rows:
            table = format_table(
                ["FLAVOR", "RESOURCE", "NOMINAL", "BORROW-LIMIT", "LEND-LIMIT", "USAGE", "BORROWED"],
                rows,
            )
            lines.extend("  " + line for line in table.splitlines())
        for p in cq.get("pending") or []:
            lines.append(
                f"  #{int(p.get('positionInClusterQueue', 0)) + 1} {p['namespace']}/{p['name']} "
                f"({p.get('owner') or '?'}, priority {p.get('priority')}): {p.get('reason') or ''}"
            )
    lqs = q.get("localQueues") or []
    if lqs:
        lines.append("")
        lines.append(
            format_table(
                ["LOCALQUEUE", "CLUSTERQUEUE", "PENDING", "ADMITTED"],
                [
                    [
                        f"{lq['namespace']}/{lq['name']}",
                        lq.get("clusterQueue"),
                        lq.get("pendingWorkloads", 0),
                        lq.get("admittedWorkloads", 0),
                    ]
                    for lq in lqs
                ],
            )
        )
    return "\n".join(lines) if lines else "no queues"


def inventory_text(inv: dict) -> str:
    lines = [f"source: {inv.get('source', '?')}"]
    rows = [
        [s.get("flavor"), s.get("resource"), s.get("free"), s.get("total")]
        for s in inv.get("summary") or []
    ]
    if rows:
        lines.append(format_table(["FLAVOR", "RESOURCE", "FREE", "TOTAL"], rows))
    for node in inv.get("nodes") or []:
        lines.append("")
        lines.append(f"node {node.get('name')}")
        for gpu in node.get("gpus") or []:
            mig = gpu.get("mig")
            if mig:
                used = sum(1 for m in mig if m.get("assignedTo"))
                desc = f"MIG {len(mig) - used}/{len(mig)} free: " + ", ".join(
                    f"{m.get('profile')}{'*' if m.get('assignedTo') else ''}" for m in mig
                )
            else:
                desc = f"in use by {gpu['assignedTo']}" if gpu.get("assignedTo") else "free"
            lines.append(f"  GPU {gpu.get('index')}  {gpu.get('product', '')}  {desc}")
    return "\n".join(lines)


# -- commands ------------------------------------------------------------------------------------


def _client(args: argparse.Namespace):
    from .client import GpuQueueClient

    return GpuQueueClient(getattr(args, "url", None), getattr(args, "token", None))


def _read_source(path: str, stdin: TextIO) -> tuple[str, str]:
    if path == "-":
        return "<stdin>", stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"cannot read {path}: {reason}", field="FILE") from None


def cmd_simulate(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from .engine.errors import ManifestError
    from .engine.simulate import simulate_text

    texts = [_read_source(p, stdin) for p in args.files]
    try:
        result = simulate_text(texts)
    except ManifestError as e:
        print(f"{PROG} simulate: {e}", file=err)
        return 2
    out.write(json.dumps(result) + "\n")
    return 0


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
    client = client or _client(args)
    request = request_from_args(args)
    if getattr(args, "array", None):
        workloads = client.submit_many(array_requests(request, parse_array(args.array)))
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
    client = client or _client(args)
    est = client.estimate(request_from_args(args))
    if args.json:
        out.write(json.dumps(est) + "\n")
        return 0
    flavor = est.get("flavor") or "(no eligible flavor)"
    print(
        f"{est.get('quantity')} × {est.get('resource')} on {flavor} for at most "
        f"{duration(est.get('maxRuntimeSeconds'))}: {float(est.get('gpuHours', 0)):.4g} GPU-hours, "
        f"{money(est.get('costUsd'))} ({money(est.get('pricePerHourUsd'))} per hour)",
        file=out,
    )
    return 0


def cmd_list(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or _client(args)
    states = [s for s in (args.state or "").split(",") if s] or None
    items = client.list(namespace=args.namespace, states=states, mine=not args.all)
    if args.json:
        out.write(json.dumps({"items": items}) + "\n")
    else:
        print(workloads_table(items, owner=args.all), file=out)
    return 0


def cmd_cancel(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or _client(args)
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
    client = client or _client(args)
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
    client = client or _client(args)
    q = client.queues()
    out.write((json.dumps(q) if args.json else queues_text(q)) + "\n")
    return 0


def cmd_inventory(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or _client(args)
    inv = client.inventory()
    out.write((json.dumps(inv) if args.json else inventory_text(inv)) + "\n")
    return 0


def cmd_prices(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    client = client or _client(args)
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
    client = client or _client(args)
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


def cmd_export_kueue(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """The configuration as Kueue YAML: the running server's, or (``--config``) these files'."""
    from . import admin

    if args.config:
        from .engine.errors import ManifestError
        from .engine.manifests import load_texts

        texts = [_read_source(p, stdin) for p in args.config]
        try:
            m = load_texts(texts)
        except ManifestError as e:
            print(f"{PROG} export-kueue: {e}", file=err)
            return 2
        text = admin.config_to_yaml(m.config, "Kueue configuration from " + ", ".join(args.config))
    else:
        text = (client or _client(args)).export_kueue()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror or e}", field="output") from None
    else:
        out.write(text)
    return 0


def cmd_import_kueue(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """Validate Kueue YAML here (Kueue's rules), then replace the server's configuration with it."""
    from . import admin

    source, text = _read_source(args.file, stdin)
    m = admin.load_import(text, source)  # ValidationError (exit 2) names the file, document and field
    answer = (client or _client(args)).import_kueue(text, dry_run=args.dry_run)
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


def cmd_replay(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``replay``: a job trace against a queue configuration, or Kueue's performance workloads,
    in simulated time (see :mod:`jupyter_gpuqueue.replay`). JSON on stdout (or ``--output``),
    the human summary on stderr (on stdout when ``--output`` is given)."""
    import time as _time

    from . import replay as rp
    from .engine.errors import ManifestError
    from .engine.simulator import SimulationError

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
        texts = [_read_source(p, stdin) for p in args.config]
        try:
            rc = rp.load_replay_config(texts)
        except ManifestError as e:
            print(f"{PROG} replay: {e}", file=err)
            return 2
        inventory = None
        if args.inventory:
            from .inventory import load_inventory_file

            inventory = load_inventory_file(args.inventory)
        trace = rp.read_trace_file(args.trace, limit=args.limit)
        wall = {"read": _time.perf_counter() - t0}
        try:
            report = rp.replay_trace(trace, rc, inventory=inventory, options=options, source=args.trace, wall=wall)
        except SimulationError as e:
            print(f"{PROG} replay: simulation stopped: {e}", file=err)
            return 1
        text = rp.summary_text(report)
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


COMMANDS: dict[str, Callable[..., int]] = {
    "simulate": cmd_simulate,
    "submit": cmd_submit,
    "estimate": cmd_estimate,
    "list": cmd_list,
    "cancel": cmd_cancel,
    "logs": cmd_logs,
    "queues": cmd_queues,
    "inventory": cmd_inventory,
    "prices": cmd_prices,
    "info": cmd_info,
    "replay": cmd_replay,
    "export-kueue": cmd_export_kueue,
    "import-kueue": cmd_import_kueue,
}


def cmd_bench(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``bench submit | drain | panels``: benchmarks of the live service (jupyter_gpuqueue/bench)."""
    from .bench.cli import cmd_bench as run_bench

    return run_bench(args, out, err, stdin)


COMMANDS["bench"] = cmd_bench


def build_parser(prog: str = PROG, *, server_options: bool = True) -> ArgumentParser:
    """The argument parser of ``jupyter gpuqueue`` (and, with ``prog="%gpujob"``, the line magic).

    ``server_options``: add ``--url`` / ``--token`` to the subcommands that talk to a server.
    """
    parser = ArgumentParser(
        prog=prog,
        description="A fair, quota-aware GPU queue (Kubernetes Kueue semantics) for Jupyter. "
        "Commands other than `simulate`, `replay` and `export-kueue --config` (offline) talk to the running Jupyter server with jupyter_gpuqueue "
        "(found automatically, or set GPUQUEUE_URL and GPUQUEUE_TOKEN).",
        epilog="Run `%(prog)s COMMAND --help` for a command's options. Exit status: 0 on "
        "success, 2 on bad input or an error from the server (the message names the field), "
        "1 when `submit --wait` ends other than Succeeded.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    parser.subcommands = sub.choices  # type: ignore[attr-defined]

    server = ArgumentParser(add_help=False)
    if server_options:
        g = server.add_argument_group("server")
        g.add_argument("--url", help="the Jupyter server's base URL (default: $GPUQUEUE_URL, else discovered)")
        g.add_argument("--token", help="the Jupyter server's token (default: $GPUQUEUE_TOKEN, else discovered)")
    as_json = ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the JSON answer instead of text")

    p = sub.add_parser(
        "simulate",
        help="run Kueue manifests through the scheduling engine offline (no server)",
        description="Load ResourceFlavors, ClusterQueues, LocalQueues, priority classes and "
        "workloads (Jobs, Kueue Workloads, ...) from the files and simulate how they are queued, "
        "admitted and preempted. Prints the result as JSON on stdout. An invalid manifest prints "
        "its file, document, field and reason on stderr and exits 2.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files; '-' reads stdin")

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
    p.add_argument("-q", "--quiet", action="store_true", help="no human summary")

    p = sub.add_parser(
        "submit",
        parents=[server, as_json],
        help="queue a job: a .py script or a command",
        description="Queue a job in your team's LocalQueue. It starts when the queue admits it "
        "under quota, with CUDA_VISIBLE_DEVICES set to its GPUs or MIG device. Prints its name, "
        "state, queue position and estimated cost.",
        epilog="examples:\n  jupyter gpuqueue submit train.py --gpus 2 --max-runtime 2h\n"
        "  jupyter gpuqueue submit --mig 1g.10gb --max-runtime 10m -- python eval.py --fast",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_arguments(p)
    p.add_argument("--wait", action="store_true", help="wait until the job finishes; exit 1 unless it Succeeded")
    p.add_argument("--array", metavar="SPEC",
                   help="a job array, as sbatch --array: 0-9, 1,3,5 or 0-15:4; one job per task id "
                   f"(in its environment as {ARRAY_TASK_ENV}; --name gets -<id>), submitted all or nothing")

    p = sub.add_parser(
        "estimate",
        parents=[server, as_json],
        help="what a job would cost (nothing is submitted)",
        description="Estimate a job's cost: requested GPUs × --max-runtime × the flavor's price "
        "per GPU-hour (the dearest eligible flavor when it is not chosen).",
    )
    add_job_arguments(p)

    p = sub.add_parser(
        "list",
        parents=[server, as_json],
        help="your workloads, newest first",
        description="List workloads with their state, 1-based queue position, flavor and cost.",
    )
    p.add_argument("--all", action="store_true", help="everyone's workloads, not only yours")
    p.add_argument("--namespace", metavar="NS", help="only this namespace (team)")
    p.add_argument("--state", metavar="STATES", help="only these states, comma-separated, e.g. Pending,Running")

    p = sub.add_parser(
        "cancel",
        parents=[server, as_json],
        help="cancel one of your workloads",
        description="Cancel a workload: a pending one leaves the queue, a running one is stopped "
        "(and billed up to now).",
    )
    p.add_argument("name", metavar="NAME", help="the workload's name (or namespace/name)")
    p.add_argument("--namespace", metavar="NS", help="its namespace, if the name is ambiguous")

    p = sub.add_parser(
        "logs",
        parents=[server],
        help="print a job's output",
        description="Print the job's combined stdout and stderr.",
    )
    p.add_argument("name", metavar="NAME", help="the workload's name (or namespace/name)")
    p.add_argument("--namespace", metavar="NS", help="its namespace, if the name is ambiguous")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing output until the job finishes")

    sub.add_parser(
        "queues",
        parents=[server, as_json],
        help="ClusterQueues: quota, usage, borrowing and who waits in what order",
    )
    sub.add_parser(
        "inventory",
        parents=[server, as_json],
        help="GPUs and MIG slices: free, total, and which job holds each",
    )
    sub.add_parser("prices", parents=[server, as_json], help="USD per GPU-hour per flavor")
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
    sub.add_parser(
        "info",
        parents=[server, as_json],
        help="you, your LocalQueues, flavors, MIG profiles and priority classes",
    )
    if server_options:  # not in the %gpujob magic
        from .bench.cli import add_bench_parser

        add_bench_parser(sub, server)
    return parser


def split_job_argv(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``submit``/``estimate`` arguments into (our options, the job's argv).

    The job's argv starts at the first word that is not one of our options; after it, our own
    options (``--gpus 2``) are still taken as ours and every other word, ``-x`` flags included,
    stays with the job, in order. Everything after ``--`` belongs to the job, verbatim.
    """
    verbatim: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, verbatim = argv[:i], argv[i + 1 :]
    actions = parser._option_string_actions  # noqa: SLF001 - argparse's option table
    opts: list[str] = []
    target: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        flag = tok.split("=", 1)[0] if tok.startswith("--") else tok
        action = actions.get(flag)
        if action is not None:
            opts.append(tok)
            takes_value = action.nargs != 0 and not (tok.startswith("--") and "=" in tok)
            if takes_value and i + 1 < len(argv):
                opts.append(argv[i + 1])
                i += 1
        elif tok.startswith("-") and not target and tok != "-":
            opts.append(tok)  # an unknown option before the job: argparse reports it
        else:
            target.append(tok)
        i += 1
    return opts, target + verbatim


def parse_args(parser: ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse a command line; ``submit``/``estimate`` take options before or after the job
    (``submit train.py --gpus 2``), see :func:`split_job_argv`."""
    if argv and argv[0] in ("submit", "estimate"):
        sub = parser.subcommands[argv[0]]  # type: ignore[attr-defined]
        opts, target = split_job_argv(sub, argv[1:])
        args = sub.parse_args(opts)
        if not target:
            raise UsageError(
                "a script or command to run is required", field="target", usage=sub.format_usage()
            )
        args.target = target
        args.command = argv[0]
        return args
    return parser.parse_args(argv)


def run(
    argv: list[str],
    *,
    out: TextIO,
    err: TextIO,
    stdin: TextIO,
    prog: str = PROG,
    client=None,
) -> int:
    """Parse and run one command; returns the exit status. Errors go to ``err``."""
    parser = build_parser(prog)
    try:
        args = parse_args(parser, argv)
    except HelpRequested as h:
        out.write(h.text)
        return 0
    except UsageError as e:
        err.write(e.usage)
        print(f"{prog}: error: {e.message}", file=err)
        return 2
    fn = COMMANDS[args.command]
    try:
        if args.command == "simulate":
            return fn(args, out, err, stdin)
        if args.command in ("replay", "bench"):
            return fn(args, out, err, stdin)
        return fn(args, out, err, stdin, client=client)
    except GpuQueueError as e:
        print(f"{prog} {args.command}: error: {e}", file=err)
        return 2


def main(argv: Optional[list[str]] = None) -> int:
    """Console-script entry point of ``jupyter-gpuqueue``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run(argv, out=sys.stdout, err=sys.stderr, stdin=sys.stdin)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `jupyter gpuqueue list | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
