"""Plain-dict forms of engine objects, for storage and the API (pure functions, no I/O).

Shapes (camelCase like Kueue's JSON):
- PodSet: ``{"name", "count", "minCount"?, "requests": {resource: int}, "nodeSelector": {}, "tolerations": [..]}``
- Admission: ``{"clusterQueue", "podSetAssignments": [{"name", "flavors", "resourceUsage", "count"}],
  "placements": [{"podSet", "podIndex", "node", "devices", "resource"}]}``
"""

from __future__ import annotations

from typing import Optional

from .model import Admission, DevicePlacement, LabelSelectorRequirement, PodSet, PodSetAssignment, Toleration


def toleration_to_dict(t: Toleration) -> dict:
    return {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}


def pod_set_to_dict(ps: PodSet) -> dict:
    d = {
        "name": ps.name,
        "count": ps.count,
        "requests": dict(ps.requests),
        "nodeSelector": dict(ps.node_selector),
        "tolerations": [toleration_to_dict(t) for t in ps.tolerations],
    }
    if ps.min_count is not None:
        d["minCount"] = ps.min_count
    if ps.required_affinity:
        d["requiredAffinity"] = [
            [{"key": e.key, "operator": e.operator, "values": list(e.values)} for e in term]
            for term in ps.required_affinity
        ]
    return d


def pod_set_from_dict(d: dict) -> PodSet:
    return PodSet(
        name=d["name"],
        count=int(d["count"]),
        requests={k: int(v) for k, v in d.get("requests", {}).items()},
        min_count=d.get("minCount"),
        node_selector=dict(d.get("nodeSelector", {})),
        tolerations=[Toleration(**t) for t in d.get("tolerations", [])],
        required_affinity=[
            [LabelSelectorRequirement(e["key"], e["operator"], tuple(e.get("values", ()))) for e in term]
            for term in d.get("requiredAffinity", [])
        ],
    )


def admission_to_dict(a: Optional[Admission]) -> Optional[dict]:
    if a is None:
        return None
    return {
        "clusterQueue": a.cluster_queue,
        "podSetAssignments": [
            {"name": p.name, "flavors": dict(p.flavors), "resourceUsage": dict(p.resource_usage), "count": p.count}
            for p in a.pod_set_assignments
        ],
        "placements": [
            {"podSet": p.pod_set, "podIndex": p.pod_index, "node": p.node, "devices": list(p.devices),
             "resource": p.resource}
            for p in a.placements
        ],
    }


def admission_from_dict(d: Optional[dict]) -> Optional[Admission]:
    if not d:
        return None
    return Admission(
        cluster_queue=d["clusterQueue"],
        pod_set_assignments=[
            PodSetAssignment(
                name=p["name"],
                flavors=dict(p["flavors"]),
                resource_usage={k: int(v) for k, v in p["resourceUsage"].items()},
                count=int(p["count"]),
            )
            for p in d.get("podSetAssignments", [])
        ],
        placements=[
            DevicePlacement(
                pod_set=p["podSet"], pod_index=int(p["podIndex"]), node=p["node"],
                devices=list(p["devices"]), resource=p["resource"],
            )
            for p in d.get("placements", [])
        ],
    )
