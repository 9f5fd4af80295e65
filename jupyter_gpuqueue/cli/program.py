"""The program ``jupyter gpuqueue``: its parser (the subcommands of every group, in the order
``--help`` lists them), the dispatch of a command line to its command, and ``main``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional, TextIO

from ..errors import GpuQueueError
from . import bench, database, jobs, offline
from .args import PROG, ArgumentParser, HelpRequested, UsageError

COMMANDS: dict[str, Callable[..., int]] = {**offline.COMMANDS, **jobs.COMMANDS, **bench.COMMANDS,
                                           **database.COMMANDS}
PARSERS: dict[str, Callable[..., None]] = {**offline.PARSERS, **jobs.PARSERS}
# The subcommands in the order of ``--help`` (``bench`` last, and only with server options).
ORDER = ("simulate", "replay", "submit", "estimate", "list", "cancel", "logs", "queues", "inventory", "prices",
         "export-kueue", "import-kueue", "info")

def build_parser(prog: str = PROG, *, server_options: bool = True) -> ArgumentParser:
    """The argument parser of ``jupyter gpuqueue`` (and, with ``prog="%gpujob"``, the line magic).

    ``server_options``: add ``--url`` / ``--token`` to the subcommands that talk to a server.
    """
    parser = ArgumentParser(
        prog=prog,
        description="A fair, quota-aware GPU queue (Kubernetes Kueue semantics) for Jupyter. "
        "Commands other than `simulate`, `replay`, `export-kueue --config`, `upgrade-db` and `backup` (offline) talk to the running Jupyter server with jupyter_gpuqueue "
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

    for name in ORDER:
        PARSERS[name](sub, server, as_json)
    if server_options:  # not in the %gpujob magic
        for name in ("upgrade-db", "backup"):  # the ledger's upkeep, offline (database.py)
            database.PARSERS[name](sub, server, as_json)
        bench.PARSERS["bench"](sub, server, as_json)
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
            if takes_value:  # one value, or nargs=N of them (-p NAME VALUE)
                n = action.nargs if isinstance(action.nargs, int) else 1
                opts.extend(argv[i + 1:i + 1 + n])
                i += n
        elif tok.startswith("-") and not target and tok != "-":
            opts.append(tok)  # an unknown option before the job: argparse reports it
        else:
            target.append(tok)
        i += 1
    return opts, target + verbatim


def parse_args(parser: ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse a command line; ``submit``/``estimate`` take options before or after the job
    (``submit train.py --gpus 2``), see :func:`split_job_argv`. ``submit`` needs a script or
    command (UsageError, field ``target``); ``estimate`` does not (``args.target`` is then ``[]``)."""
    if argv and argv[0] in ("submit", "estimate"):
        sub = parser.subcommands[argv[0]]  # type: ignore[attr-defined]
        opts, target = split_job_argv(sub, argv[1:])
        args = sub.parse_args(opts)
        if not target and argv[0] == "submit":  # an estimate needs no command
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
        print(f"{prog} {args.command}: error: {jobs.error_text(e, args.command)}", file=err)
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
