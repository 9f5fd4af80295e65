"""Who sees what of other people's workloads: the one place for the rule.

DESIGN.md ("Persistence, recovery, security"): a user sees their own jobs and their team-mates'
(positions and costs; logs stay the owner's), not another team's. A *team* is a namespace, and a
user's teams are the namespaces of the LocalQueues they may submit to (:class:`.teams.Teams`:
``user_local_queues``, hub groups through ``group_local_queues``). Queue admins (the
``custom:gpuqueue:admin`` scope; the owner of a standalone server) see everything, as does every
user where no team mapping is configured (everyone may submit everywhere) or where
``c.GpuQueueApp.workload_visibility = "all"``.

What a viewer does not see, by where it would show:

- the workload list (``GET workloads``), the event stream and the ``jobs`` / ``users`` cost
  reports leave another team's workloads out, and the ``teams`` report its top jobs;
- one workload by name (``GET workloads/{ns}/{name}``, its timeline) answers 404 NotFound with the
  message a missing one gets, so that a name cannot be probed;
- where a workload only takes a place — a ClusterQueue's pending list (``GET queues``) and a
  device's holder (``GET inventory``) — it is anonymised as the estimate's ``waitingFor`` already
  was (issue 14): its namespace is kept, its name, owner and message are null (the holder is the
  namespace alone), so positions and free devices still add up;
- team totals (``teams``, ``months``, ``daily``, ``flavors``, ``idle`` reports, budgets) are shown to
  everyone: they name no person or job.

Slurm's ``PrivateData=jobs`` and Kueue's namespaced visibility API (RBAC per namespace) are the
peers' forms of the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import NotFound

VISIBILITY_MODES = ("team", "all")


@dataclass(frozen=True)
class Viewer:
    """What ``user`` may see: ``namespaces`` None for everything, else the teams (namespaces)
    whose workloads they see, besides their own."""

    user: str
    namespaces: Optional[frozenset] = None

    @property
    def sees_all(self) -> bool:
        return self.namespaces is None

    def sees(self, namespace: str, owner: Optional[str]) -> bool:
        """Whether a workload of ``namespace`` owned by ``owner`` is visible to this viewer."""
        return self.namespaces is None or namespace in self.namespaces or owner == self.user

    def workloads(self, views: list[dict]) -> list[dict]:
        """The Workload views this viewer sees, in their order."""
        if self.namespaces is None:
            return views
        return [v for v in views if self.sees(v["namespace"], v["owner"])]

    def check(self, namespace: str, name: str, owner: Optional[str]) -> None:
        """NotFound (field ``name``), worded as for a workload that does not exist, unless this
        viewer sees the workload ``namespace/name`` of ``owner``."""
        if not self.sees(namespace, owner):
            raise NotFound(f"workload {namespace}/{name} not found", "name")

    def workload(self, view: dict) -> dict:
        """``view``, or NotFound as :meth:`check` says."""
        self.check(view["namespace"], view["name"], view["owner"])
        return view

    def queues(self, queues: dict) -> dict:
        """``GET queues`` with another team's pending entries anonymised (name, owner, message null)."""
        if self.namespaces is None:
            return queues
        cqs = []
        for cq in queues["clusterQueues"]:
            if all(self.sees(p["namespace"], p["owner"]) for p in cq["pending"]):
                cqs.append(cq)
                continue
            pending = [p if self.sees(p["namespace"], p["owner"])
                       else {**p, "name": None, "owner": None, "message": None} for p in cq["pending"]]
            cqs.append({**cq, "pending": pending})
        return {**queues, "clusterQueues": cqs}

    def inventory(self, inventory: dict, owner_of: Callable[[str], Optional[str]]) -> dict:
        """``GET inventory`` with another team's devices held by its namespace alone. ``owner_of``:
        a holder's key ("namespace/name") -> its owner."""
        if self.namespaces is None:
            return inventory

        def holder(key: Optional[str]) -> Optional[str]:
            if not key or "/" not in key:
                return key
            ns = key.split("/", 1)[0]
            return key if self.sees(ns, owner_of(key)) else ns

        def details(d: dict) -> Optional[dict]:
            h = d.get("holder")
            if not h or self.sees(h["namespace"], h["owner"]):
                return h
            return {**h, "name": None, "owner": None}  # another team's: its namespace, kind and time

        nodes = []
        for n in inventory["nodes"]:
            gpus = []
            for g in n["gpus"]:
                g = {**g, "assignedTo": holder(g["assignedTo"]), "holder": details(g)}
                if g.get("mig"):
                    g["mig"] = [{**d, "assignedTo": holder(d["assignedTo"]), "holder": details(d)} for d in g["mig"]]
                gpus.append(g)
            nodes.append({**n, "gpus": gpus})
        return {**inventory, "nodes": nodes}

    def report(self, kind: str, report: dict) -> dict:
        """A cost report (``ledger/reports.py``) as this viewer sees it: the ``jobs`` and ``users``
        reports without another team's rows, the ``teams`` report without another team's top jobs;
        the other kinds are totals and unchanged."""
        if self.namespaces is None or kind not in ("jobs", "users", "teams"):
            return report
        if kind == "teams":
            items = [i if i["namespace"] in self.namespaces
                     else {**i, "topJobs": [j for j in i.get("topJobs", []) if j.get("owner") == self.user]}
                     for i in report["items"]]
        else:
            items = [i for i in report["items"] if self.sees(i["namespace"], i.get("owner"))]
        return {**report, "items": items}


__all__ = ["VISIBILITY_MODES", "Viewer"]
