"""Views: the JSON the REST API returns (``docs/rest-api.md``): a Workload view (position, reason,
cost so far, estimated cost), lists of workloads, ClusterQueues and LocalQueues with usage and their
pending workloads in order, the inventory with each device's holder, prices, the user's info, and
cost estimates before submitting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from ..engine import serialize
from ..engine.flavors import flavor_eligible
from ..engine.model import GPU, MIG_PREFIX, PodSet, Workload
from ..engine.quantity import format_quantity
from ..errors import ValidationError
from .devices import visible_devices
from .notebooks import NotebookProgress
from .states import DEFAULT_MAX_RUNTIME, PENDING, RUNNING

if TYPE_CHECKING:
    from ..engine.model import Inventory
    from ..ledger import Ledger
    from .billing import Billing
    from .checks import RequestChecks
    from .live import LiveConfig, LiveState
    from .teams import Teams


# Kueue's preemption reasons (engine/preemption_common.py) in a word or two, for a job's card.
PREEMPTION_WORDS = {
    "InClusterQueue": "priority",
    "InCohortReclamation": "quota reclaimed",
    "InCohortFairSharing": "fair sharing",
    "InCohortReclaimWhileBorrowing": "quota reclaimed while borrowing",
    "InNodePlacement": "placement",
}


def _by_text(by: Optional[str], own_namespace: str, reveal: bool) -> tuple[Optional[str], Optional[str], str]:
    """(by, its namespace, words): another team's preemptor is shown by its team only unless
    ``reveal`` (admins)."""
    if not by:
        return None, None, "another workload"
    ns = by.partition("/")[0]
    if reveal or ns == own_namespace:
        return by, ns, by
    return None, ns, f"a {ns} workload"


def preemptions_view(rec: dict, *, reveal: bool = False) -> Optional[dict]:
    """The ``preemptions`` field of a workload view, None when it was never preempted:
    ``{"count", "lostCostUsd" (USD of the runs it lost), "last": {"at", "by" (the preemptor's
    namespace/name, null when hidden or unknown), "byNamespace", "reason" (Kueue's), "words"},
    "summary": "preempted 1× by team-a/high-wait (priority) · $0.32 of runs lost", "history":
    [same as last, oldest first]}`` (an eviction that is not a preemption, e.g. ``PodsReadyTimeout``,
    also has its ``message``, naming the node). The record keeps them in ``spec["preemptions"]``
    (Admission.requeue_evicted)."""
    count = int(rec.get("evictions") or 0)
    kept = list((rec.get("spec") or {}).get("preemptions") or [])
    if not count and not kept:
        return None
    own = rec["namespace"]
    history = []
    for p in kept:
        by, by_ns, by_words = _by_text(p.get("by"), own, reveal)
        reason = p.get("reason") or "Preempted"
        history.append({"at": p.get("at"), "by": by, "byNamespace": by_ns, "reason": reason,
                        "words": PREEMPTION_WORDS.get(reason, reason), "byWords": by_words,
                        "lostCostUsd": p.get("lostCostUsd"),
                        # an eviction by the system (PodsReadyTimeout: a lost node...) says why; a
                        # preemption's message names the preemptor, which `by` hides or reveals
                        "message": p.get("message") if reason != "Preempted" else None})
    last = history[-1] if history else None
    lost = float(last["lostCostUsd"] or 0.0) if last else 0.0
    summary = f"preempted {max(count, len(history))}×"
    if last:
        summary += f" by {last['byWords']} ({last['words']})"
    summary += f" · {_usd(lost)} of runs lost"
    return {"count": max(count, len(history)), "lostCostUsd": round(lost, 6), "last": last,
            "summary": summary, "history": history}


def _usd(x: float) -> str:
    if x <= 0:
        return "$0.00"
    if x < 0.005:
        return "< $0.01"
    return f"${x:,.2f}"


def _version() -> str:
    from ..version import __version__

    return __version__


class Views:
    """Builds the API's JSON from the live state and the ledger.

    Collaborators: ``conf`` (LiveConfig: configuration, prices, Scheduler, budgets, clock), ``live``
    (LiveState: records, Kueue's positions), the ``ledger`` (finished workloads, costs), the
    ``inventory``, ``teams`` (a user's LocalQueues), ``billing`` (costs so far, what is billed) and
    ``checks`` (estimates validate as submissions do). Settings: ``delegated`` (positions are
    Kueue's), ``python_executable``, ``root_dir``; ``mode`` ("standalone", or "hub-service" as the
    server sets it)."""

    mode = "standalone"
    estimates = None  # service/estimates.py's Estimates (QueueService sets it): the view's estimate fields
    idle = None  # service/idle.py's IdleReclaim (QueueService sets it): idleDeadline, idleKeepsLeft
    lease_extensions = None  # service/lease_extension.py (QueueService sets it): leaseExtensionSeconds, …Left

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", inventory: "Inventory",
                 teams: "Teams", billing: "Billing", checks: "RequestChecks", *, delegated: bool,
                 python_executable: str, root_dir: str):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.inventory = inventory
        self.teams = teams
        self.billing = billing
        self.checks = checks
        self.delegated = delegated
        self.python_executable = python_executable
        self.root_dir = root_dir
        self.notebooks = NotebookProgress(root_dir)  # a notebook job's executed notebook, cell n of N

    def info(self, user: str) -> dict:
        lqs = []
        for key in self.teams.allowed_local_queues(user):
            lq = self.conf.config.local_queues[key]
            caps = self.checks.runtime_caps
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
                        # the team's cap on maxRuntimeSeconds (service/runtime_caps.py), null: none
                        "maxRuntimeSeconds": caps.cap(lq.namespace) if caps is not None else None})
        profiles = sorted(
            {r[len(MIG_PREFIX):] for r in self.checks.known_resources() if r.startswith(MIG_PREFIX)},
            key=lambda p: (int(p.split("g.")[0]), p),
        )
        pcs = [
            {"name": pc.name, "value": pc.value, "kind": pc.kind, "description": pc.description}
            for pc in sorted(
                list(self.conf.config.priority_classes.values()) + list(self.conf.config.workload_priority_classes.values()),
                key=lambda p: p.value,
            )
        ]
        default_pc = self.checks.default_priority_class
        if not default_pc:
            pc = self.conf.config.default_priority_class()
            default_pc = pc.name if pc else None
        return {
            "user": user,
            "mode": self.mode,
            "version": _version(),
            "localQueues": lqs,
            "defaultLocalQueue": self.teams.default_local_queue(user),
            "flavors": sorted(self.conf.config.resource_flavors),
            "migProfiles": profiles,
            "priorityClasses": pcs,
            "defaultPriorityClass": default_pc,
            "defaultMaxRuntimeSeconds": DEFAULT_MAX_RUNTIME,
            "pythonExecutable": self.python_executable,
            "rootDir": self.root_dir,
        }

    def list_workloads(self, *, namespace: Optional[str] = None, owner: Optional[str] = None,
                       states: Optional[Iterable[str]] = None) -> list[dict]:
        """Workload views, newest first. Finished workloads come from the ledger."""
        states = list(states) if states else None
        rows = self.ledger.list_workloads(states=states)
        out_rows = []
        for row in rows:
            live = self.live.records.get(row["uid"])
            row = live if live is not None else row
            if namespace and row["namespace"] != namespace:
                continue
            if owner and row["owner"] != owner:
                continue
            out_rows.append(row)
        out_rows.sort(key=lambda r: r["created_at"], reverse=True)
        costs = self.ledger.costs_usd([r["uid"] for r in out_rows], self.conf.clock()) if out_rows else {}
        return [self.view(r, cost=costs.get(r["uid"], 0.0)) for r in out_rows]

    def get_workload(self, namespace: str, name: str) -> dict:
        return self.view(self.live.record(namespace, name))

    def estimate(self, request: dict, *, user: str) -> dict:
        """Cost estimate of a SubmitRequest before submitting: requested GPU-hours × price per hour of
        the chosen flavor (with ``any``, the dearest flavor it could land on). Validates like submit,
        except for the command."""
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self.teams.resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.conf.config.local_queues[f"{ns}/{lq}"].cluster_queue
        self.checks.resolve_priority(request.get("priorityClass"))
        max_runtime = self.checks.max_runtime(request, ns)
        ps = self.checks.pod_set_from_form(request, cq_name)
        wl = Workload(namespace=ns, name="estimate", queue_name=lq, pod_sets=[ps])
        self.checks.check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        resource, qty = next(iter(ps.requests.items()))
        eligible = self.eligible_flavors(cq_name, ps, resource)
        flavor = self.likely_flavor(cq_name, ps, resource)
        per_hour = self.conf.prices.usd_per_hour(flavor, resource, qty) if flavor else 0.0
        gpu_eq = self.conf.prices.gpu_equivalent(resource, qty)
        costs = [round(self.conf.prices.usd_per_hour(f, resource, qty) * max_runtime / 3600.0, 6) for f in eligible]
        return {
            "gpuHours": round(gpu_eq * max_runtime / 3600.0, 6),
            "costUsd": round(per_hour * max_runtime / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            "flavor": flavor,
            # every flavor it could land on (flavor "any"): the range of their costs (issue 34 item 7)
            "eligibleFlavors": eligible,
            "costRangeUsd": [min(costs), max(costs)] if costs else None,
            "resource": resource,
            "quantity": qty,
            "maxRuntimeSeconds": max_runtime,
        }

    def eligible_flavors(self, cq_name: str, ps: PodSet, resource: str) -> list[str]:
        """The flavors of ClusterQueue ``cq_name`` that ``ps`` could ever land on, in the
        ClusterQueue's order (its node selection and tolerations fit, and the quota it could
        ever use holds it)."""
        cq = self.conf.config.cluster_queues.get(cq_name)
        resource, ps = self.billing.quota_resource(cq, ps, resource)  # through resources.transformations
        rg = cq.group_for(resource) if cq else None
        if rg is None:
            return []
        node = self.conf.scheduler.tree.cluster_queues[cq_name]
        eligible = []
        for fq in rg.flavors:
            fl = self.conf.config.resource_flavors.get(fq.name)
            if fl is None or flavor_eligible(fl, ps) is not None:
                continue
            if node.potential_available((fq.name, resource)) < ps.requests[resource] * ps.count:
                continue
            eligible.append(fq.name)
        return eligible

    def likely_flavor(self, cq_name: str, ps: PodSet, resource: str) -> Optional[str]:
        """The flavor the queue would pick now, as Kueue's flavor assignment does: the first
        eligible flavor, in the ClusterQueue's order, whose quota holds it now; when none does,
        the first eligible one (it waits for it). None when none is eligible. (Not the dearest:
        issue 34 item 7 — the preview priced an H100 for a job that ran on an A100.)"""
        eligible = self.eligible_flavors(cq_name, ps, resource)
        if not eligible:
            return None
        cq = self.conf.config.cluster_queues.get(cq_name)
        quota_resource, qps = self.billing.quota_resource(cq, ps, resource)
        node = self.conf.scheduler.tree.cluster_queues[cq_name]
        need = qps.requests[quota_resource] * qps.count
        for f in eligible:
            if node.available((f, quota_resource)) >= need:
                return f
        return eligible[0]

    def queues(self) -> dict:
        """ClusterQueues with usage per flavor and resource, and their pending workloads in order."""
        cqs = []
        for name in sorted(self.conf.config.cluster_queues):
            cq = self.conf.config.cluster_queues[name]
            node = self.conf.scheduler.tree.cluster_queues[name]
            resources = []
            for rg in cq.resource_groups:
                for fq in rg.flavors:
                    for rq in fq.resources:
                        fr = (fq.name, rq.name)
                        resources.append({
                            "flavor": fq.name,
                            "resource": rq.name,
                            "nominalQuota": format_quantity(rq.name, rq.nominal_quota),
                            "borrowingLimit": None if rq.borrowing_limit is None else format_quantity(rq.name, rq.borrowing_limit),
                            "lendingLimit": None if rq.lending_limit is None else format_quantity(rq.name, rq.lending_limit),
                            "usage": format_quantity(rq.name, node.usage.get(fr, 0)),
                            "borrowed": format_quantity(rq.name, node.borrowed(fr)),
                        })
            pending = []
            for key in self.conf.scheduler.pending_keys(name):
                uid = self.live.by_key.get(key)
                rec = self.live.records.get(uid) if uid else None
                if rec is None:
                    continue
                pos = (self.live.kueue_positions.get(uid) if self.delegated else self.conf.scheduler.position(key)) or (None, None)
                reason = self.conf.scheduler.reason(key) or (None, None)
                pending.append({
                    "namespace": rec["namespace"], "name": rec["name"], "localQueue": rec["local_queue"],
                    "owner": rec["owner"], "priority": rec["priority"], "priorityClass": rec.get("priority_class"),
                    "positionInClusterQueue": pos[0], "positionInLocalQueue": pos[1],
                    "reason": reason[0], "message": reason[1], "createdAt": rec["created_at"],
                })
            admitted = sum(1 for w in self.conf.scheduler.admitted.values() if w.admission.cluster_queue == name)
            cqs.append({
                "name": name, "cohort": cq.cohort, "queueingStrategy": cq.queueing_strategy,
                "active": name not in self.conf.scheduler.inactive,
                "resources": resources, "pendingWorkloads": len(pending), "admittedWorkloads": admitted,
                "pending": pending,
            })
        lqs = []
        for key in sorted(self.conf.config.local_queues):
            lq = self.conf.config.local_queues[key]
            q = self.conf.scheduler.queues.get(lq.cluster_queue)
            adm = sum(
                1 for w in self.conf.scheduler.admitted.values()
                if w.namespace == lq.namespace and w.queue_name == lq.name
            )
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
                        "pendingWorkloads": q.count_local_queue(key) if q else 0, "admittedWorkloads": adm})
        return {"clusterQueues": cqs, "localQueues": lqs}

    def owner_of(self, key: str) -> Optional[str]:
        """The owner of the live workload ``namespace/name`` (None when it is not live)."""
        rec = self.live.records.get(self.live.by_key.get(key, ""))
        return rec["owner"] if rec else None

    def inventory_view(self) -> dict:
        """GPUs and MIG slices per flavor: free and total, and every device with its holder
        (``assignedTo``: "namespace/name"; ``holder``: {namespace, name, owner, kind, since (its
        start, else its admission, seconds since the epoch)} or None)."""
        alloc = self.conf.scheduler.allocator
        summary = []
        for fname in sorted(self.conf.config.resource_flavors):
            fl = self.conf.config.resource_flavors[fname]
            nodes = [n for n in self.inventory.nodes if all(n.labels.get(k) == v for k, v in fl.node_labels.items())]
            offered = {r for cq in self.conf.config.cluster_queues.values() for rg in cq.resource_groups
                       for f in rg.flavors if f.name == fname for r in rg.covered_resources}
            offered |= self.billing.transformed_inputs(offered)
            for resource in sorted(r for r in offered if r == GPU or r.startswith(MIG_PREFIX)):
                free, total = alloc.totals(resource, nodes) if alloc else (0, 0)
                if total == 0:
                    continue
                summary.append({"flavor": fname, "resource": resource, "free": free, "total": total})
        nodes = []
        owner = alloc.owner if alloc else {}
        holders: dict[str, Optional[dict]] = {}

        def holder(key: Optional[str]) -> Optional[dict]:
            # who holds a device, and since when (issue 34 item 11: the grid's owner and running time)
            if not key:
                return None
            if key not in holders:
                rec = self.live.records.get(self.live.by_key.get(key, ""))
                holders[key] = None if rec is None else {
                    "namespace": rec["namespace"], "name": rec["name"], "owner": rec["owner"],
                    "kind": (rec.get("spec") or {}).get("kind") or "Job",
                    "since": rec.get("started_at") or rec.get("admitted_at")}
            return holders[key]

        for n in self.inventory.nodes:
            gpus = []
            for g in n.gpus:
                key = owner.get(f"{n.name}/{g.index}") if g.mig is None else None
                gd = {"index": g.index, "uuid": g.uuid, "product": g.product, "memoryMiB": g.memory_mib,
                      "assignedTo": key, "holder": holder(key), "mig": None}
                if g.mig is not None:
                    gd["mig"] = [{"uuid": d.uuid, "profile": d.profile, "slices": d.slices,
                                  "assignedTo": owner.get(d.uuid), "holder": holder(owner.get(d.uuid))} for d in g.mig]
                gpus.append(gd)
            nodes.append({"name": n.name, "labels": dict(n.labels), "gpus": gpus})
        return {"source": self.inventory.source, "summary": summary, "nodes": nodes}

    def prices_view(self) -> dict:
        return self.conf.prices.to_json()

    def price_per_hour(self, rec: dict) -> float:
        adm = rec.get("admission")
        if adm:
            return sum(self.conf.prices.usd_per_hour(f, r, q) for f, r, q in self.billing.billable_json(adm, rec["spec"]))
        spec = rec["spec"]
        total = 0.0
        for p in spec["podSets"]:
            ps = serialize.pod_set_from_dict(p)
            for r, q in ps.requests.items():
                if r == GPU or r.startswith(MIG_PREFIX):
                    cq_name = rec.get("cluster_queue") or ""
                    f = self.likely_flavor(cq_name, ps, r) if cq_name in self.conf.config.cluster_queues else None
                    if f:
                        total += self.conf.prices.usd_per_hour(f, r, q * ps.count)
        return total

    def timeline(self, namespace: str, name: str, *, reveal: bool = False) -> dict:
        """A job's history for its page (docs/rest-api.md, Timeline): ``{"workload": view,
        "events": [{"at", "type", "text"}] (oldest first: Submitted, Moved (service/moves.py),
        Admitted (each run, where), Started, Preempted (by whom, why, what was lost), Finished /
        Failed / Cancelled),
        "runs": [{"start", "end" (null while it runs), "flavors": ["2 × gpu-a"], "costUsd",
        "outcome": running | preempted | succeeded | failed | cancelled}], "utilization":
        [{"device", "at", "percent"}], "memory": [{"device", "at", "memoryUsedMiB",
        "memoryTotalMiB" (None where unknown)}] (NVML samples, oldest first, where taken; none
        without NVML)}``. Raises NotFound."""
        rec = self.live.record(namespace, name)
        view = self.view(rec)
        if reveal:
            view = self.reveal(view)
        now = self.conf.clock()
        runs: dict[float, dict] = {}
        for iv in self.ledger.intervals(rec["uid"]):
            run = runs.setdefault(iv["start"], {"start": iv["start"], "end": iv["end"], "flavors": [], "costUsd": 0.0})
            what = iv["resource"]
            what = f"MIG {what[len(MIG_PREFIX):]}" if what.startswith(MIG_PREFIX) else iv["flavor"]
            run["flavors"].append(f"{iv['quantity']} × {what}")
            end = now if iv["end"] is None else iv["end"]
            run["costUsd"] += iv["usd_per_hour"] * max(0.0, end - iv["start"]) / 3600.0
            if iv["end"] is None:
                run["end"] = None
        preempted = (view.get("preemptions") or {}).get("history") or []
        ordered = sorted(runs.values(), key=lambda r: r["start"])
        state = rec["state"]
        for i, run in enumerate(ordered):
            run["costUsd"] = round(run["costUsd"], 6)
            if run["end"] is None:
                run["outcome"] = "running"
            elif i < len(ordered) - 1 or state == PENDING:
                run["outcome"] = "preempted"
            else:
                run["outcome"] = {"Succeeded": "succeeded", "Failed": "failed", "Cancelled": "cancelled"}.get(state, "preempted")
        events = [{"at": rec["created_at"], "type": "Submitted",
                   "text": f"submitted by {rec['owner']} to {rec['namespace']}/{rec['local_queue']}"
                           + (f" ({rec['priority_class']})" if rec.get("priority_class") else "")}]
        for run in ordered:
            where = ", ".join(run["flavors"])
            events.append({"at": run["start"], "type": "Admitted", "text": f"admitted on {where}"})
        for p in preempted:
            events.append({"at": p["at"], "type": "Preempted",
                           "text": f"preempted by {p['byWords']} ({p['words']}); its runs so far cost "
                                   f"{_usd(float(p.get('lostCostUsd') or 0.0))}, and it was queued again"})
        if rec.get("started_at"):
            events.append({"at": rec["started_at"], "type": "Started", "text": "started running"})
        for m in (rec.get("spec") or {}).get("moves") or []:  # service/moves.py
            events.append({"at": m["at"], "type": "Moved", "text": f"moved by {m['by']} from {m['from']} to {m['to']}"})
        lifted = (rec.get("spec") or {}).get("budgetHoldLiftedBy")
        if lifted:
            events.append({"at": None, "type": "BudgetHoldLifted", "text": f"budget hold lifted by {lifted}"})
        if rec.get("finished_at") is not None:
            text = state.lower()
            if rec.get("exit_code") is not None:
                text += f" (exit code {rec['exit_code']})"
            if rec.get("message"):
                text += f": {rec['message']}"
            events.append({"at": rec["finished_at"], "type": state, "text": text})
        events.sort(key=lambda e: (e["at"] is None, e["at"] or 0.0))
        return {"workload": view, "events": events, "runs": ordered,
                "utilization": self.ledger.utilization_samples(rec["uid"]),
                "memory": self.ledger.memory_samples(rec["uid"])}

    def reveal(self, view: dict) -> dict:
        """``view`` as an admin sees it: the names of the workloads its estimate waits for and of
        its preemptors (another team's are hidden from others)."""
        if self.estimates is not None:
            view = self.estimates.reveal_waiting_for(view)
        if view.get("preemptions"):
            rec = self.live.records.get(view["uid"]) or self.ledger.get_workload(view["uid"])
            if rec is not None:
                view = {**view, "preemptions": preemptions_view(rec, reveal=True)}
        return view

    def view(self, rec: dict, cost: Optional[float] = None) -> dict:
        key = f"{rec['namespace']}/{rec['name']}"
        state = rec["state"]
        pos = (self.live.kueue_positions.get(rec["uid"]) if self.delegated else self.conf.scheduler.position(key)) if state == PENDING else None
        reason, message = rec.get("reason"), rec.get("message")
        if state == PENDING:
            live = None if self.delegated else self.conf.scheduler.reason(key)
            if live:
                reason, message = live
        adm = rec.get("admission")
        spec = rec["spec"]
        now = self.conf.clock()
        if cost is None:
            cost = self.billing.cost_usd(rec, now)  # from memory where it can (service/costs.py)
        per_hour = self.price_per_hour(rec)
        max_rt = spec.get("maxRuntimeSeconds") or 0
        placements = adm.get("placements", []) if adm else []
        devices = visible_devices(placements, self.inventory)  # GPU UUIDs where NVML found them (devices.py)
        pod_sets = []
        for p in spec["podSets"]:
            pod_sets.append({"name": p["name"], "count": p["count"],
                             "requests": {r: format_quantity(r, int(v)) for r, v in p["requests"].items()}})
        admission = None
        if adm:
            admission = {
                "clusterQueue": adm["clusterQueue"],
                "podSetAssignments": [
                    {"name": a["name"], "count": a["count"], "flavors": a["flavors"],
                     "resourceUsage": {r: format_quantity(r, int(v)) for r, v in a["resourceUsage"].items()}}
                    for a in adm["podSetAssignments"]
                ],
            }
        return {
            "uid": rec["uid"],
            "name": rec["name"],
            "namespace": rec["namespace"],
            "localQueue": rec["local_queue"],
            "clusterQueue": rec.get("cluster_queue"),
            "owner": rec["owner"],
            "state": state,
            "reason": reason,
            "message": message,
            "priorityClass": rec.get("priority_class"),
            "priority": rec["priority"],
            "positionInClusterQueue": pos[0] if pos else None,
            "positionInLocalQueue": pos[1] if pos else None,
            "podSets": pod_sets,
            "admission": admission,
            "placement": placements,
            "visibleDevices": ",".join(devices) if adm else None,
            "kind": spec.get("kind") or "Job",
            "evictionDeadline": (rec.get("run") or {}).get("evictionDeadline") if state == RUNNING else None,
            "notebookServer": spec.get("notebookServer"),
            **(self.lease_extensions.fields(rec) if self.lease_extensions is not None
               else {"leaseExtensionSeconds": None, "leaseExtensionsLeft": None}),
            **(self.idle.fields(rec) if self.idle is not None else {"idleDeadline": None, "idleKeepsLeft": None,
                                                                    "idleAction": None, "idleSince": None}),
            "notebook": self.notebooks.view(rec) if "notebook" in spec else None,
            "command": spec["command"],
            "workingDir": spec["workingDir"],
            "maxRuntimeSeconds": max_rt,
            "createdAt": rec["created_at"],
            "admittedAt": rec.get("admitted_at"),
            "startedAt": rec.get("started_at"),
            "finishedAt": rec.get("finished_at"),
            "exitCode": rec.get("exit_code"),
            "evictions": rec.get("evictions", 0),
            "preemptions": preemptions_view(rec),
            "costUsd": round(cost, 6),
            "estimatedCostUsd": round(per_hour * max_rt / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            **(self.estimates.fields(rec) if self.estimates is not None else {}),
            "acceptSpot": bool(spec.get("acceptSpot")),
            "moves": [dict(m) for m in spec.get("moves") or []],
            "budgetWarning": self.conf.budgets.warning(rec["namespace"], now) if self.conf.budgets is not None else None,
        }
