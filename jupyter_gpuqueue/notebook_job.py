"""A notebook as a GPU job: what runs inside the job, and the few rules the service shares with it.

The service (``service/notebooks.py``) turns a SubmitRequest ``{"notebook": "train.ipynb",
"parameters": {"lr": 0.01}}`` into the argv ``python -m jupyter_gpuqueue.notebook_job --input
IN --output-dir DIR --kernel K --parameters JSON``. The job runs it on the GPUs the queue gave it
(``CUDA_VISIBLE_DEVICES``, as any job) and here executes the notebook with papermill
(https://papermill.readthedocs.io): the parameters are injected after the cell tagged
``parameters``, the notebook runs on its own kernel, and the executed notebook is written, cell by
cell, to :func:`output_path` (``<stem>-<workload name>.ipynb`` next to the input, or in the folder
chosen), never over the input. The log is the cells' output as it happens (papermill's
``log_output``).

Progress and outcome reach the service through the job's log, as marker lines (the service reads
them as untrusted text, like the rest of the log: :func:`parse_markers`)::

    [gpuqueue-notebook] cell 3 of 12
    [gpuqueue-notebook] failed at cell 7 of 12: ZeroDivisionError: division by zero
    [gpuqueue-notebook] output /home/ada/train-train-3f2a1c.ipynb

"cell n of N" counts every cell of the executed notebook (papermill's own ``Executing Cell n``
numbering, the injected-parameters cell included), so it matches the cell's place in the executed
notebook that JupyterLab opens. A failing cell ends the job with exit code 1 (papermill has then
written the executed notebook up to and including that cell, with its traceback, and added its
own banner cells: "An Exception was encountered at 'In [n]'"); the failure's numbers are those of
the notebook as executed, before the banners.

Only the standard library is imported at module level: the service imports the helpers without
papermill, which only the job needs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Optional

MARKER = "[gpuqueue-notebook]"
_CELL_RE = re.compile(r"^\[gpuqueue-notebook\] cell (\d{1,6}) of (\d{1,6})$")
_FAILED_RE = re.compile(r"^\[gpuqueue-notebook\] failed at cell (\d{1,6}) of (\d{1,6}): (.*)$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
ERROR_CHARS = 300  # the most characters of a failing cell's error kept for the card


def output_path(input_path: str, output_dir: Optional[str], workload_name: str) -> str:
    """The executed notebook of a job: ``<output_dir or the input's folder>/<stem>-<workload
    name>.ipynb`` (``train.ipynb`` run as ``train-3f2a1c`` → ``train-train-3f2a1c.ipynb``). The
    workload name is a DNS-1123 label (no ``/``), so the result is in that folder, and it never
    equals the input (its stem gets a suffix)."""
    folder = output_dir or os.path.dirname(input_path)
    stem = os.path.splitext(os.path.basename(input_path))[0]
    return os.path.join(folder, f"{stem}-{workload_name}.ipynb")


def parse_markers(text: str) -> dict:
    """The notebook job's progress and failure from (the tail of) its log: ``{"cell": n,
    "cells": N}`` of the last cell started, ``"failedCell"``, ``"error"`` when a cell failed; {}
    when the text has none. The log is the job's, so untrusted: only whole lines that match
    exactly count, numbers are bounded (n ≤ N ≤ 999,999), the error loses control characters
    and is cut to :data:`ERROR_CHARS`."""
    out: dict = {}
    for line in text.splitlines():
        if not line.startswith(MARKER):
            continue
        line = line.rstrip("\r")
        m = _CELL_RE.match(line)
        if m:
            n, total = int(m.group(1)), int(m.group(2))
            if 1 <= n <= total:
                out["cell"], out["cells"] = n, total
            continue
        m = _FAILED_RE.match(line)
        if m:
            n, total = int(m.group(1)), int(m.group(2))
            if 1 <= n <= total:
                error = _CONTROL.sub(" ", m.group(3)).strip()
                out.update(failedCell=n, cells=total, error=error[:ERROR_CHARS])
    return out


def _say(text: str) -> None:
    sys.stderr.write(f"{MARKER} {text}\n")
    sys.stderr.flush()


def run(input_path: str, output: str, kernel: str, parameters: dict) -> int:
    """Execute the notebook with papermill; 0 when every cell ran, 1 when a cell failed (the
    marker line says which), 2 when papermill could not run it at all (the reason is logged)."""
    import logging

    import papermill
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.exceptions import PapermillExecutionError

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    seen = {"cells": 0}  # cells of the notebook as executed (papermill then adds its error banners)

    class ProgressEngine(NBClientEngine):
        """papermill's nbclient engine, saying "cell n of N" as each cell starts."""

        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            start = nb_man.cell_start

            def cell_start(cell, cell_index=None, **kw):
                if cell_index is not None:
                    seen["cells"] = len(nb_man.nb.cells)
                    _say(f"cell {cell_index + 1} of {len(nb_man.nb.cells)}")
                return start(cell, cell_index, **kw)

            nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register("gpuqueue", ProgressEngine)
    _say(f"output {output}")
    try:
        papermill.execute_notebook(
            input_path, output, parameters=parameters, kernel_name=kernel, engine_name="gpuqueue",
            log_output=True, progress_bar=False, cwd=os.getcwd())
    except PapermillExecutionError as exc:
        total = seen["cells"]
        first = str(exc.evalue).splitlines()[0] if str(exc.evalue) else ""
        n = exc.cell_index + 1
        _say(f"failed at cell {n} of {max(total, n)}: {exc.ename}: {first}".rstrip(": "))
        return 1
    except Exception as exc:  # the kernel would not start, the output cannot be written, ...
        sys.stderr.write(f"papermill could not run {input_path}: {type(exc).__name__}: {exc}\n")
        return 2
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyter_gpuqueue.notebook_job",
                                description="Run a notebook with papermill as a GPU queue job.")
    p.add_argument("--input", required=True, help="the notebook to execute (never written)")
    p.add_argument("--output-dir", default=None, help="where the executed notebook goes (default: the input's folder)")
    p.add_argument("--kernel", default=None, help="the kernelspec name (default: the notebook's)")
    p.add_argument("--parameters", default="{}", help="a JSON object of parameters")
    args = p.parse_args(argv)
    parameters = json.loads(args.parameters)
    if not isinstance(parameters, dict):
        p.error("--parameters must be a JSON object")
    name = os.environ.get("GPUQUEUE_WORKLOAD_NAME") or "local"
    output = output_path(os.path.abspath(args.input), args.output_dir, name)
    if os.path.abspath(output) == os.path.abspath(args.input):  # pragma: no cover - output_path's rule
        p.error("the executed notebook would overwrite the input")
    return run(args.input, output, args.kernel, parameters)


if __name__ == "__main__":
    sys.exit(main())
