"""The ``bench`` command group: benchmarks of the live service against a real server
(``jupyter_gpuqueue/bench``, BENCHMARKS.md). Its parser and commands live in ``bench/cli.py``."""

from __future__ import annotations

from typing import TextIO

def cmd_bench(args, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``bench submit | drain | panels``: benchmarks of the live service (jupyter_gpuqueue/bench)."""
    from ..bench.cli import cmd_bench as run_bench

    return run_bench(args, out, err, stdin)


def add_bench_parser(sub, server, as_json) -> None:
    """Add ``bench submit | drain | panels`` (``bench/cli.py``)."""
    from ..bench.cli import add_bench_parser as add

    add(sub, server)


COMMANDS = {"bench": cmd_bench}


PARSERS = {"bench": add_bench_parser}
