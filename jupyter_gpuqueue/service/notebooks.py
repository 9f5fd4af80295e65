"""Notebook jobs: a SubmitRequest ``{"notebook": "train.ipynb", "parameters": {...}}`` checked and
turned into the argv of ``jupyter_gpuqueue.notebook_job`` (papermill), and the notebook part of a
workload's view (its executed notebook, "cell n of N", the failing cell), read from the job's log.

Checks, each a ValidationError (400) naming the field, nothing queued: ``notebook`` is a path to
an existing ``.ipynb`` file of at most :attr:`NotebookChecks.max_bytes`, valid JSON, a notebook
(nbformat 4: a ``cells`` list); its kernel (``kernel``, else the notebook's
``metadata.kernelspec.name``) is a kernelspec that exists (``jupyter_client``'s
KernelSpecManager, as this service's Python sees them: the environment's, the system's and
the service account's own kernels); ``parameters`` is an object of names that are Python
identifiers, and, when not empty, the notebook has a cell tagged ``parameters`` (papermill
would otherwise inject them at the top with only a warning, which we give as the 400);
``outputDir`` is an existing folder.

Where jobs run as their owners (backends/accounts.py), the service (root) does not open the
owner's files: only the request's form is checked here, and the job, as the owner, reads the
notebook and starts its kernel (papermill's errors, e.g. ``No such kernel``, end the job Failed
with the reason in its log), so that no user can probe files closed to them through the service.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from ..errors import ValidationError
from ..notebook_job import output_path, parse_markers

NOTEBOOK_FIELDS = ("notebook", "parameters", "outputDir", "kernel")
PAPERMILL_NO_PARAMETERS = "Input notebook does not contain a cell with tag 'parameters'"
LOG_TAIL_BYTES = 64 * 1024  # how much of a notebook job's log end is read for its markers


def is_notebook_request(request: dict) -> bool:
    return isinstance(request, dict) and request.get("notebook") not in (None, "")


class NotebookChecks:
    """Validates notebook SubmitRequests and builds their argv. Settings: ``root_dir`` (relative
    paths), ``python_executable`` (runs ``-m jupyter_gpuqueue.notebook_job``), ``as_owner``
    (jobs run as their owners: the files are not read here) and :attr:`max_bytes`."""

    #: The largest notebook accepted, in bytes (GpuQueueApp.max_notebook_bytes; 50 MiB by default).
    max_bytes = 50 * 1024 * 1024

    def __init__(self, *, root_dir: str, python_executable: str):
        self.root_dir = root_dir
        self.python_executable = python_executable

    def command(self, request: dict, *, base: str, as_owner: bool, workdir: Optional[str]) -> tuple[list[str], str, dict]:
        """(argv, working folder, the spec's ``notebook`` entry) of a notebook request.

        ``base``: the folder relative paths are taken from (the server root, or the owner's home);
        ``workdir``: the request's ``workingDir`` already resolved (None: the notebook's folder,
        where papermill users expect relative paths in the notebook to start)."""
        for f in ("command", "script", "args"):
            if request.get(f) not in (None, "", []):
                raise ValidationError(f"a notebook job runs its notebook; remove {f!r}", f)
        path = request["notebook"]
        if not isinstance(path, str):
            raise ValidationError("must be the path of a .ipynb file", "notebook")
        if not path.endswith(".ipynb"):
            raise ValidationError(f"not a notebook (a .ipynb file): {path}", "notebook")
        full = os.path.abspath(path if os.path.isabs(path) else os.path.join(base, path))
        parameters = request.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ValidationError("must be an object of parameter names and values", "parameters")
        for name in parameters:
            if not (isinstance(name, str) and name.isidentifier()):
                raise ValidationError(f"{name!r} is not a Python identifier", "parameters")
        kernel = request.get("kernel")
        if kernel is not None and (not isinstance(kernel, str) or not kernel):
            raise ValidationError("must be a kernelspec name", "kernel")
        out_dir = request.get("outputDir")
        if out_dir not in (None, ""):
            if not isinstance(out_dir, str):
                raise ValidationError("must be a folder", "outputDir")
            out_dir = os.path.abspath(out_dir if os.path.isabs(out_dir) else os.path.join(base, out_dir))
        else:
            out_dir = None
        cells = None
        if not as_owner:
            nb = self.read(full, path)
            cells = len(nb["cells"])
            kernel = self.check_kernel(nb, kernel)
            if parameters and not any("parameters" in _tags(c) for c in nb["cells"]):
                raise ValidationError(
                    f"{PAPERMILL_NO_PARAMETERS} (papermill's warning): {path} has no cell tagged 'parameters' "
                    f"for {', '.join(sorted(parameters))}; tag the cell that sets their defaults "
                    "(JupyterLab: the property inspector's cell tags)", "parameters")
            if out_dir is not None and not os.path.isdir(out_dir):
                raise ValidationError(f"no such folder: {request['outputDir']}", "outputDir")
        argv = [self.python_executable, "-m", "jupyter_gpuqueue.notebook_job", "--input", full]
        if out_dir is not None:
            argv += ["--output-dir", out_dir]
        if kernel:
            argv += ["--kernel", kernel]
        argv += ["--parameters", json.dumps(parameters, sort_keys=True)]
        entry = {"input": full, "outputDir": out_dir, "parameters": parameters, "kernel": kernel, "cells": cells}
        return argv, workdir or os.path.dirname(full), entry

    def read(self, full: str, shown: str) -> dict:
        """The notebook's JSON; ValidationError (field ``notebook``) when it is missing, too
        large, not JSON or not an nbformat 4 notebook."""
        try:
            size = os.path.getsize(full)
        except OSError:
            raise ValidationError(f"no such file: {shown}", "notebook") from None
        if not os.path.isfile(full):
            raise ValidationError(f"not a file: {shown}", "notebook")
        if size > self.max_bytes:
            raise ValidationError(f"{shown} is {size} bytes; notebooks of at most {self.max_bytes} bytes are "
                                  "accepted (clear large outputs first)", "notebook")
        try:
            with open(full, "rb") as f:
                nb = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise ValidationError(f"{shown} is not valid JSON: {exc}", "notebook") from None
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
            raise ValidationError(f"{shown} is not a Jupyter notebook (nbformat 4, with a 'cells' list)", "notebook")
        return nb

    @staticmethod
    def check_kernel(nb: dict, kernel: Optional[str]) -> str:
        """The kernelspec name the job uses: ``kernel`` or the notebook's; ValidationError naming
        the kernel when no such kernelspec exists here."""
        field = "kernel" if kernel else "notebook"
        if not kernel:
            meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
            spec = meta.get("kernelspec") if isinstance(meta.get("kernelspec"), dict) else {}
            kernel = spec.get("name")
            if not isinstance(kernel, str) or not kernel:
                raise ValidationError("the notebook names no kernel (metadata.kernelspec.name): "
                                      "give 'kernel', or save it from JupyterLab with a kernel", "notebook")
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        manager = KernelSpecManager()
        try:
            manager.get_kernel_spec(kernel)
        except NoSuchKernel:
            known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
            what = "kernel" if field == "kernel" else "the notebook's kernel (metadata.kernelspec.name)"
            raise ValidationError(f"{what} {kernel!r} does not exist here (known kernels: {known})", field) from None
        return kernel


def _tags(cell) -> list:
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    tags = meta.get("tags") if isinstance(meta, dict) else None
    return tags if isinstance(tags, list) else []


class NotebookProgress:
    """The ``notebook`` part of a workload's view, from its spec and the tail of its local log
    (the job's markers, untrusted: ``notebook_job.parse_markers``). A tail is read again only
    when the log's size changed."""

    def __init__(self, root_dir: str):
        self.root_dir = os.path.abspath(root_dir)
        self._cache: dict[str, tuple[int, dict]] = {}

    def relative(self, path: Optional[str]) -> Optional[str]:
        """``path`` relative to the server root when inside it (what JupyterLab opens), else as is."""
        if not path:
            return path
        rel = os.path.relpath(path, self.root_dir)
        return path if rel == ".." or rel.startswith(".." + os.sep) else rel

    def markers(self, rec: dict) -> dict:
        run = rec.get("run") or {}
        log_path = (run.get("logPath") or run.get("log_path")) if isinstance(run, dict) else None
        if not log_path:
            return {}
        try:
            size = os.path.getsize(log_path)
        except OSError:
            return {}
        cached = self._cache.get(rec["uid"])
        if cached is not None and cached[0] == size:
            return cached[1]
        try:
            with open(log_path, "rb") as f:
                f.seek(max(0, size - LOG_TAIL_BYTES))
                text = f.read(LOG_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return {}
        found = parse_markers(text)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[rec["uid"]] = (size, found)
        return found

    def view(self, rec: dict) -> Optional[dict]:
        """``{"input", "output", "outputDir", "parameters", "kernel", "cell", "cells", "failedCell", "error",
        "note"}`` for a notebook job (paths relative to the server root where inside it), None
        for other workloads."""
        entry = rec["spec"].get("notebook")
        if not isinstance(entry, dict):
            return None
        found = self.markers(rec) if rec.get("run") else {}
        note = None
        if rec.get("evictions", 0):
            note = (f"preempted {rec['evictions']} time(s): a notebook job starts again from the top "
                    "when it is admitted again")
        return {
            "input": self.relative(entry.get("input")),
            "output": self.relative(output_path(entry["input"], entry.get("outputDir"), rec["name"])),
            "outputDir": self.relative(entry.get("outputDir")),
            "parameters": entry.get("parameters") or {},
            "kernel": entry.get("kernel"),
            "cell": found.get("cell"),
            "cells": found.get("cells") or entry.get("cells"),
            "failedCell": found.get("failedCell"),
            "error": found.get("error"),
            "note": note,
        }
