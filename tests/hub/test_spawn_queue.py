"""A notebook spawn waits in the GPU queue, with a real JupyterHub, configurable-http-proxy, the
gpuqueue hub service and the shipped example configuration (jupyterhub_config/local/, including
spawner.py: QueuedLocalSpawner with profiles).

alice's team (team-a) and its cohort have 6 A100s. A job of alice's holds all 6; alice then asks
for a server with the "1 × A100" profile: the spawn waits, and its progress stream
(``GET /hub/api/users/alice/server/progress``) says "position 1 in team-a's queue · expected in
~10 min · waiting for 1 × A100". When the job is cancelled, the lease is admitted and the server starts with
CUDA_VISIBLE_DEVICES set to the assigned GPU; stopping the server releases the lease.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
import requests


def _hub_helpers():
    """start_hub / stop_hub / chp_path of tests/hub/conftest.py (a conftest is not importable as
    a package module here: tests/ has no __init__.py)."""
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
A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"


GRACE = 4  # seconds of warning before a preempted notebook lease is released

EXTRA_CONFIG = f"""
c.QueuedLocalSpawner.gpuqueue_poll_interval = 0.5
c.QueuedLocalSpawner.gpuqueue_lease_watch_interval = 0.5
# The hub's own check of its servers: slower than a lease's grace period, so that a server stopped
# right at its lease's end was stopped by the spawner's watch, not by the hub's poll.
c.QueuedLocalSpawner.poll_interval = 15
for service in c.JupyterHub.services:
    if service["name"] == "gpuqueue":
        service["command"].append("--GpuQueueApp.lease_preemption_grace_seconds={GRACE}")
"""


@pytest.fixture(scope="module")
def qhub(tmp_path_factory):
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    h = start_hub(
        tmp_path_factory.mktemp("qhub"),
        extra_config=EXTRA_CONFIG,
        env={"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)},
    )
    yield h
    stop_hub(h)


def _server_env(hub, user: str) -> dict:
    """The environment of ``user``'s running single-user server process of this hub (same OS
    user here; its working directory is the user's home under the hub's state folder)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"jupyterhub-singleuser" not in cmd or f"JUPYTERHUB_USER={user}".encode() not in raw:
            continue
        try:
            if not os.readlink(f"/proc/{pid}/cwd").startswith(str(hub.homes)):
                continue  # another hub's server (tests run side by side)
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
        if env.get("JUPYTERHUB_SERVICE_NAME"):
            continue  # the queue service itself
        return env
    raise AssertionError(f"no server process of {user}")


def _read_progress(hub, user: str, events: list, done: threading.Event) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # 400 until the spawn is pending
        r = hub.request("GET", f"hub/api/users/{user}/server/progress", hub.admin_token, stream=True,
                        timeout=180)
        if r.status_code == 200:
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    ev = json.loads(line[5:])
                    events.append(ev)
                    if ev.get("ready") or ev.get("failed"):
                        done.set()
                        return
            done.set()
            return
        time.sleep(0.2)
    done.set()


def _leases(hub, token):
    items = hub.queue("GET", "workloads?mine=true", token).json()["items"]
    return [w for w in items if w.get("kind") == "NotebookLease"]


def test_gpu_spawn_waits_in_queue_with_position_then_starts_on_its_gpu(qhub):
    token = qhub.token_for("alice")
    # A job of alice's team holds every A100 the cohort has (4 nominal + 2 borrowed).
    r = qhub.queue("POST", "workloads", token, json={
        "name": "holder", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 6, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 30
    while qhub.queue("GET", "workloads/team-a/holder", token).json()["state"] != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.2)

    events: list = []
    done = threading.Event()
    spawn = {}

    errors: list[BaseException] = []  # raised in the two threads: re-raised here

    def guarded(fn, *args):
        def run():
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                done.set()
        return run

    def do_spawn():
        spawn["r"] = qhub.api("POST", "users/alice/server", json={"user_options": {"profile": "a100"}},
                              timeout=120)

    t_spawn = threading.Thread(target=guarded(do_spawn), daemon=True)
    t_spawn.start()
    reader = threading.Thread(target=guarded(_read_progress, qhub, "alice", events, done), daemon=True)
    reader.start()

    # The spawn waits in the queue, and says where it stands and when it expects to start (the
    # holder's maximum run time is 10 minutes).
    expected = re.compile(r"position 1 in team-a's queue · expected in ~(9|10) min( \(\d+–\d+ min\))? · "
                          r"waiting for 1 × A100 after team-a/holder \(6 × nvidia-a100, ends in ~(9|10) min\)")
    deadline = time.monotonic() + 60
    while not any(expected.search(e.get("message") or "") for e in events):
        assert not done.is_set(), f"progress ended early: {events} {errors}\n{qhub.log_tail()}"
        assert time.monotonic() < deadline, f"no queue position in {events}\n{qhub.log_tail()}"
        time.sleep(0.2)
    (lease,) = _leases(qhub, token)
    assert lease["state"] == "Pending" and lease["priorityClass"] == "development"
    assert lease["owner"] == "alice" and lease["namespace"] == "team-a"
    time.sleep(2)  # still waiting, well past nothing: no spawn failure while queued
    model = qhub.api("GET", "users/alice").json()
    assert model["servers"][""]["pending"] == "spawn" and not model["servers"][""]["ready"]

    # The GPUs free: the lease is admitted and the server starts.
    assert qhub.queue("DELETE", "workloads/team-a/holder", token).status_code == 200
    assert done.wait(90), f"spawn did not finish: {events}\n{qhub.log_tail()}"
    t_spawn.join(30)
    reader.join(30)
    assert not t_spawn.is_alive() and not reader.is_alive(), "the spawn or the progress reader did not end"
    if errors:
        raise errors[0]
    assert events[-1].get("ready"), f"{events}\n{qhub.log_tail()}"
    assert spawn["r"].status_code in (201, 202), spawn["r"].text
    messages = [e.get("message") for e in events]
    assert any("admitted in team-a's queue" in (m or "") for m in messages), messages
    (lease,) = _leases(qhub, token)
    assert lease["state"] == "Running" and lease["admission"]["podSetAssignments"][0]["flavors"] == {
        "nvidia.com/gpu": "nvidia-a100"}
    env = _server_env(qhub, "alice")
    assert env["CUDA_VISIBLE_DEVICES"] == lease["visibleDevices"] and env["CUDA_VISIBLE_DEVICES"]
    assert env["GPUQUEUE_LEASE"] == f"team-a/{lease['name']}"

    # Stopping the server releases the lease (billing closed, GPU free).
    qhub.stop_server("alice")
    w = qhub.queue("GET", f"workloads/team-a/{lease['name']}", token).json()
    assert w["state"] == "Cancelled" and w["finishedAt"] is not None
    # The hub's per-lease token is gone with the lease.
    tokens = qhub.api("GET", "users/alice/tokens").json()["api_tokens"]
    assert not [t for t in tokens if (t.get("note") or "").startswith("gpuqueue lease")]


def test_cpu_profile_starts_without_queueing(qhub):
    token = qhub.token_for("bob")
    before = len(_leases(qhub, token))
    url = qhub.start_server("bob")
    assert url == "/user/bob/"
    assert len(_leases(qhub, token)) == before
    assert "GPUQUEUE_LEASE" not in _server_env(qhub, "bob")
    qhub.stop_server("bob")


def _wait(pred, timeout, what, hub):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}\n{hub.log_tail()}"
        time.sleep(0.2)


def test_preempted_notebook_lease_is_warned_then_released_and_its_server_stopped(qhub):
    alice, bob = qhub.token_for("alice"), qhub.token_for("bob")
    # team-b uses its own 2 A100s, so team-a has exactly its 4 and cannot borrow.
    r = qhub.queue("POST", "workloads", bob, json={
        "name": "b-holder", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    _wait(lambda: qhub.queue("GET", "workloads/team-b/b-holder", bob).json()["state"] == "Running", 30,
          "bob's job does not run", qhub)
    r = qhub.api("POST", "users/alice/server", json={"user_options": {"profile": "a100"}}, timeout=60)
    assert r.status_code in (201, 202), r.text
    qhub.start_server("alice")  # already spawning: waits until ready
    (lease,) = [w for w in _leases(qhub, alice) if w["state"] == "Running"]

    # Urgent work of alice's team needs all 4 of team-a's A100s: the lease is the victim.
    r = qhub.queue("POST", "workloads", alice, json={
        "name": "urgent", "command": [PY, "-c", "print('urgent')"], "gpus": 4, "flavor": "nvidia-a100",
        "priorityClass": "production-retrain", "maxRuntime": "5m"})
    assert r.status_code == 201, r.text
    t0 = time.time()
    path = f"workloads/team-a/{lease['name']}"
    warned = _wait(lambda: (lambda w: w if w.get("evictionDeadline") else None)(qhub.queue("GET", path, alice).json()),
                   15, "no evictionDeadline on the lease", qhub)
    assert warned["state"] == "Running" and t0 - 1 <= warned["evictionDeadline"] - GRACE <= time.time()
    assert "Preempted to accommodate team-a/urgent" in warned["message"]
    # What the JupyterLab panel reads: alice's own server, forwarding to the service, has it too.
    r = qhub.request("GET", "user/alice/gpuqueue/api/workloads?mine=true", alice)
    assert r.status_code == 200, r.text
    mine = {w["name"]: w for w in r.json()["items"]}
    assert mine[lease["name"]]["evictionDeadline"] == warned["evictionDeadline"]
    # During the grace period the server runs and the urgent job waits.
    assert qhub.queue("GET", "workloads/team-a/urgent", alice).json()["state"] == "Pending"
    assert qhub.api("GET", "users/alice").json()["servers"][""]["ready"]

    # After the grace period: the lease ends, the urgent job runs, and the spawner stops the server
    # at that moment (its lease watch), not at the hub's next poll (15 s here): no two users share
    # the GPU.
    done = _wait(lambda: (lambda w: w if w["state"] == "Failed" else None)(qhub.queue("GET", path, alice).json()),
                 GRACE + 15, "the lease was not released", qhub)
    assert done["reason"] == "Preempted" and done["finishedAt"] == pytest.approx(warned["evictionDeadline"], abs=0.01)
    _wait(lambda: qhub.request("GET", "user/alice/api/status", alice).status_code != 200, 5,
          "alice's server still answers after its lease ended", qhub)
    assert time.time() - warned["evictionDeadline"] < 6
    assert "GPU lease of alice ends (" in qhub.log_tail(200)  # the spawner's watch ("ended": a poll)
    _wait(lambda: qhub.queue("GET", "workloads/team-a/urgent", alice).json()["state"] in ("Running", "Succeeded"),
          20, "the urgent job did not start", qhub)
    _wait(lambda: not (qhub.api("GET", "users/alice").json().get("servers") or {}).get(""), 30,
          "the hub did not notice that alice's server stopped", qhub)
    assert qhub.queue("DELETE", "workloads/team-b/b-holder", bob).status_code == 200


HOOK_CONFIG = """
import os
from jupyter_gpuqueue.hub.demo_spawner import DemoAccountSpawner
from jupyter_gpuqueue.hub import gpuqueue_post_stop_hook, gpuqueue_pre_spawn_hook

# Any Spawner, no mixin: the plain hooks, settings in their own config section.
c.JupyterHub.spawner_class = DemoAccountSpawner
c.Spawner.options_form = ""
c.Spawner.pre_spawn_hook = gpuqueue_pre_spawn_hook
c.Spawner.post_stop_hook = gpuqueue_post_stop_hook
c.GpuQueueSpawnerConfig.gpuqueue_url = (
    f"http://127.0.0.1:{os.environ['GPUQUEUE_SERVICE_PORT']}/services/gpuqueue/")
c.GpuQueueSpawnerConfig.gpuqueue_request = {"migProfile": "1g.10gb"}
c.GpuQueueSpawnerConfig.gpuqueue_poll_interval = 0.5
c.GpuQueueSpawnerConfig.gpuqueue_lease_watch_interval = 0.5
"""


@pytest.fixture(scope="module")
def hook_hub(tmp_path_factory):
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    h = start_hub(tmp_path_factory.mktemp("hookhub"), extra_config=HOOK_CONFIG,
                  env={"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)})
    yield h
    stop_hub(h)


def test_plain_hooks_queue_any_spawner_stop_its_server_when_the_lease_ends_and_release_on_stop(hook_hub):
    token = hook_hub.token_for("bob")
    hook_hub.start_server("bob")
    (first,) = _leases(hook_hub, token)
    assert first["state"] == "Running" and first["namespace"] == "team-b"
    # The lease ends in the queue (here released there by its owner; a preemption's grace period,
    # the maximum lease time and an idle reclaim under onIdle "stop" end it alike): the hook's watch
    # has the hub stop the server, so that nobody else is given the GPU it still holds.
    r = hook_hub.queue("DELETE", f"workloads/team-b/{first['name']}", token)
    assert r.status_code == 200, r.text
    _wait(lambda: not (hook_hub.api("GET", "users/bob").json().get("servers") or {}).get(""), 10,
          "bob's server still runs after its lease ended", hook_hub)
    assert "GPU lease of bob ends (" in hook_hub.log_tail(200)

    hook_hub.start_server("bob")
    (lease,) = [w for w in _leases(hook_hub, token) if w["state"] == "Running"]
    assert lease["name"] != first["name"]
    assert lease["podSets"][0]["requests"] == {"nvidia.com/mig-1g.10gb": "1"}
    env = _server_env(hook_hub, "bob")
    assert env["CUDA_VISIBLE_DEVICES"] == lease["visibleDevices"] and env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    hook_hub.stop_server("bob")  # post_stop_hook: the lease is released
    w = _wait(lambda: (lambda w: w if w["state"] == "Cancelled" else None)(
        hook_hub.queue("GET", f"workloads/team-b/{lease['name']}", token).json()), 10,
        "the lease was not released by post_stop_hook", hook_hub)
    assert w["finishedAt"] is not None
    tokens = hook_hub.api("GET", "users/bob/tokens").json()["api_tokens"]
    assert not [t for t in tokens if (t.get("note") or "").startswith("gpuqueue lease")]


def test_withdrawing_the_pending_lease_fails_the_queued_spawn(qhub):
    token = qhub.token_for("anna")  # team-a
    r = qhub.queue("POST", "workloads", token, json={
        "name": "anna-holder", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 6, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    _wait(lambda: qhub.queue("GET", "workloads/team-a/anna-holder", token).json()["state"] == "Running", 30,
          "anna's job does not run", qhub)
    events: list = []
    done = threading.Event()
    threading.Thread(target=lambda: qhub.api("POST", "users/anna/server",
                                             json={"user_options": {"profile": "a100"}}, timeout=60),
                     daemon=True).start()
    threading.Thread(target=_read_progress, args=(qhub, "anna", events, done), daemon=True).start()
    pending = _wait(lambda: [w for w in _leases(qhub, token) if w["state"] == "Pending"], 30,
                    "no pending lease", qhub)
    assert qhub.queue("DELETE", f"workloads/team-a/{pending[0]['name']}", token).status_code == 200
    assert done.wait(30), events
    assert events[-1].get("failed") and "the GPU lease ended before admission" in events[-1]["message"], events
    assert "Unhandled error starting anna's server" not in qhub.log_tail(1000)  # a refusal, no traceback
    _wait(lambda: not (qhub.api("GET", "users/anna").json().get("servers") or {}).get(""), 20,
          "anna's failed spawn left a server", qhub)
    assert qhub.queue("DELETE", "workloads/team-a/anna-holder", token).status_code == 200


# -- a user in no team ------------------------------------------------------------------------------

DEMO_PASSWORD = "gpuqueue-demo"  # jupyterhub_config/local/jupyterhub_config.py's default


def _browser(hub, user: str) -> requests.Session:
    """A session logged in through the hub's login form, as a browser is (cookies, _xsrf)."""
    s = requests.Session()
    r = s.get(hub.url + "hub/login", timeout=30)
    assert r.status_code == 200, r.text
    r = s.post(hub.url + "hub/login", data={"username": user, "password": DEMO_PASSWORD,
                                            "_xsrf": s.cookies.get("_xsrf")}, timeout=30)
    assert r.status_code == 200 and s.cookies.get("jupyterhub-session-id"), (r.status_code, r.url)
    return s


def test_a_user_in_no_team_is_offered_no_gpu_and_a_gpu_spawn_is_a_clear_403(qhub):
    """dave is in the hub group "researchers" (the queue's scopes) but in no group that is a team:
    the spawn form offers him only the CPU profile, with a note saying why and what to do; a GPU
    spawn he asks for anyway fails at once with 403 and the queue's reason on the spawn page (not
    JupyterHub's "500: Unhandled error starting server"), creates no lease and leaves no server."""
    dave = _browser(qhub, "dave")
    form = dave.get(qhub.url + "hub/spawn", timeout=30)
    assert form.status_code == 200, form.text
    assert "value='cpu'" in form.text
    for gpu in ("mig-1g", "a100", "any-gpu"):
        assert f"value='{gpu}'" not in form.text, gpu
    assert "You are in no team of the GPU queue, so only servers without a GPU are offered" in form.text
    assert "ask a hub admin to add you to a group" in form.text
    # The form's token for asking the queue is gone again.
    tokens = qhub.api("GET", "users/dave/tokens").json()["api_tokens"]
    assert not [t for t in tokens if (t.get("note") or "").startswith(("gpuqueue lease", "gpuqueue options"))], tokens

    # alice (team-a) is offered every profile, without the note.
    alice_form = _browser(qhub, "alice").get(qhub.url + "hub/spawn", timeout=30)
    assert all(f"value='{p}'" in alice_form.text for p in ("cpu", "mig-1g", "a100", "any-gpu"))
    assert "gpuqueue-note" not in alice_form.text

    # dave asks for a MIG slice anyway (an old form, a bookmark): a 403 page with the reason.
    r = dave.post(qhub.url + "hub/spawn", data={"profile": "mig-1g", "_xsrf": dave.cookies.get("_xsrf")},
                  timeout=60)
    assert r.status_code == 403, (r.status_code, r.text[-2000:])
    page = r.content.decode("utf-8")
    assert "Unhandled error" not in page and "Internal Server Error" not in page
    error = re.search(r'<p class="spawn-error-msg[^"]*">(.*?)</p>', page, re.S)
    assert error, page[-3000:]
    assert error.group(1).startswith("Error: Cannot start this server with 1 × MIG 1g.10gb: user dave is "
                                     "not a member of any team"), error.group(1)
    assert "ask a hub admin to add you" in error.group(1)
    assert "value='mig-1g'" not in page  # the form shown again offers the CPU profile only
    # ... and through the REST API the same status and message.
    r = qhub.api("POST", "users/dave/server", json={"user_options": {"profile": "mig-1g"}}, timeout=60)
    assert r.status_code == 403, (r.status_code, r.text)
    assert "is not a member of any team" in r.json()["message"], r.text
    assert "Unhandled error starting dave's server" not in qhub.log_tail(1000)
    # Nothing was queued, no server is left, no token either.
    assert _leases(qhub, qhub.token_for("dave")) == []
    assert not (qhub.api("GET", "users/dave").json().get("servers") or {}).get("")
    tokens = qhub.api("GET", "users/dave/tokens").json()["api_tokens"]
    assert not [t for t in tokens if (t.get("note") or "").startswith(("gpuqueue lease", "gpuqueue options"))], tokens
    # The CPU profile starts for him as for anyone.
    r = dave.post(qhub.url + "hub/spawn", data={"profile": "cpu", "_xsrf": dave.cookies.get("_xsrf")},
                  timeout=60)
    assert r.status_code == 200, (r.status_code, r.text[-2000:])
    qhub.start_server("dave")
    qhub.stop_server("dave")


def test_an_unknown_profile_is_a_clear_400(qhub):
    r = qhub.api("POST", "users/bob/server", json={"user_options": {"profile": "h100-x8"}}, timeout=60)
    assert r.status_code == 400, (r.status_code, r.text)
    assert "unknown profile 'h100-x8'" in r.json()["message"]
    assert not (qhub.api("GET", "users/bob").json().get("servers") or {}).get("")
