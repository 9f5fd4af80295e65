"""Team budgets through the REST API against a real server, queue, SQLite ledger and local jobs:
the soft warning, the hard hold (reason BudgetExceeded), lifting it per workload, raising the
budget (held work enters the queue in its original order), validation, admin-only changes; and
the release when the UTC month rolls over (service level, its clock moved)."""

from __future__ import annotations

import asyncio
import calendar
import sys
import time

import pytest

from jupyter_gpuqueue.ledger import reports
from jupyter_gpuqueue.server.scopes import STANDALONE_ADMIN_KEY

from servicetools import service_factory
from test_rest import call, check_schema, ok, openapi_doc, wait_for_state  # noqa: F401 (fixtures)

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
metadata: {name: team-a-cq}
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
kind: ClusterQueue
metadata: {name: team-b-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: team-a-cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-b}
spec: {clusterQueue: team-b-cq}
"""

INVENTORY = """
nodes:
- name: box
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
"""


@pytest.fixture
def budgets_config() -> dict:
    return {"team-a": {"monthlyUSD": 100, "warnAt": 0.8, "hard": True}}


@pytest.fixture
def gpuqueue_config(gpuqueue_config, tmp_path, budgets_config):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    gpuqueue_config.update(config_files=[str(tmp_path / "cluster.yaml")],
                           inventory_file=str(tmp_path / "inventory.yaml"),
                           prices={"gpu": 2.0}, budgets=budgets_config, default_local_queue="team-a/q")
    return gpuqueue_config


def spend(service, namespace: str, usd: float, name: str) -> None:
    """Earlier usage of ``namespace`` this month, written to the ledger as the service writes it:
    a finished workload with one closed usage interval that cost ``usd``."""
    now = service.clock()
    start = max(reports.parse_month(reports.month_of(now))[0], now - 60.0)
    service.ledger.add_workload({
        "uid": f"history-{name}", "namespace": namespace, "name": name, "owner": "alice", "local_queue": "q",
        "cluster_queue": f"{namespace}-cq", "state": "Succeeded", "created_at": start,
        "spec": {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
                 "command": ["python", "train.py"], "workingDir": "/tmp", "env": {}, "maxRuntimeSeconds": 3600},
        "finished_at": now})
    service.ledger.open_interval(f"history-{name}", "gpu", "nvidia.com/gpu", 1, 1.0, usd * 3600.0 / (now - start), start)
    service.ledger.close_intervals(f"history-{name}", now)
    service.budgets.invalidate()


def team(view: dict, namespace: str) -> dict:
    return next(t for t in view["teams"] if t["namespace"] == namespace)


async def submit(jp_fetch, name, namespace="team-a", command=SLEEP):
    return await ok(jp_fetch, "workloads", method="POST", expect=201,
                    body={"name": name, "command": command, "gpus": 1, "localQueue": f"{namespace}/q",
                          "maxRuntime": "5m"})


async def settle(jp_fetch, seconds=0.6):
    await asyncio.sleep(seconds)  # a few scheduling cycles (cycle_interval 0.1 s)


class TestSoft:
    @pytest.fixture
    def budgets_config(self):
        return {"team-a": {"monthlyUSD": 100, "warnAt": 0.8}}

    async def test_soft_limit_warns_and_never_holds(self, jp_fetch, gpuqueue_service):
        view = await ok(jp_fetch, "budgets")
        a = team(view, "team-a")
        assert (a["state"], a["spentUsd"], a["budget"]["monthlyUSD"], a["budget"]["hard"]) == ("ok", 0.0, 100.0, False)
        assert team(view, "team-b")["state"] == "none" and view["defaultTeam"] == "team-a"
        spend(gpuqueue_service, "team-a", 85.0, "earlier")
        a = team(await ok(jp_fetch, "budgets"), "team-a")
        assert a["state"] == "warning" and round(a["spentUsd"], 2) == 85.0 and a["share"] == pytest.approx(0.85)
        w = await submit(jp_fetch, "warned", command=[PY, "-c", "print('ok')"])
        assert w["reason"] != "BudgetExceeded"
        assert "$85.00 of its $100.00" in w["budgetWarning"] and "85%" in w["budgetWarning"]
        from jupyter_gpuqueue.widget import GpuJobWidget

        assert "Budget" in GpuJobWidget(w).details.value and "85%" in GpuJobWidget(w).details.value  # %%gpujob
        done = await wait_for_state(jp_fetch, "team-a", "warned", ("Succeeded",))
        assert done["costUsd"] > 0
        spend(gpuqueue_service, "team-a", 30.0, "more")
        a = team(await ok(jp_fetch, "budgets"), "team-a")
        assert a["state"] == "exceeded" and a["holdsNewWorkloads"] is False
        w = await submit(jp_fetch, "still-runs", command=[PY, "-c", "print('ok')"])
        assert (await wait_for_state(jp_fetch, "team-a", "still-runs", ("Succeeded",)))["reason"] != "BudgetExceeded"


async def test_hard_limit_holds_new_work_admins_lift_or_raise_and_order_is_kept(jp_fetch, gpuqueue_service, started,
                                                                                 check_schema):
    svc = gpuqueue_service
    await submit(jp_fetch, "blocker")  # under budget: admitted, holds team-a's one GPU
    await wait_for_state(jp_fetch, "team-a", "blocker", ("Running",))
    spend(svc, "team-a", 150.0, "earlier")
    view = await ok(jp_fetch, "budgets")
    check_schema("Budgets", view)
    a = team(view, "team-a")
    assert a["state"] == "exceeded" and a["holdsNewWorkloads"] is True
    # The running job is not touched; new submissions are held.
    j1 = await submit(jp_fetch, "first")
    j2 = await submit(jp_fetch, "second")
    for w in (j1, j2):
        check_schema("Workload", w)
        assert (w["state"], w["reason"], w["positionInClusterQueue"]) == ("Pending", "BudgetExceeded", None)
        assert "$150.00 of its $100.00" in w["message"] and "hard limit" in w["message"]
    await settle(jp_fetch)
    assert (await ok(jp_fetch, "workloads", "team-a", "first"))["reason"] == "BudgetExceeded"
    assert (await ok(jp_fetch, "workloads", "team-a", "blocker"))["state"] == "Running"
    queues = await ok(jp_fetch, "queues")
    assert [p["name"] for p in next(c for c in queues["clusterQueues"] if c["name"] == "team-a-cq")["pending"]] == []
    # Another team is not affected.
    other = await submit(jp_fetch, "other-team", namespace="team-b", command=[PY, "-c", "print(1)"])
    assert other["reason"] != "BudgetExceeded"
    await wait_for_state(jp_fetch, "team-b", "other-team", ("Succeeded",))

    # Only admins lift holds and change budgets.
    started.web_app.settings[STANDALONE_ADMIN_KEY] = False
    try:
        status, body, _ = await call(jp_fetch, "workloads", "team-a", "second", "lift-budget-hold", method="POST")
        assert status == 403 and body["field"] == "scope"
        status, body, _ = await call(jp_fetch, "budgets", "team-a", method="PUT", body={"monthlyUSD": 1000})
        assert status == 403
    finally:
        started.web_app.settings[STANDALONE_ADMIN_KEY] = True

    # An admin lifts the hold of the second one: it enters the queue (behind the blocker).
    lifted = await ok(jp_fetch, "workloads", "team-a", "second", "lift-budget-hold", method="POST")
    assert lifted["reason"] != "BudgetExceeded"
    await settle(jp_fetch)
    second = await ok(jp_fetch, "workloads", "team-a", "second")
    assert (second["state"], second["positionInClusterQueue"]) == ("Pending", 0)
    status, body, _ = await call(jp_fetch, "workloads", "team-a", "second", "lift-budget-hold", method="POST")
    assert status == 409 and body["field"] == "name"
    audit = svc.ledger.audit_log()[0]
    assert [(e["operation"], e["target"]) for e in audit][:1] == [("lift-budget-hold", "workload/team-a/second")]

    # Bad budgets are refused with the field, and change nothing.
    for bad, field in [({"monthlyUSD": -5}, "body.monthlyUSD"), ({"monthlyUSD": "lots"}, "body.monthlyUSD"),
                       ({"monthlyUSD": 10, "warnAt": 2}, "body.warnAt"), ({"monthlyUSD": 10, "hard": "yes"}, "body.hard"),
                       ({"monthlyUSD": 10, "cap": 1}, "body.cap"), ({}, "body.monthlyUSD")]:
        status, body, _ = await call(jp_fetch, "budgets", "team-a", method="PUT", body=bad)
        assert (status, body["field"]) == (400, field), (bad, body)
    assert team(await ok(jp_fetch, "budgets"), "team-a")["budget"]["monthlyUSD"] == 100.0

    # Raising the budget releases the held one; created before "second", it queues ahead of it.
    raised = await ok(jp_fetch, "budgets", "team-a", method="PUT", body={"monthlyUSD": 1000, "warnAt": 0.9, "hard": True})
    check_schema("BudgetStatus", raised)
    for kind in ("jobs", "users", "teams", "flavors", "idle", "months", "daily"):
        check_schema("Report", await ok(jp_fetch, "reports", kind))
    teams = await ok(jp_fetch, "reports", "teams")
    a_report = next(t for t in teams["items"] if t["namespace"] == "team-a")
    assert round(a_report["costUsd"], 2) >= 150.0 and a_report["budgetUsd"] == 1000.0
    assert [j["name"] for j in a_report["topJobs"]][0] == "earlier"
    status, csv_text, headers = await call(jp_fetch, "reports", "teams", params={"format": "csv"})
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    assert csv_text.splitlines()[0] == "namespace,month,jobs,gpuHours,costUsd,avgGpuUtilization,budgetUsd,topJobs,idleReclaimedGpuHours,idleReclaims"
    for params, field in [({"month": "2026-13"}, "month"), ({"format": "xml"}, "format"),
                          ({"from": "2026-11-05", "to": "2026-11-01"}, "to")]:
        status, body, _ = await call(jp_fetch, "reports", "teams", params=params)
        assert (status, body["field"]) == (400, field), (params, body)
    status, body, _ = await call(jp_fetch, "reports", "bogus")
    assert (status, body["field"]) == (400, "kind")
    assert raised["state"] == "ok" and raised["budget"]["source"] == "admin"
    await settle(jp_fetch)
    first = await ok(jp_fetch, "workloads", "team-a", "first")
    second = await ok(jp_fetch, "workloads", "team-a", "second")
    assert (first["positionInClusterQueue"], second["positionInClusterQueue"]) == (0, 1)
    assert first["reason"] != "BudgetExceeded"
    assert svc.ledger.budgets()["team-a"]["monthlyUSD"] == 1000.0  # stored in the ledger
    assert svc.ledger.audit_log()[0][0]["operation"] == "set-budget"

    # Deleting the stored budget brings back the configured one (100, hard): new work is held again.
    back = await ok(jp_fetch, "budgets", "team-a", method="DELETE")
    assert back["budget"]["monthlyUSD"] == 100.0 and back["budget"]["source"] == "config"
    third = await submit(jp_fetch, "third")
    assert third["reason"] == "BudgetExceeded"
    # A held workload can be cancelled like any pending one.
    assert (await ok(jp_fetch, "workloads", "team-a", "third", method="DELETE"))["state"] == "Cancelled"
    for name in ("blocker", "first", "second"):
        await ok(jp_fetch, "workloads", "team-a", name, method="DELETE")


def test_held_work_is_released_in_order_when_the_month_rolls_over_and_after_a_restart(tmp_path):
    clock = {"now": float(calendar.timegm((2026, 11, 30, 23, 0, 0)))}
    build = service_factory(tmp_path, CLUSTER, INVENTORY, prices={"gpu": 2.0}, default_local_queue="team-a/q")

    def make():
        svc = build(restore=False)
        svc.clock = lambda: clock["now"]
        svc.configure_costs(budgets={"team-a": {"monthlyUSD": 10, "hard": True}})
        svc.restore()
        return svc

    svc = make()
    spend(svc, "team-a", 12.0, "november")
    for name in ("one", "two"):
        w = svc.submit({"name": name, "command": [PY, "-c", "print(1)"], "gpus": 1}, user="alice")
        assert w["reason"] == "BudgetExceeded"
        clock["now"] += 1.0
    svc.tick()
    assert svc.get_workload("team-a", "one")["reason"] == "BudgetExceeded"
    # A restart keeps them held (their reason is in the ledger).
    svc.ledger.close()
    svc = make()
    assert set(svc.budget_holds) == {svc.get_workload("team-a", n)["uid"] for n in ("one", "two")}
    svc.tick()
    assert svc.get_workload("team-a", "two")["reason"] == "BudgetExceeded"
    # December: November's spend no longer counts; both enter the queue, oldest first.
    clock["now"] = float(calendar.timegm((2026, 12, 1, 0, 0, 5)))
    svc.release_budget_holds()
    keys = list(svc.scheduler.pending_keys("team-a-cq"))
    assert keys == ["team-a/one", "team-a/two"]
    assert svc.budget_holds == {}
    svc.ledger.close()
