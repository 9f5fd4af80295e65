"""Prometheus metrics of the GPU queue, read from the service's state on every scrape.

A custom ``prometheus_client`` Collector (:class:`QueueCollector`) builds every family from the
QueueService's live state (the engine's queues and quota tree) and the ledger (workloads, usage
intervals) when Prometheus scrapes: there is no counter in memory that could drift from the ledger
or reset at a restart. Names follow Kueue's (``pkg/metrics/metrics.go``) where one exists:

==========================================  =========  ==========================================
``kueue_pending_workloads``                 gauge      cluster_queue, status (active|inadmissible)
``kueue_admitted_active_workloads``         gauge      cluster_queue
``kueue_cluster_queue_status``              gauge      cluster_queue, status (pending|active|terminated)
``kueue_cluster_queue_resource_usage``      gauge      cohort, cluster_queue, flavor, resource
``kueue_cluster_queue_nominal_quota``       gauge      cohort, cluster_queue, flavor, resource
``kueue_cluster_queue_borrowing_limit``     gauge      cohort, cluster_queue, flavor, resource
``kueue_cluster_queue_lending_limit``       gauge      cohort, cluster_queue, flavor, resource
``kueue_admitted_workloads_total``          counter    cluster_queue (admissions in the ledger)
``kueue_evicted_workloads_total``           counter    cluster_queue, reason
``kueue_admission_wait_time_seconds``       histogram  cluster_queue (created → admitted)
``training_job_cost_usd``                   gauge      job_name, team, gpu_type, namespace
``gpuqueue_team_cost_usd``                  gauge      namespace (this UTC month, to date)
``gpuqueue_team_budget_usd``                gauge      namespace (monthly budget)
``gpuqueue_budget_held_workloads``          gauge      namespace (pending, reason BudgetExceeded)
``gpuqueue_idle_reclaimed_gpu_hours``       gauge      namespace (idle notebooks released this UTC month)
``gpuqueue_flavor_capacity_gpus``           gauge      flavor (GPU-equivalents in the inventory)
``gpuqueue_flavor_idle_gpu_hours``          gauge      flavor (this UTC month, to date)
``gpuqueue_flavor_idle_cost_usd``           gauge      flavor (this UTC month, to date)
``gpuqueue_workload_estimated_wait_seconds``  gauge    namespace, name, cluster_queue (pending, estimated)
==========================================  =========  ==========================================

Resource values are in Kueue's units: devices for GPUs and MIG slices, cores for ``cpu``, bytes
for memory. ``training_job_cost_usd`` lists every job with usage in the current UTC month (its
whole cost, all months), so the series set stays bounded.

Served at ``{base_url}gpuqueue/metrics`` (only these families) by :class:`MetricsHandler`:
authenticated like the rest of the server (a logged-in user or the server's token), or with
``Authorization: Bearer <GpuQueueApp.metrics_token>`` when that is set (for a Prometheus that holds
no Jupyter token). As the hub service, a logged-in hub user also needs ``custom:gpuqueue:admin``:
the families name every team's jobs (service/visibility.py). The same collector is registered in
``prometheus_client.REGISTRY``, so jupyter_server's own ``/metrics``
(``ServerApp.authenticate_prometheus``) carries them too — except as the hub service, where any hub
user could read that one.
"""

from __future__ import annotations

import hmac
import math
import weakref
from typing import Any, Callable, Iterable, Optional

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry
from tornado import web

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import JupyterHandler

from ..engine.model import CPU
from ..ledger import reports
from .handlers import SERVICE_KEY
from .scopes import ADMIN_SCOPE, HUB_SCOPES_KEY, has_scope

METRICS_TOKEN_KEY = "gpuqueue_metrics_token"
"""Web-app setting: the bearer token that may read ``gpuqueue/metrics`` (None: server auth only)."""

#: Kueue's admission wait buckets: ``generateExponentialBuckets(14)``, 1 s … 8192 s.
WAIT_BUCKETS = [float(2 ** i) for i in range(14)]


def _value(resource: str, quantity: int) -> float:
    return quantity / 1000.0 if resource == CPU else float(quantity)


class QueueCollector:
    """A ``prometheus_client`` Collector over one QueueService (``get_service()`` → service or
    None; families are empty while it is None)."""

    def __init__(self, get_service: Callable[[], Any]):
        self._get_service = get_service

    def describe(self) -> Iterable:
        return []  # no fixed description: families are built from the live state

    def collect(self) -> Iterable:
        service = self._get_service()
        if service is None:
            return []
        return list(self._families(service))

    # -- families --------------------------------------------------------------------------------

    def _families(self, service) -> Iterable:
        now = service.clock()
        sched = service.scheduler
        config = service.config
        cq_names = sorted(config.cluster_queues)

        pending = GaugeMetricFamily("kueue_pending_workloads", "The number of pending workloads, per "
                                    "cluster_queue and status (active: in the queue's heap; inadmissible: "
                                    "tried and did not fit, or held by a budget)", labels=["cluster_queue", "status"])
        counts = {cq: {"active": 0, "inadmissible": 0} for cq in cq_names}
        held = {}
        for uid, rec in service.records.items():
            if rec["state"] != "Pending":
                continue
            cq = rec.get("cluster_queue")
            if cq not in counts:
                continue
            key = f"{rec['namespace']}/{rec['name']}"
            if uid in service.budget_holds:
                counts[cq]["inadmissible"] += 1
                held[rec["namespace"]] = held.get(rec["namespace"], 0) + 1
                continue
            reason = sched.reason(key)
            status = "active" if reason is None or reason[0] == "Pending" else "inadmissible"
            counts[cq][status] += 1
        for cq in cq_names:
            for status in ("active", "inadmissible"):
                pending.add_metric([cq, status], counts[cq][status])
        yield pending

        active = GaugeMetricFamily("kueue_admitted_active_workloads", "The number of admitted Workloads that "
                                   "are active (unsuspended and not finished)", labels=["cluster_queue"])
        adm = {cq: 0 for cq in cq_names}
        for wl in sched.admitted.values():
            if wl.admission and wl.admission.cluster_queue in adm:
                adm[wl.admission.cluster_queue] += 1
        for cq in cq_names:
            active.add_metric([cq], adm[cq])
        yield active

        status = GaugeMetricFamily("kueue_cluster_queue_status", "Reports the status of the ClusterQueue "
                                   "(1 for its one status)", labels=["cluster_queue", "status"])
        for cq in cq_names:
            st = "pending" if cq in getattr(sched, "inactive", ()) else "active"
            for s in ("pending", "active", "terminated"):
                status.add_metric([cq, s], 1.0 if s == st else 0.0)
        yield status

        labels = ["cohort", "cluster_queue", "flavor", "resource"]
        usage = GaugeMetricFamily("kueue_cluster_queue_resource_usage", "Reports the cluster_queue's total "
                                  "resource usage within all the flavors", labels=labels)
        nominal = GaugeMetricFamily("kueue_cluster_queue_nominal_quota", "Reports the cluster_queue's "
                                    "resource nominal quota within all the flavors", labels=labels)
        borrowing = GaugeMetricFamily("kueue_cluster_queue_borrowing_limit", "Reports the cluster_queue's "
                                      "resource borrowing limit within all the flavors", labels=labels)
        lending = GaugeMetricFamily("kueue_cluster_queue_lending_limit", "Reports the cluster_queue's "
                                    "resource lending limit within all the flavors", labels=labels)
        for name in cq_names:
            cq = config.cluster_queues[name]
            node = sched.tree.cluster_queues.get(name)
            for rg in cq.resource_groups:
                for fq in rg.flavors:
                    for rq in fq.resources:
                        lv = [cq.cohort or "", name, fq.name, rq.name]
                        used = node.usage.get((fq.name, rq.name), 0) if node is not None else 0
                        usage.add_metric(lv, _value(rq.name, used))
                        nominal.add_metric(lv, _value(rq.name, rq.nominal_quota))
                        if rq.borrowing_limit is not None:
                            borrowing.add_metric(lv, _value(rq.name, rq.borrowing_limit))
                        if rq.lending_limit is not None:
                            lending.add_metric(lv, _value(rq.name, rq.lending_limit))
        yield from (usage, nominal, borrowing, lending)

        wait = GaugeMetricFamily("gpuqueue_workload_estimated_wait_seconds", "Seconds from now until a "
                                 "pending workload is expected to be admitted (docs/estimates.md; pending "
                                 "workloads with an estimate only)", labels=["namespace", "name", "cluster_queue"])
        estimates = getattr(service, "estimates", None)
        for ns, name, cq, seconds in (estimates.gauge_items() if estimates is not None else ()):
            wait.add_metric([ns, name, cq], seconds)
        yield wait

        yield from self._ledger_families(service, now, cq_names, held)

    def _ledger_families(self, service, now: float, cq_names: list[str], held: dict[str, int]) -> Iterable:
        ledger = service.ledger
        rows = ledger.list_workloads()
        cq_of = {r["uid"]: r.get("cluster_queue") for r in rows}

        # Admissions: every admission opened intervals starting at its admission time.
        admissions: dict[str, set] = {cq: set() for cq in cq_names}
        all_intervals = ledger.report_intervals(now)
        for iv in all_intervals:
            cq = iv.get("cluster_queue")
            if cq in admissions:
                admissions[cq].add((iv["workload_uid"], iv["start"]))
        admitted = CounterMetricFamily("kueue_admitted_workloads_total", "The total number of admitted "
                                       "workloads (admissions recorded in the ledger)", labels=["cluster_queue"])
        for cq in cq_names:
            admitted.add_metric([cq], len(admissions[cq]))
        yield admitted

        evicted = CounterMetricFamily("kueue_evicted_workloads_total", "The number of evicted workloads per "
                                      "'cluster_queue'", labels=["cluster_queue", "reason"])
        ev = {cq: 0 for cq in cq_names}
        for r in rows:
            if r.get("cluster_queue") in ev:
                ev[r["cluster_queue"]] += int(r.get("evictions") or 0)
        for cq in cq_names:
            evicted.add_metric([cq, "Preempted"], ev[cq])
        yield evicted

        wait = HistogramMetricFamily("kueue_admission_wait_time_seconds", "The time between a workload was "
                                     "created and it was admitted, per 'cluster_queue'", labels=["cluster_queue"])
        waits: dict[str, list[float]] = {cq: [] for cq in cq_names}
        first_admit: dict[str, float] = {}
        for iv in all_intervals:
            uid = iv["workload_uid"]
            first_admit[uid] = min(first_admit.get(uid, math.inf), iv["start"])
        created = {r["uid"]: r["created_at"] for r in rows}
        for uid, at in first_admit.items():
            cq = cq_of.get(uid)
            if cq in waits and uid in created:
                waits[cq].append(max(0.0, at - created[uid]))
        for cq in cq_names:
            values = waits[cq]
            buckets = [(f"{b:g}", float(sum(1 for v in values if v <= b))) for b in WAIT_BUCKETS]
            buckets.append(("+Inf", float(len(values))))
            wait.add_metric([cq], buckets, math.fsum(values))
        yield wait

        # Costs of this UTC month (to date).
        since, until = reports.parse_month(reports.month_of(now))
        month_ivs = [iv for iv in all_intervals if iv["end"] > since and iv["start"] < until]
        month_uids = {iv["workload_uid"] for iv in month_ivs}
        job = GaugeMetricFamily("training_job_cost_usd", "Cost in USD of a job so far (jobs with usage in the "
                                "current UTC month)", labels=["job_name", "team", "gpu_type", "namespace"])
        per_job: dict[str, dict] = {}
        for iv in all_intervals:
            if iv["workload_uid"] not in month_uids:
                continue
            j = per_job.setdefault(iv["workload_uid"], {"name": iv["name"], "ns": iv["namespace"], "flavors": set(),
                                                        "usd": []})
            j["flavors"].add(iv["flavor"])
            j["usd"].append(iv["usd_per_hour"] * max(0.0, iv["end"] - iv["start"]) / 3600.0)
        for j in sorted(per_job.values(), key=lambda j: (j["ns"], j["name"])):
            job.add_metric([j["name"], j["ns"], ",".join(sorted(j["flavors"])), j["ns"]], math.fsum(j["usd"]))
        yield job

        teams = sorted({lq.namespace for lq in service.config.local_queues.values()})
        team_cost = GaugeMetricFamily("gpuqueue_team_cost_usd", "USD spent by a team (namespace) in the "
                                      "current UTC month, running work up to now", labels=["namespace"])
        spent: dict[str, list[float]] = {}
        for p in reports.pieces(month_ivs, since, min(until, now)):
            spent.setdefault(p["namespace"], []).append(p["costUsd"])
        for ns in sorted(set(teams) | set(spent)):
            team_cost.add_metric([ns], math.fsum(spent.get(ns, [])))
        yield team_cost

        budget = GaugeMetricFamily("gpuqueue_team_budget_usd", "A team's budget in USD per UTC month",
                                   labels=["namespace"])
        if service.budgets is not None:
            for ns, b in sorted(service.budgets.all().items()):
                budget.add_metric([ns], b.monthly_usd)
        yield budget

        reclaimed = GaugeMetricFamily("gpuqueue_idle_reclaimed_gpu_hours", "GPU-hours reclaimed from idle notebook "
                                      "leases of a team (namespace) released in the current UTC month (service/idle.py)",
                                      labels=["namespace"])
        for ns, r in reports.idle_reclaimed_by_team(ledger.idle_reclaims(since, until), teams).items():
            reclaimed.add_metric([ns], r["idleReclaimedGpuHours"])
        yield reclaimed

        hold = GaugeMetricFamily("gpuqueue_budget_held_workloads", "Pending workloads held because their "
                                 "team's hard budget is spent (reason BudgetExceeded)", labels=["namespace"])
        for ns in sorted(set(teams) | set(held)):
            hold.add_metric([ns], held.get(ns, 0))
        yield hold

        capacity = service.capacity_by_flavor()
        cap = GaugeMetricFamily("gpuqueue_flavor_capacity_gpus", "GPU-equivalents of the inventory per "
                                "ResourceFlavor (MIG slices by their share of the GPU)", labels=["flavor"])
        idle_h = GaugeMetricFamily("gpuqueue_flavor_idle_gpu_hours", "GPU-hours of a flavor nobody used in the "
                                   "current UTC month, to date", labels=["flavor"])
        idle_c = GaugeMetricFamily("gpuqueue_flavor_idle_cost_usd", "What the idle GPU-hours of a flavor cost "
                                   "in the current UTC month, to date", labels=["flavor"])
        # Idle from when the inventory was first known, if that is later than the 1st (service/costs.py).
        first_known = service.costs.capacity_since(now) if getattr(service, "costs", None) is not None else None
        idle_since = max(since, first_known) if first_known is not None else since
        for row in reports.idle_capacity(month_ivs, idle_since, min(until, now), capacity, service.prices.price):
            cap.add_metric([row["flavor"]], row["capacityGpus"])
            idle_h.add_metric([row["flavor"]], row["idleGpuHours"])
            idle_c.add_metric([row["flavor"]], row["idleCostUsd"])
        yield from (cap, idle_h, idle_c)


# -- the process-wide registry (jupyter_server's /metrics) -------------------------------------------

_current: Optional[weakref.ref] = None
_global_collector: Optional[QueueCollector] = None


def _current_service():
    return _current() if _current is not None else None


def install_global(service) -> None:
    """Make ``service`` the one whose metrics ``prometheus_client.REGISTRY`` (the server's
    ``/metrics``) reports; registers the collector once per process."""
    global _current, _global_collector
    _current = weakref.ref(service)
    if _global_collector is None:
        _global_collector = QueueCollector(_current_service)
        prometheus_client.REGISTRY.register(_global_collector)


def uninstall_global(service) -> None:
    """Stop reporting ``service`` in the process-wide registry (if it is the current one)."""
    global _current
    if _current_service() is service:
        _current = None


def registry_for(get_service: Callable[[], Any]) -> CollectorRegistry:
    """A registry holding only the GPU queue's families (``gpuqueue/metrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(get_service))
    return registry


class MetricsHandler(JupyterHandler):
    """``GET {base_url}gpuqueue/metrics``: the text exposition format (module docstring)."""

    @allow_unauthenticated
    def get(self) -> None:
        token = self.settings.get(METRICS_TOKEN_KEY)
        auth = self.request.headers.get("Authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not (token and bearer and hmac.compare_digest(bearer.encode(), str(token).encode())):
            if not self.logged_in:
                raise web.HTTPError(403, "log in, send the server's token, or Authorization: Bearer "
                                         "<GpuQueueApp.metrics_token>")
            if self.settings.get(HUB_SCOPES_KEY) and not has_scope(self, ADMIN_SCOPE):
                # every team's jobs by name (service/visibility.py): a hub user who is no queue admin
                raise web.HTTPError(403, f"the queue's metrics name every team's jobs: they need {ADMIN_SCOPE}, "
                                         "or Authorization: Bearer <GpuQueueApp.metrics_token>")
        settings = self.settings
        registry = registry_for(lambda: settings.get(SERVICE_KEY))
        self.set_header("Content-Type", prometheus_client.CONTENT_TYPE_LATEST)
        self.finish(prometheus_client.generate_latest(registry))


metrics_handler = (r"gpuqueue/metrics", MetricsHandler)
