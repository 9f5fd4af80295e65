"""IPython magics: ``%load_ext jupyter_gpuqueue`` registers ``%%gpujob`` and ``%gpujob``.

Cell magic — run the cell as a queued GPU job::

    %%gpujob --gpus 1 --flavor nvidia-a100 --priority development --max-runtime 10m
    import torch
    ...

The cell's code is written to ``.gpuqueue/cells/<name>.py`` under the kernel's working directory
and submitted as ``[sys.executable, that file]`` with the kernel's working directory (so it runs in
the kernel's Python environment). The cell must be plain Python (no magics or ``!`` commands).
The magic returns a :class:`~jupyter_gpuqueue.widget.GpuJob` (also stored as ``_gpujob``) whose
widget shows state, position, the estimated start while it waits ("starts in ~12 min (5–30 min)",
what it waits for, a faster flavor when there is one), cost and output live;
``_gpujob.estimated_start`` is that estimate as a timezone-aware datetime (None once it started, or
when there is none: ``_gpujob.estimate_reason`` says why), with ``estimated_start_range`` and
``waiting_for``; ``_gpujob.wait()`` blocks until it finishes.
Options: ``--gpus N | --mig PROFILE``, ``--flavor``, ``--priority``, ``--max-runtime``,
``--queue ns/lq``, ``--name``, ``--env KEY=VALUE``, ``--wait`` (block until finished),
``--no-widget``.

Line magic — the CLI's commands (``jupyter gpuqueue --help``)::

    %gpujob submit train.py --gpus 2      # returns a GpuJob
    %gpujob list [--all]
    %gpujob cancel NAME
    %gpujob logs NAME
    %gpujob queues | inventory | prices | info | estimate ...

Bad input (an unknown flavor, ``--gpus 0``, ...) raises a UsageError naming the field; nothing is
submitted. The server is found like :class:`~jupyter_gpuqueue.client.GpuQueueClient` finds it
(``GPUQUEUE_URL``/``GPUQUEUE_TOKEN``, else the Jupyter server running this kernel).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import sys
from typing import Any, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from . import cli
from .errors import GpuQueueError
from .widget import GpuJob

CELLS_DIR = os.path.join(".gpuqueue", "cells")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def build_cell_parser() -> cli.ArgumentParser:
    """The option parser of ``%%gpujob`` (the job options of ``jupyter gpuqueue submit``)."""
    parser = cli.ArgumentParser(
        prog="%%gpujob",
        description="Run this cell as a GPU job in your team's queue. The cell is saved to "
        ".gpuqueue/cells/NAME.py and run with this kernel's Python in this kernel's working "
        "directory once the queue admits it.",
    )
    cli.add_job_arguments(parser, target=False)
    parser.add_argument("--wait", action="store_true", help="block until the job finishes")
    parser.add_argument("--no-widget", action="store_true", help="do not show the live widget")
    return parser


def _usage_error(e: BaseException) -> UsageError:
    """The error as the CLI prints it: a SubmitRequest field is named by the flag the user typed
    (``--max-runtime: …``, not ``maxRuntimeSeconds: …``; cli/jobs.py ``error_text``)."""
    from .cli.jobs import error_text

    return UsageError(error_text(e) if isinstance(e, GpuQueueError) else str(e))


@magics_class
class GpuJobMagics(Magics):
    """``%gpujob`` / ``%%gpujob``. ``client``: a GpuQueueClient (default: discovered on first use)."""

    def __init__(self, shell: Any = None, client: Any = None):
        super().__init__(shell)
        self._client = client

    @property
    def client(self):
        if self._client is None:
            from .client import GpuQueueClient

            try:
                self._client = GpuQueueClient()
            except GpuQueueError as e:
                raise _usage_error(e) from None
        return self._client

    @line_cell_magic
    def gpujob(self, line: str, cell: Optional[str] = None):
        """Queue GPU jobs: ``%%gpujob [options]`` runs the cell as a job; ``%gpujob COMMAND``
        runs a ``jupyter gpuqueue`` command (submit, list, cancel, logs, ...). ``--help`` on
        either shows the options."""
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise UsageError(f"cannot parse the options: {e}") from None
        if cell is None:
            return self._line(argv)
        return self._cell(argv, cell)

    # -- %%gpujob ---------------------------------------------------------------------------------

    def _cell(self, argv: list[str], cell: str):
        parser = build_cell_parser()
        try:
            args = parser.parse_args(argv)
        except cli.HelpRequested as h:
            print(h.text)
            return None
        except cli.UsageError as e:
            raise UsageError(f"{e.message}\n{e.usage.strip()}") from None
        if not cell.strip():
            raise UsageError("the cell is empty: put the job's Python code under %%gpujob")
        name = args.name or f"cell-{secrets.token_hex(4)}"
        if len(name) > 63 or not _DNS1123.match(name):
            raise UsageError(
                f"name: {name!r} is not a valid name: a DNS-1123 label (lower case letters, digits "
                "and '-', starting and ending with a letter or digit, at most 63 characters)"
            )
        cwd = os.getcwd()
        path = os.path.join(cwd, CELLS_DIR, f"{name}.py")
        if os.path.exists(path):
            raise UsageError(
                f"name: a cell job called {name!r} was already submitted from here ({path}); "
                "choose another --name"
            )
        try:
            request = cli.request_from_args(args, cwd=cwd, command=[sys.executable, path])
        except GpuQueueError as e:
            raise _usage_error(e) from None
        request["name"] = name
        request["workingDir"] = cwd
        client = self.client
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"# Submitted by %%gpujob as {name}; runs in {cwd}\n")
            f.write(cell if cell.endswith("\n") else cell + "\n")
        try:
            workload = client.submit(request)
        except GpuQueueError as e:
            try:
                os.remove(path)
            except OSError:
                pass
            raise _usage_error(e) from None
        return self._job(workload, widget=not args.no_widget, wait=args.wait)

    def _job(self, workload: dict, *, widget: bool = True, wait: bool = False) -> GpuJob:
        job = GpuJob(self.client, workload, widget=widget)
        if self.shell is not None:
            self.shell.user_ns["_gpujob"] = job
        if wait:
            job.wait()
        return job

    # -- %gpujob COMMAND --------------------------------------------------------------------------

    def _line(self, argv: list[str]):
        parser = cli.build_parser(prog="%gpujob", server_options=False)
        try:
            args = cli.parse_args(parser, argv)
        except cli.HelpRequested as h:
            print(h.text)
            return None
        except cli.UsageError as e:
            raise UsageError(f"{e.message}\n{e.usage.strip()}") from None
        try:
            if args.command == "submit":
                workload = self.client.submit(cli.request_from_args(args))
                return self._job(workload, wait=args.wait)
            fn = cli.COMMANDS[args.command]
            if args.command == "simulate":
                status = fn(args, sys.stdout, sys.stderr, sys.stdin)
            else:
                status = fn(args, sys.stdout, sys.stderr, sys.stdin, client=self.client)
        except GpuQueueError as e:
            raise _usage_error(e) from None
        if status:
            raise UsageError(f"%gpujob {args.command} failed (status {status})")
        return None


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_gpuqueue``: register the ``%gpujob`` / ``%%gpujob`` magics."""
    ipython.register_magics(GpuJobMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:  # pragma: no cover - IPython keeps magics
    pass
