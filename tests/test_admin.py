"""The admin API against a real server, QueueService, SQLite ledger and local backend.

Quotas, cohorts, priority classes and prices are changed live and validated as Kueue validates
(docs/rest-api.md "Admin"); every change is audited and survives a restart.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

from jupyter_gpuqueue import admin
from jupyter_gpuqueue.engine.manifests import load_text
from jupyter_gpuqueue.server.scopes import STANDALONE_ADMIN_KEY

from test_rest import call, check_schema, command_job, ok, openapi_doc, wait_for_state  # noqa: F401 (fixtures)

EXAMPLES = Path("/work/shared/examples")
if not EXAMPLES.is_dir():
    EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"
SLEEP = "import time; time.sleep(120)"
L4 = {"flavor": "nvidia-l4", "resource": "nvidia.com/gpu"}


async def audit(jp_fetch) -> dict:
    return await ok(jp_fetch, "admin", "audit")


async def config_json(jp_fetch) -> dict:
    view = await ok(jp_fetch, "admin", "config")
    view.pop("stored", None)
    return view


def quota(view: dict, cq: str, flavor: str, resource: str) -> dict:
    q = next(c for c in view["clusterQueues"] if c["name"] == cq)
    return next(r for r in q["resources"] if r["flavor"] == flavor and r["resource"] == resource)


async def cancel_all(jp_fetch) -> None:
    for wl in (await ok(jp_fetch, "workloads"))["items"]:
        if wl["state"] not in ("Succeeded", "Failed", "Cancelled"):
            await call(jp_fetch, "workloads", wl["namespace"], wl["name"], method="DELETE")


# -- a quota change applies on the next cycle ------------------------------------------------------


async def test_raising_a_quota_admits_a_pending_workload(jp_fetch, started):
    # team-a may use exactly 1 L4: nominal 1, no borrowing from the cohort.
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH",
                    body={"resources": [{**L4, "nominalQuota": "1", "borrowingLimit": "0"}]})
    assert quota(view, "team-a-cq", "nvidia-l4", "nvidia.com/gpu") | {"path": None} == {
        **L4, "nominalQuota": "1", "borrowingLimit": "0", "lendingLimit": None, "path": None}
    assert view["auditId"] >= 1
    try:
        first = await ok(jp_fetch, "workloads", method="POST", expect=201,
                         body=command_job(SLEEP, name="l4-first", flavor="nvidia-l4"))
        await wait_for_state(jp_fetch, "team-a", "l4-first", ("Running",))
        second = await ok(jp_fetch, "workloads", method="POST", expect=201,
                          body=command_job(SLEEP, name="l4-second", flavor="nvidia-l4"))
        await asyncio.sleep(0.5)  # several cycles: it stays pending, the quota is full
        pending = await ok(jp_fetch, "workloads", "team-a", "l4-second")
        assert pending["state"] == "Pending", pending
        assert pending["positionInClusterQueue"] == 0

        # the admin raises the quota: the next cycle admits it
        await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH",
                 body={"resources": [{**L4, "nominalQuota": "2"}]})
        admitted = await wait_for_state(jp_fetch, "team-a", "l4-second", ("Admitted", "Running"), timeout=10)
        assert admitted["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "nvidia-l4"
        queues = await ok(jp_fetch, "queues")
        row = next(r for c in queues["clusterQueues"] if c["name"] == "team-a-cq"
                   for r in c["resources"] if r["flavor"] == "nvidia-l4" and r["resource"] == "nvidia.com/gpu")
        assert row["nominalQuota"] == "2" and row["usage"] == "2" and row["borrowingLimit"] == "0"

        # lowering it again does not evict what runs (Kueue: admissions stay); usage is above quota
        await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH",
                 body={"resources": [{**L4, "nominalQuota": "1"}]})
        await asyncio.sleep(0.5)
        for name in ("l4-first", "l4-second"):
            assert (await ok(jp_fetch, "workloads", "team-a", name))["state"] == "Running"
        queues = await ok(jp_fetch, "queues")
        row = next(r for c in queues["clusterQueues"] if c["name"] == "team-a-cq"
                   for r in c["resources"] if r["flavor"] == "nvidia-l4" and r["resource"] == "nvidia.com/gpu")
        assert row["nominalQuota"] == "1" and row["usage"] == "2"
        # ... and nothing new is admitted there until usage is below the quota again
        await ok(jp_fetch, "workloads", method="POST", expect=201,
                 body=command_job(SLEEP, name="l4-third", flavor="nvidia-l4"))
        await asyncio.sleep(0.5)
        assert (await ok(jp_fetch, "workloads", "team-a", "l4-third"))["state"] == "Pending"
        assert first["name"] and second["name"]
    finally:
        await cancel_all(jp_fetch)

    entries = (await audit(jp_fetch))["items"]
    assert [e["operation"] for e in entries] == ["patch-cluster-queue"] * 3
    newest = entries[0]
    assert newest["actor"] == "alice" and newest["target"] == "ClusterQueue/team-a-cq"
    assert time.time() - newest["at"] < 120

    def l4_gpu(doc):
        flavors = doc["spec"]["resourceGroups"][0]["flavors"]
        return next(r for f in flavors if f["name"] == "nvidia-l4" for r in f["resources"]
                    if r["name"] == "nvidia.com/gpu")

    assert l4_gpu(newest["before"])["nominalQuota"] == "2"
    assert l4_gpu(newest["after"])["nominalQuota"] == "1"
    first_entry = entries[-1]
    assert l4_gpu(first_entry["before"]) == {"name": "nvidia.com/gpu", "nominalQuota": "2"}
    assert l4_gpu(first_entry["after"]) == {"name": "nvidia.com/gpu", "nominalQuota": "1", "borrowingLimit": "0"}


# -- invalid changes: 400 naming the field, nothing changed, nothing audited ----------------------

A100_GPU = {"flavor": "nvidia-a100", "resource": "nvidia.com/gpu"}


@pytest.mark.parametrize(
    "path, body, field, reason",
    [
        # Kueue's CEL rule on ClusterQueueSpec (clusterqueue_types.go)
        (("cluster-queues", "team-a-cq"), {"cohort": None, "resources": [{**A100_GPU, "borrowingLimit": "2"}]},
         "spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit", "must be nil when cohort is empty"),
        # Kueue's webhook validateFlavorQuotas
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "lendingLimit": "5"}]},
         "spec.resourceGroups[0].flavors[0].resources[2].lendingLimit",
         "must be less than or equal to the nominalQuota"),
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "nominalQuota": "-1"}]},
         "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota", "must be greater than or equal to 0"),
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "nominalQuota": "four"}]},
         "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota", "quantities must match"),
        # issue 15 item 3: a quota is stored exactly as given or refused (Kueue would round 1.5 GPUs up to 2)
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "nominalQuota": "1.5"}]},
         "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota",
         'Invalid value: "1.5": nvidia.com/gpu is counted in whole GPUs; a quota must be a whole number '
         "(Kueue would round it up to 2)"),
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "borrowingLimit": 0.5}]},
         "spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit", "whole GPUs"),
        (("cluster-queues", "team-a-cq"), {"resources": [{"flavor": "nvidia-a100-mig",
                                                            "resource": "nvidia.com/mig-1g.10gb", "lendingLimit": "1500m"}]},
         "spec.resourceGroups[1].flavors[0].resources[0].lendingLimit", "whole MIG devices"),
        (("cluster-queues", "team-a-cq"), {"resources": [{"flavor": "nvidia-a100", "resource": "cpu",
                                                            "nominalQuota": "1.5m"}]},
         "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "cpu quotas are whole millicores"),
        (("cluster-queues", "team-a-cq"), {"resources": [{"flavor": "nvidia-a100", "resource": "memory",
                                                            "nominalQuota": "0.5"}]},
         "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota", "memory quotas are whole bytes"),
        (("cluster-queues", "team-a-cq"), {"resources": [{**A100_GPU, "nominalQuota": None}]},
         "resources[0].nominalQuota", "required"),
        (("cluster-queues", "team-a-cq"), {"resources": [{"flavor": "nvidia-b200", "resource": "nvidia.com/gpu",
                                                            "nominalQuota": "1"}]},
         "resources[0].flavor", "has no quota for nvidia.com/gpu in flavor nvidia-b200"),
        (("cluster-queues", "team-a-cq"), {"cohort": "Research!"}, "spec.cohort", "RFC 1123"),
        (("cluster-queues", "team-a-cq"), {"nominalQuota": 3}, "nominalQuota", "unknown field"),
        (("cluster-queues", "team-a-cq"), [1], "body", "JSON object"),
        # scheduling.k8s.io validation: HighestUserDefinablePriority
        (("priority-classes", "development"), {"value": 2_000_000_000}, "value",
         "maximum allowed value of a user defined priority is 1000000000"),
        (("priority-classes", "development"), {"value": "high"}, "value", "integer"),
        (("prices",), {"flavors": {"nvidia-a100": -1}, "default": 2.0}, "flavors.nvidia-a100", "from 0 to"),
        (("prices",), {"flavors": {"nvidia-b200": 5}, "default": 2.0}, "flavors.nvidia-b200",
         "no ResourceFlavor nvidia-b200"),
        (("prices",), {"flavors": {}, "default": 2.0, "currency": "EUR"}, "currency", "only USD"),
    ],
)
async def test_invalid_changes_are_400_naming_the_field(jp_fetch, started, path, body, field, reason):
    before_view = await config_json(jp_fetch)
    before_yaml = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    method = "PUT" if path == ("prices",) else "PATCH"
    status, err, _ = await call(jp_fetch, "admin", *path, method=method, body=body)
    assert status == 400, err
    assert err["field"] == field, err
    assert reason in err["message"], err
    assert await config_json(jp_fetch) == before_view
    assert (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1] == before_yaml
    assert (await audit(jp_fetch))["total"] == 0


async def test_unknown_objects_are_404(jp_fetch, started):
    status, err, _ = await call(jp_fetch, "admin", "cluster-queues", "team-z-cq", method="PATCH", body={})
    assert status == 404 and err["field"] == "name", err
    status, err, _ = await call(jp_fetch, "admin", "priority-classes", "urgent", method="PATCH", body={"value": 1})
    assert status == 404 and err["field"] == "name", err
    assert (await audit(jp_fetch))["total"] == 0


# -- priority classes, cohorts, prices -------------------------------------------------------------


async def test_priority_class_cohort_and_prices_are_changed_and_audited(jp_fetch, started):
    view = await ok(jp_fetch, "admin", "priority-classes", "development", method="PATCH",
                    body={"value": 2000, "description": "notebooks"})
    dev = next(p for p in view["priorityClasses"] if p["name"] == "development")
    assert dev == {"name": "development", "kind": "PriorityClass", "value": 2000, "description": "notebooks",
                   "globalDefault": False}
    # the submit form and new submissions see the new value
    info = await ok(jp_fetch, "info")
    assert next(p for p in info["priorityClasses"] if p["name"] == "development")["value"] == 2000
    try:
        wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                      body=command_job("print(1)", priorityClass="development"))
        assert wl["priority"] == 2000
    finally:
        await cancel_all(jp_fetch)

    # leaving the cohort: team-b can no longer borrow team-a's GPUs
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH", body={"cohort": None})
    assert next(c for c in view["clusterQueues"] if c["name"] == "team-a-cq")["cohort"] is None
    queues = await ok(jp_fetch, "queues")
    assert next(c for c in queues["clusterQueues"] if c["name"] == "team-a-cq")["cohort"] is None
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH", body={"cohort": "research"})
    assert next(c for c in view["clusterQueues"] if c["name"] == "team-a-cq")["cohort"] == "research"

    prices = await ok(jp_fetch, "admin", "prices", method="PUT",
                      body={"flavors": {"nvidia-a100": 2.5, "nvidia-h100": 4.0}, "default": 1.5})
    assert prices["flavors"] == {"nvidia-a100": 2.5, "nvidia-h100": 4.0}
    effective = {e["flavor"]: (e["usdPerGpuHour"], e["source"]) for e in prices["effective"]}
    assert effective["nvidia-a100-mig"] == (2.5, "base flavor")
    # not listed, but its nodeLabels name an L4: billed as the L4 family, not at the default
    assert effective["nvidia-l4"] == (0.81, "family")
    public = await ok(jp_fetch, "prices")
    assert public["flavors"] == {"nvidia-a100": 2.5, "nvidia-h100": 4.0} and public["default"] == 1.5
    est = await ok(jp_fetch, "estimate", method="POST", body={"gpus": 1, "flavor": "nvidia-h100", "maxRuntime": "1h"})
    assert est["costUsd"] == pytest.approx(4.0)

    entries = (await audit(jp_fetch))["items"]
    assert [e["operation"] for e in entries] == [
        "set-prices", "patch-cluster-queue", "patch-cluster-queue", "patch-priority-class"]
    assert entries[0]["before"]["flavors"]["nvidia-h100"] == 3.75 and entries[0]["after"]["default"] == 1.5
    assert entries[1]["before"]["spec"].get("cohort") is None and entries[1]["after"]["spec"]["cohort"] == "research"
    assert entries[3]["target"] == "PriorityClass/development"
    assert (entries[3]["before"]["value"], entries[3]["after"]["value"]) == (1000, 2000)
    page = await ok(jp_fetch, "admin", "audit", params={"limit": "1", "offset": "1"})
    assert page["total"] == 4 and [e["id"] for e in page["items"]] == [entries[1]["id"]]


# -- export and import -----------------------------------------------------------------------------


async def test_export_import_round_trip(jp_fetch, started, gpuqueue_service):
    status, exported, headers = await call(jp_fetch, "admin", "config", params={"format": "yaml"})
    assert status == 200 and headers["Content-Type"] == "application/yaml; charset=utf-8"  # read as UTF-8
    # what engine/manifests.py (Kueue's rules) loads is exactly the live configuration
    assert load_text(exported).config == gpuqueue_service.config
    kinds = [d["kind"] for d in yaml.safe_load_all(exported)]
    assert kinds.count("ClusterQueue") == 2 and kinds.count("LocalQueue") == 2 and "ResourceFlavor" in kinds
    status, by_accept, _ = await call(jp_fetch, "admin", "config", headers={"Accept": "application/yaml"})
    assert by_accept == exported
    before = await config_json(jp_fetch)

    # a dry run validates and changes nothing
    dry = await ok(jp_fetch, "admin", "import", method="POST", params={"dryRun": "true"}, body=exported,
                   headers={"Content-Type": "application/yaml"})
    assert dry["dryRun"] is True and dry["summary"]["clusterQueues"] == 2
    assert (await audit(jp_fetch))["total"] == 0

    answer = await ok(jp_fetch, "admin", "import", method="POST", body=exported,
                      headers={"Content-Type": "application/yaml"})
    assert answer["dryRun"] is False and answer["auditId"] >= 1
    assert await config_json(jp_fetch) == before
    again = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    assert again == exported
    entry = (await audit(jp_fetch))["items"][0]
    assert entry["operation"] == "import" and entry["after"]["kueueYaml"] == admin.config_to_yaml(gpuqueue_service.config)

    # an edited export, imported with PUT as JSON: the new quota is live
    docs = list(yaml.safe_load_all(again))
    cq = next(d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "team-b-cq")
    cq["spec"]["resourceGroups"][0]["flavors"][1]["resources"][2]["nominalQuota"] = 3
    await ok(jp_fetch, "admin", "config", method="PUT", body={"yaml": yaml.safe_dump_all(docs)})
    view = await config_json(jp_fetch)
    assert quota(view, "team-b-cq", "nvidia-h100", "nvidia.com/gpu")["nominalQuota"] == "3"


async def test_quotas_are_stored_exactly_or_refused_on_every_path(jp_fetch, started):
    """Issue 15 item 3: PATCH, import and PUT refuse a quota Kueue would round (1.5 GPUs → 2), naming
    the field and changing nothing; a fractional value Kubernetes quantities hold exactly (1.5 cpu =
    1500m, 1.5Gi) is stored as given."""
    before = await config_json(jp_fetch)
    exported = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    docs = list(yaml.safe_load_all(exported))
    cq = next(d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "team-b-cq")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "1.5"
    text = yaml.safe_dump_all(docs)
    field = "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota"
    for method, path, body, params, headers in [
        ("POST", ("admin", "import"), text, {"dryRun": "true"}, {"Content-Type": "application/yaml"}),
        ("POST", ("admin", "import"), text, None, {"Content-Type": "application/yaml"}),
        ("PUT", ("admin", "config"), {"yaml": text}, None, None),
    ]:
        status, err, _ = await call(jp_fetch, *path, method=method, body=body, params=params, headers=headers)
        assert status == 400, err
        assert err["field"] == field, err
        assert "ClusterQueue/team-b-cq" in err["message"] and "whole GPUs" in err["message"], err
    assert await config_json(jp_fetch) == before
    assert (await audit(jp_fetch))["total"] == 0

    # exact fractions of cpu and memory are kept exactly
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH", body={"resources": [
        {"flavor": "nvidia-a100", "resource": "cpu", "nominalQuota": "1.5"},
        {"flavor": "nvidia-a100", "resource": "memory", "nominalQuota": "1.5Gi"}]})
    assert quota(view, "team-a-cq", "nvidia-a100", "cpu")["nominalQuota"] == "1500m"
    assert quota(view, "team-a-cq", "nvidia-a100", "memory")["nominalQuota"] == "1536Mi"
    exported = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    live = load_text(exported).config.cluster_queues["team-a-cq"].resource_groups[0].flavors[0].resources
    assert [(r.name, r.nominal_quota) for r in live[:2]] == [("cpu", 1500), ("memory", 1536 * 2**20)]


@pytest.mark.parametrize(
    "example, field, reason",
    [
        ("seed000-kueue-setup.yaml", "spec.resourceGroups[0].flavors[1].resources",
         "must have the same number of resources as the coveredResources"),
        ("seed003-kueue-setup.yaml", "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
         "must be nil when cohort is empty"),
        ("seed000-priority-classes.yaml", "kind", "has no ClusterQueue"),
    ],
)
async def test_invalid_examples_are_rejected_on_import_with_kueues_reason(jp_fetch, started, example, field, reason):
    path = EXAMPLES / example
    if not path.exists():
        pytest.skip(f"{path} is not here")
    before = await config_json(jp_fetch)
    status, err, _ = await call(jp_fetch, "admin", "import", method="POST", body=path.read_text(),
                                headers={"Content-Type": "application/yaml"})
    assert status == 400, err
    assert err["field"] == field and reason in err["message"], err
    assert await config_json(jp_fetch) == before
    assert (await audit(jp_fetch))["total"] == 0


async def test_import_that_drops_a_queue_in_use_is_refused(jp_fetch, started):
    exported = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    docs = [d for d in yaml.safe_load_all(exported)
            if not (d["kind"] == "LocalQueue" and d["metadata"]["name"] == "team-a-queue")]
    docs.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                 "metadata": {"name": "team-a-new", "namespace": "team-a"}, "spec": {"clusterQueue": "team-a-cq"}})
    text = yaml.safe_dump_all(docs)
    try:
        await ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job(SLEEP, name="in-use"))
        status, err, _ = await call(jp_fetch, "admin", "import", method="POST", body=text,
                                    headers={"Content-Type": "application/yaml"})
        assert status == 400 and err["field"] == "localQueues", err
        assert "team-a/in-use (LocalQueue team-a/team-a-queue would not exist)" in err["message"]
        assert (await audit(jp_fetch))["total"] == 0
    finally:
        await cancel_all(jp_fetch)
    await wait_for_state(jp_fetch, "team-a", "in-use", ("Cancelled",))
    # once the workload is finished, the same import is accepted
    await ok(jp_fetch, "admin", "import", method="POST", body=text, headers={"Content-Type": "application/yaml"})
    info = await ok(jp_fetch, "info")
    assert {f"{q['namespace']}/{q['name']}" for q in info["localQueues"]} == {"team-a/team-a-new", "team-b/team-b-queue"}


@pytest.mark.parametrize(
    "body, headers, field",
    [
        ("", {"Content-Type": "application/yaml"}, "body"),
        ("a: [", {"Content-Type": "application/yaml"}, "manifest"),
        ({"yaml": 3}, None, "yaml"),
        ({"manifest": "x"}, None, "manifest"),
    ],
)
async def test_malformed_imports_are_400(jp_fetch, started, body, headers, field):
    status, err, _ = await call(jp_fetch, "admin", "import", method="POST", body=body, headers=headers)
    assert status == 400 and err["field"] == field, err


async def test_an_import_with_workloads_is_refused(jp_fetch, started):
    exported = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "team-a-queue"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "python", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    text = exported + "---\n" + yaml.safe_dump(job)
    status, err, _ = await call(jp_fetch, "admin", "import", method="POST", body=text,
                                headers={"Content-Type": "application/yaml"})
    assert status == 400 and err["field"] == "kind" and "team-a/j" in err["message"], err


# -- restart ---------------------------------------------------------------------------------------


def _restart(serverapp, gpuqueue_config: dict, **extra):
    """A fresh GpuQueueApp on the same ledger, as after a server restart; returns its service."""
    from jupyter_gpuqueue.server.app import GpuQueueApp

    app = GpuQueueApp(config=Config({"GpuQueueApp": {**gpuqueue_config, **extra}}))
    app.serverapp = serverapp
    app.initialize_settings()
    return app.settings["gpuqueue_service"]


async def test_restart_keeps_the_changed_configuration(jp_fetch, started, gpuqueue_config, gpuqueue_service):
    await ok(jp_fetch, "admin", "cluster-queues", "team-b-cq", method="PATCH",
             body={"resources": [{**L4, "nominalQuota": "1", "lendingLimit": "0"}]})
    await ok(jp_fetch, "admin", "prices", method="PUT", body={"flavors": {"nvidia-l4": 0.9}, "default": 2.0})
    live_yaml = admin.config_to_yaml(gpuqueue_service.config)

    restarted = _restart(started, gpuqueue_config)
    try:
        assert admin.config_to_yaml(restarted.config) == live_yaml
        assert restarted.prices.per_flavor == {"nvidia-l4": 0.9}
        q = restarted.config.cluster_queues["team-b-cq"].resource_groups[0].flavors[2].resources[2]
        assert (q.name, q.nominal_quota, q.lending_limit) == ("nvidia.com/gpu", 1, 0)
    finally:
        restarted.ledger.close()

    # discard_stored_config: the config files rule again, and the drop is audited
    fresh = _restart(started, gpuqueue_config, discard_stored_config=True)
    try:
        q = fresh.config.cluster_queues["team-b-cq"].resource_groups[0].flavors[2].resources[2]
        assert (q.nominal_quota, q.lending_limit) == (2, None)
        assert fresh.ledger.active_config() is None
        rows, total = fresh.ledger.audit_log()
        assert rows[0]["operation"] == "discard-stored-config" and total == 3
    finally:
        fresh.ledger.close()


# -- who may ---------------------------------------------------------------------------------------


class TestNonAdmin:
    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"tornado_settings": {STANDALONE_ADMIN_KEY: False}}

    async def test_non_admins_get_403_and_change_nothing(self, jp_fetch, started):
        info = await ok(jp_fetch, "info")
        assert info["permissions"]["admin"] is False
        for parts, method, body in [
            (("admin", "config"), "GET", None),
            (("admin", "config"), "PUT", {"yaml": "x"}),
            (("admin", "import"), "POST", {"yaml": "x"}),
            (("admin", "cluster-queues", "team-a-cq"), "PATCH", {"cohort": None}),
            (("admin", "priority-classes", "development"), "PATCH", {"value": 1}),
            (("admin", "prices"), "GET", None),
            (("admin", "prices"), "PUT", {"flavors": {}, "default": 0}),
            (("admin", "audit"), "GET", None),
        ]:
            status, err, _ = await call(jp_fetch, *parts, method=method, body=body)
            assert status == 403, (parts, method, status, err)
            assert err["field"] == "scope" and "custom:gpuqueue:admin" in err["message"], err
        # the public views are unchanged and still readable
        assert (await ok(jp_fetch, "prices"))["default"] == 2.0


async def test_admin_is_told_in_info(jp_fetch, started):
    assert (await ok(jp_fetch, "info"))["permissions"]["admin"] is True


async def test_admin_answers_match_the_openapi_schemas(jp_fetch, started, check_schema):
    check_schema("AdminConfig", await ok(jp_fetch, "admin", "config"))
    check_schema("AdminPrices", await ok(jp_fetch, "admin", "prices"))
    await ok(jp_fetch, "admin", "priority-classes", "development", method="PATCH", body={"value": 1500})
    check_schema("AuditLog", await audit(jp_fetch))
    imported = await ok(jp_fetch, "admin", "import", method="POST", params={"dryRun": "1"},
                        body=json.dumps({"yaml": (await call(jp_fetch, "admin", "config",
                                                             params={"format": "yaml"}))[1]}))
    check_schema("ImportResult", imported)


# -- the CLI: export-kueue / import-kueue ----------------------------------------------------------


async def test_cli_export_and_import_kueue(jp_fetch, gpuqueue_env, tmp_path):
    from test_cli import arun

    rc, exported, err = await arun("export-kueue", env=gpuqueue_env)
    assert rc == 0, err
    assert exported == (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    # offline, from the files, the same objects
    from jupyter_gpuqueue.service import DEMO_DIR

    rc, offline, err = await arun("export-kueue", "--config", str(DEMO_DIR / "cluster.yaml"), env={})
    assert rc == 0, err
    assert load_text(offline).config == load_text(exported).config

    docs = list(yaml.safe_load_all(exported))
    next(d for d in docs if d["kind"] == "PriorityClass" and d["metadata"]["name"] == "development")["value"] = 1234
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    rc, out, err = await arun("import-kueue", str(path), "--dry-run", env=gpuqueue_env)
    assert rc == 0 and "valid, not applied" in out, (out, err)
    assert (await audit(jp_fetch))["total"] == 0
    rc, out, err = await arun("import-kueue", str(path), env=gpuqueue_env)
    assert rc == 0 and "imported" in out and "2 clusterQueues" in out, (out, err)
    view = await config_json(jp_fetch)
    assert next(p for p in view["priorityClasses"] if p["name"] == "development")["value"] == 1234

    # an example Kueue rejects: exit 2 with the file, document, field and reason; nothing changes
    seed = EXAMPLES / "seed003-kueue-setup.yaml"
    if seed.exists():
        rc, out, err = await arun("import-kueue", str(seed), env=gpuqueue_env)
        assert rc == 2 and out == ""
        assert ("seed003-kueue-setup.yaml: document 3: ClusterQueue/gpu-cluster: spec.resourceGroups[0]"
                ".flavors[0].resources[0].borrowingLimit: Invalid value: 128: must be nil when cohort is empty") in err
    assert (await audit(jp_fetch))["total"] == 1


class TestCliNonAdmin:
    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"tornado_settings": {STANDALONE_ADMIN_KEY: False}}

    async def test_export_needs_the_admin_scope(self, gpuqueue_env):
        from test_cli import arun

        rc, out, err = await arun("export-kueue", env=gpuqueue_env)
        assert rc == 2 and "custom:gpuqueue:admin" in err, err


# -- the export is exact (pure, no server) ---------------------------------------------------------

EVERY_FIELD = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-tainted}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-L4}
  nodeTaints: [{key: gpu, value: "true", effect: NoSchedule}, {key: dedicated, effect: NoExecute}]
  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}, {operator: Exists}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: org}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu-tainted, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}]
  fairSharing: {weight: "0.5"}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: lab}
spec:
  parentName: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu-tainted, resources: [{name: nvidia.com/gpu, nominalQuota: 1, lendingLimit: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohort: lab
  namespaceSelector:
    matchExpressions: [{key: team, operator: In, values: [a, b]}, {key: frozen, operator: DoesNotExist}]
  queueingStrategy: StrictFIFO
  stopPolicy: Hold
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: Preempt}
  preemption:
    reclaimWithinCohort: LowerPriority
    withinClusterQueue: LowerOrNewerEqualPriority
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  fairSharing: {weight: 3}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu-tainted
      resources:
      - {name: cpu, nominalQuota: 1500m, borrowingLimit: "2"}
      - {name: memory, nominalQuota: 1536Mi, lendingLimit: 1Gi}
      - {name: nvidia.com/gpu, nominalQuota: 3, borrowingLimit: 1, lendingLimit: 0}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: open}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/mig-1g.10gb]
    flavors: [{name: gpu-tainted, resources: [{name: nvidia.com/mig-1g.10gb, nominalQuota: 7}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 5000
description: urgent work
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: -10
globalDefault: true
preemptionPolicy: Never
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}
resources:
  transformations:
  - {input: nvidia.com/mig-1g.10gb, strategy: Replace, outputs: {example.com/gpu-slices: "1"}}
  - {input: nvidia.com/gpu, outputs: {example.com/gpu-slices: "7", cpu: 500m}}
"""


def test_export_round_trips_every_field_the_engine_models():
    config = load_text(EVERY_FIELD).config
    text = admin.config_to_yaml(config, "header")
    assert text.startswith("# header\n")
    again = load_text(text).config
    assert again == config
    assert admin.config_to_yaml(again, "header") == text
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Namespace", "ResourceFlavor", "Cohort", "Cohort", "ClusterQueue",
                                         "ClusterQueue", "LocalQueue", "PriorityClass", "WorkloadPriorityClass",
                                         "Configuration"]


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")) if EXAMPLES.is_dir() else [])
def test_every_valid_example_configuration_round_trips(example):
    from jupyter_gpuqueue.engine.errors import ManifestError

    try:
        config = load_text((EXAMPLES / example).read_text(), example).config
    except ManifestError:
        pytest.skip(f"{example} is invalid for Kueue (tested on import)")
    assert load_text(admin.config_to_yaml(config)).config == config


def test_patch_priority_class_picks_the_workload_priority_class_first():
    config = load_text(EVERY_FIELD.replace("name: urgent", "name: low")).config  # a WPC and a PC named low
    new, before, after = admin.patch_priority_class(config, "low", {"value": 7})
    assert before["kind"] == after["kind"] == "WorkloadPriorityClass" and after["value"] == 7
    assert new.workload_priority_classes["low"].value == 7 and new.priority_classes["low"].value == -10
    assert config.workload_priority_classes["low"].value == 5000  # the input is not modified
    new, _, after = admin.patch_priority_class(config, "low", {"kind": "PriorityClass", "description": "bulk"})
    assert after["kind"] == "PriorityClass" and new.priority_classes["low"].description == "bulk"
    assert new.priority_classes["low"].global_default is True
    with pytest.raises(Exception) as e:
        admin.patch_priority_class(config, "low", {"kind": "Deployment"})
    assert getattr(e.value, "field", None) == "kind"


# -- issue 15 item 8: quota above the hardware -------------------------------------------------------


async def test_quota_above_the_hardware_warns_and_placement_preempts_lower_priority(jp_fetch, started, check_schema):
    """The issue's scenario: team-b's A100 quota raised to 3 gives the cohort 7 A100s of quota for 6
    devices (a warning in the answer, the audit entry and GET admin/config). A development job holds
    one A100; an experiment-high 6 × A100 job fits the quota but not the devices: the development
    job is preempted for it (reason InNodePlacement), and it runs."""
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-b-cq", method="PATCH",
                    body={"resources": [{**A100_GPU, "nominalQuota": "3"}]})
    warning = ("Cohort research has 7 nvidia.com/gpu of flavor nvidia-a100 in nominal quota, but the inventory "
               "has 6: workloads within quota may wait for devices (PlacementFailed) or preempt lower-priority "
               "workloads on the nodes")
    assert view["warnings"] == [warning]
    check_schema("AdminConfig", view)
    assert (await ok(jp_fetch, "admin", "config"))["warnings"] == [warning]
    entry = (await audit(jp_fetch))["items"][0]
    check_schema("AuditEntry", entry)
    assert entry["warnings"] == [warning] and "warnings" not in entry["after"]
    assert entry["after"]["kind"] == "ClusterQueue"
    # a dry-run import of the same configuration says so too
    exported = (await call(jp_fetch, "admin", "config", params={"format": "yaml"}))[1]
    dry = await ok(jp_fetch, "admin", "import", method="POST", params={"dryRun": "true"}, body=exported,
                   headers={"Content-Type": "application/yaml"})
    assert dry["warnings"] == [warning]
    try:
        await ok(jp_fetch, "workloads", method="POST", expect=201,
                 body=command_job(SLEEP, name="dev-notebook", localQueue="team-b/team-b-queue",
                                  flavor="nvidia-a100", priorityClass="development"))
        await wait_for_state(jp_fetch, "team-b", "dev-notebook", ("Running",))
        await ok(jp_fetch, "workloads", method="POST", expect=201,
                 body=command_job(SLEEP, name="high-six", gpus=6, flavor="nvidia-a100",
                                  priorityClass="experiment-high"))
        high = await wait_for_state(jp_fetch, "team-a", "high-six", ("Running",), timeout=30)
        assert sorted(high["visibleDevices"].split(",")) == [str(i) for i in range(6)], high
        dev = await ok(jp_fetch, "workloads", "team-b", "dev-notebook")
        assert dev["state"] == "Pending" and dev["evictions"] == 1, dev
        # back in the queue; nothing of lower priority runs for it to preempt: it waits for devices
        assert dev["reason"] == "PlacementFailed", dev
    finally:
        await cancel_all(jp_fetch)

    # back to 2: no warning any more
    view = await ok(jp_fetch, "admin", "cluster-queues", "team-b-cq", method="PATCH",
                    body={"resources": [{**A100_GPU, "nominalQuota": "2"}]})
    assert view["warnings"] == []
    assert (await audit(jp_fetch))["items"][0]["warnings"] == []
