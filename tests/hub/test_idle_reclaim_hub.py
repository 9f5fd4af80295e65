"""Idle notebook GPU reclaim with a real JupyterHub, configurable-http-proxy, the gpuqueue hub
service and the shipped example configuration (jupyterhub_config/local/, spawner.py included).

Each user's server reports its own activity to the service (server/activity.py, every 0.5 s
here: ``GPUQUEUE_ACTIVITY_INTERVAL``): a kernel executing, terminal input; the Hub's
``last_activity`` (which every API request moves) is not used for such a server. Timeouts are
seconds here (``--GpuQueueApp.idle_timeout_minimum_seconds=1``) instead of minutes.

alice's A100 server is idle: the admin turns the policy on for team-a; the lease is warned
(``idleDeadline``, read through alice's own server as JupyterLab reads it), alice keeps it once
through her server, a kernel executing a cell keeps it alive, then with no keep left it is
released although the Hub is told of activity all along (as an open tab's polling tells it): the
spawner stops her server and alice's queued 4-GPU job gets the GPUs at once. The GPU-hours
reclaimed are in the teams report and in Prometheus. (An open JupyterLab tab in Chromium:
test_idle_tab_browser.py.)

With ``onIdle: "release"`` the server goes on without its GPU instead: the lease ends (the queued
job starts at once), the server still answers, the kernel that held the GPU is shut down, and a
kernel started afterwards has no device in its environment (read from /proc of its process).

Named servers (``c.JupyterHub.allow_named_servers``): two servers of alice hold a lease each
(named after the server); stopping one releases only its lease; a server stopped while the queue
service was down has its lease, and only its lease, released by the service when it starts again.
"""

from __future__ import annotations

import json
import os
import re
import signal
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
# A release the queue cannot take is not retried: only the queue's reconcile at its start ends it.
c.QueuedLocalSpawner.gpuqueue_release_retry_seconds = 0
c.JupyterHub.allow_named_servers = True
# The servers' extension looks at their lease every 0.5 s (10 s by default).
c.Spawner.environment = {**c.Spawner.environment, "GPUQUEUE_LEASE_WATCH_INTERVAL": "0.5",
                         # ... and report their activity to the queue every 0.5 s (30 s by default)
                         "GPUQUEUE_ACTIVITY_INTERVAL": "0.5"}
# JupyterHub notices a managed service that exited (and starts it again) at its next poll, every
# 30 s by default: every second here.
from jupyterhub.services.service import _ServiceSpawner
_ServiceSpawner.poll_interval = 1.0
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
    assert ihub.queue("POST", f"{path}/keep-gpu", bob).status_code == 404  # another team's: as a missing one
    r = ihub.request("POST", f"user/alice/gpuqueue/api/{path}/keep-gpu", alice)
    assert r.status_code == 200, r.text
    assert r.json()["idleDeadline"] is None and r.json()["idleKeepsLeft"] == 0
    r = ihub.request("POST", f"user/alice/gpuqueue/api/{path}/keep-gpu", alice)
    assert r.status_code == 409 and "no idle warning" in r.json()["message"]

    # A kernel executing a cell that runs longer than the timeout keeps it from being idle.
    kid, _env = _start_kernel(ihub, alice)
    ws = _execute(ihub, alice, kid, f"import time; time.sleep({TIMEOUT + 4})")
    try:
        _wait(lambda: _kernel_state(ihub, alice, kid) == "busy", 30, "the cell does not run", ihub)
        t_end = time.monotonic() + TIMEOUT + 2
        while time.monotonic() < t_end:
            assert ihub.queue("GET", path, alice).json()["idleDeadline"] is None
            time.sleep(0.5)
        _wait(lambda: _kernel_state(ihub, alice, kid) == "idle", 30, "the cell does not end", ihub)
    finally:
        ws.close()

    # Idle again, no keep left: warned, then released at the deadline, although the Hub hears of
    # activity all along (what an open tab's polling tells it): alice's server reports its own.
    def warned_while_the_hub_hears_activity():
        _report_activity(ihub, alice)
        w = ihub.queue("GET", path, alice).json()
        return w if w["idleDeadline"] else None

    warned = _wait(warned_while_the_hub_hears_activity, TIMEOUT + 15, "no second warning", ihub)
    assert warned["idleKeepsLeft"] == 0
    r = ihub.queue("POST", f"{path}/keep-gpu", alice)
    assert r.status_code == 409 and "no keeps left" in r.json()["message"]
    assert ihub.queue("GET", "workloads/team-a/big", alice).json()["state"] == "Pending"
    def released_while_the_hub_hears_activity():
        _report_activity(ihub, alice)
        w = ihub.queue("GET", path, alice).json()
        return w if w["state"] != "Running" else None

    done = _wait(released_while_the_hub_hears_activity, WARN + 10, "the idle lease was not released", ihub)
    assert (done["state"], done["reason"]) == ("Succeeded", "IdleReclaimed"), done
    assert done["finishedAt"] == pytest.approx(warned["idleDeadline"], abs=1.0)
    assert done["idleSince"] == pytest.approx(warned["idleSince"], abs=1.5)  # the cell's end
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
    metrics = ihub.request("GET", "services/gpuqueue/gpuqueue/metrics", ada).text  # queue admins only
    line = next(x for x in metrics.splitlines() if x.startswith('gpuqueue_idle_reclaimed_gpu_hours{namespace="team-a"}'))
    assert float(line.split()[-1]) == pytest.approx(hours, rel=1e-6)
    assert ihub.queue("DELETE", "workloads/team-b/b-holder", bob).status_code == 200
    assert ihub.queue("DELETE", "admin/idle-policy/team-a", ada).status_code == 200


def _kernel_env(kernel_id):
    """The environment of the kernel process ``kernel_id`` (its connection file is on its command
    line), None when no such process runs."""
    needle = f"kernel-{kernel_id}.json".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        return dict(kv.decode(errors="replace").split("=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    return None


def _start_kernel(hub, token, server_path="user/alice/"):
    r = hub.request("POST", f"{server_path}api/kernels", token, json={"name": "python3"})
    assert r.status_code == 201, r.text
    kid = r.json()["id"]
    return kid, _wait(lambda: _kernel_env(kid), 30, f"kernel {kid} did not start", hub)


def _execute(hub, token, kernel_id, code, server_path="user/alice/"):
    """Send ``code`` to the kernel as JupyterLab does (an ``execute_request`` on its websocket,
    jupyter_server's JSON protocol); returns the open websocket (close it when done)."""
    import uuid

    import websocket

    ws = websocket.create_connection(
        f"{hub.url.replace('http', 'ws', 1)}{server_path}api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {token}"], timeout=30)
    session = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": uuid.uuid4().hex, "username": "alice", "session": session,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": datetime.now(timezone.utc).isoformat()},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    return ws


def _kernel_state(hub, token, kernel_id, server_path="user/alice/"):
    r = hub.request("GET", f"{server_path}api/kernels/{kernel_id}", token)
    return r.json().get("execution_state") if r.status_code == 200 else None


def _leases(hub, token, state="Running"):
    return [w for w in hub.queue("GET", "workloads?mine=true", token).json()["items"]
            if w["kind"] == "NotebookLease" and (state is None or w["state"] == state)]


def _hold_team_b(hub):
    """team-b uses its own 2 A100s: team-a has exactly its 4 (no borrowing)."""
    bob = hub.token_for("bob")
    r = hub.queue("POST", "workloads", bob, json={
        "name": "b-holder2", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    return lambda: hub.queue("DELETE", "workloads/team-b/b-holder2", bob)


def test_idle_release_keeps_the_server_running_without_its_gpu(ihub):
    alice, ada = ihub.token_for("alice"), ihub.token_for("ada")
    release_b = _hold_team_b(ihub)
    try:
        r = ihub.api("POST", "users/alice/server", json={"user_options": {"profile": "a100"}}, timeout=60)
        assert r.status_code in (201, 202), r.text
        ihub.start_server("alice")
        (lease,) = _leases(ihub, alice)
        assert lease["notebookServer"] == {"name": "", "goesOnWithoutGpus": True}
        path = f"workloads/team-a/{lease['name']}"
        # A kernel started while the lease holds the GPU has it.
        k1, env1 = _start_kernel(ihub, alice)
        assert env1["CUDA_VISIBLE_DEVICES"] == lease["visibleDevices"] != ""
        assert env1["GPUQUEUE_LEASE"] == f"team-a/{lease['name']}"
        r = ihub.queue("POST", "workloads", alice, json={
            "name": "big2", "command": [PY, "-c", "print('big')"], "gpus": 4, "flavor": "nvidia-a100",
            "priorityClass": "development", "maxRuntime": "5m"})
        assert r.status_code == 201, r.text

        r = ihub.queue("PUT", "admin/idle-policy/team-a", ada, json={
            "idleTimeoutSeconds": TIMEOUT, "warnSeconds": 2, "maxKeeps": 0, "onIdle": "release"})
        assert r.status_code == 200, r.text
        assert next(t for t in r.json()["teams"] if t["namespace"] == "team-a")["policy"]["onIdle"] == "release"
        warned = _wait(lambda: (lambda w: w if w["idleDeadline"] else None)(ihub.queue("GET", path, alice).json()),
                       TIMEOUT + 10, "the idle lease was not warned", ihub)
        assert warned["idleAction"] == "release" and warned["idleSince"] is not None
        done = _wait(lambda: (lambda w: w if w["state"] != "Running" else None)(ihub.queue("GET", path, alice).json()),
                     15, "the idle lease was not released", ihub)
        assert (done["state"], done["reason"], done["idleAction"]) == ("Succeeded", "IdleReclaimed", "release"), done
        assert "the notebook server goes on without GPUs" in done["message"]
        # Its GPU goes to the queued job at once ...
        big = _wait(lambda: (lambda w: w if w["state"] in ("Running", "Succeeded") else None)(
            ihub.queue("GET", "workloads/team-a/big2", alice).json()), 10, "the queued job did not start", ihub)
        assert big["admittedAt"] - done["finishedAt"] < 2.0
        # ... the server goes on (the spawner's lease watch looks every 0.5 s) ...
        time.sleep(2)
        assert ihub.request("GET", "user/alice/api/status", alice).status_code == 200, "the server was stopped"
        assert ihub.api("GET", "users/alice").json()["servers"][""]["ready"]
        # ... and the kernel that held the GPU is shut down.
        _wait(lambda: k1 not in [k["id"] for k in ihub.request("GET", "user/alice/api/kernels", alice).json()], 15,
              "the kernel that held the GPU still runs", ihub)
        _wait(lambda: _kernel_env(k1) is None, 10, "the kernel process that held the GPU is still there", ihub)
        # A kernel started now sees no GPU.
        k2, env2 = _start_kernel(ihub, alice)
        assert env2["CUDA_VISIBLE_DEVICES"] == "" and env2["NVIDIA_VISIBLE_DEVICES"] == "void", env2
        assert "GPUQUEUE_LEASE" not in env2 and env2["GPUQUEUE_LEASE_RELEASED"] == f"team-a/{lease['name']}"
        # JupyterLab finds this server's lease in its page config (the notice after a reload).
        page = ihub.request("GET", "user/alice/lab", alice).text
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S).group(1))
        assert config["gpuqueueLease"] == f"team-a/{lease['name']}"
        ihub.request("DELETE", f"user/alice/api/kernels/{k2}", alice)
    finally:
        release_b()
        ihub.queue("DELETE", "workloads/team-a/big2", alice)
        ihub.queue("DELETE", "admin/idle-policy/team-a", ada)
        ihub.stop_server("alice")


def _start_named(hub, user, name, profile="a100", timeout=60.0):
    r = hub.api("POST", f"users/{user}/servers/{name}", json={"user_options": {"profile": profile}}, timeout=60)
    assert r.status_code in (201, 202), r.text
    return _wait(lambda: ((hub.api("GET", f"users/{user}").json().get("servers") or {}).get(name) or {}).get("ready"),
                 timeout, f"{user}'s server {name} not ready", hub)


def _service_pid(hub):
    """The pid of this hub's gpuqueue service process (its environment names the hub's state)."""
    want = f"GPUQUEUE_HUB_STATE={hub.state}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"gpuqueue_service_config.py" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    return int(pid)
        except OSError:
            continue
    return None


def test_named_servers_hold_a_lease_each_and_release_only_their_own(ihub):
    alice = ihub.token_for("alice")
    try:
        for name in ("exp1", "exp2"):
            _start_named(ihub, "alice", name)
        leases = {w["notebookServer"]["name"]: w for w in _leases(ihub, alice)}
        assert sorted(leases) == ["exp1", "exp2"], leases
        assert leases["exp1"]["name"].startswith("notebook-exp1-") and leases["exp2"]["name"].startswith("notebook-exp2-")
        assert leases["exp1"]["visibleDevices"] != leases["exp2"]["visibleDevices"]
        assert all(w["pricePerHourUsd"] > 0 for w in leases.values())  # each billed
        # Stopping exp1 releases its lease only.
        r = ihub.api("DELETE", "users/alice/servers/exp1")
        assert r.status_code in (202, 204), r.text
        _wait(lambda: ihub.queue("GET", f"workloads/team-a/{leases['exp1']['name']}", alice).json()["state"]
              != "Running", 20, "exp1's lease was not released", ihub)
        assert ihub.queue("GET", f"workloads/team-a/{leases['exp2']['name']}", alice).json()["state"] == "Running"
        assert ihub.request("GET", "user/alice/exp2/api/status", alice).status_code == 200

        # exp1 again; then exp1 stops while the queue service is down (its release cannot reach
        # it and is not retried here): the service, started again by the hub, releases exp1's
        # lease and keeps exp2's.
        _start_named(ihub, "alice", "exp1")
        again = {w["notebookServer"]["name"]: w for w in _leases(ihub, alice)}
        pid = _service_pid(ihub)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: ihub.queue("GET", "info", alice).status_code >= 500 or _service_pid(ihub) != pid, 10,
              "the queue service did not go down", ihub)
        r = ihub.api("DELETE", "users/alice/servers/exp1")
        assert r.status_code in (202, 204), r.text
        _wait(lambda: not (ihub.api("GET", "users/alice").json().get("servers") or {}).get("exp1"), 20,
              "exp1 did not stop", ihub)
        w1 = _wait(lambda: (lambda r: r.json() if r.status_code == 200 and r.json()["state"] != "Running" else None)(
            ihub.queue("GET", f"workloads/team-a/{again['exp1']['name']}", alice)), 60,
            "the lease of the server stopped while the queue was down was not released", ihub)
        # Released by the restarted service's reconcile ("no longer running"), or, where the hub
        # restarted the service before the spawner's release was sent (a quiet machine), by that
        # release: either way exp1's lease is given back and exp2's is kept.
        assert (w1["state"] == "Succeeded" and "no longer running" in w1["message"]) \
            or w1["state"] == "Cancelled", w1
        assert ihub.queue("GET", f"workloads/team-a/{again['exp2']['name']}", alice).json()["state"] == "Running"
        assert ihub.request("GET", "user/alice/exp2/api/status", alice).status_code == 200
    finally:
        for name in ("exp1", "exp2"):
            ihub.api("DELETE", f"users/alice/servers/{name}")
