"""Billing: what admitted work is charged for, and what a workload has cost so far.

The ledger's usage intervals are the record of billing (reports, budgets, restarts). For the cost
shown in a Workload view (every event and position query builds one) the service keeps a copy of
the intervals it opened and closed itself, and sums them as Ledger.cost_usd does: one SQL query per
view was a third of the server's time with 100 panels open (BENCHMARKS.md, "The live service"). A
workload whose intervals the service did not all see (restored after a restart with some already
open or closed) is asked of the ledger. A MIG slice is billed as its share of the GPU whatever
quota it was charged to (Kueue ``resources.transformations``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.model import PodSet, apply_transformations, is_device_resource
from ..engine.placement import device_flavors

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .live import LiveConfig


class Billing:
    """Billing of admitted work: what it is charged for and its cost so far.

    Collaborators: ``conf`` (LiveConfig: the configuration's resource transformations) and the
    ``ledger`` (the cost of workloads whose intervals were not all seen here)."""

    def __init__(self, conf: "LiveConfig", ledger: "Ledger"):
        self.conf = conf
        self.ledger = ledger
        self._billing: dict[str, list[list]] = {}  # uid -> [[start, end, usd_per_hour]]

    def billing_opened(self, uid: str, start: float, rates: list[float], first: bool) -> None:
        """Intervals of ``uid`` were opened at ``start`` (seconds), one per rate (USD per hour);
        ``first``: the workload had no interval before, so all of them are known here."""
        known = self._billing.setdefault(uid, []) if first else self._billing.get(uid)
        if known is not None:
            known.extend([start, None, rate] for rate in rates)

    def billing_closed(self, uid: str, end: float) -> None:
        """Every open interval of ``uid`` was closed at ``end`` (never before its start, as
        Ledger.close_intervals)."""
        for iv in self._billing.get(uid, ()):
            if iv[1] is None:
                iv[1] = max(iv[0], end)

    def cost_usd(self, rec: dict, now: float) -> float:
        """USD charged to the workload of ``rec`` so far: Σ usd_per_hour × hours of its intervals
        (open ones up to ``now``), as Ledger.cost_usd; 0.0 for one never admitted."""
        known = self._billing.get(rec["uid"])
        if known is not None:
            return sum(rate * max(0.0, (now if end is None else end) - start) / 3600.0
                       for start, end, rate in known)
        if rec.get("admitted_at") is None and not rec.get("evictions"):
            return 0.0  # intervals are opened only at admission
        return self.ledger.cost_usd(rec["uid"], now)

    def billable(self, wl) -> list[tuple[str, str, int]]:
        """(flavor, device resource, quantity) an admitted engine Workload holds: its PodSets' GPU
        and MIG requests × admitted count, in the flavor assigned to them, or, where a Kueue
        ``Replace`` transformation counted them as other resources (e.g. GPU slices), in the flavor
        assigned to those. What usage intervals are opened for (a MIG slice is billed as its share
        of the GPU whatever quota it was charged to)."""
        pods = {ps.name: ps for ps in wl.pod_sets}
        out = []
        for psa in wl.admission.pod_set_assignments:
            ps = pods.get(psa.name)
            if ps is None:
                out.extend((f, r, int(psa.resource_usage.get(r, 0))) for r, f in psa.flavors.items())
                continue
            flavors = device_flavors(ps, psa.flavors, self.conf.config.resource_transformations)
            out.extend((flavors[r], r, q * psa.count) for r, q in ps.requests.items()
                       if q > 0 and is_device_resource(r) and r in flavors)
        return out

    def billable_json(self, admission: dict, spec: dict) -> list[tuple[str, str, int]]:
        """:meth:`_billable` of a stored admission (``serialize.admission_to_dict``) and spec."""
        pods = {p["name"]: p for p in spec.get("podSets", [])}
        out = []
        for psa in admission["podSetAssignments"]:
            p = pods.get(psa["name"])
            if p is None:
                out.extend((f, r, int(psa["resourceUsage"].get(r, 0))) for r, f in psa["flavors"].items())
                continue
            requests = {r: int(q) for r, q in p["requests"].items()}
            flavors = device_flavors(PodSet(p["name"], int(p.get("count", 1)), requests), psa["flavors"],
                                     self.conf.config.resource_transformations)
            out.extend((flavors[r], r, q * int(psa["count"])) for r, q in requests.items()
                       if q > 0 and is_device_resource(r) and r in flavors)
        return out

    def transformed_inputs(self, covered: set) -> set:
        """Resources whose transformation outputs (Kueue ``resources.transformations``) are all in
        ``covered``: a MIG profile replaced by GPU slices is requestable where slices are offered."""
        return {t.input for t in self.conf.config.resource_transformations.values()
                if t.outputs and all(o in covered for o in t.outputs)}

    def quota_resource(self, cq, ps: PodSet, resource: str) -> tuple[str, PodSet]:
        """The resource ``ps``'s ``resource`` is charged to in ``cq``, and ``ps`` with its requests
        as charged: itself when ``cq`` covers it, else its transformation's first covered output."""
        t = self.conf.config.resource_transformations.get(resource)
        if cq is None or t is None or cq.group_for(resource) is not None:
            return resource, ps
        charged = apply_transformations(ps.requests, self.conf.config.resource_transformations)
        for o in sorted(t.outputs):
            if cq.group_for(o) is not None:
                return o, PodSet(ps.name, ps.count, charged, ps.min_count, ps.node_selector, ps.tolerations,
                                 ps.required_affinity)
        return resource, ps
