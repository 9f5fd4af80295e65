"""Faster options that keep the job's size or say that they change it, taken in one step by moving
the pending workload in place (issue 34 item 6: service/moves.py, service/estimates.py) — on the
real QueueService (SQLite ledger, local processes, real restarts). The REST endpoint, its
refusals and the crash in the middle of a move are in tests/test_rest.py-style tests below and in
tests/test_crash_commits.py."""

from __future__ import annotations

import sys
import time

import pytest

from jupyter_gpuqueue.errors import Conflict, Forbidden, ValidationError
from servicetools import service_factory, stop_jobs
from test_rest import check_schema, openapi_doc  # noqa: F401  (fixtures)

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-b}
spec: {nodeLabels: {model: b}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-lab}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
    - name: gpu-b
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: lab}
spec: {clusterQueue: cq-lab}
"""


def _gpus(node: str, model: str, n: int) -> str:
    rows = "\n".join(f"  - {{index: {i}, uuid: GPU-{model * 8}-0000-0000-0000-00000000000{i}, "
                     f"product: Model {model.upper()}, memoryMiB: 1024}}" for i in range(n))
    return f"- name: {node}\n  labels: {{model: {model}}}\n  gpus:\n{rows}\n"


INVENTORY = "nodes:\n" + _gpus("box-a", "a", 4) + _gpus("box-b", "b", 4)


@pytest.fixture
def env(tmp_path):
    make = service_factory(tmp_path, CLUSTER, INVENTORY, stop_grace_seconds=1.0)
    yield make
    stop_jobs(make.services)


def job(name, gpus, flavor, seconds=600, max_runtime="1h"):
    return {"name": name, "gpus": gpus, "flavor": flavor, "maxRuntime": max_runtime,
            "command": [sys.executable, "-c", f"import time; time.sleep({seconds})"]}


def wait(svc, pred, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def get(svc, name):
    return svc.get_workload("lab", name)


def scene(svc):
    """gpu-a full for an hour (alice's 4-GPU blocker); gpu-b: 2 of 4 GPUs held by bob for at most
    10 min. alice's 4-GPU job pinned to gpu-a waits an hour; on gpu-b it would start in ~10 min."""
    svc.submit(job("blocker", 4, "gpu-a"), user="alice")
    svc.submit(job("other", 2, "gpu-b", max_runtime="10m"), user="bob")
    wait(svc, lambda: get(svc, "blocker")["state"] == get(svc, "other")["state"] == "Running")
    svc.submit(job("wide", 4, "gpu-a"), user="alice")
    wait(svc, lambda: get(svc, "wide")["reason"] == "NoFit")


def test_a_faster_option_keeps_the_size_or_says_plainly_that_it_changes_it(env):
    svc = env()
    scene(svc)
    svc.submit(job("wide-any", 4, "any"), user="alice")  # 4 GPUs of any flavor: none before ~10 min
    wait(svc, lambda: get(svc, "wide-any")["reason"] == "NoFit")
    svc.estimates.refresh_now()
    # pinned to gpu-a: the same size on gpu-b, not "2 GPUs ... is free now"
    opts = get(svc, "wide")["fasterOptions"]
    assert [(o["gpus"], o["flavor"], o["changesSize"]) for o in opts] == [(4, "gpu-b", False)], opts
    assert opts[0]["summary"].startswith("4 × gpu-b would start in ~"), opts[0]
    assert opts[0]["move"] == {"gpus": 4, "flavor": "gpu-b"}
    # any flavor: only fewer GPUs start sooner, and the sentence says that the size changes
    opts = get(svc, "wide-any")["fasterOptions"]
    assert opts and all(o["changesSize"] and o["gpus"] < 4 for o in opts), opts
    for o in opts:
        n = o["gpus"]
        assert o["summary"].startswith(f"runs on {n} GPU{'s' if n > 1 else ''} instead of 4: free now, starts at once, $"), o
        assert o["move"] == {"gpus": n, "flavor": "any"}


def test_a_pending_job_moves_in_place_keeping_its_identity_and_history(env):
    svc = env()
    scene(svc)
    before = get(svc, "wide")
    svc.cancel("lab", "other", user="bob")
    wait(svc, lambda: svc.scheduler.allocator.by_workload.get("lab/other") is None)

    # refusals change nothing
    with pytest.raises(Forbidden):
        svc.move_workload("lab", "wide", user="bob", data={"flavor": "gpu-b"})
    for data, field in (({"flavor": "gpu-z"}, "flavor"), ({"gpus": 9}, "gpus"), ({"gpus": 0}, "gpus"),
                        ({"priorityClass": "high"}, "priorityClass"), ({}, "body"), ([], "body")):
        with pytest.raises(ValidationError) as e:
            svc.move_workload("lab", "wide", user="alice", data=data)
        assert e.value.field == field, (data, e.value)
    with pytest.raises(Conflict) as e:  # nothing to move
        svc.move_workload("lab", "wide", user="alice", data={"flavor": "gpu-a"})
    assert e.value.field == "body"
    same = get(svc, "wide")
    assert (same["podSets"], same["moves"], same["state"]) == (before["podSets"], [], "Pending")

    w = svc.move_workload("lab", "wide", user="alice", data=before["fasterOptions"][0]["move"]
                          if before["fasterOptions"] and not before["fasterOptions"][0]["changesSize"]
                          else {"flavor": "gpu-b"})
    assert (w["uid"], w["createdAt"], w["state"]) == (before["uid"], before["createdAt"], "Pending")
    assert w["moves"][0]["from"] == "4 × gpu-a" and w["moves"][0]["to"] == "4 × gpu-b"
    wait(svc, lambda: get(svc, "wide")["state"] == "Running")
    w = get(svc, "wide")
    assert w["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "gpu-b"
    # placed on box-b's four GPUs, and its process runs
    assert [(p["node"], sorted(p["devices"])) for p in w["placement"]] == [("box-b", ["0", "1", "2", "3"])]
    assert w["uid"] in svc.backend.running()
    events = [e["type"] for e in svc.timeline("lab", "wide")["events"]]
    assert events[:2] == ["Submitted", "Moved"] and "Admitted" in events
    # exactly one workload of that name, in the ledger too
    rows = [r for r in svc.ledger.list_workloads() if r["name"] == "wide"]
    assert len(rows) == 1 and rows[0]["spec"]["flavor"] == "gpu-b"

    # no longer pending: 409 naming the state, nothing changed
    with pytest.raises(Conflict) as e:
        svc.move_workload("lab", "wide", user="alice", data={"gpus": 2, "flavor": "gpu-b"})
    assert e.value.field == "state"
    assert get(svc, "wide")["podSets"][0]["requests"]["nvidia.com/gpu"] == "4"


def test_a_move_is_kept_across_a_restart_and_keeps_the_place_in_the_queue(env):
    svc = env()
    scene(svc)
    svc.submit(job("later", 4, "gpu-a"), user="alice")
    wait(svc, lambda: get(svc, "later")["positionInClusterQueue"] is not None)
    svc.move_workload("lab", "wide", user="alice", data={"gpus": 2, "flavor": "gpu-b"})
    w = get(svc, "wide")
    assert w["positionInClusterQueue"] == 0 and get(svc, "later")["positionInClusterQueue"] == 1
    svc2 = env()
    w2 = get(svc2, "wide")
    assert (w2["uid"], w2["podSets"][0]["requests"]["nvidia.com/gpu"], len(w2["moves"])) == (w["uid"], "2", 1)
    wait(svc2, lambda: get(svc2, "wide")["state"] == "Running")  # 2 GPUs of gpu-b are free


# -- the REST endpoint (the demo queue: team-a has 4 A100s and 2 L4s of its own) ------------------


async def test_post_move_answers_the_documented_workload_and_refuses_with_the_field(jp_fetch, started, check_schema):
    from test_rest import call, ok, wait_for_state

    def req(name, gpus, flavor):
        return {"name": name, "gpus": gpus, "flavor": flavor, "maxRuntime": "1h",
                "command": [sys.executable, "-c", "import time; time.sleep(600)"]}

    await ok(jp_fetch, "workloads", method="POST", body=req("hold", 4, "nvidia-a100"), expect=201)
    await wait_for_state(jp_fetch, "team-a", "hold", ("Running",))
    try:
        pending = await ok(jp_fetch, "workloads", method="POST", body=req("wide", 4, "nvidia-a100"), expect=201)
        status, err, _ = await call(jp_fetch, "workloads", "team-a", "wide", "move", method="POST",
                                    body={"flavor": "nvidia-x"})
        assert (status, err["field"]) == (400, "flavor"), err
        status, err, _ = await call(jp_fetch, "workloads", "team-a", "wide", "move", method="POST",
                                    body={"gpus": 2, "flavor": "nvidia-l4", "priorityClass": "x"})
        assert (status, err["field"]) == (400, "priorityClass"), err
        w = await ok(jp_fetch, "workloads", "team-a", "wide", "move", method="POST",
                     body={"gpus": 2, "flavor": "nvidia-l4"})
        check_schema("Workload", w)
        assert (w["uid"], w["createdAt"]) == (pending["uid"], pending["createdAt"])
        assert w["moves"][-1]["from"] == "4 × nvidia-a100" and w["moves"][-1]["to"] == "2 × nvidia-l4"
        w = await wait_for_state(jp_fetch, "team-a", "wide", ("Running",))
        assert w["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "nvidia-l4"
        status, err, _ = await call(jp_fetch, "workloads", "team-a", "wide", "move", method="POST", body={"gpus": 1})
        assert (status, err["field"]) == (409, "state"), err
        timeline = await ok(jp_fetch, "workloads", "team-a", "wide", "timeline")
        check_schema("Timeline", timeline)
        assert [e["type"] for e in timeline["events"]][:2] == ["Submitted", "Moved"]
    finally:
        for name in ("hold", "wide"):
            await call(jp_fetch, "workloads", "team-a", name, method="DELETE")


# -- a crash in the middle of a move (GPUQUEUE_FAILPOINT=move:…, ledger/failpoints.py) ------------


@pytest.fixture(scope="module")
def launcher():
    from servertools import Launcher

    la = Launcher(zygote=True)  # servers forked from a preloaded zygote: starts in a fraction of the time
    yield la
    la.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before", "after"])
def test_a_crash_in_the_middle_of_a_move_leaves_exactly_one_workload(tmp_path, launcher, point):
    import sqlite3

    from servertools import ServerSetup

    setup = ServerSetup(tmp_path, CLUSTER, INVENTORY)
    srv = launcher.start(setup)
    try:
        for name, gpus, flavor in (("blocker", 4, "gpu-a"), ("wide", 4, "gpu-a")):
            r = srv.request("POST", "workloads", json=dict(job(name, gpus, flavor), localQueue="lab/q"))
            assert r.status_code == 201, r.text
        deadline = time.monotonic() + 60
        while srv.request("GET", "workloads/lab/blocker").json()["state"] != "Running":
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.1)
        uid = srv.request("GET", "workloads/lab/wide").json()["uid"]
        srv.stop()
        env = setup.env
        setup.env = lambda: {**env(), "GPUQUEUE_FAILPOINT": f"move:{point}"}
        srv = launcher.start(setup)
        setup.env = env
        with pytest.raises(Exception):  # the server dies inside the request: never answered
            srv.request("POST", "workloads/lab/wide/move", json={"flavor": "gpu-b"}, timeout=30)
        deadline = time.monotonic() + 30
        while srv.alive():
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.05)
        srv.kill9()
        assert f"failpoint move:{point}" in srv.log_path.read_text(errors="replace")
        srv = launcher.start(setup)  # unarmed
        # the truth is the ledger: one row, moved exactly when the kill came after the commit
        with sqlite3.connect(setup.db_path) as db:
            rows = db.execute("SELECT uid, spec FROM workloads WHERE namespace = 'lab' AND name = 'wide'").fetchall()
        assert [r[0] for r in rows] == [uid]
        w = srv.request("GET", "workloads/lab/wide").json()
        assert w["uid"] == uid and len(w["moves"]) == (1 if point == "after" else 0), w
        deadline = time.monotonic() + 60
        while point == "after" and w["state"] != "Running":  # the moved workload starts on gpu-b
            assert time.monotonic() < deadline, (w, srv.log_tail())
            time.sleep(0.1)
            w = srv.request("GET", "workloads/lab/wide").json()
        listed = [x for x in srv.request("GET", "workloads").json()["items"] if x["name"] == "wide"]
        assert len(listed) == 1
    finally:
        for name in ("blocker", "wide"):
            try:
                srv.request("DELETE", f"workloads/lab/{name}")
            except Exception:  # noqa: BLE001
                pass
        srv.stop()


def test_a_move_request_replaces_only_what_it_names_and_gpus_and_mig_replace_each_other():
    from jupyter_gpuqueue.service.moves import Moves, request_words

    gpu = {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 4}}], "flavor": "gpu-a"}
    mig = {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/mig-1g.10gb": 1}}], "flavor": "any"}
    assert Moves._request(gpu, {"flavor": "gpu-b"}) == {"flavor": "gpu-b", "gpus": 4}
    assert Moves._request(gpu, {"gpus": 2}) == {"flavor": "gpu-a", "gpus": 2}
    assert Moves._request(gpu, {"migProfile": "2g.20gb"}) == {"flavor": "gpu-a", "migProfile": "2g.20gb"}
    assert Moves._request(mig, {"gpus": 1, "flavor": "any"}) == {"flavor": "any", "gpus": 1}
    assert Moves._request(mig, {"migProfile": "3g.40gb"}) == {"flavor": "any", "migProfile": "3g.40gb"}
    assert (request_words(gpu), request_words(mig)) == ("4 × gpu-a", "MIG 1g.10gb")
    assert request_words(dict(gpu, flavor="any")) == "4 GPUs (any flavor)"
