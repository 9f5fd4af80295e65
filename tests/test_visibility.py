"""Who sees what (service/visibility.py, docs/rest-api.md "Who sees what"): a user sees their own
workloads and their teams', not another team's, in every reader of the live queue — the list, one
workload by name, the queues' pending lists, the devices' holders, the cost reports and the event
stream — and admins see everything. On a real QueueService (local jobs, SQLite ledger) with two
teams sharing one ClusterQueue and one GPU; the REST API and a real hub's websocket are
tests/hub/test_authz_matrix.py's."""

from __future__ import annotations

import json
import sys

import pytest

from jupyter_gpuqueue.errors import NotFound, ValidationError
from jupyter_gpuqueue.server.events import EventBroadcaster
from jupyter_gpuqueue.service.visibility import Viewer
from servicetools import service_factory, stop_jobs, tick_until

PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(120)"]
CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: shared-cq}
spec:
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared-cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-b}
spec: {clusterQueue: shared-cq}
"""
INVENTORY = """
nodes:
- name: box
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
"""
TEAMS = {"alice": ["team-a/q"], "anna": ["team-a/q"], "bob": ["team-b/q"]}


@pytest.fixture
def svc(tmp_path):
    build = service_factory(tmp_path, CLUSTER, INVENTORY, user_local_queues={u: list(q) for u, q in TEAMS.items()},
                            prices={"gpu": 2.0})
    service = build()
    yield service
    stop_jobs(build.services)
    for s in build.services:
        s.ledger.close()


def submit(svc, user: str, name: str, lq: str) -> dict:
    return svc.submit({"name": name, "localQueue": lq, "command": SLEEP, "gpus": 1, "maxRuntime": "5m"}, user=user)


@pytest.fixture
def queue(svc):
    """alice's a-run Running on the one GPU; alice's a-wait and bob's b-wait Pending behind it."""
    submit(svc, "alice", "a-run", "team-a/q")
    tick_until(svc, lambda: svc.record("team-a", "a-run")["state"] == "Running")
    submit(svc, "alice", "a-wait", "team-a/q")
    submit(svc, "bob", "b-wait", "team-b/q")
    tick_until(svc, lambda: len(svc.queues()["clusterQueues"][0]["pending"]) == 2)
    return svc


def test_a_user_sees_their_teams_workloads_and_not_another_teams(queue):
    svc = queue
    bob, anna, admin = svc.teams.viewer("bob"), svc.teams.viewer("anna"), Viewer("ops")
    assert bob.namespaces == {"team-b"} and anna.namespaces == {"team-a"}

    # The list: her team's for anna (alice's jobs included), bob's own for bob; everything for an admin.
    listed = lambda v: sorted(w["name"] for w in v.workloads(svc.list_workloads()))  # noqa: E731
    assert listed(anna) == ["a-run", "a-wait"]
    assert listed(bob) == ["b-wait"]
    assert listed(admin) == ["a-run", "a-wait", "b-wait"]

    # By name: another team's is answered as a missing one, word for word.
    with pytest.raises(NotFound) as missing:
        svc.record("team-a", "no-such-job")
    with pytest.raises(NotFound) as hidden:
        bob.workload(svc.get_workload("team-a", "a-run"))
    assert (hidden.value.field, str(hidden.value)) == (
        missing.value.field, str(missing.value).replace("no-such-job", "a-run"))
    assert anna.workload(svc.get_workload("team-a", "a-run"))["owner"] == "alice"

    # The shared ClusterQueue's pending list: positions kept, another team's name, owner and message null.
    def pending(v):
        return {p["positionInClusterQueue"]: (p["namespace"], p["name"], p["owner"])
                for p in v.queues(svc.queues())["clusterQueues"][0]["pending"]}
    assert pending(admin) == {0: ("team-a", "a-wait", "alice"), 1: ("team-b", "b-wait", "bob")}
    assert pending(anna) == {0: ("team-a", "a-wait", "alice"), 1: ("team-b", None, None)}
    assert pending(bob) == {0: ("team-a", None, None), 1: ("team-b", "b-wait", "bob")}
    assert all(p["message"] is None for p in bob.queues(svc.queues())["clusterQueues"][0]["pending"]
               if p["namespace"] == "team-a")

    # The GPU's holder: alice's job for her team, its namespace alone for bob.
    def holder(v):
        return v.inventory(svc.inventory_view(), svc.views.owner_of)["nodes"][0]["gpus"][0]["assignedTo"]
    assert holder(anna) == holder(admin) == "team-a/a-run"
    assert holder(bob) == "team-a"

    # Cost reports: alice's job and name for team-a and the admin; team-a's totals only for bob.
    jobs = lambda v: [(i["namespace"], i["name"]) for i in v.report("jobs", svc.report("jobs"))["items"]]  # noqa: E731
    assert ("team-a", "a-run") in jobs(anna) and ("team-a", "a-run") in jobs(admin)
    assert all(ns == "team-b" for ns, _ in jobs(bob))
    assert all(i["namespace"] == "team-b" for i in bob.report("users", svc.report("users"))["items"])
    teams = {i["namespace"]: i for i in bob.report("teams", svc.report("teams"))["items"]}
    assert teams["team-a"]["topJobs"] == [] and teams["team-a"]["jobs"] >= 1
    mine = {i["namespace"]: i for i in anna.report("teams", svc.report("teams"))["items"]}
    assert [j["name"] for j in mine["team-a"]["topJobs"]] == ["a-run"]

    # workload_visibility = "all": everyone sees every workload; a bad mode changes nothing.
    with pytest.raises(ValidationError) as bad:
        svc.teams.set_visibility("nobody")
    assert bad.value.field == "workload_visibility" and svc.teams.visibility == "team"
    svc.teams.set_visibility("all")
    assert svc.teams.viewer("bob").sees_all and listed(svc.teams.viewer("bob")) == ["a-run", "a-wait", "b-wait"]


def test_without_a_team_mapping_everyone_sees_everything(tmp_path):
    build = service_factory(tmp_path, CLUSTER, INVENTORY)
    svc = build()
    try:
        assert svc.teams.viewer("bob").sees_all  # everyone may submit everywhere: no team to hide from
    finally:
        svc.ledger.close()


class Client:
    """An event-stream connection as the broadcaster sees it (server/events.py): who it is, whether
    it takes batches, and the frames written to it."""

    def __init__(self, user: str, admin: bool = False, batches: bool = True):
        self.gpuqueue_user, self.gpuqueue_admin, self.batches = user, admin, batches
        self.frames: list[bytes] = []

    def _write_frame(self, frame: bytes) -> None:
        self.frames.append(frame)

    def workloads(self) -> list[tuple[str, str]]:
        """(namespace, name) of every workload event received, in order."""
        out = []
        for f in self.frames:
            n = f[1] & 0x7F
            msg = json.loads(f[2 + {126: 2, 127: 8}.get(n, 0):])
            for e in msg["events"] if msg["type"] == "batch" else [msg]:
                if e["type"] == "workload":
                    out.append((e["workload"]["namespace"], e["workload"]["name"]))
        return out


def test_the_event_stream_carries_what_each_client_sees(queue):
    svc = queue
    # bob also owns a workload in team-a's namespace, from a time he was in team-a: he still sees his own.
    svc.teams.user_local_queues["bob"] = ["team-b/q", "team-a/q"]
    submit(svc, "bob", "b-in-a", "team-a/q")
    svc.teams.user_local_queues["bob"] = ["team-b/q"]
    b = EventBroadcaster(svc, flush_interval=0)
    clients = {"anna": Client("anna"), "bob": Client("bob"), "bob-old": Client("bob", batches=False),
               "alice": Client("alice"), "ops": Client("ops", admin=True)}
    for c in clients.values():
        b.add(c)
    try:
        for ns, name in (("team-a", "a-run"), ("team-b", "b-wait"), ("team-a", "a-wait"), ("team-a", "b-in-a")):
            svc.events.emit_workload(svc.record(ns, name)["uid"])
        b.flush()
        got = {k: set(c.workloads()) for k, c in clients.items()}
        everything = {("team-a", "a-run"), ("team-b", "b-wait"), ("team-a", "a-wait"), ("team-a", "b-in-a")}
        assert everything <= got["ops"]
        assert got["anna"] >= {("team-a", "a-run"), ("team-a", "a-wait"), ("team-a", "b-in-a")}
        assert ("team-b", "b-wait") not in got["anna"] and ("team-b", "b-wait") not in got["alice"]
        assert got["bob"] == got["bob-old"] == {("team-b", "b-wait"), ("team-a", "b-in-a")}
        # the same selection is framed once for clients that see the same (anna and alice: team-a, no own elsewhere)
        assert clients["anna"].frames == clients["alice"].frames
    finally:
        for c in clients.values():
            b.remove(c)


def test_a_user_in_no_team_is_told_what_to_do_in_plain_words(svc):
    """Issue 34 item 10: the refusal names no configuration setting (c.GpuQueueApp.…)."""
    from jupyter_gpuqueue.errors import GpuQueueError

    with pytest.raises(GpuQueueError) as e:
        svc.submit({"name": "x", "command": SLEEP, "gpus": 1, "maxRuntime": "5m"}, user="zoe")
    assert "not a member of any team" in e.value.message and "c.GpuQueueApp" not in e.value.message, e.value.message
    assert "ask an admin to add you to a team" in e.value.message
