"""A notebook lease outlives a hub shutdown that stopped its server (issue 15, item 10).

JupyterHub's ``cleanup()`` stops its managed services (the queue) before the users' servers, so
the server stopped at shutdown cannot release its lease. When the hub starts again, with the
server gone, the lease is released and its GPUs are free: by the spawner (the mixin restores the
lease with the server's state and releases it once the queue answers) and by the queue service
itself (at its start it asks the hub which owners of Running leases still have a server:
hub/reconcile.py). The plain hooks keep no state, so there only the queue service can end it.

Real JupyterHub, configurable-http-proxy and the gpuqueue service, restarted on the same state
folder (the hub's database, the queue's ledger).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import requests

from hubtools import chp_path, start_hub, stop_hub

pytestmark = pytest.mark.slow

PY = sys.executable

MIXIN_CONFIG = """
c.QueuedLocalSpawner.gpuqueue_poll_interval = 0.5
"""

HOOK_CONFIG = """
import os
from jupyter_gpuqueue.hub.demo_spawner import DemoAccountSpawner
from jupyter_gpuqueue.hub import gpuqueue_post_stop_hook, gpuqueue_pre_spawn_hook

c.JupyterHub.spawner_class = DemoAccountSpawner
c.Spawner.options_form = ""
c.Spawner.pre_spawn_hook = gpuqueue_pre_spawn_hook
c.Spawner.post_stop_hook = gpuqueue_post_stop_hook
c.GpuQueueSpawnerConfig.gpuqueue_url = (
    f"http://127.0.0.1:{os.environ['GPUQUEUE_SERVICE_PORT']}/services/gpuqueue/")
c.GpuQueueSpawnerConfig.gpuqueue_request = {"gpus": 1, "flavor": "nvidia-a100"}
c.GpuQueueSpawnerConfig.gpuqueue_poll_interval = 0.5
"""


@pytest.fixture(autouse=True)
def _needs_chp():
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")


def _env():
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    return {"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)}


def _leases(hub, token):
    items = hub.queue("GET", "workloads?mine=true", token).json()["items"]
    return [w for w in items if w.get("kind") == "NotebookLease"]


def _wait(pred, timeout, what, hub):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}\n{hub.log_tail(120)}"
        time.sleep(0.3)


def _shutdown_as_is(hub) -> None:
    """Stop the hub as an admin would (SIGTERM) with the user's server running: its cleanup()
    stops the queue service, then the server."""
    hub.proc.send_signal(signal.SIGTERM)
    try:
        hub.proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    stop_hub(hub)  # whatever is left (the proxy)


def _lease_held_across_restart(tmp_path, extra_config: str, spawn_body: dict):
    """alice's server on 1 × A100; the hub shut down and started again; returns (hub, lease)."""
    state = tmp_path / "hub"
    hub = start_hub(state, extra_config=extra_config, env=_env())
    try:
        r = hub.api("POST", "users/alice/server", json=spawn_body, timeout=60)
        assert r.status_code in (201, 202), r.text
        hub.start_server("alice", timeout=90)
        token = hub.token_for("alice")
        (lease,) = _leases(hub, token)
        assert lease["state"] == "Running", lease
    finally:
        _shutdown_as_is(hub)
    first_log = hub.log_path.read_text(errors="replace")
    # The bug: the queue was gone when the server stopped, so the lease could not be released.
    assert "could not release" in first_log or "gpuqueue_post_stop_hook" in first_log or \
        "post_stop_hook" in first_log, first_log[-4000:]
    hub.log_path.rename(state / "jupyterhub-first.log")
    hub = start_hub(state, extra_config=extra_config, env=_env())
    return hub, lease


def _gpus_are_free(hub, token) -> None:
    """A job of alice's team for every A100 the cohort has runs at once."""
    r = hub.queue("POST", "workloads", token, json={
        "name": "all-a100", "command": [PY, "-c", "import time; time.sleep(60)"],
        "gpus": 6, "flavor": "nvidia-a100", "maxRuntime": "5m"})
    assert r.status_code == 201, r.text
    _wait(lambda: hub.queue("GET", "workloads/team-a/all-a100", token).json()["state"] == "Running", 30,
          "the 6 A100s were not all free", hub)
    assert hub.queue("DELETE", "workloads/team-a/all-a100", token).status_code == 200


def test_mixin_lease_of_a_server_stopped_at_hub_shutdown_is_released_at_restart(tmp_path):
    hub, lease = _lease_held_across_restart(tmp_path, MIXIN_CONFIG, {"user_options": {"profile": "a100"}})
    try:
        token = hub.token_for("alice")
        w = _wait(lambda: (lambda w: w if w["state"] in ("Succeeded", "Cancelled") else None)(
            hub.queue("GET", f"workloads/team-a/{lease['name']}", token).json()), 60,
            "the lease of the stopped server was not released at hub start", hub)
        assert w["finishedAt"] is not None
        assert not (hub.api("GET", "users/alice").json().get("servers") or {}).get("")
        _gpus_are_free(hub, token)
        # a new spawn works as before
        hub.start_server("alice", timeout=90)
        (new,) = [x for x in _leases(hub, token) if x["state"] == "Running"]
        assert new["name"] != lease["name"]
    finally:
        stop_hub(hub)


def test_plain_hook_lease_is_released_by_the_queue_service_at_its_start(tmp_path):
    # The plain hooks keep no spawner state: the queue service alone finds the lease orphaned.
    hub, lease = _lease_held_across_restart(tmp_path, HOOK_CONFIG, {})
    try:
        token = hub.token_for("alice")
        w = _wait(lambda: (lambda w: w if w["state"] != "Running" else None)(
            hub.queue("GET", f"workloads/team-a/{lease['name']}", token).json()), 60,
            "the queue service did not release the lease of the stopped server", hub)
        assert w["state"] == "Succeeded", w
        assert "its notebook server is no longer running" in (w.get("message") or ""), w
        assert w["finishedAt"] is not None
        _gpus_are_free(hub, token)
    finally:
        stop_hub(hub)


def test_a_hub_started_with_sigint_ignored_stops_its_queue_service_at_once(tmp_path):
    """JupyterHub stops its managed service with SIGINT, then SIGTERM only after
    Spawner.interrupt_timeout (30 s). Started as a background job of a non-interactive shell (SIGINT
    ignored, inherited by the service), the hub's shutdown must still stop the queue at once."""
    hub = start_hub(tmp_path / "hub", env=_env(), sigint_ignored=True)
    try:
        t0 = time.monotonic()
        hub.proc.send_signal(signal.SIGTERM)
        hub.proc.wait(25)
        took = time.monotonic() - t0
        log = hub.log_path.read_text(errors="replace")
        assert "received signal 2, stopping" in log, log[-3000:]
        assert took < 20, f"the hub took {took:.1f} s to stop (its service ignored SIGINT)"
        with pytest.raises(requests.ConnectionError):
            requests.get(hub.service_url, timeout=2)
    finally:
        stop_hub(hub)
