"""Notebook jobs (issue 37) against a real ``jupyter server`` (tests/servertools.py) whose jobs
are real processes: papermill runs the notebook on a real ipykernel.

- REST: the example notebook (examples/train_digits.ipynb, a real scikit-learn model) with a
  parameter runs to Succeeded; the executed notebook lies next to the input under the job's name,
  holds the injected parameter and the cells' outputs, and the input is unchanged.
- Progress: a notebook held at one cell shows "cell n of N" (the job's log markers) while it runs.
- A failing cell ends the job Failed with that cell's number and error; the executed notebook keeps
  the cells up to it (the traceback in it, the next cell never run).
- Bad input (not a notebook, invalid JSON, a parameter without a `parameters` cell, a kernel that
  does not exist, a notebook over the size limit, ...): 400 naming the field, nothing queued.
- CLI: ``jupyter gpuqueue submit NB.ipynb -p NAME VALUE --wait`` and ``--sweep``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servertools import Launcher, ServerSetup
from test_crash import CLUSTER, INVENTORY

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "train_digits.ipynb"
DEADLINE = 240.0  # seconds: a kernel start plus scikit-learn's import on a loaded 2-core machine


def notebook(*sources: str, tags: dict | None = None, kernel: str = "python3") -> str:
    cells = [{"cell_type": "code", "metadata": {"tags": (tags or {}).get(i, [])}, "source": src,
              "outputs": [], "execution_count": None} for i, src in enumerate(sources)]
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
                       "metadata": {"kernelspec": {"name": kernel, "display_name": kernel, "language": "python"}}})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    launcher = Launcher(zygote=False)
    setup = ServerSetup(tmp_path_factory.mktemp("notebooks"), CLUSTER, INVENTORY,
                        extra_config="c.GpuQueueApp.max_notebook_bytes = 200000\n")
    srv = launcher.start(setup)
    yield srv
    srv.stop()
    launcher.close()


def submit(server, body, expect=201) -> dict:
    r = server.request("POST", "workloads", json=body)
    assert r.status_code == expect, r.text
    return r.json()


def get(server, wl) -> dict:
    r = server.request("GET", f"workloads/{wl['namespace']}/{wl['name']}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_until(server, wl, ok, what, timeout=DEADLINE) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        view = get(server, wl)
        if ok(view):
            return view
        if time.monotonic() > deadline:
            log = server.request("GET", f"workloads/{wl['namespace']}/{wl['name']}/logs").json().get("text")
            raise AssertionError(f"{what}: {json.dumps(view)[:2000]}\nlog: {log}")
        time.sleep(0.2)


def finished(view) -> bool:
    return view["state"] in ("Succeeded", "Failed", "Cancelled")


def count(server) -> int:
    return len(server.request("GET", "workloads").json()["items"])


def test_the_example_notebook_runs_with_a_parameter(server):
    root = server.setup.root
    shutil.copy(EXAMPLE, root / "train_digits.ipynb")
    digest = hashlib.sha256((root / "train_digits.ipynb").read_bytes()).hexdigest()
    wl = submit(server, {"notebook": "train_digits.ipynb", "parameters": {"epochs": 2, "learning_rate": 0.01},
                         "localQueue": "one/q", "gpus": 1})
    assert wl["name"].startswith("train-digits-")
    assert wl["notebook"]["input"] == "train_digits.ipynb"
    assert wl["notebook"]["output"] == f"train_digits-{wl['name']}.ipynb"
    assert wl["notebook"]["parameters"] == {"epochs": 2, "learning_rate": 0.01}
    view = wait_until(server, wl, finished, "the notebook job did not finish")
    assert view["state"] == "Succeeded", view
    nb = view["notebook"]
    assert nb["cell"] == nb["cells"] == 7  # 6 cells and papermill's injected-parameters cell
    assert nb["failedCell"] is None
    executed = json.loads((root / nb["output"]).read_text())
    injected = [c for c in executed["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "epochs = 2" in "".join(injected[0]["source"])
    text = json.dumps(executed)
    assert "epochs=2 learning_rate=0.01" in text and "test accuracy" in text
    assert f"CUDA_VISIBLE_DEVICES = {view['visibleDevices']}" in text  # on the GPUs the queue assigned
    assert hashlib.sha256((root / "train_digits.ipynb").read_bytes()).hexdigest() == digest  # input untouched
    log = server.request("GET", f"workloads/{wl['namespace']}/{wl['name']}/logs").json()["text"]
    assert "epoch   2/2" in log  # the cells' output is the log


def test_progress_shows_the_cell_being_executed(server):
    root = server.setup.root
    flag = root / "go-on"
    (root / "held.ipynb").write_text(notebook(
        "x = 1",
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)",
        "print('after', x)"))
    wl = submit(server, {"notebook": "held.ipynb", "localQueue": "one/q"})
    view = wait_until(server, wl, lambda v: (v["notebook"] or {}).get("cell") == 2,
                      "no 'cell 2 of 3' while the notebook waits in its second cell")
    assert view["state"] == "Running" and view["notebook"]["cells"] == 3
    flag.write_text("")
    view = wait_until(server, wl, finished, "the held notebook did not finish")
    assert view["state"] == "Succeeded" and view["notebook"]["cell"] == 3


def test_a_failing_cell_fails_the_job_with_its_number_and_error(server):
    root = server.setup.root
    (root / "broken.ipynb").write_text(notebook("a = 1", "print('before the error')", "1 / 0", "print('never')"))
    wl = submit(server, {"notebook": "broken.ipynb", "localQueue": "one/q"})
    view = wait_until(server, wl, finished, "the failing notebook did not finish")
    assert view["state"] == "Failed", view
    assert view["notebook"]["failedCell"] == 3
    assert view["notebook"]["cells"] == 4
    assert view["notebook"]["error"] == "ZeroDivisionError: division by zero"
    executed = json.loads((root / view["notebook"]["output"]).read_text())
    cells = {"".join(c["source"]): c for c in executed["cells"] if c["cell_type"] == "code"}
    assert cells["1 / 0"]["outputs"][0]["ename"] == "ZeroDivisionError"
    assert "before the error" in json.dumps(cells["print('before the error')"]["outputs"])
    assert cells["print('never')"]["execution_count"] is None and not cells["print('never')"]["outputs"]  # never ran


@pytest.mark.parametrize("files, body, field, words", [
    ({"train.py": "print(1)"}, {"notebook": "train.py"}, "notebook", "not a notebook"),
    ({}, {"notebook": "missing.ipynb"}, "notebook", "no such file"),
    ({"bad.ipynb": "{not json"}, {"notebook": "bad.ipynb"}, "notebook", "not valid JSON"),
    ({"list.ipynb": "[1, 2]"}, {"notebook": "list.ipynb"}, "notebook", "not a Jupyter notebook"),
    ({"plain.ipynb": notebook("x = 1")}, {"notebook": "plain.ipynb", "parameters": {"x": 2}}, "parameters",
     "does not contain a cell with tag 'parameters'"),
    ({"p.ipynb": notebook("x = 1", tags={0: ["parameters"]})}, {"notebook": "p.ipynb", "parameters": {"1x": 2}},
     "parameters", "not a Python identifier"),
    ({"k.ipynb": notebook("x = 1", kernel="no-such-kernel")}, {"notebook": "k.ipynb"}, "notebook",
     "'no-such-kernel' does not exist"),
    ({"k2.ipynb": notebook("x = 1")}, {"notebook": "k2.ipynb", "kernel": "nope"}, "kernel", "'nope' does not exist"),
    ({"big.ipynb": notebook("x = 1", "# " + "x" * 300_000)}, {"notebook": "big.ipynb"}, "notebook",
     "at most 200000 bytes"),
    ({"o.ipynb": notebook("x = 1")}, {"notebook": "o.ipynb", "outputDir": "nowhere"}, "outputDir", "no such folder"),
    ({"c.ipynb": notebook("x = 1")}, {"notebook": "c.ipynb", "command": ["true"]}, "command", "remove"),
    ({}, {"command": ["true"], "parameters": {"x": 1}}, "parameters", "only a notebook job"),
    ({}, {"notebook": 3}, "notebook", "string"),
])
def test_bad_notebook_input_is_400_naming_the_field(server, files, body, field, words):
    root = server.setup.root
    for name, text in files.items():
        (root / name).write_text(text)
    before = count(server)
    r = server.request("POST", "workloads", json={"localQueue": "one/q", **body})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["field"] == field, err
    assert words in err["message"], err
    assert count(server) == before  # nothing queued


def cli(server, *args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpuqueue.cli", *args, "--url", server.url.removesuffix("gpuqueue/api/"),
         "--token", server.setup.token],
        capture_output=True, text=True, cwd=cwd, timeout=DEADLINE + 60, env=server.setup.env())


def test_cli_submits_a_notebook_with_parameters_and_a_sweep(server):
    root = server.setup.root
    sub = root / "cli"
    sub.mkdir(exist_ok=True)
    (sub / "echo.ipynb").write_text(notebook("lr = 0.1\nepochs = 1\nname = 'x'", "print('lr', lr, 'epochs', epochs, name)",
                                             tags={0: ["parameters"]}))
    r = cli(server, "submit", "echo.ipynb", "-p", "lr", "0.01", "-p", "epochs", "3", "-p", "name", "run1",
            "--queue", "one/q", "--wait", "--json", cwd=sub)
    assert r.returncode == 0, r.stdout + r.stderr
    wl = json.loads(r.stdout.strip().splitlines()[-1])
    assert wl["state"] == "Succeeded"
    assert wl["notebook"]["parameters"] == {"lr": 0.01, "epochs": 3, "name": "run1"}
    executed = json.loads((root / wl["notebook"]["output"]).read_text())
    assert "lr 0.01 epochs 3 run1" in json.dumps(executed)

    r = cli(server, "submit", "echo.ipynb", "--sweep", "lr", "0.1,0.2", "--sweep", "epochs", "1,2",
            "--queue", "one/q", "--json", cwd=sub)
    assert r.returncode == 0, r.stdout + r.stderr
    items = json.loads(r.stdout)["items"]
    assert [w["notebook"]["parameters"] for w in items] == [
        {"lr": 0.1, "epochs": 1}, {"lr": 0.1, "epochs": 2}, {"lr": 0.2, "epochs": 1}, {"lr": 0.2, "epochs": 2}]
    for w in items:  # not needed to run: spare the machine
        server.request("DELETE", f"workloads/{w['namespace']}/{w['name']}")

    before = count(server)
    r = cli(server, "submit", "echo.ipynb", "-p", "nope", "1", "--kernel", "missing", "--queue", "one/q", cwd=sub)
    assert r.returncode != 0 and "--kernel" in r.stderr and "'missing' does not exist" in r.stderr, r.stderr
    r = cli(server, "submit", "train.py", "-p", "lr", "1", cwd=sub)
    assert r.returncode != 0 and "-p" in r.stderr, r.stderr
    assert count(server) == before


def test_log_markers_are_read_as_untrusted_text():
    """The job's log is the job's own: only whole marker lines count, numbers are bounded, the
    error loses control characters and is cut (jupyter_gpuqueue/notebook_job.parse_markers)."""
    from jupyter_gpuqueue.notebook_job import ERROR_CHARS, parse_markers

    assert parse_markers("") == {}
    assert parse_markers("[gpuqueue-notebook] cell 2 of 5\nprint\n[gpuqueue-notebook] cell 3 of 5\n") == \
        {"cell": 3, "cells": 5}
    for bad in ("[gpuqueue-notebook] cell 6 of 5", "[gpuqueue-notebook] cell 0 of 5",
                "x [gpuqueue-notebook] cell 1 of 5", "[gpuqueue-notebook] cell 1 of 9999999",
                "[gpuqueue-notebook] cell -1 of 5", "[gpuqueue-notebook] cell 1 of 5 extra"):
        assert parse_markers(bad) == {}, bad
    found = parse_markers("[gpuqueue-notebook] failed at cell 2 of 3: E: \x1b[31mred\x07" + "y" * 5000)
    assert found["failedCell"] == 2 and found["cells"] == 3
    assert "\x1b" not in found["error"] and "\x07" not in found["error"] and len(found["error"]) <= ERROR_CHARS
