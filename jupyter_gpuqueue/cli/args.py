"""What every command group of ``jupyter gpuqueue`` shares: the parser class that raises instead of
exiting, argument types, and reading an input file (or stdin). Also used by the bench's command
line (``bench/cli.py``) and the ``%gpujob`` magics; imports nothing of the other groups."""

from __future__ import annotations

import argparse
import re
from typing import Optional, TextIO

from ..errors import GpuQueueError

PROG = "jupyter gpuqueue"


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
    exiting, so that the magics can show errors in a notebook. ``main`` turns them into exit 2 / 0.

    Abbreviated long options are refused (``allow_abbrev=False``): ``--gpu 1`` is an error, not
    ``--gpus 1``, so that a later option cannot silently change what an old command line means."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

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


def read_source(path: str, stdin: TextIO) -> tuple[str, str]:
    """``(source name, text)`` of a file, or of stdin for ``-``; UsageError (field ``FILE``)
    when it cannot be read."""
    if path == "-":
        return "<stdin>", stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"cannot read {path}: {reason}", field="FILE") from None


def server_client(args: argparse.Namespace):
    """The REST client of the server the command talks to (``--url`` / ``--token``, else
    ``$GPUQUEUE_URL`` / ``$GPUQUEUE_TOKEN``, else discovered)."""
    from ..client import GpuQueueClient

    return GpuQueueClient(getattr(args, "url", None), getattr(args, "token", None))
