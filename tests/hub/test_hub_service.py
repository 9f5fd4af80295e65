"""End to end with a real JupyterHub: the queue as one hub-managed service, teams from hub groups,
custom scopes enforced by the service, and a user's server in hub-client mode forwarding to it.

One hub for the module (tests/hub/conftest.py), started from the shipped example
``jupyterhub_config/local/jupyterhub_config.py``: alice (team-a), bob (team-b), carol (both),
dave (may use the queue, in no team), ada (hub admin and gpuqueue admin, team-a).
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import pytest
import websocket

pytestmark = pytest.mark.slow

PY = sys.executable
SUBMIT_SCOPE = "custom:gpuqueue:submit"


def job(code: str = "print('ok')", **extra) -> dict:
    req = {"command": [PY, "-c", code], "gpus": 1, "maxRuntime": "2m",
           "name": f"t-{uuid.uuid4().hex[:8]}"}
    req.update(extra)
    return req


def wait_state(hub, token, ns, name, states, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        wl = hub.queue("GET", f"workloads/{ns}/{name}", token).json()
        if wl.get("state") in states:
            return wl
        assert time.monotonic() < deadline, wl
        time.sleep(0.2)


def test_info_lists_exactly_the_users_local_queues(hub):
    def info(user):
        r = hub.queue("GET", "info", hub.token_for(user))
        assert r.status_code == 200, r.text
        return r.json()

    alice, bob, carol, dave, ada = (info(u) for u in ("alice", "bob", "carol", "dave", "ada"))
    lq = lambda i: [f"{q['namespace']}/{q['name']}" for q in i["localQueues"]]  # noqa: E731
    assert alice["user"] == "alice" and alice["mode"] == "hub-service"
    assert lq(alice) == ["team-a/team-a-queue"] and alice["defaultLocalQueue"] == "team-a/team-a-queue"
    assert lq(bob) == ["team-b/team-b-queue"]
    assert lq(carol) == ["team-a/team-a-queue", "team-b/team-b-queue"]
    assert lq(dave) == [] and dave["defaultLocalQueue"] is None
    assert alice["permissions"] == {"submit": True, "admin": False}
    assert ada["permissions"] == {"submit": True, "admin": True}


def test_team_members_submit_into_their_team_queue(hub):
    for user, ns in (("alice", "team-a"), ("bob", "team-b")):
        token = hub.token_for(user)
        r = hub.queue("POST", "workloads", token, json=job())
        assert r.status_code == 201, r.text
        wl = r.json()
        assert (wl["owner"], wl["namespace"], wl["localQueue"]) == (user, ns, f"{ns}-queue")
        assert r.headers["Location"].endswith(f"/services/gpuqueue/gpuqueue/api/workloads/{ns}/{wl['name']}")
        done = wait_state(hub, token, ns, wl["name"], ("Succeeded", "Failed"))
        assert done["state"] == "Succeeded", (done.get("message"), done.get("exitCode"), done.get("workingDir"))


def test_a_user_in_two_teams_picks_one_and_others_cannot(hub):
    r = hub.queue("POST", "workloads", hub.token_for("carol"), json=job(localQueue="team-b/team-b-queue"))
    assert r.status_code == 201, r.text
    assert r.json()["namespace"] == "team-b"
    r = hub.queue("POST", "workloads", hub.token_for("alice"), json=job(localQueue="team-b/team-b-queue"))
    assert r.status_code == 403, r.text
    assert r.json()["field"] == "localQueue"


def test_a_user_in_no_team_is_told_the_fix(hub):
    r = hub.queue("POST", "workloads", hub.token_for("dave"), json=job())
    assert r.status_code == 403, r.text
    err = r.json()
    assert err["reason"] == "Forbidden" and err["field"] == "localQueue"
    assert "ask a hub admin to add you to a team of the GPU queue" in err["message"]


def test_submit_scope_is_enforced(hub):
    # alice holds the scope, but this token of hers carries only access to the service
    token = hub.token_for("alice", scopes=["access:services!service=gpuqueue"])
    r = hub.queue("POST", "workloads", token, json=job())
    assert r.status_code == 403, r.text
    err = r.json()
    assert err["field"] == "scope" and SUBMIT_SCOPE in err["message"], err
    for path in ("workloads", "workloads/team-a/anything", "workloads/team-a/anything/logs"):
        assert hub.queue("GET", path, token).status_code == 403, path
    assert hub.queue("POST", "estimate", token, json=job()).status_code == 403
    # read-only views need only access to the service
    for path in ("info", "queues", "inventory", "prices", "openapi.json"):
        assert hub.queue("GET", path, token).status_code == 200, path
    assert hub.queue("GET", "info", token).json()["permissions"] == {"submit": False, "admin": False}
    # the event stream carries workloads: submit scope too
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(
            hub.service_url.replace("http", "ws") + "gpuqueue/api/events",
            header=[f"Authorization: token {token}"], timeout=10,
        )
    assert e.value.status_code == 403
    # no token at all: the service refuses before any handler runs
    assert hub.queue("GET", "info", token=None).status_code == 403


def test_only_queue_admins_reach_the_admin_api(hub):
    r = hub.queue("GET", "admin/config", hub.token_for("alice"))
    assert r.status_code == 403 and r.json()["field"] == "scope", r.text
    assert "custom:gpuqueue:admin" in r.json()["message"]
    assert hub.queue("GET", "admin/config", hub.token_for("ada")).status_code == 200


def test_users_cannot_cancel_or_read_each_others_jobs(hub):
    """A team-mate (anna) sees alice's job but may not cancel it or read its logs; another team's user
    (bob) is answered as for a job that does not exist (docs/rest-api.md, "Who sees what")."""
    alice, anna, bob = hub.token_for("alice"), hub.token_for("anna"), hub.token_for("bob")
    wl = hub.queue("POST", "workloads", alice, json=job("import time; time.sleep(30)")).json()
    path = f"workloads/{wl['namespace']}/{wl['name']}"
    r = hub.queue("DELETE", path, anna)
    assert r.status_code == 403 and r.json()["reason"] == "Forbidden", r.text
    assert hub.queue("GET", path + "/logs", anna).status_code == 403
    assert hub.queue("GET", path, anna).status_code == 200  # team-mates see positions and costs
    for r in (hub.queue("DELETE", path, bob), hub.queue("GET", path + "/logs", bob), hub.queue("GET", path, bob)):
        assert r.status_code == 404 and r.json()["reason"] == "NotFound", r.text
    r = hub.queue("DELETE", path, alice)
    assert r.status_code == 200 and r.json()["state"] == "Cancelled", r.text


def test_user_server_forwards_to_the_service(hub):
    """Client mode: alice's own server (spawned by the hub) forwards REST and events as alice."""
    token = hub.token_for("alice")
    base = hub.start_server("alice").lstrip("/") + "gpuqueue/api/"
    assert base == "user/alice/gpuqueue/api/"

    info = hub.request("GET", base + "info", token)
    assert info.status_code == 200, info.text
    assert info.json()["user"] == "alice" and info.json()["mode"] == "hub-service"
    assert [q["namespace"] for q in info.json()["localQueues"]] == ["team-a"]

    ws = websocket.create_connection(
        hub.url.replace("http", "ws") + base + "events",
        header=[f"Authorization: token {token}"], timeout=20,
    )
    try:
        hello = json.loads(ws.recv())
        assert hello == {"type": "hello", "user": "alice"}
        r = hub.request("POST", base + "workloads", token, json=job(name="via-user-server"))
        assert r.status_code == 201, r.text
        wl = r.json()
        assert wl["owner"] == "alice" and wl["namespace"] == "team-a"
        assert r.headers["Location"] == "/user/alice/gpuqueue/api/workloads/team-a/via-user-server"
        seen = set()
        deadline = time.monotonic() + 30
        while "Succeeded" not in seen:
            assert time.monotonic() < deadline, seen
            event = json.loads(ws.recv())
            if event.get("type") == "workload" and event["workload"]["name"] == "via-user-server":
                seen.add(event["workload"]["state"])
        assert "Running" in seen or "Admitted" in seen, seen
    finally:
        ws.close()

    # the panel's "Submit as GPU job" on a file of alice's server: relative path, run there
    home = hub.homes / "alice"
    (home / "job.py").write_text("import os; print('cwd=' + os.getcwd())\n")
    r = hub.request("POST", base + "workloads", token, json={"script": "job.py", "gpus": 1, "name": "script-job"})
    assert r.status_code == 201, r.text
    done = wait_state(hub, token, "team-a", "script-job", ("Succeeded", "Failed"))
    assert done["state"] == "Succeeded", done
    log = hub.request("GET", base + "workloads/team-a/script-job/logs", token).json()
    assert f"cwd={home.resolve()}" in log["text"], log

    # errors come back as the service's JSON, query strings and methods pass through
    r = hub.request("POST", base + "workloads", token, data="{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body", r.text
    r = hub.request("GET", base + "workloads/team-a/no-such-job", token)
    assert r.status_code == 404 and r.json()["reason"] == "NotFound", r.text
    mine = hub.request("GET", base + "workloads", token, params={"mine": "true", "state": "Succeeded"})
    assert mine.status_code == 200 and "via-user-server" in [w["name"] for w in mine.json()["items"]]
    assert all(w["owner"] == "alice" for w in mine.json()["items"])
    r = hub.request("GET", base + "workloads", token, params={"state": "Bogus"})
    assert r.status_code == 400 and r.json()["field"] == "state"
    r = hub.request("DELETE", base + "workloads/team-a/via-user-server", token)
    assert r.status_code == 200 and r.json()["state"] == "Succeeded"


def test_an_admins_quota_change_applies_at_the_next_cycle_and_is_audited(hub):
    """Through the hub: alice (no admin scope) cannot change quotas; ada's change admits alice's
    waiting job in the next cycle, and the audit log says who changed what."""
    alice, ada = hub.token_for("alice"), hub.token_for("ada")
    path = "admin/cluster-queues/team-a-cq"
    l4 = {"flavor": "nvidia-l4", "resource": "nvidia.com/gpu"}
    r = hub.queue("PATCH", path, alice, json={"resources": [{**l4, "nominalQuota": 5}]})
    assert r.status_code == 403 and "custom:gpuqueue:admin" in r.json()["message"], r.text
    # team-a on its own (no cohort to borrow from) with one L4: alice's second L4 job must wait.
    r = hub.queue("PATCH", path, ada, json={"cohort": None, "resources": [{**l4, "nominalQuota": 1}]})
    assert r.status_code == 200, r.text
    try:
        r = hub.queue("POST", "workloads", alice, json=job("import time; time.sleep(60)", flavor="nvidia-l4"))
        assert r.status_code == 201, r.text
        holder = r.json()["name"]
        wait_state(hub, alice, "team-a", holder, ("Running",))
        r = hub.queue("POST", "workloads", alice, json=job(flavor="nvidia-l4"))
        assert r.status_code == 201, r.text
        name = r.json()["name"]
        time.sleep(1.0)  # several scheduling cycles
        wl = hub.queue("GET", f"workloads/team-a/{name}", alice).json()
        assert wl["state"] == "Pending" and wl["reason"] == "NoFit", wl
        r = hub.queue("PATCH", path, ada, json={"resources": [{**l4, "nominalQuota": 2}]})
        assert r.status_code == 200, r.text
        done = wait_state(hub, alice, "team-a", name, ("Succeeded", "Failed"))
        assert done["state"] == "Succeeded", (done.get("message"), done.get("exitCode"), done.get("workingDir"))
        assert hub.queue("DELETE", f"workloads/team-a/{holder}", alice).status_code == 200
        audit = hub.queue("GET", "admin/audit?limit=5", ada).json()["items"]
        latest = audit[0]
        assert (latest["actor"], latest["operation"], latest["target"]) == \
            ("ada", "patch-cluster-queue", "ClusterQueue/team-a-cq")
        assert latest["before"] != latest["after"]
        assert hub.queue("GET", "admin/audit", alice).status_code == 403
    finally:
        r = hub.queue("PATCH", path, ada, json={"cohort": "research", "resources": [{**l4, "nominalQuota": 2}]})
        assert r.status_code == 200, r.text
