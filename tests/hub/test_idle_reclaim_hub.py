"""Idle notebook GPU reclaim with a real JupyterHub, configurable-http-proxy, the gpuqueue hub
service and the shipped example configuration (jupyterhub_config/local/, spawner.py included).

The service reads the servers' ``last_activity`` from the Hub API with its own token (the
``gpuqueue-service`` role: ``read:users:activity``, ``read:servers``). Timeouts are seconds here
(``--GpuQueueApp.idle_timeout_minimum_seconds=1``; the Hub is read every 0.5 s) instead of minutes.

alice's A100 server is idle: the admin turns the policy on for team-a; the lease is warned
(``idleDeadline``, read through alice's own server as JupyterLab reads it), alice keeps it once
through her server, activity reported to the Hub keeps it alive, then with no keep left it is
released: the spawner stops her server and alice's queued 4-GPU job gets the GPUs at once. The
GPU-hours reclaimed are in the teams report and in Prometheus.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest


def _hub_helpers():
    import importlib.util

    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == str(Path(__file__).with_name("conftest.py")):
            return mod
    spec = importlib.util.spec_from_file_location("gpuqueue_hub_conftest", Path(__file__).with_name("conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_h = _hub_helpers()
chp_path, start_hub, stop_hub = _h.chp_path, _h.start_hub, _h.stop_hub

pytestmark = pytest.mark.slow

PY = sys.executable
TIMEOUT, WARN = 4, 4  # seconds of idleness before the warning, and of warning before the release

EXTRA_CONFIG = """
c.QueuedLocalSpawner.gpuqueue_poll_interval = 0.5
c.QueuedLocalSpawner.gpuqueue_lease_watch_interval = 0.5
c.QueuedLocalSpawner.poll_interval = 15
for service in c.JupyterHub.services:
    if service["name"] == "gpuqueue":
        service["command"] += ["--GpuQueueApp.idle_timeout_minimum_seconds=1",
                               "--GpuQueueApp.idle_activity_interval=0.5"]
"""


@pytest.fixture(scope="module")
def ihub(tmp_path_factory):
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    h = start_hub(tmp_path_factory.mktemp("ihub"), extra_config=EXTRA_CONFIG,
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
        time.sleep(0.2)


def _report_activity(hub, token):
    """What jupyterhub-singleuser does after a kernel execution: POST the server's activity."""
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    r = hub.request("POST", "hub/api/users/alice/activity", token,
                    json={"last_activity": now, "servers": {"": {"last_activity": now}}})
    assert r.status_code in (200, 204), r.text


def test_idle_notebook_is_warned_kept_then_released_and_its_gpus_go_to_the_queued_job(ihub):
    alice, bob, ada = ihub.token_for("alice"), ihub.token_for("bob"), ihub.token_for("ada")
    # Only admins set the policy; bad input is a 400 naming the field, and changes nothing.
    assert ihub.queue("PUT", "admin/idle-policy/team-a", alice, json={"idleTimeoutSeconds": 60}).status_code == 403
    for body, field in [({"idleTimeoutSeconds": 0}, "idleTimeoutSeconds"), ({"idle": 60}, "idle"),
                        ({"idleTimeoutSeconds": 60, "maxKeeps": -1}, "maxKeeps")]:
        r = ihub.queue("PUT", "admin/idle-policy/team-a", ada, json=body)
        assert r.status_code == 400 and r.json()["field"] == field, (body, r.text)
    assert ihub.queue("PUT", "admin/idle-policy/nowhere", ada, json={"idleTimeoutSeconds": 60}).status_code == 404
    assert ihub.queue("GET", "admin/idle-policy", ada).json()["teams"][0]["stored"] is False

    # team-b uses its own 2 A100s: team-a has exactly its 4.
    r = ihub.queue("POST", "workloads", bob, json={
        "name": "b-holder", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    r = ihub.api("POST", "users/alice/server", json={"user_options": {"profile": "a100"}}, timeout=60)
    assert r.status_code in (201, 202), r.text
    ihub.start_server("alice")
    (lease,) = [w for w in ihub.queue("GET", "workloads?mine=true", alice).json()["items"]
                if w["kind"] == "NotebookLease" and w["state"] == "Running"]
    path = f"workloads/team-a/{lease['name']}"
    assert lease["idleKeepsLeft"] is None and lease["idleDeadline"] is None  # off by default
    # alice's 4-GPU job, at the lease's priority (no preemption): it waits for the lease's GPU.
    r = ihub.queue("POST", "workloads", alice, json={
        "name": "big", "command": [PY, "-c", "print('big')"], "gpus": 4, "flavor": "nvidia-a100",
        "priorityClass": "development", "maxRuntime": "5m"})
    assert r.status_code == 201, r.text

    r = ihub.queue("PUT", "admin/idle-policy/team-a", ada,
                   json={"idleTimeoutSeconds": TIMEOUT, "warnSeconds": WARN, "maxKeeps": 1})
    assert r.status_code == 200, r.text
    audit = ihub.queue("GET", "admin/audit", ada).json()["items"][0]
    assert (audit["operation"], audit["target"], audit["actor"]) == ("set-idle-policy", "namespace/team-a", "ada")

    # What JupyterLab reads: alice's own server, forwarding to the service.
    def mine():
        r = ihub.request("GET", "user/alice/gpuqueue/api/workloads?mine=true", alice)
        assert r.status_code == 200, r.text
        return {w["name"]: w for w in r.json()["items"]}[lease["name"]]

    warned = _wait(lambda: (lambda w: w if w["idleDeadline"] else None)(mine()), 30,
                   "the idle lease was not warned", ihub)
    assert warned["state"] == "Running" and warned["idleKeepsLeft"] == 1
    assert warned["idleDeadline"] - time.time() <= WARN + 1
    # Only alice keeps it, through her own server as the "Keep my GPU" button does.
    assert ihub.queue("POST", f"{path}/keep-gpu", bob).status_code == 403
    r = ihub.request("POST", f"user/alice/gpuqueue/api/{path}/keep-gpu", alice)
    assert r.status_code == 200, r.text
    assert r.json()["idleDeadline"] is None and r.json()["idleKeepsLeft"] == 0
    r = ihub.request("POST", f"user/alice/gpuqueue/api/{path}/keep-gpu", alice)
    assert r.status_code == 409 and "no idle warning" in r.json()["message"]

    # Activity reported to the Hub (a kernel execution) keeps it from being idle.
    t_end = time.monotonic() + TIMEOUT + 3
    while time.monotonic() < t_end:
        _report_activity(ihub, alice)
        assert ihub.queue("GET", path, alice).json()["idleDeadline"] is None
        time.sleep(0.5)

    # Idle again, no keep left: warned, then released at the deadline.
    warned = _wait(lambda: (lambda w: w if w["idleDeadline"] else None)(ihub.queue("GET", path, alice).json()),
                   TIMEOUT + 10, "no second warning", ihub)
    assert warned["idleKeepsLeft"] == 0
    r = ihub.queue("POST", f"{path}/keep-gpu", alice)
    assert r.status_code == 409 and "no keeps left" in r.json()["message"]
    assert ihub.queue("GET", "workloads/team-a/big", alice).json()["state"] == "Pending"
    done = _wait(lambda: (lambda w: w if w["state"] != "Running" else None)(ihub.queue("GET", path, alice).json()),
                 WARN + 10, "the idle lease was not released", ihub)
    assert (done["state"], done["reason"]) == ("Succeeded", "IdleReclaimed"), done
    assert done["finishedAt"] == pytest.approx(warned["idleDeadline"], abs=1.0)
    assert "idle notebook reclaim" in done["message"]
    # Its GPU goes to the queued job at once, and the spawner stops the server (its lease watch).
    big = _wait(lambda: (lambda w: w if w["state"] in ("Running", "Succeeded") else None)(
        ihub.queue("GET", "workloads/team-a/big", alice).json()), 10, "the queued job did not start", ihub)
    assert big["admittedAt"] - done["finishedAt"] < 2.0
    _wait(lambda: ihub.request("GET", "user/alice/api/status", alice).status_code != 200, 10,
          "alice's server still answers after its lease was reclaimed", ihub)

    # Reported: Costs' teams report and Prometheus.
    teams = {t["namespace"]: t for t in ihub.queue("GET", "reports/teams", alice).json()["items"]}
    hours = teams["team-a"]["idleReclaimedGpuHours"]
    assert teams["team-a"]["idleReclaims"] == 1 and hours > 7.9  # 1 A100 × ~8 h of its lease left
    assert teams["team-b"]["idleReclaimedGpuHours"] == 0
    metrics = ihub.request("GET", "services/gpuqueue/gpuqueue/metrics", alice).text
    line = next(x for x in metrics.splitlines() if x.startswith('gpuqueue_idle_reclaimed_gpu_hours{namespace="team-a"}'))
    assert float(line.split()[-1]) == pytest.approx(hours, rel=1e-6)
    assert ihub.queue("DELETE", "workloads/team-b/b-holder", bob).status_code == 200
    assert ihub.queue("DELETE", "admin/idle-policy/team-a", ada).status_code == 200
