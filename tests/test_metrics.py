"""Prometheus metrics scraped from a real server and parsed with prometheus_client's own parser:
Kueue's metric names and labels, the seed's training_job_cost_usd, budgets and idle capacity;
authentication (the server's token, or GpuQueueApp.metrics_token) and the server's /metrics."""

from __future__ import annotations

import asyncio
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_budgets import CLUSTER, INVENTORY, spend, submit
from test_rest import ok, wait_for_state

PY = sys.executable
METRICS_TOKEN = "scrape-me-0123456789"


@pytest.fixture
def gpuqueue_config(gpuqueue_config, tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    gpuqueue_config.update(config_files=[str(tmp_path / "cluster.yaml")],
                           inventory_file=str(tmp_path / "inventory.yaml"), prices={"gpu": 2.0},
                           budgets={"team-b": {"monthlyUSD": 50, "hard": True}}, default_local_queue="team-a/q",
                           metrics_token=METRICS_TOKEN)
    return gpuqueue_config


def parse(text: str) -> dict:
    """{metric family name: {(sample name, frozenset(labels)): value}}."""
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        samples = out.setdefault(fam.name, {})
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(fams, family, sample=None, **labels):
    return fams[family][(sample or family, frozenset(labels.items()))]


async def scrape(jp_fetch, *path) -> dict:
    resp = await jp_fetch(*path)
    assert resp.headers["Content-Type"].startswith("text/plain")
    return parse(resp.body.decode())


async def test_metrics_follow_the_queue_and_the_ledger(jp_fetch, gpuqueue_service):
    await submit(jp_fetch, "blocker")  # team-a's only GPU
    await wait_for_state(jp_fetch, "team-a", "blocker", ("Running",))
    await submit(jp_fetch, "waiter")  # StrictFIFO, no quota left: inadmissible
    spend(gpuqueue_service, "team-b", 60.0, "earlier")  # team-b's hard budget (50) is spent
    held = await submit(jp_fetch, "held", namespace="team-b")
    assert held["reason"] == "BudgetExceeded"
    await asyncio.sleep(0.5)

    fams = await scrape(jp_fetch, "gpuqueue", "metrics")
    assert value(fams, "kueue_pending_workloads", cluster_queue="team-a-cq", status="inadmissible") == 1
    assert value(fams, "kueue_pending_workloads", cluster_queue="team-a-cq", status="active") == 0
    assert value(fams, "kueue_pending_workloads", cluster_queue="team-b-cq", status="inadmissible") == 1
    assert value(fams, "kueue_admitted_active_workloads", cluster_queue="team-a-cq") == 1
    assert value(fams, "kueue_admitted_active_workloads", cluster_queue="team-b-cq") == 0
    q = dict(cohort="", cluster_queue="team-a-cq", flavor="gpu", resource="nvidia.com/gpu")
    assert value(fams, "kueue_cluster_queue_resource_usage", **q) == 1
    assert value(fams, "kueue_cluster_queue_nominal_quota", **q) == 1
    assert value(fams, "kueue_cluster_queue_status", cluster_queue="team-a-cq", status="active") == 1
    assert value(fams, "kueue_admitted_workloads", "kueue_admitted_workloads_total",
                 cluster_queue="team-a-cq") == 1
    assert value(fams, "kueue_evicted_workloads", "kueue_evicted_workloads_total",
                 cluster_queue="team-a-cq", reason="Preempted") == 0
    wait = fams["kueue_admission_wait_time_seconds"]
    assert wait[("kueue_admission_wait_time_seconds_count", frozenset({("cluster_queue", "team-a-cq")}))] == 1
    assert wait[("kueue_admission_wait_time_seconds_bucket",
                 frozenset({("cluster_queue", "team-a-cq"), ("le", "+Inf")}))] == 1
    # The seed's per-job cost, and team spend / budgets / held work.
    costs = {dict(lbl)["job_name"]: (dict(lbl), v) for (_n, lbl), v in fams["training_job_cost_usd"].items()}
    labels, blocker_cost = costs["blocker"]
    assert labels == {"job_name": "blocker", "team": "team-a", "gpu_type": "gpu", "namespace": "team-a"}
    assert blocker_cost > 0
    assert round(costs["earlier"][1], 2) == 60.0
    assert round(value(fams, "gpuqueue_team_cost_usd", namespace="team-b"), 2) == 60.0
    assert value(fams, "gpuqueue_team_budget_usd", namespace="team-b") == 50.0
    assert value(fams, "gpuqueue_budget_held_workloads", namespace="team-b") == 1
    assert value(fams, "gpuqueue_flavor_capacity_gpus", flavor="gpu") == 2.0
    idle = value(fams, "gpuqueue_flavor_idle_gpu_hours", flavor="gpu")
    # 2 GPUs idle at most since this service first knew its inventory, not since the 1st of the month.
    since = gpuqueue_service.costs.capacity_since()
    assert 0 < idle <= 2 * (gpuqueue_service.clock() - since) / 3600 + 1e-9
    # The waiter's estimated wait: the blocker's declared maximum run time (5 min), at most.
    for _ in range(100):
        fams = await scrape(jp_fetch, "gpuqueue", "metrics")
        est = fams.get("gpuqueue_workload_estimated_wait_seconds", {})
        if est:
            break
        await asyncio.sleep(0.1)
    waiting = value(fams, "gpuqueue_workload_estimated_wait_seconds", namespace="team-a", name="waiter",
                    cluster_queue="team-a-cq")
    assert 0 < waiting <= 300

    # Nothing drifts: cancel the blocker and the figures follow the state.
    await ok(jp_fetch, "workloads", "team-a", "blocker", method="DELETE")
    await wait_for_state(jp_fetch, "team-a", "waiter", ("Running",))
    fams = await scrape(jp_fetch, "gpuqueue", "metrics")
    assert value(fams, "kueue_pending_workloads", cluster_queue="team-a-cq", status="inadmissible") == 0
    assert value(fams, "kueue_admitted_workloads", "kueue_admitted_workloads_total",
                 cluster_queue="team-a-cq") == 2
    assert fams["kueue_admission_wait_time_seconds"][(
        "kueue_admission_wait_time_seconds_count", frozenset({("cluster_queue", "team-a-cq")}))] == 2
    # jupyter_server's own /metrics carries the same families.
    server = await scrape(jp_fetch, "metrics")
    assert value(server, "kueue_admitted_active_workloads", cluster_queue="team-a-cq") == 1
    for name in ("waiter", "held"):
        ns = "team-b" if name == "held" else "team-a"
        await ok(jp_fetch, "workloads", ns, name, method="DELETE")


async def test_metrics_need_the_server_token_or_the_metrics_token(http_server_client, jp_base_url, gpuqueue_service):
    path = f"{jp_base_url}gpuqueue/metrics"
    resp = await http_server_client.fetch(path, raise_error=False)
    assert resp.code == 403
    resp = await http_server_client.fetch(path, headers={"Authorization": "Bearer wrong-token"}, raise_error=False)
    assert resp.code == 403
    resp = await http_server_client.fetch(path, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    fams = parse(resp.body.decode())
    assert "kueue_pending_workloads" in fams and "training_job_cost_usd" in fams


async def test_the_grafana_dashboard_uses_only_metrics_the_server_exports(jp_fetch, gpuqueue_service):
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[1] / "grafana" / "gpuqueue-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    names = {m for e in exprs for m in re.findall(r"\b((?:kueue|gpuqueue|training)_[a-z_]+)\b", e)}
    fams = await scrape(jp_fetch, "gpuqueue", "metrics")
    samples = {s for f in fams.values() for (s, _labels) in f}
    exported = set(fams) | samples
    assert names and names <= exported, names - exported
