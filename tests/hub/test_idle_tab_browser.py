"""Issue 31 item 5, end to end: a real JupyterHub (configurable-http-proxy, the gpuqueue service, the
shipped example configuration with its queued spawner), alice logged in through the hub's login
form in headless Chromium, JupyterLab open on her A100 server with the GPU Queue panel.

- **A kernel busy in a loop keeps the GPU.** A notebook cell ``while True: time.sleep(0.5)``, run
  from JupyterLab (its toolbar's Run button), keeps the lease well past the team's idle timeout plus its
  warning: never warned, never released.
- **An open tab does not.** The loop is interrupted; the tab stays open, polling the server's
  REST API (kernels, sessions, contents, the queue panel) all along — the Hub's ``last_activity``
  of the server moves with it (``JUPYTERHUB_ACTIVITY_INTERVAL=1`` here: the Hub hears of it every
  second, checked) — and still the lease is warned after the timeout and released at the
  deadline; the spawner stops the server.

The server reports its own activity (server/activity.py, every second here); the service counts
only that for its lease (service/idle.py). Seconds stand for an admin's minutes
(``idle_timeout_minimum_seconds=1``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from hubtools import chp_path, start_hub, stop_hub

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("GPUQUEUE_CHROMIUM", "/usr/bin/chromium")
PY = sys.executable
TIMEOUT, WARN = 6, 4  # seconds of idleness before the warning, and of warning before the release
DEMO_PASSWORD = "gpuqueue-demo"

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(420)]

EXTRA_CONFIG = """
c.QueuedLocalSpawner.gpuqueue_poll_interval = 0.5
c.QueuedLocalSpawner.gpuqueue_lease_watch_interval = 0.5
c.Spawner.environment = {**c.Spawner.environment, "GPUQUEUE_LEASE_WATCH_INTERVAL": "0.5",
                         "GPUQUEUE_ACTIVITY_INTERVAL": "1",
                         # the Hub hears of the server's API requests every second (300 s by default)
                         "JUPYTERHUB_ACTIVITY_INTERVAL": "1"}
for service in c.JupyterHub.services:
    if service["name"] == "gpuqueue":
        service["command"] += ["--GpuQueueApp.idle_timeout_minimum_seconds=1",
                               "--GpuQueueApp.idle_activity_interval=0.5"]
"""

LOOP_NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "id": "loop", "metadata": {}, "outputs": [],
               "source": "import time\nwhile True:\n    time.sleep(0.5)"}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _skip_reason():
    if chp_path() is None:
        return "configurable-http-proxy (npm) is not installed; scripts/test.sh installs it"
    if not os.path.exists(CHROMIUM):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set GPUQUEUE_CHROMIUM)"
    if not (REPO / "jupyter_gpuqueue" / "labextension" / "static" / "style.js").exists():
        return "the labextension is not built: pip install -e ."
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (Python) is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="module")
def thub(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    h = start_hub(tmp_path_factory.mktemp("thub"), extra_config=EXTRA_CONFIG,
                  env={"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)})
    yield h
    stop_hub(h)


def _wait(pred, timeout, what, hub):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}\n{hub.log_tail()}"
        time.sleep(0.25)


def _reports_logged(hub, lease_name) -> int:
    """How many activity reports of alice's server the service has answered (its access log)."""
    needle = f"200 POST /services/gpuqueue/gpuqueue/api/workloads/team-a/{lease_name}/activity "
    return hub.log_path.read_text(errors="replace").count(needle)


def _server_last_activity(hub) -> float:
    from jupyter_gpuqueue.service.idle import parse_timestamp

    return parse_timestamp(hub.api("GET", "users/alice").json()["servers"][""]["last_activity"]) or 0.0


def test_an_open_tab_does_not_keep_an_idle_gpu_and_a_busy_kernel_does(thub):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    alice, bob, ada = thub.token_for("alice"), thub.token_for("bob"), thub.token_for("ada")
    # team-b uses its own 2 A100s: team-a has exactly its 4.
    r = thub.queue("POST", "workloads", bob, json={
        "name": "b-holder", "command": [PY, "-c", "import time; time.sleep(400)"],
        "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    try:
        r = thub.api("POST", "users/alice/server", json={"user_options": {"profile": "a100"}}, timeout=60)
        assert r.status_code in (201, 202), r.text
        thub.start_server("alice")
        (lease,) = [w for w in thub.queue("GET", "workloads?mine=true", alice).json()["items"]
                    if w["kind"] == "NotebookLease" and w["state"] == "Running"]
        path = f"workloads/team-a/{lease['name']}"
        r = thub.request("PUT", "user/alice/api/contents/loop.ipynb", alice,
                         json={"type": "notebook", "format": "json", "content": LOOP_NOTEBOOK})
        assert r.status_code in (200, 201), r.text
        # The notebook's kernel runs already (as after a reload: JupyterLab connects to it, no
        # "Select Kernel" dialog); no news toast over the page.
        r = thub.request("POST", "user/alice/api/sessions", alice, json={
            "path": "loop.ipynb", "name": "loop.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
        assert r.status_code == 201, r.text
        r = thub.request("PUT", "user/alice/lab/api/settings/@jupyterlab/apputils-extension:notification", alice,
                         json={"raw": json.dumps({"fetchNews": "false", "checkForUpdates": False})})
        assert r.status_code == 204, r.text

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60000)
            try:
                # Logged in through the hub's form, as alice would; then her JupyterLab.
                page.goto(thub.url + "hub/login?next=%2Fuser%2Falice%2Flab%2Ftree%2Floop.ipynb")
                page.fill("#username_input", "alice")
                page.fill("#password_input", DEMO_PASSWORD)
                page.click("#login_submit")
                notebook = page.locator(".jp-NotebookPanel")
                notebook.wait_for(timeout=120000)
                idle_kernel = page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']")
                idle_kernel.wait_for(timeout=120000)
                tab = page.locator('.lm-TabBar-tab[data-id="jp-gpuqueue-panel"]')
                tab.wait_for(timeout=60000)
                if not page.locator("#jp-gpuqueue-panel").is_visible():
                    tab.click()  # the panel polls too
                expect(page.locator("#jp-gpuqueue-panel .jp-gpuqueue-conn-live")).to_be_visible()

                # Run the loop from JupyterLab: its cell selected, the toolbar's Run button (again
                # if a click came before the page took it: the prompt says [*] once it runs).
                cell = page.locator(".jp-NotebookPanel .jp-Cell").first
                prompt = cell.locator(".jp-InputPrompt")
                run = page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']")
                dialog = page.locator(".jp-Dialog")
                deadline = time.monotonic() + 90
                while "[*]" not in prompt.inner_text():
                    assert time.monotonic() < deadline, f"the cell does not run: prompt {prompt.inner_text()!r}"
                    try:
                        if dialog.is_visible():  # JupyterLab asks which kernel: the notebook's
                            dialog.locator(".jp-mod-accept").click(timeout=5000)
                        prompt.click(timeout=5000)
                        run.first.click(timeout=5000)
                        expect(prompt).to_contain_text("[*]", timeout=10000)
                    except (AssertionError, PlaywrightTimeout):
                        pass

                # (The prompt says whether the cell runs: jupyter_server's execution_state of the
                # kernel also follows other requests' status, and said "idle" while the loop ran.)
                # The server has told the queue since (two of its reports, read from the hub's log).
                reports = _reports_logged(thub, lease["name"])
                _wait(lambda: _reports_logged(thub, lease["name"]) >= reports + 2, 60,
                      "alice's server does not report its activity", thub)
                r = thub.queue("PUT", "admin/idle-policy/team-a", ada, json={
                    "idleTimeoutSeconds": TIMEOUT, "warnSeconds": WARN, "maxKeeps": 0,
                    "utilizationBelowPercent": None})
                assert r.status_code == 200, r.text

                # The busy kernel keeps the GPU, well past the timeout and the warning.
                t_end = time.monotonic() + 2 * (TIMEOUT + WARN)
                while time.monotonic() < t_end:
                    w = thub.queue("GET", path, alice).json()
                    assert w["state"] == "Running" and w["idleDeadline"] is None, w
                    time.sleep(0.5)
                assert "[*]" in prompt.inner_text(), "the loop does not run any more"

                # Interrupted: the tab stays open and polls; the lease is warned, then released.
                page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']").first.click(
                    timeout=30000)
                expect(prompt).to_contain_text("[1]", timeout=30000)  # the loop ended (KeyboardInterrupt)
                stopped = time.time()
                warned = _wait(lambda: (lambda w: w if w["idleDeadline"] else None)(
                    thub.queue("GET", path, alice).json()), TIMEOUT + 30, "the idle lease was not warned", thub)
                assert warned["idleSince"] >= stopped - 3, (warned["idleSince"], stopped)
                # The Hub heard of activity since (the tab's polling): it would have kept the GPU.
                assert _server_last_activity(thub) > warned["idleSince"] + 2, (
                    "the open tab did not move the Hub's last_activity: the test proves nothing")
                # The warning is shown in the open tab.
                toast = page.locator(".Toastify__toast", has_text="Idle notebook")
                expect(toast).to_be_visible(timeout=20000)
                done = _wait(lambda: (lambda w: w if w["state"] != "Running" else None)(
                    thub.queue("GET", path, alice).json()), WARN + 20, "the idle lease was not released", thub)
                assert (done["state"], done["reason"]) == ("Succeeded", "IdleReclaimed"), done
                assert _server_last_activity(thub) > done["idleSince"] + TIMEOUT
                _wait(lambda: thub.request("GET", "user/alice/api/status", alice).status_code != 200, 30,
                      "alice's server still answers after its lease was reclaimed", thub)
            except BaseException:
                page.screenshot(path=str(thub.state / "failed.png"))  # (next to the hub's log)
                raise
            finally:
                browser.close()
    finally:
        thub.queue("DELETE", "workloads/team-b/b-holder", bob)
        thub.queue("DELETE", "admin/idle-policy/team-a", ada)
        thub.stop_server("alice")

