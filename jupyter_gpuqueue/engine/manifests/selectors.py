"""Label selectors, node taints, tolerations and required node affinity, validated as the API
server does (``pkg/apis/core/validation``; ``metav1validation``). Used by ResourceFlavors,
ClusterQueues' namespaceSelector and pod templates; a Workload's PodSet templates are validated as
Kueue does instead (``pod_validation=False``, ``_workload_tolerations``: see ``pods``)."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from .. import model
from ..errors import ManifestError
from .fields import (
    INT64_MAX,
    INT64_MIN,
    MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS,
    _check,
    _child,
    _duplicate,
    _forbidden,
    _index,
    _integer,
    _invalid,
    _known_fields,
    _label_value_errors,
    _labels,
    _mapping,
    _qualified_name_errors,
    _required,
    _sequence,
    _string,
    _too_many,
    _unsupported,
    _wrong_type,
)


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


_TOLERATION_OPERATORS = ("Equal", "Exists")


def _label_selector(value: Any, path: str) -> model.LabelSelector:
    """metav1validation.ValidateLabelSelector."""
    raw = _mapping(value, path)
    _known_fields(raw, ("matchLabels", "matchExpressions"), path)
    match_labels = _labels(raw.get("matchLabels"), _child(path, "matchLabels"))
    exprs: list[model.LabelSelectorRequirement] = []
    epath = _child(path, "matchExpressions")
    for i, item in enumerate(_sequence(raw.get("matchExpressions"), epath)):
        ipath = _index(epath, i)
        item = _mapping(item, ipath, required=True)
        _known_fields(item, ("key", "operator", "values"), ipath)
        key = _string(item.get("key"), _child(ipath, "key"), required=True)
        _check(_qualified_name_errors(key), _child(ipath, "key"), key)
        op = _string(item.get("operator"), _child(ipath, "operator"), required=True)
        vpath = _child(ipath, "values")
        values = _sequence(item.get("values"), vpath)
        for j, v in enumerate(values):
            if not isinstance(v, str):
                raise _wrong_type(_index(vpath, j), v, "a string")
            _check(_label_value_errors(v), _index(vpath, j), v)
        if op in ("In", "NotIn"):
            if not values:
                raise _required(vpath, "must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise _forbidden(vpath, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        else:
            raise _invalid(_child(ipath, "operator"), op, "not a valid selector operator")
        exprs.append(model.LabelSelectorRequirement(key=key, operator=op, values=tuple(values)))
    return model.LabelSelector(match_labels=match_labels, match_expressions=exprs)


def _taints(value: Any, path: str) -> list[model.Taint]:
    """ResourceFlavor nodeTaints: CRD schema (≤ 8, effect enum) + webhook validateNodeTaints."""
    items = _sequence(value, path)
    if len(items) > MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS:
        raise _too_many(path, len(items), MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS)
    out: list[model.Taint] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        ipath = _index(path, i)
        item = _mapping(item, ipath, required=True)
        _known_fields(item, ("key", "value", "effect", "timeAdded"), ipath)
        key = _string(item.get("key"), _child(ipath, "key"), required=True)
        _check(_qualified_name_errors(key), _child(ipath, "key"), key)
        val = _string(item.get("value"), _child(ipath, "value"))
        _check(_label_value_errors(val), _child(ipath, "value"), val)
        effect = _string(item.get("effect"), _child(ipath, "effect"), required=True)
        if effect not in _TAINT_EFFECTS:
            raise _invalid(
                _child(ipath, "effect"),
                effect,
                "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
            )
        if (key, effect) in seen:
            raise _duplicate(ipath, {"key": key, "effect": effect}, "taints must be unique by key and effect pair")
        seen.add((key, effect))
        out.append(model.Taint(key=key, value=val, effect=effect))
    return out


def _tolerations(value: Any, path: str, *, max_items: Optional[int] = None) -> list[model.Toleration]:
    """Kubernetes validateTolerations (pkg/apis/core/validation) = ResourceFlavor's CEL rules."""
    items = _sequence(value, path)
    if max_items is not None and len(items) > max_items:
        raise _too_many(path, len(items), max_items)
    out: list[model.Toleration] = []
    for i, item in enumerate(items):
        ipath = _index(path, i)
        item = _mapping(item, ipath, required=True)
        _known_fields(item, ("key", "operator", "value", "effect", "tolerationSeconds"), ipath)
        key = _string(item.get("key"), _child(ipath, "key"))
        if key:
            _check(_qualified_name_errors(key), _child(ipath, "key"), key)
        op = _string(item.get("operator"), _child(ipath, "operator"), default="Equal") or "Equal"
        val = _string(item.get("value"), _child(ipath, "value"))
        effect = _string(item.get("effect"), _child(ipath, "effect"))
        seconds = _integer(item.get("tolerationSeconds"), _child(ipath, "tolerationSeconds"),
                           minimum=None, maximum=None)
        if not key and op != "Exists":
            raise _invalid(
                _child(ipath, "operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            )
        if seconds is not None and effect != "NoExecute":
            raise _invalid(_child(ipath, "effect"), effect, "effect must be 'NoExecute' when `tolerationSeconds` is set")
        if op == "Equal":
            _check(_label_value_errors(val), _child(ipath, "value"), val)
        elif op == "Exists":
            if val:
                raise _invalid(_child(ipath, "value"), val, "value must be empty when `operator` is 'Exists'")
        else:
            raise _unsupported(_child(ipath, "operator"), op, _TOLERATION_OPERATORS)
        if effect and effect not in _TAINT_EFFECTS:
            raise _unsupported(_child(ipath, "effect"), effect, _TAINT_EFFECTS)
        out.append(model.Toleration(key=key, operator=op, value=val, effect=effect))
    return out


_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _workload_tolerations(value: Any, path: str) -> list[model.Toleration]:
    """A Workload's PodSet template tolerations, as the CRD schema types them (key, operator,
    value and effect strings, tolerationSeconds an integer) and no more: neither the schema nor
    Kueue's webhook restricts them. An operator other than ``Equal`` / ``Exists`` is kept and
    tolerates nothing (``ToleratesTaint``, ``model.Toleration.tolerates``); an empty one means
    ``Equal``."""
    out: list[model.Toleration] = []
    for i, item in enumerate(_sequence(value, path)):
        ipath = _index(path, i)
        item = _mapping(item, ipath, required=True)
        _known_fields(item, ("key", "operator", "value", "effect", "tolerationSeconds"), ipath)
        key = _string(item.get("key"), _child(ipath, "key"))
        op = _string(item.get("operator"), _child(ipath, "operator")) or "Equal"
        val = _string(item.get("value"), _child(ipath, "value"))
        effect = _string(item.get("effect"), _child(ipath, "effect"))
        _integer(item.get("tolerationSeconds"), _child(ipath, "tolerationSeconds"), minimum=INT64_MIN, maximum=INT64_MAX)
        out.append(model.Toleration(key=key, operator=op, value=val, effect=effect))
    return out


_KUEUE_CANNOT_PARSE = "Kueue accepts it in a Workload, but its flavor assignment cannot parse it"


def _kueue_requirement(key: str, op: str, values: tuple[str, ...], path: str) -> None:
    """A Workload's node-affinity expression as Kueue's flavor assigner parses it (nodeaffinity's
    ``nodeSelectorRequirementsAsSelector`` → ``labels.NewRequirement``), its first error raised
    with the parser's words (see ``pods``: the engine refuses what Kueue cannot parse)."""
    if op not in _NODE_SELECTOR_OPERATORS:
        raise ManifestError(f"Unsupported value: {json.dumps(op)}: {_KUEUE_CANNOT_PARSE}", _child(path, "operator"))
    errors = _qualified_name_errors(key)
    if errors:
        raise _invalid(_child(path, "key"), key, "; ".join(errors) + f" ({_KUEUE_CANNOT_PARSE})")
    vpath = _child(path, "values")
    if op in ("In", "NotIn") and not values:
        raise _invalid(vpath, [], f"for 'in', 'notin' operators, values set can't be empty ({_KUEUE_CANNOT_PARSE})")
    if op in ("Exists", "DoesNotExist") and values:
        raise _invalid(vpath, list(values),
                       f"values set must be empty for exists and does not exist ({_KUEUE_CANNOT_PARSE})")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise _invalid(vpath, list(values),
                           f"for 'Gt', 'Lt' operators, exactly one value is required ({_KUEUE_CANNOT_PARSE})")
        if not re.fullmatch(r"[+-]?[0-9]+", values[0]) or not INT64_MIN <= int(values[0]) <= INT64_MAX:
            raise _invalid(_index(vpath, 0), values[0],
                           f"for 'Gt', 'Lt' operators, the value must be an integer ({_KUEUE_CANNOT_PARSE})")
    for j, v in enumerate(values):
        errors = _label_value_errors(v)
        if errors:
            raise _invalid(_index(vpath, j), v, "; ".join(errors) + f" ({_KUEUE_CANNOT_PARSE})")


def _required_node_affinity(value: Any, path: str, *, pod_validation: bool = True) -> list:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` as
    lists of requirements (terms ORed, expressions ANDed), validated as the API server does
    (``ValidateNodeSelectorRequirement``), or, without ``pod_validation`` (a Workload's PodSet),
    as the CRD schema does (``nodeSelectorTerms`` required, possibly empty: no constraint, as
    Kueue's ``flavorSelector`` reads it; each expression's ``key`` and ``operator`` required)
    and as Kueue's flavor assigner parses it (``_kueue_requirement``). Preferred affinity and pod
    (anti-)affinity do not restrict flavors and are ignored."""
    affinity = _mapping(value, path)
    na_path = _child(path, "nodeAffinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), na_path)
    req_path = _child(na_path, "requiredDuringSchedulingIgnoredDuringExecution")
    if node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is None:
        return []
    required = _mapping(node_affinity["requiredDuringSchedulingIgnoredDuringExecution"], req_path)
    terms_path = _child(req_path, "nodeSelectorTerms")
    terms = _sequence(required.get("nodeSelectorTerms"), terms_path, required=True)
    if not terms and pod_validation:
        raise _required(terms_path, "must have at least one node selector term")
    out = []
    for i, term in enumerate(terms):
        tpath = _index(terms_path, i)
        term = _mapping(term, tpath, required=True)
        exprs = []
        epath = _child(tpath, "matchExpressions")
        for j, e in enumerate(_sequence(term.get("matchExpressions"), epath)):
            ep = _index(epath, j)
            e = _mapping(e, ep, required=True)
            if not pod_validation:
                for name in ("key", "operator"):
                    if e.get(name) is None:
                        raise _required(_child(ep, name))
                key, op = _string(e["key"], _child(ep, "key")), _string(e["operator"], _child(ep, "operator"))
                vpath = _child(ep, "values")
                values = _sequence(e.get("values"), vpath)
                for k, v in enumerate(values):
                    if not isinstance(v, str):
                        raise _wrong_type(_index(vpath, k), v, "a string")
                _kueue_requirement(key, op, tuple(values), ep)
                exprs.append(model.LabelSelectorRequirement(key, op, tuple(values)))
                continue
            key = _string(e.get("key"), _child(ep, "key"), required=True)
            _check(_qualified_name_errors(key), _child(ep, "key"), key)
            op = _string(e.get("operator"), _child(ep, "operator"), required=True)
            if op not in _NODE_SELECTOR_OPERATORS:
                raise _unsupported(_child(ep, "operator"), op, _NODE_SELECTOR_OPERATORS)
            values = tuple(str(v) for v in _sequence(e.get("values"), _child(ep, "values")))
            if op in ("In", "NotIn") and not values:
                raise _required(_child(ep, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
            if op in ("Exists", "DoesNotExist") and values:
                raise _forbidden(_child(ep, "values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            if op in ("Gt", "Lt") and len(values) != 1:
                raise _required(_child(ep, "values"), "must be specified single value when `operator` is 'Lt' or 'Gt'")
            exprs.append(model.LabelSelectorRequirement(key, op, values))
        out.append(exprs)
    return out
