"""What a hub admin looks for (issue 34, items 10 and 11): a cap on the maximum run time per team,
wait times and preemption losses per team, and the owner and running time of every device.

A real QueueService with its SQLite ledger and local processes (tests/servicetools.py), and the
REST API of a real Jupyter server for the admin endpoints, the trait and the OpenAPI shapes."""

from __future__ import annotations

import sys
import time

import pytest
from servicetools import service_factory, stop_jobs
from test_preemption_view import PREEMPTING
from test_rest import call, check_schema, ok, openapi_doc  # noqa: F401 (fixtures)
from test_service import INVENTORY, state, wait

from jupyter_gpuqueue.errors import Conflict, NotFound, ValidationError

PY = sys.executable


@pytest.fixture
def make(tmp_path):
    build = service_factory(tmp_path, PREEMPTING, INVENTORY, default_local_queue="one/q", stop_grace_seconds=0.5,
                            prices={"gpu-a": 3.6})
    yield build
    stop_jobs(build.services, grace=0.2)


def sleeper(seconds: float, **extra) -> dict:
    return {"command": [PY, "-c", f"import time; time.sleep({seconds})"], "flavor": "gpu-a", **extra}


# -- the cap on the maximum run time ----------------------------------------------------------------


def test_a_team_cap_refuses_a_longer_run_names_the_field_and_changes_nothing(make):
    svc = make()
    view = svc.runtime_caps.set_cap("one", {"maxRuntimeSeconds": 86400}, actor="admin")
    assert next(t for t in view["teams"] if t["namespace"] == "one")["maxRuntimeSeconds"] == 86400
    before = len(svc.ledger.list_workloads())
    for request, field in (({"maxRuntime": "999d"}, "maxRuntime"), ({"maxRuntimeSeconds": 86401}, "maxRuntimeSeconds")):
        with pytest.raises(ValidationError) as e:
            svc.submit(sleeper(1, name="long", **request), user="alice")
        assert e.value.field == field
        assert "at most 1 d (86400 s)" in str(e.value) and "team one" in str(e.value)
        with pytest.raises(ValidationError) as e:  # the form's cost preview says the same
            svc.estimate(sleeper(1, **request), user="alice")
        assert e.value.field == field
    assert len(svc.ledger.list_workloads()) == before  # nothing stored
    # at the cap: accepted; none asked: the default (1 h), at most the cap; another team: no cap
    assert svc.submit(sleeper(0, name="day", maxRuntime="1d"), user="alice")["maxRuntimeSeconds"] == 86400
    svc.runtime_caps.set_cap("one", {"maxRuntimeSeconds": 600}, actor="admin")
    assert svc.submit(sleeper(0, name="default"), user="alice")["maxRuntimeSeconds"] == 600
    assert svc.submit(sleeper(0, name="other", localQueue="two/q", maxRuntime="999d"),
                      user="bob")["maxRuntimeSeconds"] == 999 * 86400
    # /info tells the form; the change is audited; it survives a restart
    assert {q["namespace"]: q["maxRuntimeSeconds"] for q in svc.info("alice")["localQueues"]}["one"] == 600
    entry = svc.ledger.audit_log(1)[0][0]
    assert entry["operation"] == "set-runtime-cap" and entry["actor"] == "admin"
    assert entry["before"] == {"maxRuntimeSeconds": 86400} and entry["after"] == {"maxRuntimeSeconds": 600}
    svc.ledger.close()
    again = make()
    assert again.runtime_caps.cap("one") == 600
    again.runtime_caps.delete_cap("one", actor="admin")
    assert again.runtime_caps.cap("one") is None


def test_bad_caps_are_refused_naming_the_field(make):
    svc = make()
    for body, field in (({"maxRuntimeSeconds": 0}, "maxRuntimeSeconds"), ({"maxRuntimeSeconds": 1.5}, "maxRuntimeSeconds"),
                        ({"maxRuntimeSeconds": "1d"}, "maxRuntimeSeconds"), ({"maxRuntimeSeconds": True}, "maxRuntimeSeconds"),
                        ({}, "maxRuntimeSeconds"), ({"maxRuntimeSeconds": 60, "x": 1}, "x")):
        with pytest.raises(ValidationError) as e:
            svc.runtime_caps.set_cap("one", body, actor="admin")
        assert e.value.field == field, body
    with pytest.raises(NotFound):
        svc.runtime_caps.set_cap("nobody", {"maxRuntimeSeconds": 60}, actor="admin")
    assert svc.runtime_caps.cap("one") is None
    with pytest.raises(ValidationError) as e:
        svc.runtime_caps.configure({"one": -1})
    assert e.value.field == "max_runtime_caps['one']"


def test_a_manifest_over_the_cap_is_refused_naming_its_label(make):
    svc = make()
    svc.runtime_caps.configure({"*": 3600})
    job = f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: long-job
  namespace: one
  labels: {{kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/max-exec-time-seconds: "7200"}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: x
        command: ["{PY}", "-c", "pass"]
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""
    with pytest.raises(ValidationError) as e:
        svc.submit_manifest(job, user="alice")
    assert e.value.field == "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"
    assert "3600 s" in str(e.value)


# -- wait times and preemption losses per team, and who holds each device --------------------------


def test_the_waits_report_has_each_teams_waits_and_its_runs_lost_to_preemption(make):
    svc = make()
    svc.submit(sleeper(60, name="low", gpus=2, priorityClass="low"), user="alice")
    wait(svc, lambda: state(svc, "one", "low") == "Running")
    # the grid: each device says who holds it, which team, which workload, since when
    low = svc.get_workload("one", "low")
    held = [g["holder"] for n in svc.inventory_view()["nodes"] for g in n["gpus"] if g["holder"]]
    assert held == [{"namespace": "one", "name": "low", "owner": "alice", "kind": "Job",
                     "since": low["startedAt"] or low["admittedAt"]}] * 2
    time.sleep(1.0)  # a run worth something
    svc.submit(sleeper(1, name="high", priorityClass="high"), user="alice")
    wait(svc, lambda: svc.get_workload("one", "low")["evictions"] == 1)
    wait(svc, lambda: state(svc, "one", "low") == "Running", timeout=60)  # after high, low runs again
    report = svc.report("waits")
    row = next(r for r in report["items"] if r["namespace"] == "one")
    # the truth: the ledger's intervals and the times the service recorded
    low = svc.ledger.find_workload("one", "low")
    high = svc.ledger.find_workload("one", "high")
    ivs = {uid: sorted((i for i in svc.ledger.report_intervals(svc.clock()) if i["workload_uid"] == uid),
                       key=lambda i: i["start"]) for uid in (low["uid"], high["uid"])}
    preempted_at = low["spec"]["preemptions"][0]["at"]
    first_run = [i for i in ivs[low["uid"]] if i["end"] <= preempted_at + 1e-6]
    waits = sorted([first_run[0]["start"] - low["created_at"], ivs[high["uid"]][0]["start"] - high["created_at"],
                    ivs[low["uid"]][-1]["start"] - preempted_at])
    assert row["admissions"] == 3
    assert row["waitMedianSeconds"] == pytest.approx(waits[1])
    assert row["waitP90Seconds"] == pytest.approx(waits[2]) == pytest.approx(row["waitMaxSeconds"])
    assert row["preemptions"] == 1
    lost_hours = sum(i["gpu_equivalent"] * (i["end"] - i["start"]) / 3600 for i in first_run)
    assert row["preemptedGpuHours"] == pytest.approx(lost_hours) and lost_hours >= 2 * 1.0 / 3600
    assert row["preemptedCostUsd"] == pytest.approx(low["spec"]["preemptions"][0]["lostCostUsd"], abs=1e-5)
    other = next(r for r in report["items"] if r["namespace"] == "two")
    assert other == {"namespace": "two", "admissions": 0, "waitMedianSeconds": None, "waitP90Seconds": None,
                     "waitMaxSeconds": None, "preemptions": 0, "preemptedGpuHours": 0.0, "preemptedCostUsd": 0.0}


def test_another_teams_device_shows_its_team_and_time_not_its_owner(make):
    svc = make(user_local_queues={"alice": ["one/q"], "bob": ["two/q"]})
    svc.submit(sleeper(60, name="theirs", localQueue="two/q", gpus=1, flavor="gpu-b"), user="bob")
    wait(svc, lambda: state(svc, "two", "theirs") == "Running")
    viewer = svc.teams.viewer("alice")
    assert not viewer.sees_all
    inv = viewer.inventory(svc.inventory_view(), svc.views.owner_of)
    held = [g["holder"] for n in inv["nodes"] for g in n["gpus"] if g["holder"]]
    assert held and held[0]["namespace"] == "two" and held[0]["name"] is None and held[0]["owner"] is None
    assert held[0]["since"] is not None


def test_an_extension_may_not_take_a_lease_past_the_cap(make):
    svc = make()
    svc.lease_extensions.configure(600, 3)
    svc.runtime_caps.configure({"one": 900})
    svc.submit({"kind": "NotebookLease", "name": "nb", "gpus": 1, "flavor": "gpu-a", "maxRuntimeSeconds": 600,
                "priorityClass": "low"},
               user="alice")
    wait(svc, lambda: state(svc, "one", "nb") == "Running")
    assert svc.get_workload("one", "nb")["leaseExtensionsLeft"] == 0
    with pytest.raises(Conflict) as e:
        svc.extend_lease("one", "nb", user="alice")
    assert "900 s" in str(e.value)


# -- over REST: the admin endpoints, the trait, the shapes ------------------------------------------


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    gpuqueue_config["max_runtime_caps"] = {"team-b": 7200}
    return gpuqueue_config


async def test_rest_caps_reports_and_inventory_follow_the_openapi_document(jp_fetch, started, check_schema):
    caps = await ok(jp_fetch, "admin", "runtime-caps")
    check_schema("RuntimeCaps", caps)
    team_b = next(t for t in caps["teams"] if t["namespace"] == "team-b")
    assert team_b["maxRuntimeSeconds"] == 7200 and team_b["configuredSeconds"] == 7200 and not team_b["stored"]
    caps = await ok(jp_fetch, "admin", "runtime-caps", "team-a", method="PUT", body={"maxRuntimeSeconds": 3600})
    check_schema("RuntimeCaps", caps)
    status, err, _ = await call(jp_fetch, "workloads", method="POST", body={
        "localQueue": "team-a/team-a-queue", "command": [PY, "-c", "pass"], "gpus": 1, "maxRuntime": "999d"})
    assert status == 400 and err["field"] == "maxRuntime" and "1 h (3600 s)" in err["message"], err
    status, err, _ = await call(jp_fetch, "estimate", method="POST", body={
        "localQueue": "team-a/team-a-queue", "gpus": 1, "maxRuntime": "999d"})
    assert status == 400 and err["field"] == "maxRuntime", err
    status, err, _ = await call(jp_fetch, "admin", "runtime-caps", "team-a", method="PUT", body={"maxRuntimeSeconds": 0})
    assert status == 400 and err["field"] == "maxRuntimeSeconds"
    status, _, _ = await call(jp_fetch, "admin", "runtime-caps", "nobody", method="PUT", body={"maxRuntimeSeconds": 60})
    assert status == 404
    info = await ok(jp_fetch, "info")
    check_schema("Info", info)
    assert {q["namespace"]: q["maxRuntimeSeconds"] for q in info["localQueues"]} == {"team-a": 3600, "team-b": 7200}
    assert (await ok(jp_fetch, "admin", "audit"))["items"][0]["operation"] == "set-runtime-cap"
    caps = await ok(jp_fetch, "admin", "runtime-caps", "team-a", method="DELETE")
    assert next(t for t in caps["teams"] if t["namespace"] == "team-a")["maxRuntimeSeconds"] is None
    report = await ok(jp_fetch, "reports", "waits")
    check_schema("Report", report)
    assert {r["namespace"] for r in report["items"]} >= {"team-a", "team-b"}
    check_schema("InventoryView", await ok(jp_fetch, "inventory"))
