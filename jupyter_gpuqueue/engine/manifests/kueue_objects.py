"""Kueue's objects (and the Kubernetes kinds they depend on) → ``ClusterConfig``: Namespace,
PriorityClass, WorkloadPriorityClass, ResourceFlavor, ClusterQueue, Cohort, LocalQueue, and Kueue's
Configuration (``fairSharing``, ``resources.transformations``). Rules: the CRD schemas and CEL rules
(``apis/kueue/v1beta1/*_types.go``) and the webhooks (``pkg/webhooks/*.go``,
``pkg/config/validation.go``)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .. import model
from ..errors import ManifestError
from ..quantity import parse_quantity, resource_value
from .builder import Builder
from .fields import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    INT32_MIN,
    MAX_FLAVORS_PER_GROUP,
    MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS,
    MAX_FLAVOR_RESOURCE_COMBINATIONS,
    MAX_RESOURCES,
    MAX_RESOURCE_GROUPS,
    MAX_TOTAL_COVERED_RESOURCES,
    MAX_TOTAL_FLAVORS,
    SYSTEM_PRIORITY_CLASSES,
    _boolean,
    _check,
    _child,
    _dns1123_subdomain_errors,
    _dns_subdomain,
    _duplicate,
    _enum,
    _forbidden,
    _index,
    _integer,
    _invalid,
    _key,
    _known_fields,
    _labels,
    _mapping,
    _non_negative,
    _quantity,
    _quantity_map,
    _required,
    _resource_name,
    _sequence,
    _string,
    _too_many,
    _unsupported,
)
from .selectors import _label_selector, _taints, _tolerations


_CQ_SPEC_FIELDS = (
    "resourceGroups", "queueingStrategy", "namespaceSelector", "flavorFungibility", "preemption",
    "admissionChecks", "admissionChecksStrategy", "stopPolicy", "fairSharing", "admissionScope",
    "excludeResourcePrefixes", "concurrentAdmissionPolicy",
)

_FAIR_SHARING_STRATEGY_SETS = (
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
)


class KueueObjects:
    """Reads the queueing objects into ``Builder.config``: Namespace, PriorityClass, WorkloadPriorityClass,
    ResourceFlavor, ClusterQueue, Cohort, LocalQueue and Kueue's Configuration.

    A little over 400 lines: the ClusterQueue's resource groups alone are 140 lines of Kueue's
    rules (limits, flavors, cohort-only fields); split further, each piece would read a single
    ClusterQueue field."""

    def __init__(self, builder: Builder):
        self.b = builder

    def _fair_sharing_weight(self, value: Any, path: str) -> float:
        """FairSharing.weight (fairsharing_types.go; webhook validateFairSharing)."""
        raw = _mapping(value, path)
        _known_fields(raw, ("weight",), path)
        if raw.get("weight") is None:
            return 1.0
        wpath = _child(path, "weight")
        weight = parse_quantity(raw["weight"], wpath)
        if weight < 0:
            raise _invalid(wpath, raw["weight"], "must be greater than or equal to 0")
        if 0 < weight <= Fraction(1, 10**9):
            raise _invalid(wpath, raw["weight"], "When not 0, weight must be > 10e-9")
        return float(weight)

    def namespace(self, doc, group, version, kind, name):
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, labels, _ann = self.b._cluster_scoped_meta(doc, label_name=True)
        self.b._register(group, kind, "", name)
        self.b.config.namespaces[name] = model.Namespace(name=name, labels=labels)

    def priority_class(self, doc, group, version, kind, name):
        """scheduling.k8s.io/v1 PriorityClass: ValidatePriorityClass and the Priority admission
        plugin (one globalDefault at most)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "value", "globalDefault",
                            "description", "preemptionPolicy"), "")
        name, _labels_, _ann = self.b._cluster_scoped_meta(doc)
        value = _integer(doc.get("value"), "value", required=True, minimum=INT32_MIN)
        global_default = _boolean(doc.get("globalDefault"), "globalDefault")
        if name.startswith("system-"):
            if SYSTEM_PRIORITY_CLASSES.get(name) != value or global_default:
                raise _forbidden(
                    "metadata.name",
                    "priority class names with 'system-' prefix are reserved for system use only",
                )
        elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
            raise _forbidden("value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")
        policy = _enum(doc.get("preemptionPolicy"), "preemptionPolicy", ("PreemptLowerPriority", "Never"),
                       "PreemptLowerPriority")
        description = _string(doc.get("description"), "description")
        self.b._register(group, kind, "", name)
        if global_default:
            existing = self.b.config.default_priority_class()
            if existing is not None:
                raise _forbidden(
                    "globalDefault",
                    f"PriorityClass {existing.name} is already marked as default. Only one default can exist",
                )
        self.b.config.priority_classes[name] = model.PriorityClass(
            name=name, value=value, kind="PriorityClass", global_default=global_default,
            preemption_policy=policy, description=description,
        )

    def workload_priority_class(self, doc, group, version, kind, name):
        _known_fields(doc, ("apiVersion", "kind", "metadata", "value", "description"), "")
        name, _labels_, _ann = self.b._cluster_scoped_meta(doc)
        value = _integer(doc.get("value"), "value", required=True, minimum=INT32_MIN)
        description = _string(doc.get("description"), "description")
        self.b._register(group, kind, "", name)
        self.b.config.workload_priority_classes[name] = model.PriorityClass(
            name=name, value=value, kind="WorkloadPriorityClass", description=description,
        )

    def resource_flavor(self, doc, group, version, kind, name):
        """ResourceFlavor: resourceflavor_types.go + pkg/webhooks/resourceflavor_webhook.go."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec"), "")
        name, _labels_, _ann = self.b._cluster_scoped_meta(doc)
        spec = _mapping(doc.get("spec"), "spec")
        _known_fields(spec, ("nodeLabels", "nodeTaints", "tolerations", "topologyName"), "spec")
        node_labels = _labels(spec.get("nodeLabels"), "spec.nodeLabels",
                              max_items=MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS)
        taints = _taints(spec.get("nodeTaints"), "spec.nodeTaints")
        tolerations = _tolerations(spec.get("tolerations"), "spec.tolerations",
                                   max_items=MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS)
        if spec.get("topologyName") is not None:
            topology = _dns_subdomain(spec.get("topologyName"), "spec.topologyName")
            if not node_labels:
                raise _invalid("spec", "object", "at least one nodeLabel is required when topology is set")
            self.b.warn("spec.topologyName", f"topology {topology!r} ignored: topology-aware scheduling is not supported")
        self.b._register(group, kind, "", name)
        self.b.config.resource_flavors[name] = model.ResourceFlavor(
            name=name, node_labels=node_labels, node_taints=taints, tolerations=tolerations,
        )

    def _resource_groups(self, value: Any, path: str, *, has_parent: bool, is_cohort: bool) -> list[model.ResourceGroup]:
        """resourceGroups of a ClusterQueue or Cohort: the CRD schema and CEL rules first (as the
        API server evaluates them before webhooks), then Kueue's webhook
        (``validateResourceGroups`` / ``validateFlavorQuotas`` in pkg/webhooks/clusterqueue_webhook.go)."""
        groups = _sequence(value, path)
        if len(groups) > MAX_RESOURCE_GROUPS:
            raise _too_many(path, len(groups), MAX_RESOURCE_GROUPS)
        parsed = []  # (covered, [(flavor name, fpath, [(rname, rpath, nominal, borrowing, lending, raws)])])
        for i, rg in enumerate(groups):
            gpath = _index(path, i)
            rg = _mapping(rg, gpath, required=True)
            _known_fields(rg, ("coveredResources", "flavors"), gpath)
            cpath = _child(gpath, "coveredResources")
            covered = _sequence(rg.get("coveredResources"), cpath, required=True)
            if not covered:
                raise _required(cpath, "should have at least 1 items")
            if len(covered) > MAX_RESOURCES:
                raise _too_many(cpath, len(covered), MAX_RESOURCES)
            for j, r in enumerate(covered):
                _string(r, _index(cpath, j), required=True)
            fpath_list = _child(gpath, "flavors")
            flavors = _sequence(rg.get("flavors"), fpath_list, required=True)
            if not flavors:
                raise _required(fpath_list, "should have at least 1 items")
            if len(flavors) > MAX_FLAVORS_PER_GROUP:
                raise _too_many(fpath_list, len(flavors), MAX_FLAVORS_PER_GROUP)
            names_in_group: set[str] = set()
            parsed_flavors = []
            for j, fq in enumerate(flavors):
                fpath = _index(fpath_list, j)
                fq = _mapping(fq, fpath, required=True)
                _known_fields(fq, ("name", "resources"), fpath)
                fname = _dns_subdomain(fq.get("name"), _child(fpath, "name"))
                if fname in names_in_group:  # +listType=map, +listMapKey=name
                    raise _duplicate(fpath, {"name": fname})
                names_in_group.add(fname)
                rlist_path = _child(fpath, "resources")
                resources = _sequence(fq.get("resources"), rlist_path, required=True)
                if not resources:
                    raise _required(rlist_path, "should have at least 1 items")
                if len(resources) > MAX_RESOURCES:
                    raise _too_many(rlist_path, len(resources), MAX_RESOURCES)
                rnames: set[str] = set()
                parsed_resources = []
                for k, rq in enumerate(resources):
                    rpath = _index(rlist_path, k)
                    rq = _mapping(rq, rpath, required=True)
                    _known_fields(rq, ("name", "nominalQuota", "borrowingLimit", "lendingLimit"), rpath)
                    rname = _string(rq.get("name"), _child(rpath, "name"), required=True)
                    if rname in rnames:
                        raise _duplicate(rpath, {"name": rname})
                    rnames.add(rname)
                    nominal = _quantity(rq.get("nominalQuota"), _child(rpath, "nominalQuota"), required=True)
                    borrowing = _quantity(rq.get("borrowingLimit"), _child(rpath, "borrowingLimit"))
                    lending = _quantity(rq.get("lendingLimit"), _child(rpath, "lendingLimit"))
                    parsed_resources.append((rname, rpath, nominal, borrowing, lending, rq))
                # CEL on ResourceGroup: flavors must have the same number of resources as the
                # coveredResources (reported at the offending flavor, with the webhook's words).
                if len(resources) != len(covered):
                    listed = ", ".join(r[0] for r in parsed_resources)
                    raise ManifestError(
                        "Invalid value: must have the same number of resources as the coveredResources "
                        f"(flavor {fname!r} lists {len(resources)}: {listed}; coveredResources lists "
                        f"{len(covered)}: {', '.join(map(str, covered))})",
                        rlist_path,
                    )
                parsed_flavors.append((fname, fpath, parsed_resources))
            parsed.append((covered, cpath, parsed_flavors))
        # CEL on ClusterQueueSpec / webhook validateLimit: limits need a cohort (or a parent).
        limit_owner = "parent" if is_cohort else "cohort"
        if not has_parent:
            for _covered, _cpath, pflavors in parsed:
                for _fname, _fpath, pres in pflavors:
                    for _rname, rpath, _nominal, borrowing, lending, rq in pres:
                        if borrowing is not None:
                            raise _invalid(_child(rpath, "borrowingLimit"), rq["borrowingLimit"],
                                           f"must be nil when {limit_owner} is empty")
                        if lending is not None:
                            raise _invalid(_child(rpath, "lendingLimit"), rq["lendingLimit"],
                                           f"must be nil when {limit_owner} is empty")
        # Webhook.
        seen_resources: set[str] = set()
        seen_flavors: set[str] = set()
        total_flavors = 0
        total_covered = 0
        out: list[model.ResourceGroup] = []
        for gi, (covered, cpath, pflavors) in enumerate(parsed):
            for j, rname in enumerate(covered):
                _resource_name(rname, _index(cpath, j))
                if rname in seen_resources:
                    raise _duplicate(_index(cpath, j), rname,
                                     "each resource can only form part of one resource group")
                seen_resources.add(rname)
            combos = 0
            flavors_out: list[model.FlavorQuotas] = []
            for fname, fpath, pres in pflavors:
                quotas: list[model.ResourceQuota] = []
                for k, (rname, rpath, nominal, borrowing, lending, rq) in enumerate(pres):
                    if rname != covered[k]:
                        raise _invalid(_child(rpath, "name"), rname,
                                       f"must match the name in coveredResources (expected {covered[k]!r} "
                                       f"at this position: a flavor lists its resources in the order of "
                                       f"coveredResources)")
                    _non_negative(nominal, _child(rpath, "nominalQuota"), rq["nominalQuota"])
                    if borrowing is not None:
                        _non_negative(borrowing, _child(rpath, "borrowingLimit"), rq["borrowingLimit"])
                    if lending is not None:
                        _non_negative(lending, _child(rpath, "lendingLimit"), rq["lendingLimit"])
                        if not is_cohort and lending > nominal:
                            raise _invalid(_child(rpath, "lendingLimit"), rq["lendingLimit"],
                                           "must be less than or equal to the nominalQuota")
                    quotas.append(model.ResourceQuota(
                        name=rname,
                        nominal_quota=resource_value(rname, nominal),
                        borrowing_limit=None if borrowing is None else resource_value(rname, borrowing),
                        lending_limit=None if lending is None else resource_value(rname, lending),
                    ))
                if fname in seen_flavors:
                    raise _duplicate(_child(fpath, "name"), fname,
                                     "each flavor can only form part of one resource group")
                seen_flavors.add(fname)
                combos += len(pres)
                flavors_out.append(model.FlavorQuotas(name=fname, resources=quotas))
            if combos > MAX_FLAVOR_RESOURCE_COMBINATIONS:
                raise _invalid(_index(path, gi), combos,
                               f"number of flavor-resource combinations in a resourceGroup must be ≤ "
                               f"{MAX_FLAVOR_RESOURCE_COMBINATIONS}, got {combos}")
            total_flavors += len(pflavors)
            total_covered += len(covered)
            out.append(model.ResourceGroup(covered_resources=list(covered), flavors=flavors_out))
        if total_flavors > MAX_TOTAL_FLAVORS:
            raise _invalid(path, total_flavors,
                           f"total number of flavors across all resourceGroups must be ≤ {MAX_TOTAL_FLAVORS}, "
                           f"got {total_flavors}")
        if total_covered > MAX_TOTAL_COVERED_RESOURCES:
            raise _invalid(path, total_covered,
                           f"total number of covered resources across all resourceGroups must be ≤ "
                           f"{MAX_TOTAL_COVERED_RESOURCES}, got {total_covered}")
        return out

    def cluster_queue(self, doc, group, version, kind, name):
        """ClusterQueue: clusterqueue_types.go + pkg/webhooks/clusterqueue_webhook.go."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, _labels_, _ann = self.b._cluster_scoped_meta(doc)
        spec = _mapping(doc.get("spec"), "spec")
        cohort_field = "cohort" if version == "v1beta1" else "cohortName"
        _known_fields(spec, _CQ_SPEC_FIELDS + (cohort_field,), "spec")
        cohort_path = f"spec.{cohort_field}"
        cohort = _dns_subdomain(spec.get(cohort_field), cohort_path, required=False) or None
        strategy = _enum(spec.get("queueingStrategy"), "spec.queueingStrategy", model.QUEUEING_STRATEGIES,
                         model.BEST_EFFORT_FIFO)
        selector = None
        if spec.get("namespaceSelector") is not None:
            selector = _label_selector(spec["namespaceSelector"], "spec.namespaceSelector")
        preemption = self._preemption(spec.get("preemption"), "spec.preemption")
        fungibility = self._flavor_fungibility(spec.get("flavorFungibility"), "spec.flavorFungibility")
        stop_policy = _enum(spec.get("stopPolicy"), "spec.stopPolicy", ("None", "Hold", "HoldAndDrain"), "None")
        weight = self._fair_sharing_weight(spec.get("fairSharing"), "spec.fairSharing")
        groups = self._resource_groups(spec.get("resourceGroups"), "spec.resourceGroups",
                                       has_parent=cohort is not None, is_cohort=False)
        if spec.get("admissionChecks"):
            _sequence(spec["admissionChecks"], "spec.admissionChecks")
        if spec.get("admissionChecksStrategy"):
            _mapping(spec["admissionChecksStrategy"], "spec.admissionChecksStrategy")
        for key in ("admissionChecks", "admissionChecksStrategy"):
            if spec.get(key):
                self.b.warn(f"spec.{key}", "ignored: admission checks are not supported; workloads are "
                                         "admitted on quota alone")
        for key in ("admissionScope", "concurrentAdmissionPolicy"):
            if spec.get(key) is not None:
                _mapping(spec[key], f"spec.{key}")
                self.b.warn(f"spec.{key}", "ignored: not supported")
        if spec.get("excludeResourcePrefixes"):
            for j, prefix in enumerate(_sequence(spec["excludeResourcePrefixes"], "spec.excludeResourcePrefixes")):
                _string(prefix, _index("spec.excludeResourcePrefixes", j), required=True)
            self.b.warn("spec.excludeResourcePrefixes", "ignored: every requested resource is accounted")
        self.b._register(group, kind, "", name)
        self.b.config.cluster_queues[name] = model.ClusterQueue(
            name=name, resource_groups=groups, cohort=cohort, queueing_strategy=strategy,
            namespace_selector=selector, preemption=preemption, flavor_fungibility=fungibility,
            fair_sharing_weight=weight, stop_policy=stop_policy,
        )

    def _preemption(self, value: Any, path: str) -> model.ClusterQueuePreemption:
        raw = _mapping(value, path)
        _known_fields(raw, ("reclaimWithinCohort", "withinClusterQueue", "borrowWithinCohort"), path)
        reclaim = _enum(raw.get("reclaimWithinCohort"), _child(path, "reclaimWithinCohort"),
                        model.RECLAIM_WITHIN_COHORT_POLICIES, model.NEVER)
        within = _enum(raw.get("withinClusterQueue"), _child(path, "withinClusterQueue"),
                       model.WITHIN_CLUSTER_QUEUE_POLICIES, model.NEVER)
        bpath = _child(path, "borrowWithinCohort")
        braw = _mapping(raw.get("borrowWithinCohort"), bpath)
        _known_fields(braw, ("policy", "maxPriorityThreshold"), bpath)
        policy = _enum(braw.get("policy"), _child(bpath, "policy"), model.BORROW_WITHIN_COHORT_POLICIES, model.NEVER)
        threshold = _integer(braw.get("maxPriorityThreshold"), _child(bpath, "maxPriorityThreshold"),
                             minimum=INT32_MIN)
        if reclaim == model.NEVER and policy != model.NEVER:
            raise _invalid(path, raw, "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
        return model.ClusterQueuePreemption(
            within_cluster_queue=within, reclaim_within_cohort=reclaim,
            borrow_within_cohort=model.BorrowWithinCohort(policy=policy, max_priority_threshold=threshold),
        )

    def _flavor_fungibility(self, value: Any, path: str) -> model.FlavorFungibility:
        """flavorFungibility; v1beta2's ``MayStopSearch`` is v1beta1's Borrow / Preempt."""
        raw = _mapping(value, path)
        _known_fields(raw, ("whenCanBorrow", "whenCanPreempt", "preference"), path)
        borrow = _enum(raw.get("whenCanBorrow"), _child(path, "whenCanBorrow"),
                       ("MayStopSearch", "TryNextFlavor", "Borrow"), model.BORROW)
        preempt = _enum(raw.get("whenCanPreempt"), _child(path, "whenCanPreempt"),
                        ("MayStopSearch", "TryNextFlavor", "Preempt"), model.TRY_NEXT_FLAVOR)
        if raw.get("preference") is not None:
            pref = _enum(raw.get("preference"), _child(path, "preference"),
                         ("BorrowingOverPreemption", "PreemptionOverBorrowing"), "")
            if borrow != model.TRY_NEXT_FLAVOR or preempt != model.TRY_NEXT_FLAVOR:
                raise _invalid(_child(path, "preference"), pref,
                               f'preference "{pref}" requires both whenCanBorrow and whenCanPreempt to be TryNextFlavor')
            self.b.warn(_child(path, "preference"), "ignored: flavors are tried in order")
        return model.FlavorFungibility(
            when_can_borrow=model.BORROW if borrow == "MayStopSearch" else borrow,
            when_can_preempt=model.PREEMPT if preempt == "MayStopSearch" else preempt,
        )

    def cohort(self, doc, group, version, kind, name):
        """Cohort (cohort_types.go; pkg/webhooks/cohort_webhook.go). ``spec.parentName`` (v1beta2
        and later v1beta1) or ``spec.parent`` (v1alpha1 and early v1beta1)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, _labels_, _ann = self.b._cluster_scoped_meta(doc)
        spec = _mapping(doc.get("spec"), "spec")
        parent_fields = ("parentName",) if version == "v1beta2" else ("parent", "parentName")
        _known_fields(spec, parent_fields + ("resourceGroups", "fairSharing"), "spec")
        parent = None
        for pf in parent_fields:
            value = _dns_subdomain(spec.get(pf), f"spec.{pf}", required=False) or None
            if value is not None:
                if parent is not None and parent != value:
                    raise _invalid(f"spec.{pf}", value, "spec.parent and spec.parentName name different cohorts")
                parent = value
        weight = self._fair_sharing_weight(spec.get("fairSharing"), "spec.fairSharing")
        groups = self._resource_groups(spec.get("resourceGroups"), "spec.resourceGroups",
                                       has_parent=parent is not None, is_cohort=True)
        self.b._register(group, kind, "", name)
        self.b.config.cohorts[name] = model.Cohort(name=name, parent=parent, resource_groups=groups,
                                                 fair_sharing_weight=weight)

    def local_queue(self, doc, group, version, kind, name):
        """LocalQueue (localqueue_types.go). Unlike ``kubectl`` (which would use the current
        context's namespace) a manifest here must name the namespace."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, namespace, _labels_, _ann = self.b._namespaced_meta(doc, require_namespace=True)
        spec = _mapping(doc.get("spec"), "spec")
        _known_fields(spec, ("clusterQueue", "stopPolicy", "fairSharing"), "spec")
        cq = _string(spec.get("clusterQueue"), "spec.clusterQueue")
        if not cq:
            raise _required("spec.clusterQueue", "a LocalQueue must name the ClusterQueue that backs it")
        _check(_dns1123_subdomain_errors(cq), "spec.clusterQueue", cq)
        stop = _enum(spec.get("stopPolicy"), "spec.stopPolicy", ("None", "Hold", "HoldAndDrain"), "None")
        if stop != "None":
            self.b.warn("spec.stopPolicy", f"ignored: LocalQueue stopPolicy {stop} is not supported; "
                                         "stop the ClusterQueue instead")
        if spec.get("fairSharing") is not None:
            self._fair_sharing_weight(spec.get("fairSharing"), "spec.fairSharing")
            self.b.warn("spec.fairSharing", "ignored: admission fair sharing between LocalQueues is not supported")
        self.b._register(group, kind, namespace, name)
        lq = model.LocalQueue(namespace=namespace, name=name, cluster_queue=cq)
        self.b.config.local_queues[lq.key] = lq

    def configuration(self, doc, version):
        """config.kueue.x-k8s.io Configuration: ``fairSharing`` only (pkg/config/validation.go).
        In v1beta1 ``fairSharing.enable`` switches it on; in v1beta2 the presence of the struct."""
        if self.b._configuration_index is not None:
            raise _duplicate("kind", "Configuration",
                             f"a Configuration is already defined in document {self.b._configuration_index}")
        self.b._configuration_index = self.b._index
        self._resource_transformations(doc.get("resources"), "resources")
        if "fairSharing" not in doc or doc.get("fairSharing") is None:
            return
        path = "fairSharing"
        raw = _mapping(doc.get("fairSharing"), path)
        allowed = ("enable", "preemptionStrategies") if version == "v1beta1" else ("preemptionStrategies",)
        _known_fields(raw, allowed, path)
        enable = _boolean(raw.get("enable"), _child(path, "enable")) if version == "v1beta1" else True
        spath = _child(path, "preemptionStrategies")
        strategies = _sequence(raw.get("preemptionStrategies"), spath)
        for j, s in enumerate(strategies):
            _string(s, _index(spath, j), required=True)
        if strategies and tuple(strategies) not in _FAIR_SHARING_STRATEGY_SETS:
            raise _unsupported(spath, strategies, [",".join(s) for s in _FAIR_SHARING_STRATEGY_SETS])
        fs = model.FairSharingConfig(enable=enable)
        if strategies:
            fs.preemption_strategies = list(strategies)
        self.b.config.fair_sharing = fs

    def _resource_transformations(self, value, path: str) -> None:
        """Configuration ``resources``: ``transformations`` (Kueue pkg/config/validation.go
        ``validateResourceTransformations``: a resource name as ``input``, unique; ``strategy``
        Retain (default) or Replace; ``outputs`` a map of non-negative quantities).
        ``excludeResourcePrefixes`` is accepted and ignored (with a warning)."""
        raw = _mapping(value, path)
        _known_fields(raw, ("transformations", "excludeResourcePrefixes", "deviceClassMappings"), path)
        for key in ("excludeResourcePrefixes", "deviceClassMappings"):
            if raw.get(key):
                self.b.warn(_child(path, key), "ignored: not supported by this engine")
        tpath = _child(path, "transformations")
        seen: dict[str, int] = {}
        for i, item in enumerate(_sequence(raw.get("transformations"), tpath)):
            ipath = _index(tpath, i)
            t = _mapping(item, ipath, required=True)
            _known_fields(t, ("input", "strategy", "outputs", "multiplyBy"), ipath)
            name = _resource_name(t.get("input"), _child(ipath, "input"))
            if name in seen:
                raise _duplicate(_child(ipath, "input"), name, f"already transformed by {_index(tpath, seen[name])}")
            seen[name] = i
            strategy = _enum(t.get("strategy"), _child(ipath, "strategy"), model.TRANSFORMATION_STRATEGIES,
                             model.RETAIN)
            if t.get("multiplyBy") is not None:
                raise _forbidden(_child(ipath, "multiplyBy"), "not supported by this engine")
            opath = _child(ipath, "outputs")
            outputs = {}
            for oname, (q, original) in _quantity_map(t.get("outputs"), opath).items():
                _resource_name(oname, _key(opath, oname))
                _non_negative(q, _key(opath, oname), original)
                outputs[oname] = q
            self.b.config.resource_transformations[name] = model.ResourceTransformation(
                input=name, outputs=outputs, strategy=strategy)
