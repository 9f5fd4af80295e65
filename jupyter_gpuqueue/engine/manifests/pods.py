"""Pod templates: a template's per-pod requests, as Kubernetes (and so Kueue) computes them, with its
nodeSelector, tolerations, required node affinity and priorityClassName.

Two sets of rules:

- **Pods** (the templates of batch/v1 Jobs, Volcano jobs, Kubeflow jobs): the API server
  validates them as Pods (``ValidateResourceRequirements``, ``validateContainerResourceName``):
  container names are unique DNS-1123 labels, resource names are standard or fully qualified
  (so ``gpu`` and ``pods`` are refused), extended resources are integers with a limit equal to
  the request.
- **Workloads** (``kind: Workload`` PodSet templates, ``pod_validation=False``): not Pods. The API
  server checks only the CRD schema (a container has a ``name``; quantities parse; resource names
  are not restricted), and Kueue's Workload webhook (``pkg/webhooks/workload_webhook.go``,
  ``validateContainer``) only refuses the ``pods`` request, which Kueue reserves. So ``gpu: 1``
  is accepted, as Kueue accepts it (its own tests use it). Two checks stay for both: a request
  above its limit (Kueue's scheduler refuses such a workload as inadmissible, ``validateResources``)
  and a negative quantity (the engine's quota arithmetic needs them ≥ 0; the Pods made from such a
  Workload would be refused by the API server).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import model
from ..errors import ManifestError
from ..quantity import resource_value
from .fields import (
    _child,
    _container_resource_name,
    _dns_label,
    _dns_subdomain,
    _duplicate,
    _index,
    _invalid,
    _is_extended_resource,
    _is_hugepages,
    _key,
    _known_fields,
    _labels,
    _mapping,
    _non_negative,
    _quantity_map,
    _required,
    _sequence,
    _string,
)
from .selectors import _required_node_affinity, _tolerations


@dataclass
class _PodInfo:
    requests: dict[str, int]
    node_selector: dict[str, str]
    tolerations: list[model.Toleration]
    priority_class_name: str
    required_affinity: list = field(default_factory=list)


_OBJECT_META_FIELDS = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
)


def _container_requests(c: Any, path: str, seen_names: set[str], pod_validation: bool = True) -> dict[str, int]:
    """One container's requests after Kubernetes defaulting (request := limit when absent), in
    canonical units. With ``pod_validation`` (a job's pod template) validated as the API server
    validates a Pod's container (``ValidateResourceRequirements``); without it (a Workload's
    PodSet template) only as Kueue does (see the module docstring)."""
    c = _mapping(c, path, required=True)
    if pod_validation:
        name = _dns_label(c.get("name"), _child(path, "name"))
        if name in seen_names:
            raise _duplicate(_child(path, "name"), name)
        seen_names.add(name)
    else:
        _string(c.get("name"), _child(path, "name"), required=True)  # the CRD schema: a name, any string
    rpath = _child(path, "resources")
    res = _mapping(c.get("resources"), rpath)
    _known_fields(res, ("requests", "limits", "claims"), rpath)
    req_path, lim_path = _child(rpath, "requests"), _child(rpath, "limits")
    requests = _quantity_map(res.get("requests"), req_path)
    limits = _quantity_map(res.get("limits"), lim_path)
    for rname, (q, raw) in limits.items():
        p = _key(lim_path, rname)
        if pod_validation:
            _container_resource_name(rname, p)
        _non_negative(q, p, raw)
        if pod_validation and _is_extended_resource(rname) and q.denominator != 1:
            raise _invalid(p, raw, "must be an integer")
    effective = dict(limits)
    effective.update(requests)
    for rname, (q, raw) in requests.items():
        p = _key(req_path, rname)
        if pod_validation:
            _container_resource_name(rname, p)  # also rejects "pods", which Kueue reserves
        elif rname == "pods":  # Kueue's Workload webhook, validateContainer
            raise _invalid(p, rname, "the key is reserved for internal kueue use")
        _non_negative(q, p, raw)
        extended = _is_extended_resource(rname)
        if pod_validation and extended and q.denominator != 1:
            raise _invalid(p, raw, "must be an integer")
        overcommit = (not extended and not _is_hugepages(rname)) or not pod_validation
        if rname in limits:
            lq, lraw = limits[rname]
            if not overcommit and q != lq:
                raise _invalid(p, raw, f"must be equal to {rname} limit of {lraw}")
            if q > lq:
                raise _invalid(p, raw, f"must be less than or equal to {rname} limit of {lraw}")
        elif not overcommit:
            raise _required(_key(lim_path, rname), "Limit must be set for non overcommitable resources")
    return {rname: resource_value(rname, q) for rname, (q, _raw) in effective.items()}


def _add(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max_into(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        into[k] = max(into.get(k, 0), v)


def _pod_template(
    template: Any, path: str, *, job_restart_policy: bool = False, containers_required: bool = True,
    pod_validation: bool = True,
) -> _PodInfo:
    """A PodTemplateSpec → per-pod requests (canonical units), nodeSelector, tolerations and
    ``priorityClassName``.

    Requests follow Kubernetes' ``PodRequests`` (k8s.io/component-helpers/resource), which Kueue
    uses: the sum over ``containers``; each ``initContainer`` runs alone, so the pod needs
    ``max(sum(containers), max(initContainers))`` per resource, with sidecars (init containers
    with ``restartPolicy: Always``) added to both; plus ``spec.overhead``. Zero requests are
    dropped (they need no quota)."""
    tpl = _mapping(template, path, required=True)
    spath = _child(path, "spec")
    spec = _mapping(tpl.get("spec"), spath, required=True)
    if job_restart_policy:
        policy = _string(spec.get("restartPolicy"), _child(spath, "restartPolicy"))
        if policy not in ("OnFailure", "Never"):
            shown = policy or "Always"
            raise ManifestError(
                f'Unsupported value: "{shown}"'
                + (" (the default when unset)" if not policy else "")
                + ': supported values: "OnFailure", "Never"',
                _child(spath, "restartPolicy"),
            )
    cpath = _child(spath, "containers")
    containers = _sequence(spec.get("containers"), cpath, required=containers_required)
    if containers_required and not containers:
        raise _required(cpath)
    names: set[str] = set()
    total: dict[str, int] = {}
    for i, c in enumerate(containers):
        _add(total, _container_requests(c, _index(cpath, i), names, pod_validation))
    ipath = _child(spath, "initContainers")
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for i, c in enumerate(_sequence(spec.get("initContainers"), ipath)):
        reqs = _container_requests(c, _index(ipath, i), names, pod_validation)
        restart = _string(_mapping(c, _index(ipath, i)).get("restartPolicy"),
                          _child(_index(ipath, i), "restartPolicy"))
        if restart == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            _max_into(init_max, sidecars)
        else:
            running = dict(sidecars)
            _add(running, reqs)
            _max_into(init_max, running)
    _max_into(total, init_max)
    opath = _child(spath, "overhead")
    for rname, (q, raw) in _quantity_map(spec.get("overhead"), opath).items():
        _non_negative(q, _key(opath, rname), raw)
        _add(total, {rname: resource_value(rname, q)})
    node_selector = _labels(spec.get("nodeSelector"), _child(spath, "nodeSelector"))
    tolerations = _tolerations(spec.get("tolerations"), _child(spath, "tolerations"))
    required_affinity = _required_node_affinity(spec.get("affinity"), _child(spath, "affinity"))
    pc = _dns_subdomain(spec.get("priorityClassName"), _child(spath, "priorityClassName"), required=False)
    return _PodInfo(
        requests={k: v for k, v in total.items() if v != 0},
        node_selector=node_selector,
        tolerations=tolerations,
        priority_class_name=pc,
        required_affinity=required_affinity,
    )
