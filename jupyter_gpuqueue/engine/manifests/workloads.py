"""kueue.x-k8s.io Workload objects → Workloads, validated as Kueue v0.14 validates them: the CRD
schema (``workload_types.go``; ``config/components/crd/bases/kueue.x-k8s.io_workloads.yaml``) and
the Workload webhook (``pkg/webhooks/workload_webhook.go``, ``ValidateWorkload``: the reserved
``pods`` request, at most one PodSet with ``minCount``, ``status.admission``). Their PodSet
templates are not Pods: what is checked there, what is carried to the engine (requests above
limits: Kueue's scheduler never admits such a Workload) and what is refused because the engine
cannot do as Kueue does (negative quantities, node affinity Kueue cannot parse) is in ``pods``."""

from __future__ import annotations

from typing import Any, Optional

from .. import model
from ..errors import ManifestError
from ..quantity import resource_value
from .builder import Builder
from .fields import (
    INT32_MIN,
    KUEUE_GROUP,
    MAX_POD_SETS,
    PC_SOURCE,
    WPC_SOURCE,
    _boolean,
    _check,
    _child,
    _dns_subdomain,
    _duplicate,
    _enum,
    _index,
    _integer,
    _invalid,
    _key,
    _known_fields,
    _mapping,
    _quantity_map,
    _required,
    _sequence,
    _show,
    _string,
    _too_many,
    dns1123_label_errors,
)
from .pods import _pod_template


class WorkloadObjects:
    """Reads kueue.x-k8s.io Workload objects (with their ``status.admission``)."""

    def __init__(self, builder: Builder):
        self.b = builder

    def workload(self, doc, group, version, kind, name):
        """kueue.x-k8s.io Workload (workload_types.go; pkg/webhooks/workload_webhook.go). Its
        ``spec.priority`` is taken as is (0 when absent), as Kueue does for Workload objects."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, namespace, labels, annotations = self.b._namespaced_meta(doc)
        meta = doc["metadata"]
        spec = _mapping(doc.get("spec"), "spec", required=True)
        spec_fields = ["podSets", "queueName", "priority", "active", "maximumExecutionTimeSeconds",
                       "preemptionGates"]
        spec_fields += ["priorityClassName", "priorityClassSource"] if version == "v1beta1" else ["priorityClassRef"]
        _known_fields(spec, spec_fields, "spec")
        ppath = "spec.podSets"
        raw_sets = _sequence(spec.get("podSets"), ppath, required=True)
        if not raw_sets:
            raise _required(ppath, "should have at least 1 items")
        if len(raw_sets) > MAX_POD_SETS:
            raise _too_many(ppath, len(raw_sets), MAX_POD_SETS)
        pod_sets: list[model.PodSet] = []
        over_limits: list[str] = []  # Kueue's ValidateResources errors, in its order
        with_min = 0
        for i, ps in enumerate(raw_sets):
            ipath = _index(ppath, i)
            ps = _mapping(ps, ipath, required=True)
            _known_fields(ps, ("name", "template", "count", "minCount", "topologyRequest"), ipath)
            psname = _string(ps.get("name"), _child(ipath, "name")) or "main"
            _check(dns1123_label_errors(psname), _child(ipath, "name"), psname)
            if any(p.name == psname for p in pod_sets):
                raise _duplicate(ipath, {"name": psname})
            count = _integer(ps.get("count"), _child(ipath, "count"), default=1, minimum=0)
            min_count = _integer(ps.get("minCount"), _child(ipath, "minCount"), minimum=1)
            if min_count is not None:
                with_min += 1
                if min_count > count:
                    raise _invalid(ipath, "object", "minCount should be positive and less or equal to count")
            if ps.get("topologyRequest") is not None:
                _mapping(ps["topologyRequest"], _child(ipath, "topologyRequest"))
                self.b.warn(_child(ipath, "topologyRequest"), "ignored: topology-aware scheduling is not supported")
            info = _pod_template(ps.get("template"), _child(ipath, "template"), pod_validation=False)
            over_limits.extend(info.over_limits)
            pod_sets.append(model.PodSet(name=psname, count=count, requests=info.requests, min_count=min_count,
                                         node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity))
        if with_min > 1:
            raise _invalid(ppath, with_min, "at most one podSet can use minCount")
        queue = _dns_subdomain(spec.get("queueName"), "spec.queueName", required=False)
        priority = _integer(spec.get("priority"), "spec.priority", minimum=INT32_MIN)
        pc_name: Optional[str] = None
        pc_kind: Optional[str] = None
        if version == "v1beta1":
            pc_name = _dns_subdomain(spec.get("priorityClassName"), "spec.priorityClassName", required=False) or None
            source = _enum(spec.get("priorityClassSource"), "spec.priorityClassSource", (WPC_SOURCE, PC_SOURCE, ""), "")
            pc_kind = {WPC_SOURCE: "WorkloadPriorityClass", PC_SOURCE: "PriorityClass"}.get(source) if pc_name else None
        else:
            ref_path = "spec.priorityClassRef"
            ref = _mapping(spec.get("priorityClassRef"), ref_path)
            _known_fields(ref, ("group", "kind", "name"), ref_path)
            if ref:
                pc_name = _dns_subdomain(ref.get("name"), _child(ref_path, "name"))
                rgroup = _enum(ref.get("group"), _child(ref_path, "group"), (KUEUE_GROUP, "scheduling.k8s.io"), KUEUE_GROUP)
                rkind = _enum(ref.get("kind"), _child(ref_path, "kind"), ("WorkloadPriorityClass", "PriorityClass"),
                              "WorkloadPriorityClass" if rgroup == KUEUE_GROUP else "PriorityClass")
                pc_kind = rkind
        if pc_name and priority is None:
            raise _invalid("spec", "object", "priority should not be nil when priorityClassName is set")
        active = _boolean(spec.get("active"), "spec.active", default=True)
        max_exec = _integer(spec.get("maximumExecutionTimeSeconds"), "spec.maximumExecutionTimeSeconds", minimum=1)
        if spec.get("preemptionGates"):
            self.b.warn("spec.preemptionGates", "ignored: preemption gates are not supported")
        admission = self._admission(doc.get("status"), pod_sets)
        draft = self.b._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                     meta=meta, labels=labels, annotations=annotations, priority=None,
                                     fixed_priority=(priority or 0, pc_name, pc_kind), max_exec=max_exec,
                                     active=active, admission=admission)
        if over_limits:
            # Kueue creates it, and its scheduler leaves it pending with this message (``pods``).
            errors = over_limits[0] if len(over_limits) == 1 else f"[{', '.join(over_limits)}]"
            draft.workload.invalid_resources = f"resources validation failed: {errors}"
        return draft

    def _admission(self, status: Any, pod_sets: list[model.PodSet]) -> Optional[model.Admission]:
        """``status.admission`` → ``model.Admission`` (webhook validateAdmission: known podSet
        names, resourceUsage a multiple of count; CEL: one assignment per podSet; the schema:
        flavor names are DNS subdomains, resource names any string). A negative resourceUsage is
        refused, as a negative request is (``pods``)."""
        status = _mapping(status, "status")
        if status.get("admission") is None:
            return None
        apath = "status.admission"
        adm = _mapping(status.get("admission"), apath)
        _known_fields(adm, ("clusterQueue", "podSetAssignments"), apath)
        cq = _dns_subdomain(adm.get("clusterQueue"), _child(apath, "clusterQueue"))
        lpath = _child(apath, "podSetAssignments")
        raw = _sequence(adm.get("podSetAssignments"), lpath, required=True)
        if len(raw) > MAX_POD_SETS:
            raise _too_many(lpath, len(raw), MAX_POD_SETS)
        by_name = {ps.name: ps for ps in pod_sets}
        assignments: list[model.PodSetAssignment] = []
        for i, item in enumerate(raw):
            ipath = _index(lpath, i)
            item = _mapping(item, ipath, required=True)
            _known_fields(item, ("name", "flavors", "resourceUsage", "count", "topologyAssignment",
                                 "delayedTopologyRequest"), ipath)
            psname = _string(item.get("name"), _child(ipath, "name")) or "main"
            if psname not in by_name:
                raise ManifestError(f"Not found: {_show(psname)}", _child(ipath, "name"))
            if any(a.name == psname for a in assignments):
                raise _duplicate(ipath, {"name": psname})
            count = _integer(item.get("count"), _child(ipath, "count"), default=by_name[psname].count, minimum=0)
            fpath = _child(ipath, "flavors")
            flavors: dict[str, str] = {}
            for rname, fname in _mapping(item.get("flavors"), fpath).items():  # resource names: any string
                flavors[rname] = _dns_subdomain(fname, _key(fpath, rname))
            upath = _child(ipath, "resourceUsage")
            usage: dict[str, int] = {}
            for rname, (q, qraw) in _quantity_map(item.get("resourceUsage"), upath).items():
                if q < 0:  # as a negative request (``pods``): it would free quota that is in use
                    raise _invalid(_key(upath, rname), qraw, "must be greater than or equal to 0 (Kueue would "
                                   "charge the negative quantity and free quota that is in use)")
                value = resource_value(rname, q)
                if count > 0 and value % count != 0:
                    raise _invalid(_key(upath, rname), qraw, f"is not a multiple of {count}")
                usage[rname] = value
            assignments.append(model.PodSetAssignment(name=psname, flavors=flavors, resource_usage=usage, count=count))
        if len(assignments) != len(pod_sets):
            raise _invalid(lpath, len(assignments), "podSetAssignments must have the same number of podSets as the spec")
        return model.Admission(cluster_queue=cq, pod_set_assignments=assignments)
