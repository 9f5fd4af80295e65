"""Idle notebook GPU reclaim (service/idle.py) in a real QueueService: real SQLite ledger, real
restarts, real local processes for the job that waits for the GPU, and a fake clock (the
service's and the lease backend's) so that 10-minute timeouts take no time. The activity source
is the seam: a fake Hub answering each owner's last activity (the real Hub is in
tests/hub/test_idle_reclaim_hub.py).

A lease of a team whose policy is on, idle for idleTimeoutSeconds, gets idleDeadline (warning),
may be kept (idleKeepsLeft, 409 when none is left or no warning runs), and at the deadline is
released as at its end (Succeeded, reason IdleReclaimed): the waiting job gets the GPU in the
same tick, and the GPU-hours reclaimed show in the teams report and in Prometheus."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import datetime, timezone

import pytest
from servicetools import service_factory, stop_jobs

from jupyter_gpuqueue.errors import Conflict, Forbidden, NotFound, ValidationError
from jupyter_gpuqueue.service.idle import parse_policy, parse_timestamp

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
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
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: lab}
spec: {clusterQueue: cq-lab}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: other}
spec: {clusterQueue: cq-lab}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: development}
value: 1000
preemptionPolicy: Never
"""

INVENTORY = """
nodes:
- name: box-a
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
"""

PY = sys.executable
POLICY = {"idleTimeoutSeconds": 600, "warnSeconds": 300, "maxKeeps": 1, "utilizationBelowPercent": 5}


class FakeHub:
    """The activity source: each owner's last activity as the Hub would report it."""

    def __init__(self):
        self.last: dict[str, float] = {}
        self.calls: list[list[str]] = []
        self.down = False

    async def __call__(self, users):
        self.calls.append(list(users))
        if self.down:
            raise OSError("hub unreachable")
        return {u: self.last[u] for u in users if u in self.last}


class Clock:
    def __init__(self):
        self.t = float(int(time.time()))

    def __call__(self):
        return self.t


@pytest.fixture
def env(tmp_path):
    make = service_factory(tmp_path, CLUSTER, INVENTORY, stop_grace_seconds=1.0)
    clock, hub = Clock(), FakeHub()

    def build(**kw):
        svc = make(**kw)
        svc.clock = clock
        svc.backend.clock = clock  # the lease backend: a release happens at the service's time
        svc.idle.activity_source = hub
        return svc

    yield build, clock, hub
    stop_jobs(make.services)


def step(svc, clock, dt=0.0, refresh=True):
    """Advance the clock by ``dt``, read the activity (as the 30 s poll would), run one tick."""
    clock.t += dt
    if refresh:
        asyncio.run(svc.idle.refresh())
    svc.tick()


def get(svc, name, ns="lab"):
    return svc.get_workload(ns, name)


def running_lease(svc, clock, hub, name="nb", user="alice", ns="lab", server=None):
    body = {"kind": "NotebookLease", "name": name, "gpus": 1, "maxRuntimeSeconds": 8 * 3600, "localQueue": f"{ns}/q"}
    if server is not None:
        body["notebookServer"] = server
    svc.submit(body, user=user)
    for _ in range(5):
        step(svc, clock, refresh=False)
    w = get(svc, name, ns)
    assert w["state"] == "Running", w
    hub.last[user] = w["startedAt"]  # the server's last activity: its start
    return w


def test_idle_lease_is_warned_kept_once_then_released_and_its_gpu_goes_to_the_waiting_job(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    events = []
    svc.subscribe(events.append)
    lease = running_lease(svc, clock, hub)
    assert lease["idleDeadline"] is None and lease["idleKeepsLeft"] == 1
    svc.submit({"name": "train", "command": [PY, "-c", "import time; time.sleep(30)"], "gpus": 2}, user="bob")
    step(svc, clock)
    assert get(svc, "train")["state"] == "Pending"

    step(svc, clock, 599)  # 599 s idle: nothing yet
    assert get(svc, "nb")["idleDeadline"] is None
    step(svc, clock, 1)  # 600 s: the warning, deadline = now + warnSeconds
    w = get(svc, "nb")
    assert w["state"] == "Running" and w["idleDeadline"] == clock.t + 300 and w["idleKeepsLeft"] == 1
    assert any(e["type"] == "workload" and e["workload"]["name"] == "nb" and e["workload"]["idleDeadline"] == w["idleDeadline"]
               for e in events), "the warning went out on the event stream (JupyterLab shows it)"

    # Only the owner may keep it; keeping restarts the clock and spends the one keep.
    with pytest.raises(Forbidden):
        svc.keep_gpu("lab", "nb", user="bob")
    step(svc, clock, 200)
    kept = svc.keep_gpu("lab", "nb", user="alice")
    assert kept["idleDeadline"] is None and kept["idleKeepsLeft"] == 0
    with pytest.raises(Conflict, match="no idle warning"):
        svc.keep_gpu("lab", "nb", user="alice")
    kept_at = clock.t
    step(svc, clock, 599)
    assert get(svc, "nb")["idleDeadline"] is None  # counted from the keep, not from the start
    step(svc, clock, 1)
    deadline = get(svc, "nb")["idleDeadline"]
    assert deadline == kept_at + 600 + 300
    with pytest.raises(Conflict, match="no keeps left"):
        svc.keep_gpu("lab", "nb", user="alice")

    step(svc, clock, 299)
    assert get(svc, "nb")["state"] == "Running" and get(svc, "train")["state"] == "Pending"
    step(svc, clock, 1)  # the deadline: released, and the GPU goes to the waiting job in this tick
    done = get(svc, "nb")
    assert done["state"] == "Succeeded" and done["reason"] == "IdleReclaimed"
    assert "idle notebook reclaim" in done["message"]
    assert done["finishedAt"] == deadline and done["idleDeadline"] is None
    (iv,) = svc.ledger.intervals(done["uid"])
    assert iv["end"] == deadline  # billing stops at the release
    assert get(svc, "train")["state"] in ("Admitted", "Running")
    # GPU-hours reclaimed: 1 GPU × from the release to the lease's scheduled end.
    expected = (lease["startedAt"] + 8 * 3600 - deadline) / 3600
    rec = svc.ledger.get_workload(done["uid"])
    assert rec["run"]["idleReclaimed"]["gpuHours"] == pytest.approx(expected)
    report = svc.report("teams")
    lab = next(t for t in report["items"] if t["namespace"] == "lab")
    assert lab["idleReclaimedGpuHours"] == pytest.approx(expected) and lab["idleReclaims"] == 1
    other = next(t for t in report["items"] if t["namespace"] == "other")
    assert other["idleReclaimedGpuHours"] == 0.0


def test_activity_ends_a_warning_and_unknown_or_stale_activity_never_releases(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    running_lease(svc, clock, hub)
    step(svc, clock, 600)
    assert get(svc, "nb")["idleDeadline"] is not None
    # A kernel execution during the warning (the Hub's last_activity moves): the warning ends.
    hub.last["alice"] = clock.t + 100
    step(svc, clock, 100)
    assert get(svc, "nb")["idleDeadline"] is None and get(svc, "nb")["idleKeepsLeft"] == 1
    step(svc, clock, 600)
    assert get(svc, "nb")["idleDeadline"] == clock.t + 300
    # The Hub goes away: the lease is not released on what was last known, however long it lasts.
    hub.down = True
    for _ in range(20):
        step(svc, clock, 300)
    assert get(svc, "nb")["state"] == "Running"
    hub.down = False
    step(svc, clock, 1)  # known again (still idle, deadline long past): released now
    assert get(svc, "nb")["reason"] == "IdleReclaimed"

    # A user the Hub knows nothing about (no server): never warned.
    running_lease(svc, clock, hub, name="nb2", user="zoe")
    del hub.last["zoe"]
    svc.idle._activity.pop("zoe", None)
    for _ in range(5):
        step(svc, clock, 600)
    assert get(svc, "nb2")["state"] == "Running" and get(svc, "nb2")["idleDeadline"] is None


def test_gpu_busy_above_the_threshold_is_not_idle_where_nvml_answers(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    rates = {"p": 80.0}
    svc.costs.utilization_sampler = lambda uuids: {u: rates["p"] for u in uuids}
    svc.costs.utilization_interval = 30.0
    running_lease(svc, clock, hub)
    for _ in range(30):  # 30 min of a training cell: no request, no new activity, GPU at 80 %
        step(svc, clock, 60)
    assert get(svc, "nb")["idleDeadline"] is None
    busy_until = clock.t
    rates["p"] = 1.0  # the cell finished: the GPU is idle
    for _ in range(9):
        step(svc, clock, 60)
    assert get(svc, "nb")["idleDeadline"] is None
    step(svc, clock, 60)
    w = get(svc, "nb")
    assert w["idleDeadline"] is not None and clock.t - busy_until >= 600  # idle from the last busy sample


def test_policies_are_validated_stored_audited_and_off_by_default(env):
    build, clock, hub = env
    svc = build()
    view = svc.idle.policies_view()
    assert view["default"]["idleTimeoutSeconds"] is None and view["minimumTimeoutSeconds"] == 300
    assert [t["namespace"] for t in view["teams"]] == ["lab", "other"]
    running_lease(svc, clock, hub)
    for _ in range(5):
        step(svc, clock, 3600)
    w = get(svc, "nb")
    assert w["state"] == "Running" and w["idleDeadline"] is None and w["idleKeepsLeft"] is None  # off

    for body, field in [({"idleTimeoutSeconds": 299}, "idleTimeoutSeconds"),
                        ({"idleTimeoutSeconds": "10m"}, "idleTimeoutSeconds"),
                        ({"idleTimeoutSeconds": 600, "warnSeconds": 0}, "warnSeconds"),
                        ({"idleTimeoutSeconds": 600, "maxKeeps": -1}, "maxKeeps"),
                        ({"idleTimeoutSeconds": 600, "maxKeeps": True}, "maxKeeps"),
                        ({"idleTimeoutSeconds": 600, "utilizationBelowPercent": 101}, "utilizationBelowPercent"),
                        ({"idleTimeout": 600}, "idleTimeout"),
                        ({"idleTimeoutSeconds": 600, "onIdle": "suspend"}, "onIdle"),
                        ({"idleTimeoutSeconds": 600, "onIdle": None}, "onIdle"),
                        ([600], "body")]:
        with pytest.raises(ValidationError) as e:
            svc.idle.set_policy("lab", body, actor="ada")
        assert e.value.field == field, (body, e.value)
    with pytest.raises(NotFound) as e:
        svc.idle.set_policy("nope", POLICY, actor="ada")
    assert e.value.field == "namespace"
    assert svc.ledger.audit_log()[1] == 0 and svc.idle.policy("lab")["idleTimeoutSeconds"] is None  # nothing changed

    out = svc.idle.set_policy("lab", {"idleTimeoutSeconds": 900}, actor="ada")
    lab = next(t for t in out["teams"] if t["namespace"] == "lab")
    assert lab["policy"] == {"idleTimeoutSeconds": 900, "warnSeconds": 600, "maxKeeps": 3, "utilizationBelowPercent": 5,
                             "onIdle": "stop"}
    assert lab["stored"] and lab["updatedBy"] == "ada"
    (entry,), _ = svc.ledger.audit_log()
    assert (entry["operation"], entry["target"], entry["actor"]) == ("set-idle-policy", "namespace/lab", "ada")
    assert entry["before"]["idleTimeoutSeconds"] is None and entry["after"]["idleTimeoutSeconds"] == 900
    assert get(svc, "nb")["idleKeepsLeft"] == 3

    # Stored: a restart keeps it; DELETE brings back the default.
    svc.ledger.close()
    svc2 = build()
    assert svc2.idle.policy("lab")["idleTimeoutSeconds"] == 900
    svc2.idle.delete_policy("lab", actor="ada")
    assert svc2.idle.policy("lab")["idleTimeoutSeconds"] is None
    assert svc2.ledger.audit_log()[0][0]["operation"] == "delete-idle-policy"


def test_a_restart_keeps_the_warning_deadline_and_the_keeps_used(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", {**POLICY, "maxKeeps": 2}, actor="ada")
    running_lease(svc, clock, hub)
    step(svc, clock, 600)
    svc.keep_gpu("lab", "nb", user="alice")
    step(svc, clock, 600)
    deadline = get(svc, "nb")["idleDeadline"]
    assert deadline is not None
    svc.ledger.close()
    svc2 = build()  # the same ledger, a fresh service: activity unknown until the Hub is read
    svc2.tick()
    w = get(svc2, "nb")
    assert w["idleDeadline"] == deadline and w["idleKeepsLeft"] == 1
    step(svc2, clock, 100)
    assert get(svc2, "nb")["idleDeadline"] == deadline  # not pushed back by the restart
    step(svc2, clock, 200)
    assert get(svc2, "nb")["reason"] == "IdleReclaimed" and get(svc2, "nb")["finishedAt"] == deadline


def test_default_policy_from_the_app_and_its_errors(env):
    build, clock, hub = env
    svc = build()
    svc.idle.configure({"idleTimeoutSeconds": 1200, "maxKeeps": 0}, minimum_timeout=300)
    assert svc.idle.policy("other") == {"idleTimeoutSeconds": 1200, "warnSeconds": 600, "maxKeeps": 0,
                                        "utilizationBelowPercent": 5, "onIdle": "stop"}
    with pytest.raises(ValidationError) as e:
        svc.idle.configure({"idleTimeoutSeconds": 60})
    assert e.value.field == "idleTimeoutSeconds"
    svc.idle.configure(minimum_timeout=30)
    assert parse_policy({"idleTimeoutSeconds": 60}, minimum_timeout=30)["idleTimeoutSeconds"] == 60
    assert parse_timestamp("2026-11-03T10:00:00.000000Z") == datetime(2026, 11, 3, 10, tzinfo=timezone.utc).timestamp()
    assert parse_timestamp(None) is None and parse_timestamp("yesterday") is None


def test_keep_gpu_errors(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    with pytest.raises(NotFound):
        svc.keep_gpu("lab", "nope", user="alice")
    svc.submit({"name": "job", "command": [PY, "-c", "import time; time.sleep(30)"], "gpus": 1}, user="alice")
    step(svc, clock)
    with pytest.raises(Conflict, match="not a running notebook lease"):
        svc.keep_gpu("lab", "job", user="alice")


def test_on_idle_release_ends_the_lease_and_says_the_server_goes_on_where_its_spawner_can(env):
    """``onIdle: "release"``: the lease ends as with "stop" (its GPU to the next workload), and the
    view says what the spawner and the server extension act on: ``idleAction`` "release" for a
    lease whose spawner can keep the server without GPUs, "stop" for one that cannot (KubeSpawner)."""
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", {**POLICY, "maxKeeps": 0, "onIdle": "release"}, actor="ada")
    local = running_lease(svc, clock, hub, name="nb", server={"name": "exp2", "goesOnWithoutGpus": True})
    pod = running_lease(svc, clock, hub, name="pod", server={"name": "", "goesOnWithoutGpus": False})
    assert local["notebookServer"] == {"name": "exp2", "goesOnWithoutGpus": True}
    assert (local["idleAction"], pod["idleAction"]) == ("release", "stop")
    hub.last["alice"] = {"exp2": local["startedAt"], "": pod["startedAt"]}
    step(svc, clock, 600)
    warned = get(svc, "nb")
    assert warned["idleDeadline"] == clock.t + 300 and warned["idleSince"] == local["startedAt"]
    step(svc, clock, 300)
    done, stopped = get(svc, "nb"), get(svc, "pod")
    assert (done["state"], done["reason"], done["idleAction"]) == ("Succeeded", "IdleReclaimed", "release")
    assert "the notebook server goes on without GPUs" in done["message"]
    assert done["idleSince"] == local["startedAt"]
    assert (stopped["reason"], stopped["idleAction"]) == ("IdleReclaimed", "stop")
    assert "goes on" not in stopped["message"]


def test_a_named_server_lease_counts_its_own_servers_activity(env):
    """Two servers of one user, one lease each: the activity of one does not keep the other's GPU."""
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    a = running_lease(svc, clock, hub, name="nb-a", server={"name": ""})
    b = running_lease(svc, clock, hub, name="nb-b", server={"name": "exp2"})
    assert a["name"] == "nb-a" and b["notebookServer"] == {"name": "exp2", "goesOnWithoutGpus": False}
    hub.last["alice"] = {"": a["startedAt"], "exp2": a["startedAt"]}
    step(svc, clock, 300)
    hub.last["alice"] = {"": a["startedAt"], "exp2": clock.t}  # a cell ran in exp2 only
    step(svc, clock, 300)
    assert get(svc, "nb-a")["idleDeadline"] is not None
    assert get(svc, "nb-b")["idleDeadline"] is None
    with pytest.raises(ValidationError) as e:
        svc.submit({"kind": "NotebookLease", "gpus": 1, "notebookServer": {"name": "a/b"}}, user="alice")
    assert e.value.field == "notebookServer.name"
    with pytest.raises(ValidationError) as e:
        svc.submit({"kind": "NotebookLease", "gpus": 1, "notebookServer": {"goesOn": True}}, user="alice")
    assert e.value.field == "notebookServer.goesOn"
    with pytest.raises(ValidationError) as e:
        svc.submit({"command": [PY, "-c", "0"], "gpus": 1, "notebookServer": {"name": ""}}, user="alice")
    assert e.value.field == "notebookServer"
    named = svc.submit({"kind": "NotebookLease", "gpus": 1, "notebookServer": {"name": "Exp 2"}}, user="alice")
    assert named["name"].startswith("notebook-exp-2-"), named["name"]


def report(svc, user="alice", name="nb", **body):
    """What alice's notebook server sends every $GPUQUEUE_ACTIVITY_INTERVAL (server/activity.py)."""
    return svc.report_lease_activity("lab", name, user=user, data=body)


def test_a_reporting_server_decides_an_open_tab_is_not_activity_and_a_busy_kernel_is(env):
    """Issue 31 item 5: the Hub's last_activity moves with an open tab's polling (here: every
    step); once the server reports its own activity, only that counts. A kernel executing keeps the
    GPU however long it runs; its end starts the idle clock."""
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    w = running_lease(svc, clock, hub)

    def tab_polls():
        hub.last["alice"] = clock.t  # the tab's REST polling as the Hub sees it

    # A kernel busy in a loop for two hours, no tab polling: never warned.
    assert report(svc, busy=True, idleSeconds=0) == {"busy": True, "lastActivity": clock.t}
    for _ in range(24):
        step(svc, clock, 300)
        report(svc, busy=True, idleSeconds=0)
    assert get(svc, "nb")["idleDeadline"] is None
    # The loop ends; the tab stays open and polls: the server says idle, the Hub active.
    ended = clock.t
    for _ in range(19):
        step(svc, clock, 30)
        tab_polls()
        report(svc, busy=False, idleSeconds=clock.t - ended)
    assert get(svc, "nb")["idleDeadline"] is None  # 570 s
    step(svc, clock, 30)
    report(svc, busy=False, idleSeconds=clock.t - ended)
    tab_polls()
    step(svc, clock)
    warned = get(svc, "nb")
    assert warned["idleDeadline"] == clock.t + 300 and warned["idleSince"] == ended
    # An execution during the warning ends it at once (the server reports as it starts).
    report(svc, busy=True, idleSeconds=0)
    svc.tick()
    assert get(svc, "nb")["idleDeadline"] is None
    ended = clock.t
    while get(svc, "nb")["state"] == "Running":  # idle again, with the tab open all along
        assert clock.t - ended <= 900, "not released 600 s + 300 s after the last execution"
        report(svc, busy=False, idleSeconds=clock.t - ended)
        step(svc, clock, 30)
        tab_polls()
    assert clock.t - ended == 900
    done = get(svc, "nb")
    assert (done["state"], done["reason"]) == ("Succeeded", "IdleReclaimed"), done
    assert done["idleSince"] == ended
    with pytest.raises(Conflict, match="not a running notebook lease"):
        report(svc, busy=False, idleSeconds=0)  # the server stops reporting then
    assert w["uid"] not in svc.idle.reports.by_uid or svc.tick() is None


def test_reports_that_stop_or_a_restart_never_release_and_the_hub_is_no_longer_asked(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    running_lease(svc, clock, hub)
    report(svc, busy=False, idleSeconds=0)
    start = clock.t
    step(svc, clock, 60)
    report(svc, busy=False, idleSeconds=60)
    # The server stops reporting (it hangs, the network breaks): stale after 90 s, nothing happens,
    # although the Hub (an old last_activity) would call it idle.
    hub.last["alice"] = start - 3600
    for _ in range(10):
        step(svc, clock, 600)
    assert get(svc, "nb")["idleDeadline"] is None and get(svc, "nb")["state"] == "Running"
    assert not any("alice" in c for c in hub.calls), "the Hub is asked about a server that reports its own activity"
    # A restart of the service: the lease's server reported before (kept in its run record), so
    # the Hub is not used for it; the first report after the restart decides.
    svc.ledger.close()
    svc2 = build()
    for _ in range(3):
        step(svc2, clock, 600)
    assert get(svc2, "nb")["idleDeadline"] is None
    report(svc2, busy=False, idleSeconds=700)
    svc2.tick()
    assert get(svc2, "nb")["idleDeadline"] == clock.t + 300


def test_a_lease_whose_server_never_reports_falls_back_to_the_hub(env):
    """KubeSpawner pods without the extension, other clients' leases: the Hub's last_activity."""
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    running_lease(svc, clock, hub, name="nb")
    running_lease(svc, clock, hub, name="pod")
    hub.last["alice"] = clock.t
    report(svc, busy=True, idleSeconds=0)  # only nb's server reports
    for _ in range(5):
        step(svc, clock, 60)
        report(svc, busy=True, idleSeconds=0)
    step(svc, clock, 300)
    report(svc, busy=True, idleSeconds=0)
    svc.tick()
    assert get(svc, "pod")["idleDeadline"] is not None  # the Hub: idle for 600 s
    assert get(svc, "nb")["idleDeadline"] is None  # its kernel executes


def test_activity_report_errors_change_nothing(env):
    build, clock, hub = env
    svc = build()
    svc.idle.set_policy("lab", POLICY, actor="ada")
    running_lease(svc, clock, hub)
    with pytest.raises(NotFound):
        report(svc, name="nope", busy=True)
    with pytest.raises(Forbidden):
        report(svc, user="bob", busy=True)
    for body, field in [({}, "busy"), ({"busy": "yes"}, "busy"), ({"busy": 1}, "busy"),
                        ({"busy": False, "idleSeconds": -1}, "idleSeconds"),
                        ({"busy": False, "idleSeconds": float("nan")}, "idleSeconds"),
                        ({"busy": False, "idleSeconds": True}, "idleSeconds"),
                        ({"busy": False, "idleSeconds": "10"}, "idleSeconds"),
                        ({"busy": False, "lastActivity": 0}, "lastActivity")]:
        with pytest.raises(ValidationError) as e:
            report(svc, **body)
        assert e.value.field == field, (body, e.value)
    with pytest.raises(ValidationError) as e:
        svc.report_lease_activity("lab", "nb", user="alice", data=[True])
    assert e.value.field == "body"
    assert not svc.idle.reports.by_uid and not (svc.ledger.find_workload("lab", "nb")["run"] or {}).get("idle", {}).get(
        "serverReports")
    svc.submit({"name": "job", "command": [PY, "-c", "import time; time.sleep(30)"], "gpus": 1}, user="alice")
    step(svc, clock)
    with pytest.raises(Conflict, match="not a running notebook lease"):
        report(svc, name="job", busy=False)
    assert report(svc, busy=False) == {"busy": False, "lastActivity": None}  # none since it started
