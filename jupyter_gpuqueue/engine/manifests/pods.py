"""Pod templates: a template's per-pod requests, as Kubernetes (and so Kueue) computes them, with its
nodeSelector, tolerations, required node affinity and priorityClassName.

Two sets of rules:

- **Pods** (the templates of batch/v1 Jobs, Volcano jobs, Kubeflow jobs): the API server
  validates them as Pods (``ValidateResourceRequirements``, ``validateContainerResourceName``,
  ``ValidateNodeSelectorRequirement``, ``validateTolerations``): container names are unique
  DNS-1123 labels, resource names are standard or fully qualified (so ``gpu`` and ``pods`` are
  refused), quantities are not negative, extended resources are integers with a limit equal to
  the request, a request is at most its limit, nodeSelector and tolerations follow label syntax.
- **Workloads** (``kind: Workload`` PodSet templates, ``pod_validation=False``): not Pods. What
  Kueue v0.14 applies to them, and nothing more:

  * the Workload CRD schema (``config/components/crd/bases/kueue.x-k8s.io_workloads.yaml``):
    ``spec.containers`` is required (it may be empty); ``containers`` and ``initContainers`` are
    list-maps keyed by ``name``, so each container has a ``name`` (any string) unique in its
    list; quantities match the quantity pattern (which allows a sign); resource names,
    nodeSelector values, tolerations (key, operator, value, effect are any strings) and
    node-affinity expressions (``key`` and ``operator`` required, ``values`` strings) are not
    restricted further; a template's ``priorityClassName`` is any string (a Workload's priority
    is its own ``spec.priority``);
  * Kueue's Workload webhook (``pkg/webhooks/workload_webhook.go``, ``validateContainer``): the
    ``pods`` request is reserved for Kueue, in containers and initContainers alike.

  What Kueue accepts but then treats specially is carried to the engine, or refused here where
  the engine cannot do as Kueue does (each says why):

  * a request above its limit: Kueue creates the Workload and its scheduler never admits it
    (``pkg/workload/resources.go`` ``ValidateResources``, called before flavor assignment in
    ``pkg/scheduler/scheduler.go``: pending, "resources validation failed: …: requests must not
    exceed its limits"). The message goes to ``Workload.invalid_resources``; the engine keeps
    such a workload pending with it, as Kueue does (``engine/scheduler.py``).
  * a negative quantity (a request, a limit that stands in for a missing request, overhead): the
    schema lets it through and no webhook looks, but Kueue would charge it, lowering the
    ClusterQueue's usage so that other workloads get quota that is in use. The engine keeps quota
    from being over-committed, so it refuses such a Workload, with that reason.
  * a node-affinity expression that Kueue's flavor assigner cannot parse (an operator Kubernetes
    does not know, values that do not suit the operator, a key or value that is not a label):
    Kueue's ``flavorSelector`` (``pkg/scheduler/flavorassigner``) turns it into a selector with
    ``k8s.io/component-helpers/scheduling/corev1/nodeaffinity`` (``labels.NewRequirement``),
    and the parse error fails the flavor assignment of the workload whenever a flavor it tries
    has a node label of that key. The engine has no failed assignment, only flavors that match or
    not, so it refuses such an expression, with the parser's reason.
  * an unknown toleration operator or effect is kept: Kubernetes' ``ToleratesTaint`` (which
    Kueue calls) lets such a toleration tolerate nothing, and so does ``model.Toleration``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

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
    _wrong_type,
)
from .selectors import _required_node_affinity, _tolerations, _workload_tolerations


@dataclass
class _PodInfo:
    requests: dict[str, int]
    node_selector: dict[str, str]
    tolerations: list[model.Toleration]
    priority_class_name: str
    required_affinity: list = field(default_factory=list)
    # Workloads: Kueue's ValidateResources errors ("<container path>: Invalid value: …"), initContainers first.
    over_limits: list[str] = field(default_factory=list)


_OBJECT_META_FIELDS = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
)

_NEGATIVE_IN_WORKLOAD = (
    "must be greater than or equal to 0 (a Workload's schema lets a sign through, but Kueue would "
    "charge the negative quantity and free quota that is in use)"
)


def _greater_message(path: str, names: list[str]) -> str:
    """Kueue's ValidateResources error for one container, worded as Go prints it."""
    shown = ", ".join(f'"{n}"' for n in names)
    return f"{path}: Invalid value: []v1.ResourceName{{{shown}}}: requests must not exceed its limits"


def _workload_container_name(c: dict, path: str, seen_names: set[str]) -> None:
    """The CRD schema: containers are a list-map keyed by ``name`` (required, any string, unique
    in its list; the API server reports a repeated key on the item)."""
    if c.get("name") is None:
        raise _required(_child(path, "name"))
    name = _string(c["name"], _child(path, "name"))
    if name in seen_names:
        raise _duplicate(path, {"name": name})
    seen_names.add(name)


def _container_requests(c: Any, path: str, seen_names: set[str], pod_validation: bool = True,
                        over_limits: Optional[list[str]] = None) -> dict[str, int]:
    """One container's requests after Kubernetes defaulting (request := limit when absent), in
    canonical units. With ``pod_validation`` (a job's pod template) validated as the API server
    validates a Pod's container (``ValidateResourceRequirements``); without it (a Workload's
    PodSet template) only as Kueue does, its requests above their limits appended to
    ``over_limits`` (see the module docstring)."""
    c = _mapping(c, path, required=True)
    if pod_validation:
        name = _dns_label(c.get("name"), _child(path, "name"))
        if name in seen_names:
            raise _duplicate(_child(path, "name"), name)
        seen_names.add(name)
    else:
        _workload_container_name(c, path, seen_names)
    rpath = _child(path, "resources")
    res = _mapping(c.get("resources"), rpath)
    _known_fields(res, ("requests", "limits", "claims"), rpath)
    req_path, lim_path = _child(rpath, "requests"), _child(rpath, "limits")
    requests = _quantity_map(res.get("requests"), req_path)
    limits = _quantity_map(res.get("limits"), lim_path)
    effective = dict(limits)
    effective.update(requests)
    if not pod_validation:
        if "pods" in requests:  # Kueue's Workload webhook, validateContainer
            raise _invalid(_key(req_path, "pods"), "pods", "the key is reserved for internal kueue use")
        for rname, (q, raw) in effective.items():
            if q < 0:
                raise _invalid(_key(req_path if rname in requests else lim_path, rname), raw, _NEGATIVE_IN_WORKLOAD)
        greater = sorted(r for r, (q, _raw) in requests.items() if r in limits and q > limits[r][0])
        if greater and over_limits is not None:
            over_limits.append(_greater_message(path, greater))
        return {rname: resource_value(rname, q) for rname, (q, _raw) in effective.items()}
    for rname, (q, raw) in limits.items():
        p = _key(lim_path, rname)
        _container_resource_name(rname, p)
        _non_negative(q, p, raw)
        if _is_extended_resource(rname) and q.denominator != 1:
            raise _invalid(p, raw, "must be an integer")
    for rname, (q, raw) in requests.items():
        p = _key(req_path, rname)
        _container_resource_name(rname, p)  # also rejects "pods", which Kueue reserves
        _non_negative(q, p, raw)
        extended = _is_extended_resource(rname)
        if extended and q.denominator != 1:
            raise _invalid(p, raw, "must be an integer")
        overcommit = not extended and not _is_hugepages(rname)
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


def _string_map(value: Any, path: str) -> dict[str, str]:
    """A map of strings (a Workload template's nodeSelector: the CRD schema checks no more)."""
    raw = _mapping(value, path)
    for key, val in raw.items():
        if not isinstance(key, str):
            raise _wrong_type(path, key, "an object with string keys")
        if not isinstance(val, str):
            raise _wrong_type(_key(path, key), val, "a string")
    return dict(raw)


def _pod_template(
    template: Any, path: str, *, job_restart_policy: bool = False, containers_required: bool = True,
    pod_validation: bool = True,
) -> _PodInfo:
    """A PodTemplateSpec → per-pod requests (canonical units), nodeSelector, tolerations and
    ``priorityClassName``; with ``pod_validation`` False (a Workload's PodSet) validated as Kueue
    does and Kueue's ValidateResources errors in ``over_limits`` (see the module docstring).

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
    if containers_required and not containers and pod_validation:  # a Workload's schema allows []
        raise _required(cpath)
    names: set[str] = set()
    over: list[str] = []
    total: dict[str, int] = {}
    for i, c in enumerate(containers):
        _add(total, _container_requests(c, _index(cpath, i), names, pod_validation, over))
    ipath = _child(spath, "initContainers")
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_names: set[str] = names if pod_validation else set()  # a Pod's names are unique across both lists
    init_over: list[str] = []
    for i, c in enumerate(_sequence(spec.get("initContainers"), ipath)):
        reqs = _container_requests(c, _index(ipath, i), init_names, pod_validation, init_over)
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
        if q < 0:
            raise _invalid(_key(opath, rname), raw, "must be greater than or equal to 0" if pod_validation
                           else _NEGATIVE_IN_WORKLOAD)
        _add(total, {rname: resource_value(rname, q)})
    if pod_validation:
        node_selector = _labels(spec.get("nodeSelector"), _child(spath, "nodeSelector"))
        tolerations = _tolerations(spec.get("tolerations"), _child(spath, "tolerations"))
        pc = _dns_subdomain(spec.get("priorityClassName"), _child(spath, "priorityClassName"), required=False)
    else:
        node_selector = _string_map(spec.get("nodeSelector"), _child(spath, "nodeSelector"))
        tolerations = _workload_tolerations(spec.get("tolerations"), _child(spath, "tolerations"))
        pc = _string(spec.get("priorityClassName"), _child(spath, "priorityClassName"))
    required_affinity = _required_node_affinity(spec.get("affinity"), _child(spath, "affinity"),
                                                pod_validation=pod_validation)
    return _PodInfo(
        requests={k: v for k, v in total.items() if v != 0},
        node_selector=node_selector,
        tolerations=tolerations,
        priority_class_name=pc,
        required_affinity=required_affinity,
        over_limits=init_over + over,
    )
