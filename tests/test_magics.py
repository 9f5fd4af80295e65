"""``%load_ext jupyter_gpuqueue`` and ``%%gpujob`` in a real kernel (nbclient) against the test server.

The kernel reaches the pytest-jupyter server through GPUQUEUE_URL / GPUQUEUE_TOKEN in its
environment. The test is async so that the server keeps serving while the kernel runs cells.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_gpuqueue.client import GpuQueueClient, ServerUnavailable
from jupyter_gpuqueue.widget import GpuJob

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def text_of(cell) -> str:
    """Everything a cell showed: streams, results (text/plain) and errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "".join(parts)


def may_fail(source: str):
    cell = new_code_cell(source)
    cell.metadata["tags"] = ["raises-exception"]  # nbclient records the error and goes on
    return cell


async def run_notebook(cells, cwd: Path, env: dict, timeout: int = 300):
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, kernel_name="python3", timeout=timeout,
                            resources={"metadata": {"path": str(cwd)}})
    await client.async_execute(env={**os.environ, **env})
    nbformat.validate(nb)
    return nb


async def test_gpujob_cell_trains_digits_and_bad_input_shows_the_field(gpuqueue_env, jp_fetch, tmp_path):
    assert TRAIN.exists(), TRAIN
    work = tmp_path / "work"
    work.mkdir()
    cells = [
        new_code_cell("%load_ext jupyter_gpuqueue"),
        # 1: bad input is refused before anything is submitted
        may_fail("%%gpujob --gpus 1 --flavor nvidia-nonexistent --max-runtime 5m\nprint('never runs')"),
        may_fail("%%gpujob --gpus 0\nprint('never runs')"),
        # 3: the real job
        new_code_cell(
            "%%gpujob --gpus 1 --max-runtime 5m --name digits-cell\n"
            "import runpy, sys\n"
            f"sys.argv = ['train_digits.py', '--epochs', '3', '--out', 'results/digits.json']\n"
            f"runpy.run_path({str(TRAIN)!r}, run_name='__main__')\n"
        ),
        # 4: the handle
        new_code_cell(
            "job = _gpujob\n"
            "state = job.wait(timeout=240)\n"
            "print('STATE', state, job.name, job.namespace)\n"
            "print('COST', job.cost_usd > 0, job.info['exitCode'])\n"
            "print('LOG', 'test accuracy' in job.logs())\n"
            "print(repr(job))\n"
            "import time\n"
            "deadline = time.time() + 30\n"
            "while 'test accuracy' not in job.widget.log.value and time.time() < deadline:\n"
            "    time.sleep(0.2)\n"
            "print('WIDGET', 'Succeeded' in job.widget.header.value, 'test accuracy' in job.widget.log.value,\n"
            "      job.widget.cancel_button.disabled, '$' in job.widget.details.value)"
        ),
        # 5: line magics
        new_code_cell("%gpujob list"),
        new_code_cell("%gpujob logs digits-cell"),
        may_fail("%gpujob cancel no-such-job"),
        # 8: a script file through the line magic
        new_code_cell(
            "open('hello.py', 'w').write('import sys; print(\\'hello\\', sys.argv[1:])')\n"
            "job = %gpujob submit hello.py world --name line-job --max-runtime 2m --no-such-flag\n"
            "print('LINE', job.wait(timeout=60), job.name)\n"
            "print(job.logs())"
        ),
    ]
    nb = await run_notebook(cells, work, gpuqueue_env)
    out = [text_of(c) for c in nb.cells]

    assert "--flavor" in out[1] and "nvidia-nonexistent" in out[1], out[1]  # the flag typed, not the API field
    assert "never runs" not in out[1]
    assert "--gpus" in out[2] and "positive" in out[2], out[2]

    job_cell = nb.cells[3]
    results = [o for o in job_cell.outputs if o["output_type"] == "execute_result"]
    assert len(results) == 1, job_cell.outputs
    assert WIDGET_MIME in results[0]["data"], results[0]["data"].keys()
    assert results[0]["data"]["text/plain"].startswith("GpuJob(")
    assert (work / ".gpuqueue" / "cells" / "digits-cell.py").read_text().count("runpy.run_path") == 1

    assert "STATE Succeeded digits-cell" in out[4], out[4]
    assert "COST True 0" in out[4] and "LOG True" in out[4], out[4]
    assert "GpuJob(" in out[4] and "Succeeded" in out[4]
    assert "WIDGET True True True True" in out[4], out[4]  # the widget followed the job

    result = json.loads((work / "results" / "digits.json").read_text())
    assert result["epochs"] == 3 and result["accuracy"] > 0.8
    assert result["devices"]  # CUDA_VISIBLE_DEVICES was set to the assigned GPU

    assert "digits-cell" in out[5] and "Succeeded" in out[5], out[5]
    assert "test accuracy" in out[6], out[6]
    assert "name" in out[7] and "no-such-job" in out[7], out[7]

    # our options anywhere; the others stay with the script
    assert "LINE Succeeded line-job" in out[8], out[8]
    assert "hello ['world', '--no-such-flag']" in out[8], out[8]

    # only the real jobs reached the server
    r = await jp_fetch("gpuqueue", "api", "workloads")
    names = [w["name"] for w in json.loads(r.body)["items"]]
    assert names == ["line-job", "digits-cell"]
    # and the refused cells left no files behind
    assert sorted(p.name for p in (work / ".gpuqueue" / "cells").iterdir()) == ["digits-cell.py"]


class WebsocketBlockedClient(GpuQueueClient):
    """A real client behind a proxy that refuses websockets."""

    def events(self, timeout=None):
        raise ServerUnavailable("websocket upgrade refused by a proxy")


class FlakyLogsClient(WebsocketBlockedClient):
    """A real client, no websocket, whose first two log reads fail with an error nobody foresaw."""

    failures = 0

    def logs(self, *args, **kwargs):
        if self.failures < 2:
            self.failures += 1
            raise RuntimeError("an unforeseen error")
        return super().logs(*args, **kwargs)


async def test_gpujob_watcher_outlives_an_unforeseen_error(gpuqueue_env):
    """The widget's watcher thread shows an error of one poll and goes on: the job's output and
    final state still arrive (a thread that died would leave the widget frozen)."""
    client = FlakyLogsClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    code = "import time; print('still here', flush=True); time.sleep(3)"
    wl = await asyncio.to_thread(client.submit, {"command": [sys.executable, "-c", code], "maxRuntime": "2m"})
    job = GpuJob(client, wl)
    try:
        assert await asyncio.to_thread(job.wait, 60) == "Succeeded"
        for _ in range(100):
            if "still here" in job.widget.log.value:
                break
            await asyncio.sleep(0.1)
        assert client.failures == 2  # both failures happened, in the watcher
        assert "still here" in job.widget.log.value
        assert "Succeeded" in job.widget.header.value
    finally:
        job.close()


async def test_gpujob_falls_back_to_polling_and_cancels_from_the_widget(gpuqueue_env):
    client = WebsocketBlockedClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    code = "import time; print('polled', flush=True); time.sleep(0.5)"
    wl = await asyncio.to_thread(client.submit, {"command": [sys.executable, "-c", code], "maxRuntime": "2m"})
    job = GpuJob(client, wl)
    # job.wait() blocks: run it off the server's event loop
    assert await asyncio.to_thread(job.wait, 60) == "Succeeded"
    assert job.info["exitCode"] == 0 and job.cost_usd > 0
    for _ in range(100):
        if "polled" in job.widget.log.value:
            break
        await asyncio.sleep(0.1)
    assert "polled" in job.widget.log.value
    assert "Succeeded" in job.widget.header.value

    sleeper = await asyncio.to_thread(
        client.submit, {"command": [sys.executable, "-c", "import time; time.sleep(60)"], "maxRuntime": "2m"}
    )
    job2 = GpuJob(client, sleeper)
    await asyncio.to_thread(job2.widget.cancel_button.click)
    assert job2.state == "Cancelled"
    assert await asyncio.to_thread(job2.wait, 30) == "Cancelled"
    assert job2.widget.cancel_button.disabled
    assert "Cancelled" in repr(job2)
    job.close()
    job2.close()


async def test_gpujob_widget_and_handle_show_the_estimated_start(gpuqueue_env, tmp_path):
    """A %%gpujob cell that has to wait: the widget says when it starts and what it waits for, and
    ``_gpujob.estimated_start`` is a timezone-aware datetime (issue 14)."""
    client = GpuQueueClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    blocker = await asyncio.to_thread(client.submit, {
        "name": "h100-blocker", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100",
        "command": [sys.executable, "-c", "import time; time.sleep(600)"], "maxRuntime": "10m"})
    work = tmp_path / "work"
    work.mkdir()
    try:
        for _ in range(100):
            if (await asyncio.to_thread(client.get, "team-b", "h100-blocker"))["state"] == "Running":
                break
            await asyncio.sleep(0.2)
        cells = [
            new_code_cell("%load_ext jupyter_gpuqueue"),
            new_code_cell(
                "%%gpujob --gpus 1 --flavor nvidia-h100 --queue team-b/team-b-queue --max-runtime 5m --name waits-cell\n"
                "print('ran')"
            ),
            new_code_cell(
                "import time, datetime\n"
                "job = _gpujob\n"
                "deadline = time.time() + 60\n"
                "while job.estimated_start is None and time.time() < deadline:\n"
                "    time.sleep(0.5)\n"
                "    job.refresh()\n"
                "est = job.estimated_start\n"
                "ahead = (est - datetime.datetime.now(datetime.timezone.utc)).total_seconds()\n"
                "print('STATE', job.state)\n"
                "print('AWARE', est.tzinfo is not None and est.utcoffset() is not None)\n"
                "print('AHEAD', 400 < ahead < 660)\n"
                "early, late = job.estimated_start_range\n"
                "print('RANGE', early <= est <= late)\n"
                "wf = job.waiting_for[0]\n"
                "print('WAITING', wf['namespace'], wf['name'], wf['summary'], wf['kind'], wf['expected_end'].tzinfo is not None)\n"
                "while 'Starts' not in job.widget.details.value and time.time() < deadline:\n"
                "    time.sleep(0.2)\n"
                "details = job.widget.details.value\n"
                "print('WIDGET', 'starts in ~' in details, 'from your team-b/h100-blocker (ends ~' in details,\n"
                "      'cannot foresee' in details)\n"
                "print(repr(job))\n"
                "job.cancel()\n"
                "print('AFTER', job.state, job.estimated_start, job.waiting_for, job.estimated_start_range)\n"
                "print('COST', 'Cost so far' not in job.widget.details.value)"
            ),
        ]
        nb = await run_notebook(cells, work, gpuqueue_env, timeout=120)
        out = text_of(nb.cells[2])
        assert "STATE Pending" in out, out
        assert "AWARE True" in out and "AHEAD True" in out and "RANGE True" in out, out
        assert "WAITING team-b h100-blocker 4 × nvidia-h100 running True" in out, out
        assert "WIDGET True True True" in out, out
        assert re.search(r"GpuJob\(team-b/waits-cell: Pending, position 1 .*starts in ~\d+ min", out), out
        assert "AFTER Cancelled None [] None" in out, out
        assert "COST True" in out, out
    finally:
        await asyncio.to_thread(client.cancel, blocker["namespace"], blocker["name"])
