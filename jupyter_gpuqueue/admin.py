"""Admin configuration editing: the live ClusterConfig as Kueue YAML, and changes to it.

Pure functions (no I/O, no Tornado, no SQL): the REST handlers and the CLI call them, and
:meth:`jupyter_gpuqueue.service.QueueService.apply_config` applies what they return.

Every change goes the same way, so that Kueue's own rules apply to it:

1. the current configuration becomes Kueue documents (:func:`config_to_documents`), the dicts
   ``kubectl get -o yaml`` would show, in apiVersion ``kueue.x-k8s.io/v1beta1``;
2. the change edits those documents (:func:`patch_cluster_queue`, :func:`patch_priority_class`) or
   replaces them all (:func:`load_import`);
3. the documents are loaded back with :func:`jupyter_gpuqueue.engine.manifests.load_documents`,
   i.e. validated exactly as Kueue's CRD schemas and webhooks would (``borrowingLimit`` without a
   cohort is ``spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit: Invalid value: 2:
   must be nil when cohort is empty``, from the CEL rule in
   ``apis/kueue/v1beta1/clusterqueue_types.go``), and the result is the new ``ClusterConfig``.

A rejected change raises :class:`~jupyter_gpuqueue.errors.ValidationError` (400) whose ``field``
is the Kueue field path (or the request field, for a malformed request) and whose message says
which object and why; :class:`~jupyter_gpuqueue.errors.NotFound` (404) for an unknown object.
Nothing is changed then: these functions never modify their inputs.

Units: quotas are Kubernetes quantities (``"4"`` GPUs, ``"500m"`` cpu, ``"64Gi"`` memory); prices
are USD per GPU-hour per ResourceFlavor.
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from typing import Any, Optional

import yaml

from .engine import model
from .engine.errors import ManifestError
from .engine.manifests import Manifests, load_documents, parse_yaml_documents
from .engine.placement import DeviceAllocator
from .engine.quota import QuotaTree
from .engine.quantity import format_quantity, parse_quantity
from .errors import NotFound, ValidationError
from .ledger.pricing import Prices

KUEUE_API = "kueue.x-k8s.io/v1beta1"
SCHEDULING_API = "scheduling.k8s.io/v1"
CONFIG_API = "config.kueue.x-k8s.io/v1beta1"
SOURCE = "admin"

_QUOTA_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")

__all__ = [
    "config_to_documents",
    "documents_to_yaml",
    "config_to_yaml",
    "load_config_documents",
    "load_config_text",
    "load_import",
    "config_view",
    "patch_cluster_queue",
    "patch_priority_class",
    "prices_from_request",
    "prices_view",
    "config_summary",
    "capacity_warnings",
    "check_exact_quotas",
]


# ---------------------------------------------------------------------------------------------
# ClusterConfig → Kueue documents


def _meta(name: str, namespace: Optional[str] = None, labels: Optional[dict] = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return meta


def _weight(value: float) -> Any:
    """A fair-sharing weight as a Kubernetes quantity (``1``, ``"0.5"``), exact for what the
    loader produced (it stores ``float(Fraction)``)."""
    if float(value).is_integer():
        return int(value)
    return repr(float(value))


def _selector(sel: model.LabelSelector) -> dict:
    out: dict[str, Any] = {}
    if sel.match_labels:
        out["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        exprs = []
        for e in sel.match_expressions:
            item: dict[str, Any] = {"key": e.key, "operator": e.operator}
            if e.values:
                item["values"] = list(e.values)
            exprs.append(item)
        out["matchExpressions"] = exprs
    return out


def _resource_groups(groups: list[model.ResourceGroup]) -> list[dict]:
    out = []
    for rg in groups:
        flavors = []
        for fq in rg.flavors:
            resources = []
            for rq in fq.resources:
                item: dict[str, Any] = {"name": rq.name, "nominalQuota": format_quantity(rq.name, rq.nominal_quota)}
                if rq.borrowing_limit is not None:
                    item["borrowingLimit"] = format_quantity(rq.name, rq.borrowing_limit)
                if rq.lending_limit is not None:
                    item["lendingLimit"] = format_quantity(rq.name, rq.lending_limit)
                resources.append(item)
            flavors.append({"name": fq.name, "resources": resources})
        out.append({"coveredResources": list(rg.covered_resources), "flavors": flavors})
    return out


def _toleration(t: model.Toleration) -> dict:
    out: dict[str, Any] = {}
    if t.key:
        out["key"] = t.key
    out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def _cluster_queue_doc(cq: model.ClusterQueue) -> dict:
    spec: dict[str, Any] = {}
    if cq.cohort:
        spec["cohort"] = cq.cohort
    if cq.namespace_selector is not None:
        spec["namespaceSelector"] = _selector(cq.namespace_selector)
    spec["queueingStrategy"] = cq.queueing_strategy
    pre = cq.preemption
    preemption: dict[str, Any] = {
        "reclaimWithinCohort": pre.reclaim_within_cohort,
        "withinClusterQueue": pre.within_cluster_queue,
    }
    bwc = pre.borrow_within_cohort
    if bwc.policy != model.NEVER or bwc.max_priority_threshold is not None:
        preemption["borrowWithinCohort"] = {"policy": bwc.policy}
        if bwc.max_priority_threshold is not None:
            preemption["borrowWithinCohort"]["maxPriorityThreshold"] = bwc.max_priority_threshold
    spec["preemption"] = preemption
    ff = cq.flavor_fungibility
    if (ff.when_can_borrow, ff.when_can_preempt) != (model.BORROW, model.TRY_NEXT_FLAVOR):
        spec["flavorFungibility"] = {"whenCanBorrow": ff.when_can_borrow, "whenCanPreempt": ff.when_can_preempt}
    if cq.fair_sharing_weight != 1.0:
        spec["fairSharing"] = {"weight": _weight(cq.fair_sharing_weight)}
    if cq.stop_policy != "None":
        spec["stopPolicy"] = cq.stop_policy
    spec["resourceGroups"] = _resource_groups(cq.resource_groups)
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": _meta(cq.name), "spec": spec}


def config_to_documents(config: model.ClusterConfig) -> list[dict]:
    """The whole configuration as Kubernetes objects, in apply order.

    Namespaces (``v1``), ResourceFlavors, Cohorts (only those with a quota or a parent: a cohort
    named only by ``spec.cohort`` is implicit in Kueue), ClusterQueues, LocalQueues,
    PriorityClasses (``scheduling.k8s.io/v1``), WorkloadPriorityClasses, each sorted by name; then,
    only when fair sharing is enabled or resources are transformed, Kueue's
    ``config.kueue.x-k8s.io/v1beta1`` Configuration (``fairSharing``, ``resources.transformations``;
    it belongs in the kueue-manager ConfigMap, not ``kubectl apply``).

    Loading these documents back with ``engine.manifests.load_documents`` gives a ClusterConfig
    equal to ``config`` (the round trip is exact). Returns new dicts; ``config`` is not touched.
    """
    docs: list[dict] = []
    for name in sorted(config.namespaces):
        ns = config.namespaces[name]
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, labels=ns.labels)})
    for name in sorted(config.resource_flavors):
        fl = config.resource_flavors[name]
        spec: dict[str, Any] = {}
        if fl.node_labels:
            spec["nodeLabels"] = dict(fl.node_labels)
        if fl.node_taints:
            spec["nodeTaints"] = [
                {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect} for t in fl.node_taints
            ]
        if fl.tolerations:
            spec["tolerations"] = [_toleration(t) for t in fl.tolerations]
        docs.append({"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": _meta(name), "spec": spec})
    for name in sorted(config.cohorts):
        co = config.cohorts[name]
        spec = {}
        if co.parent:
            spec["parentName"] = co.parent
        if co.resource_groups:
            spec["resourceGroups"] = _resource_groups(co.resource_groups)
        if co.fair_sharing_weight != 1.0:
            spec["fairSharing"] = {"weight": _weight(co.fair_sharing_weight)}
        docs.append({"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": _meta(name), "spec": spec})
    for name in sorted(config.cluster_queues):
        docs.append(_cluster_queue_doc(config.cluster_queues[name]))
    for key in sorted(config.local_queues):
        lq = config.local_queues[key]
        docs.append({"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": _meta(lq.name, lq.namespace),
                     "spec": {"clusterQueue": lq.cluster_queue}})
    for name in sorted(config.priority_classes):
        pc = config.priority_classes[name]
        doc: dict[str, Any] = {"apiVersion": SCHEDULING_API, "kind": "PriorityClass", "metadata": _meta(name),
                               "value": pc.value}
        if pc.global_default:
            doc["globalDefault"] = True
        if pc.preemption_policy != "PreemptLowerPriority":
            doc["preemptionPolicy"] = pc.preemption_policy
        if pc.description:
            doc["description"] = pc.description
        docs.append(doc)
    for name in sorted(config.workload_priority_classes):
        pc = config.workload_priority_classes[name]
        doc = {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": _meta(name), "value": pc.value}
        if pc.description:
            doc["description"] = pc.description
        docs.append(doc)
    if config.fair_sharing.enable or config.resource_transformations:
        conf: dict[str, Any] = {"apiVersion": CONFIG_API, "kind": "Configuration"}
        if config.fair_sharing.enable:
            conf["fairSharing"] = {"enable": True,
                                   "preemptionStrategies": list(config.fair_sharing.preemption_strategies)}
        if config.resource_transformations:
            conf["resources"] = {"transformations": [
                {"input": t.input, "strategy": t.strategy,
                 "outputs": {o: _fraction_quantity(q) for o, q in sorted(t.outputs.items())}}
                for _, t in sorted(config.resource_transformations.items())
            ]}
        docs.append(conf)
    return docs


def _fraction_quantity(value) -> Any:
    """A per-unit transformation output (a Fraction of the output's unit) as a Kubernetes
    quantity: ``7``, ``"500m"``, else its decimal form."""
    value = Fraction(value)
    if value.denominator == 1:
        return value.numerator
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return repr(float(value))


def documents_to_yaml(docs: list[dict], header: str = "") -> str:
    """A multi-document YAML stream (``---`` between documents), keys in Kubernetes order.
    ``header``: comment lines put first (each line gets ``# ``)."""
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    body = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return lines + body


def config_to_yaml(config: model.ClusterConfig, header: str = "") -> str:
    """:func:`config_to_documents` as YAML text (what ``export`` answers and the ledger stores)."""
    return documents_to_yaml(config_to_documents(config), header)


# ---------------------------------------------------------------------------------------------
# Documents → validated ClusterConfig


def _invalid(exc: ManifestError) -> ValidationError:
    return ValidationError(str(exc), field=exc.field or "manifest")


def _is_device(resource: str) -> bool:
    return resource == model.GPU or resource.startswith(model.MIG_PREFIX)


def _inexact_quota_reason(resource: str, value: Any) -> Optional[str]:
    """Why the quota ``value`` of ``resource`` cannot be stored exactly, or None when it can.

    Kueue keeps quotas as integers of its canonical unit (``pkg/resources/requests.go``:
    ``ResourceValue``: cpu in millicores, everything else in whole base units) and rounds a
    finer value up (``Quantity.Value()`` / ``MilliValue()``), so ``nominalQuota: 1.5`` for
    ``nvidia.com/gpu`` silently becomes 2. Here such a value is refused instead: GPUs and MIG
    devices are whole devices, cpu is whole millicores ("1.5" = 1500m is exact), memory and
    other resources whole bytes / units. A value that does not parse returns None (the loader
    refuses it with Kubernetes' own reason)."""
    try:
        amount = parse_quantity(value)
    except ManifestError:
        return None
    canonical = amount * 1000 if resource == "cpu" else amount
    if canonical.denominator == 1 or canonical < 0:  # a negative quota: the loader says why
        return None
    rounded = math.ceil(canonical)
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    kueue = f"Kueue would round it up to {format_quantity(resource, rounded)}"
    if _is_device(resource):
        what = "GPUs" if resource == model.GPU else "MIG devices"
        return (f"Invalid value: {shown}: {resource} is counted in whole {what}; a quota must be a whole "
                f"number ({kueue})")
    if resource == "cpu":
        return (f"Invalid value: {shown}: cpu quotas are whole millicores (e.g. \"1.5\" or \"1500m\"); "
                f"{kueue}")
    unit = "bytes" if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-") else "units"
    return f"Invalid value: {shown}: {resource} quotas are whole {unit}; {kueue}"


def check_exact_quotas(docs: list, source: str = SOURCE) -> None:
    """Refuse a quota that would not be stored exactly as given (see :func:`_inexact_quota_reason`).

    ``docs``: configuration documents (dicts). Every ``nominalQuota``, ``borrowingLimit`` and
    ``lendingLimit`` of a ClusterQueue's or Cohort's ``spec.resourceGroups`` is checked. Raises
    ValidationError whose field is the Kueue field path
    (``spec.resourceGroups[0].flavors[0].resources[2].nominalQuota``) and whose message names the
    document as the loader's do (``admin: document 6: ClusterQueue/team-a-cq: <field>: Invalid
    value: "1.5": nvidia.com/gpu is counted in whole GPUs; …``). Malformed documents are left to
    the loader."""
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") not in ("ClusterQueue", "Cohort"):
            continue
        if not str(doc.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
            continue
        spec, meta = doc.get("spec"), doc.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        groups = spec.get("resourceGroups") if isinstance(spec, dict) else None
        if not isinstance(groups, list):
            continue
        for gi, rg in enumerate(groups):
            flavors = rg.get("flavors") if isinstance(rg, dict) else None
            for fi, fq in enumerate(flavors if isinstance(flavors, list) else []):
                resources = fq.get("resources") if isinstance(fq, dict) else None
                for ri, rq in enumerate(resources if isinstance(resources, list) else []):
                    if not isinstance(rq, dict) or not isinstance(rq.get("name"), str):
                        continue
                    for key in _QUOTA_FIELDS:
                        if rq.get(key) is None:
                            continue
                        reason = _inexact_quota_reason(rq["name"], rq[key])
                        if reason is not None:
                            path = f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}].{key}"
                            raise ValidationError(f"{source}: document {index}: {doc['kind']}/{name}: {path}: {reason}",
                                                  field=path)


def load_config_documents(docs: list[dict], source: str = SOURCE) -> Manifests:
    """Validate configuration documents as Kueue would; returns the engine's :class:`Manifests`.

    Raises ValidationError (field: the Kueue field path; message: ``<source>: document <i>:
    <Kind>/<name>: <field>: <reason>``) for anything Kueue rejects, for a quota that would not be
    stored exactly as given (a fractional GPU count, ``1.5m`` cpu: :func:`check_exact_quotas`;
    Kueue would round it up), and for documents that are workloads (batch/v1 Jobs with a
    queue-name label, Kueue Workloads, ...): configuration changes take configuration kinds only,
    workloads are submitted (``POST .../workloads``).
    """
    check_exact_quotas(docs, source)
    try:
        m = load_documents(docs, source)
    except ManifestError as exc:
        raise _invalid(exc) from None
    if m.workloads:
        keys = ", ".join(w.key for w in m.workloads[:5])
        raise ValidationError(
            f"the configuration holds workloads ({keys}); it may contain only ResourceFlavors, "
            "ClusterQueues, Cohorts, LocalQueues, PriorityClasses, WorkloadPriorityClasses, Namespaces "
            "and a Kueue Configuration. Submit workloads through the queue instead.",
            field="kind",
        )
    return m


def load_config_text(text: str, source: str = SOURCE) -> Manifests:
    """Parse Kueue YAML and validate it as configuration (:func:`load_config_documents`).
    Raises ValidationError naming the field path (invalid YAML: the line and column)."""
    try:
        docs = parse_yaml_documents(text, source)
    except ManifestError as exc:
        raise _invalid(exc) from None
    return load_config_documents(docs, source)


def load_import(text: str, source: str = "import") -> Manifests:
    """Parse and validate a whole configuration to import (it replaces the current one).

    ``text``: Kueue YAML, several documents. Raises ValidationError naming the Kueue field path
    and the reason for anything Kueue would reject (invalid YAML, a repeated key, an unknown field,
    ``borrowingLimit`` without a cohort, ...), for workloads in the stream, and for a configuration
    with no ClusterQueue or no LocalQueue (an import replaces everything; one without queues would
    leave no queue to submit to). Documents of other kinds (ResourceQuota, LimitRange, ...) are
    returned in ``Manifests.ignored``.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("the configuration to import is empty", field="body")
    m = load_config_text(text, source)
    if not m.config.cluster_queues:
        raise ValidationError(
            "an import replaces the whole configuration, and this one has no ClusterQueue "
            f"(ignored: {', '.join(m.ignored) or 'nothing'})",
            field="kind",
        )
    if not m.config.local_queues:
        raise ValidationError(
            "an import replaces the whole configuration, and this one has no LocalQueue to submit to",
            field="kind",
        )
    return m


def _find(docs: list[dict], kind: str, name: str) -> Optional[dict]:
    for doc in docs:
        if doc.get("kind") == kind and doc.get("metadata", {}).get("name") == name:
            return doc
    return None


def _quantity_input(value: Any, field: str) -> Any:
    """A quota value from a request: a quantity string or a number, passed to the loader as is
    (it validates it as Kubernetes does); anything else is refused here, naming the field."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValidationError(
            f"must be a Kubernetes quantity such as \"4\", \"500m\" or \"64Gi\", got {json.dumps(value)}",
            field=field,
        )
    if isinstance(value, str):
        value = value.strip()
    return value


def patch_cluster_queue(config: model.ClusterConfig, name: str, patch: Any) -> tuple[model.ClusterConfig, dict, dict]:
    """Change a ClusterQueue's cohort and its quotas per flavor and resource.

    ``patch``: ``{"cohort": "research" | null, "resources": [{"flavor": "nvidia-a100", "resource":
    "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2" | null, "lendingLimit": null}]}``;
    every key is optional; an absent key keeps the value, ``null`` removes a borrowingLimit or
    lendingLimit (unlimited / lend everything) or the cohort. Quotas are Kubernetes quantities in
    the resource's unit (GPUs, MIG slices, cores, bytes).

    Returns ``(new_config, before, after)``, where before/after are the ClusterQueue's documents
    (for the audit log). Raises NotFound(field="name") for an unknown ClusterQueue,
    ValidationError naming the request field (``resources[1].flavor``) for a malformed request or
    a flavor/resource the ClusterQueue does not have, and ValidationError naming the Kueue field
    path for what Kueue rejects (e.g. ``spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit``
    set without a cohort; ``lendingLimit`` above ``nominalQuota``; a negative quota).
    """
    if not isinstance(patch, dict):
        raise ValidationError("must be a JSON object", field="body")
    unknown = sorted(set(patch) - {"cohort", "resources"})
    if unknown:
        raise ValidationError("unknown field; a ClusterQueue patch takes cohort and resources", field=unknown[0])
    if name not in config.cluster_queues:
        raise NotFound(f"no ClusterQueue {name}", field="name")
    docs = config_to_documents(config)
    doc = _find(docs, "ClusterQueue", name)
    before = copy.deepcopy(doc)
    spec = doc["spec"]
    if "cohort" in patch:
        cohort = patch["cohort"]
        if cohort is not None and not isinstance(cohort, str):
            raise ValidationError(f"must be a cohort name or null, got {json.dumps(cohort)}", field="cohort")
        cohort = (cohort or "").strip()
        if cohort:
            spec["cohort"] = cohort
        else:
            spec.pop("cohort", None)
        # keep Kubernetes' field order: cohort first
        doc["spec"] = spec = {**({"cohort": spec.pop("cohort")} if "cohort" in spec else {}), **spec}
    resources = patch.get("resources", [])
    if not isinstance(resources, list):
        raise ValidationError("must be a list of {flavor, resource, nominalQuota, borrowingLimit, lendingLimit}",
                              field="resources")
    for i, change in enumerate(resources):
        where = f"resources[{i}]"
        if not isinstance(change, dict):
            raise ValidationError("must be an object", field=where)
        extra = sorted(set(change) - {"flavor", "resource", *_QUOTA_FIELDS})
        if extra:
            raise ValidationError(f"unknown field; expected flavor, resource, {', '.join(_QUOTA_FIELDS)}",
                                  field=f"{where}.{extra[0]}")
        flavor, resource = change.get("flavor"), change.get("resource")
        if not isinstance(flavor, str) or not flavor:
            raise ValidationError("the ResourceFlavor name is required", field=f"{where}.flavor")
        if not isinstance(resource, str) or not resource:
            raise ValidationError("the resource name is required", field=f"{where}.resource")
        target = None
        for rg in spec["resourceGroups"]:
            for fq in rg["flavors"]:
                if fq["name"] != flavor:
                    continue
                for rq in fq["resources"]:
                    if rq["name"] == resource:
                        target = rq
        if target is None:
            offered = sorted({f"{fq['name']}/{rq['name']}" for rg in spec["resourceGroups"]
                              for fq in rg["flavors"] for rq in fq["resources"]})
            raise ValidationError(
                f"ClusterQueue {name} has no quota for {resource} in flavor {flavor} (it has: {', '.join(offered)}); "
                "add flavors and resources by importing a configuration",
                field=f"{where}.flavor",
            )
        for key in _QUOTA_FIELDS:
            if key not in change:
                continue
            value = change[key]
            if value is None or (isinstance(value, str) and not value.strip()):
                if key == "nominalQuota":
                    raise ValidationError("nominalQuota is required (0 for none)", field=f"{where}.nominalQuota")
                target.pop(key, None)
            else:
                target[key] = _quantity_input(value, f"{where}.{key}")
    m = load_config_documents(docs)
    after = _find(config_to_documents(m.config), "ClusterQueue", name)
    return m.config, before, after


def patch_priority_class(config: model.ClusterConfig, name: str, patch: Any) -> tuple[model.ClusterConfig, dict, dict]:
    """Change a priority class's ``value`` (an int32 priority; larger is more important) and/or
    ``description``.

    ``patch``: ``{"value": 20000, "description": "...", "kind": "WorkloadPriorityClass"}``; ``kind``
    picks between a WorkloadPriorityClass and a PriorityClass of the same name (default: the
    WorkloadPriorityClass, which Kueue's ``kueue.x-k8s.io/priority-class`` label resolves first).
    As in Kueue, a new value applies to workloads submitted from now on; queued and admitted
    workloads keep the priority they were given ("Changing value doesn't affect existing
    workloads", WorkloadPriorityClass in ``apis/kueue/v1beta1/workloadpriorityclass_types.go``).
    Kubernetes forbids updating a PriorityClass's ``value`` in place (``ValidatePriorityClassUpdate``
    in ``pkg/apis/scheduling/validation``); here the object is replaced, as ``kubectl replace
    --force`` or an import would.

    Returns ``(new_config, before, after)``. Raises NotFound(field="name"), ValidationError naming
    the request field, or the Kueue/Kubernetes field (``value``: above 1000000000 is forbidden for a
    user-defined PriorityClass, ``pkg/apis/scheduling/validation``).
    """
    if not isinstance(patch, dict):
        raise ValidationError("must be a JSON object", field="body")
    unknown = sorted(set(patch) - {"value", "description", "kind"})
    if unknown:
        raise ValidationError("unknown field; a priority class patch takes value, description and kind",
                              field=unknown[0])
    kind = patch.get("kind")
    if kind is None:
        kind = "WorkloadPriorityClass" if name in config.workload_priority_classes else "PriorityClass"
    if kind not in ("WorkloadPriorityClass", "PriorityClass"):
        raise ValidationError("must be WorkloadPriorityClass or PriorityClass", field="kind")
    table = config.workload_priority_classes if kind == "WorkloadPriorityClass" else config.priority_classes
    if name not in table:
        raise NotFound(f"no {kind} {name}", field="name")
    docs = config_to_documents(config)
    doc = _find(docs, kind, name)
    before = copy.deepcopy(doc)
    if "value" in patch:
        doc["value"] = patch["value"]
    if "description" in patch:
        desc = patch["description"]
        if desc is None or desc == "":
            doc.pop("description", None)
        else:
            doc["description"] = desc
    m = load_config_documents(docs)
    after = _find(config_to_documents(m.config), kind, name)
    return m.config, before, after


def prices_from_request(config: model.ClusterConfig, body: Any) -> Prices:
    """The price list of ``PUT admin/prices``: ``{"flavors": {flavor: USD per GPU-hour},
    "default": USD per GPU-hour, "migSlicesPerGpu": 7}`` (``currency`` "USD" optional).

    It replaces the whole list. Raises ValidationError naming ``flavors.<name>`` for a negative or
    non-numeric price or a flavor that is not a ResourceFlavor of the configuration, ``default``,
    ``migSlicesPerGpu`` or the unknown key."""
    if not isinstance(body, dict):
        raise ValidationError("must be a JSON object", field="body")
    flavors = body.get("flavors", {})
    if not isinstance(flavors, dict):
        raise ValidationError("must be an object of flavor name to USD per GPU-hour", field="flavors")
    for flavor in flavors:
        if flavor not in config.resource_flavors:
            raise ValidationError(
                f"no ResourceFlavor {flavor} in the configuration (known: {', '.join(sorted(config.resource_flavors))})",
                field=f"flavors.{flavor}",
            )
    return Prices.from_json(body)


# ---------------------------------------------------------------------------------------------
# Views (JSON for the admin API and the panel)


def prices_view(config: model.ClusterConfig, prices: Prices) -> dict:
    """The price list plus the effective USD per GPU-hour of every ResourceFlavor:
    ``{"currency", "flavors", "default", "migSlicesPerGpu", "effective": [{"flavor",
    "usdPerGpuHour", "source": "listed" | "base flavor" | "family" | "default", "model"?}]}``;
    ``model`` ("H100") where the flavor is priced as the GPU family its nodeLabels name."""
    out = prices.to_json()
    effective = []
    for flavor in sorted(config.resource_flavors):
        row = {"flavor": flavor, "usdPerGpuHour": prices.price(flavor), "source": prices.source(flavor)}
        if row["source"] == "family":
            row["model"] = prices.family_model(flavor)
        effective.append(row)
    out["effective"] = effective
    return out


def _quota_json(resource: str, value: Optional[int]) -> Optional[str]:
    return None if value is None else format_quantity(resource, value)


def config_view(config: model.ClusterConfig, prices: Prices, inventory: Optional[model.Inventory] = None) -> dict:
    """The JSON view of ``GET admin/config`` (``AdminConfig`` in openapi.yaml).

    ``warnings``: :func:`capacity_warnings` against ``inventory`` (quota above the hardware).

    ClusterQueues list every quota as ``{"flavor", "resource", "nominalQuota", "borrowingLimit",
    "lendingLimit", "path"}`` (quantities as strings, limits null when unset; ``path`` is the Kueue
    field path of that quota, e.g. ``spec.resourceGroups[0].flavors[1].resources[2]``, which is how
    a validation error's ``field`` is matched to it)."""
    cqs = []
    for name in sorted(config.cluster_queues):
        cq = config.cluster_queues[name]
        resources = []
        for gi, rg in enumerate(cq.resource_groups):
            for fi, fq in enumerate(rg.flavors):
                for ri, rq in enumerate(fq.resources):
                    resources.append({
                        "flavor": fq.name,
                        "resource": rq.name,
                        "nominalQuota": format_quantity(rq.name, rq.nominal_quota),
                        "borrowingLimit": _quota_json(rq.name, rq.borrowing_limit),
                        "lendingLimit": _quota_json(rq.name, rq.lending_limit),
                        "path": f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]",
                    })
        cqs.append({
            "name": name,
            "cohort": cq.cohort,
            "queueingStrategy": cq.queueing_strategy,
            "preemption": {
                "withinClusterQueue": cq.preemption.within_cluster_queue,
                "reclaimWithinCohort": cq.preemption.reclaim_within_cohort,
            },
            "resources": resources,
            "localQueues": sorted(k for k, lq in config.local_queues.items() if lq.cluster_queue == name),
        })
    pcs = []
    for kind, table in (("PriorityClass", config.priority_classes),
                        ("WorkloadPriorityClass", config.workload_priority_classes)):
        for pc in table.values():
            pcs.append({"name": pc.name, "kind": kind, "value": pc.value, "description": pc.description,
                        "globalDefault": pc.global_default})
    pcs.sort(key=lambda p: (-p["value"], p["name"]))
    cohorts = sorted({cq.cohort for cq in config.cluster_queues.values() if cq.cohort} | set(config.cohorts))
    return {
        "clusterQueues": cqs,
        "cohorts": cohorts,
        "resourceFlavors": sorted(config.resource_flavors),
        "localQueues": [
            {"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue}
            for _, lq in sorted(config.local_queues.items())
        ],
        "priorityClasses": pcs,
        "fairSharing": config.fair_sharing.enable,
        "prices": prices_view(config, prices),
        "warnings": capacity_warnings(config, inventory),
    }


def config_summary(config: model.ClusterConfig) -> dict:
    """Counts of each kind, for an import's audit entry and answer."""
    return {
        "resourceFlavors": len(config.resource_flavors),
        "clusterQueues": len(config.cluster_queues),
        "cohorts": len(config.cohorts),
        "localQueues": len(config.local_queues),
        "priorityClasses": len(config.priority_classes),
        "workloadPriorityClasses": len(config.workload_priority_classes),
        "namespaces": len(config.namespaces),
    }



# ---------------------------------------------------------------------------------------------
# Quota against hardware


def capacity_warnings(config: model.ClusterConfig, inventory: Optional[model.Inventory]) -> list[str]:
    """Where the configuration promises more devices than the inventory has.

    For every cohort tree (a root Cohort with everything under it, or a ClusterQueue without a
    cohort) and every (ResourceFlavor, device resource) — ``nvidia.com/gpu`` and
    ``nvidia.com/mig-<profile>`` — the nominal quotas of its ClusterQueues and Cohorts are added up
    and compared with the devices of that resource on the nodes whose labels match the flavor's
    ``nodeLabels`` (GPUs in MIG mode count as their MIG devices, not as GPUs). Where the quota is
    larger, workloads that fit the quota may not find devices: they wait with ``PlacementFailed``,
    or preempt lower-priority workloads on the nodes (docs/engine.md, "Preemption for placement"),
    which Kueue's quota rules alone would never do. When no single tree exceeds the hardware but
    several trees together do, that is said too (placement preemption stays inside a cohort tree).

    Returns one sentence per finding, in a stable order (empty without an inventory). Kueue has no
    such check: its quotas need not match any node (``apis/kueue/v1beta1/clusterqueue_types.go``)."""
    if inventory is None or not inventory.nodes:
        return []
    tree = QuotaTree(config)
    per_root: dict[tuple[str, str, str], int] = {}  # (root, flavor, resource) -> nominal
    kind_of: dict[str, str] = {}

    def add(root_node, groups) -> None:
        kind_of[root_node.name] = "ClusterQueue" if root_node.is_cluster_queue else "Cohort"
        for rg in groups:
            for fq in rg.flavors:
                for rq in fq.resources:
                    if _is_device(rq.name) and rq.nominal_quota > 0:
                        k = (root_node.name, fq.name, rq.name)
                        per_root[k] = per_root.get(k, 0) + rq.nominal_quota

    for name, cq in config.cluster_queues.items():
        add(tree.cluster_queues[name].root(), cq.resource_groups)
    for name, co in config.cohorts.items():
        if name in tree.cohorts:
            add(tree.cohorts[name].root(), co.resource_groups)
    alloc = DeviceAllocator(inventory)
    devices: dict[tuple[str, str], int] = {}

    def count(flavor: str, resource: str) -> int:
        if (flavor, resource) not in devices:
            fl = config.resource_flavors.get(flavor)
            labels = fl.node_labels if fl is not None else {}
            devices[(flavor, resource)] = sum(
                len(alloc.devices_of(n.name, resource)) for n in inventory.nodes
                if all(n.labels.get(k) == v for k, v in labels.items()))
        return devices[(flavor, resource)]

    out: list[str] = []
    totals: dict[tuple[str, str], list[int]] = {}
    for (root, flavor, resource), quota in sorted(per_root.items()):
        have = count(flavor, resource)
        t = totals.setdefault((flavor, resource), [0, 0, 0])
        t[0] += quota
        t[1] += 1
        if quota > have:
            t[2] += 1
            who = f"Cohort {root}" if kind_of[root] == "Cohort" else f"ClusterQueue {root} (no cohort)"
            out.append(
                f"{who} has {quota} {resource} of flavor {flavor} in nominal quota, but the inventory has "
                f"{have}: workloads within quota may wait for devices (PlacementFailed) or preempt "
                "lower-priority workloads on the nodes")
    for (flavor, resource), (quota, roots, over) in sorted(totals.items()):
        have = count(flavor, resource)
        if roots > 1 and not over and quota > have:
            out.append(
                f"The ClusterQueues together have {quota} {resource} of flavor {flavor} in nominal quota "
                f"({roots} cohort trees), but the inventory has {have}: workloads within quota may wait "
                "for devices (PlacementFailed); preemption for placement does not cross cohorts")
    return out
