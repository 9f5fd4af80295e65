"""Kubernetes / Kueue manifests → the engine's model, validated as Kueue and Kubernetes would.

The caller reads files; this module gets text (:func:`load_text`) or already-parsed documents
(:func:`load_documents`, :func:`parse_workload_document`). It does no I/O and reads no clock.

Accepted kinds
--------------
====================================  ===========================================================
``v1`` Namespace                      ``ClusterConfig.namespaces`` (its labels feed namespaceSelector)
``v1`` List                           each of ``items`` (error paths start ``items[i].``)
``scheduling.k8s.io/v1`` PriorityClass ``ClusterConfig.priority_classes``
``kueue.x-k8s.io/v1beta1|v1beta2``    ResourceFlavor, ClusterQueue, Cohort (also ``v1alpha1``),
                                      LocalQueue, WorkloadPriorityClass → ``ClusterConfig``;
                                      Workload → ``Manifests.workloads`` (``status.admission``
                                      becomes ``Workload.admission``: it starts admitted)
``config.kueue.x-k8s.io/v1beta1|2``   Configuration: ``fairSharing`` and ``resources.transformations`` are read
``batch/v1`` Job                      a Workload with one PodSet ``main``
``batch.volcano.sh/v1alpha1`` Job     a Workload with one PodSet per task
``kubeflow.org/v1`` PyTorchJob, TFJob a Workload with one PodSet per replica type (lower-cased)
====================================  ===========================================================

A job (batch/v1, Volcano, Kubeflow) without the ``kueue.x-k8s.io/queue-name`` label (or the
deprecated annotation of that name) is not managed by Kueue (its default
``manageJobsWithoutQueueName: false``) and is listed in ``Manifests.ignored``, as is every other
kind (``v1/ResourceQuota ml-team/gpu-quota``, ``v1/LimitRange ...``, Kueue's AdmissionCheck ...).

Workloads made from jobs are named after the job (Kueue itself would name a Job's Workload
``job-<name>-<hash>``); their ``creation_time`` is ``metadata.creationTimestamp`` (RFC 3339, as
seconds since the epoch) when present, else the document index, so that documents keep their
order in FIFO queues.

Validation
----------
The rules are Kueue's CRD schemas (kubebuilder markers and CEL ``XValidation`` rules in
``apis/kueue/v1beta1/*_types.go``), Kueue's admission webhooks (``pkg/webhooks/*.go``,
``pkg/controller/jobframework/validation.go``, ``pkg/config/validation.go``) and the Kubernetes
API server's own (``k8s.io/apimachinery/pkg/util/validation``, ``pkg/apis/core/validation``,
``pkg/apis/batch/validation``, ``pkg/apis/scheduling/validation``), with their messages. Fields
unknown to the schema are rejected as ``kubectl``'s strict field validation does, for Kueue kinds,
object metadata, a Job's ``spec`` and a container's ``resources``; a key repeated in a YAML
mapping is rejected too. The whole input is rejected on the first error: :class:`ManifestError`
carries the source, the 0-based document index (documents that are empty, e.g. a comment block
before the first ``---``, are skipped and not counted), the kind and name, the field path and the
reason.

Cross-references Kueue accepts and only marks inactive (a LocalQueue naming a missing
ClusterQueue, a ClusterQueue naming a missing ResourceFlavor or Cohort) are kept as they are.
A cohort named only by ``ClusterQueue.spec.cohort`` gets no ``Cohort`` entry (it is implicit).
Priority classes may come after the jobs that use them: they are resolved once every document is
read. Fields Kueue has and the engine does not model (admission checks, topology, LocalQueue
stopPolicy ...) are accepted, validated where cheap, and reported in ``Manifests.warnings``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, Optional

import yaml

from . import model
from .errors import ManifestError
from .quantity import parse_quantity, resource_value

__all__ = [
    "Manifests",
    "load_text",
    "load_documents",
    "parse_workload_document",
    "parse_yaml_documents",
    "parse_duration",
    "QUEUE_NAME_LABEL",
    "PRIORITY_CLASS_LABEL",
    "MAX_EXEC_TIME_LABEL",
    "JOB_MIN_PARALLELISM_ANNOTATION",
    "DEFAULT_NAMESPACE",
    "MAX_POD_SETS",
]

# Kueue's labels and annotations (pkg/controller/constants/constants.go).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
DEFAULT_NAMESPACE = "default"

# Limits from the CRD schemas (apis/kueue/v1beta1/*_types.go).
MAX_POD_SETS = 8
MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES = 64
MAX_TOTAL_FLAVORS = 256  # webhook: validateTotalFlavors
MAX_TOTAL_COVERED_RESOURCES = 256  # webhook: validateTotalCoveredResources
MAX_FLAVOR_RESOURCE_COMBINATIONS = 512  # webhook: validateFlavorResourceCombinations
MAX_FLAVOR_LABELS_TAINTS_TOLERATIONS = 8
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# scheduling.k8s.io: HighestUserDefinablePriority and the two built-in system classes.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}

KUEUE_GROUP = "kueue.x-k8s.io"
WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
PC_SOURCE = "scheduling.k8s.io/priorityclass"


@dataclass
class Manifests:
    """What a manifest stream holds.

    ``config``: the queueing objects (flavors, queues, cohorts, priority classes, namespaces,
    fair sharing). ``workloads``: one ``model.Workload`` per managed job or Workload object, in
    document order. ``ignored``: ``"<apiVersion>/<kind> [<namespace>/]<name>"`` for each document
    that is not used (e.g. ``"v1/ResourceQuota ml-team/gpu-quota"``, or
    ``"batch/v1/Job default/x"`` for a Job without a queue-name label). ``warnings``: fields that
    Kueue has but the engine does not act on, one line each with its location.
    """

    config: model.ClusterConfig
    workloads: list[model.Workload]
    ignored: list[str]
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Field errors, worded as Kubernetes' field.Error types (k8s.io/apimachinery/.../field/errors.go).


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Fraction):
        return str(value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):  # pragma: no cover - defensive
        return repr(value)


def _invalid(path: str, value: Any, detail: str) -> ManifestError:
    return ManifestError(f"Invalid value: {_show(value)}: {detail}", path)


def _required(path: str, detail: str = "") -> ManifestError:
    return ManifestError("Required value" + (f": {detail}" if detail else ""), path)


def _unsupported(path: str, value: Any, allowed: Iterable[str]) -> ManifestError:
    options = ", ".join(json.dumps(a) for a in allowed)
    return ManifestError(f"Unsupported value: {_show(value)}: supported values: {options}", path)


def _duplicate(path: str, value: Any, detail: str = "") -> ManifestError:
    return ManifestError(f"Duplicate value: {_show(value)}" + (f": {detail}" if detail else ""), path)


def _too_many(path: str, count: int, limit: int) -> ManifestError:
    return ManifestError(f"Too many: {count}: must have at most {limit} items", path)


def _forbidden(path: str, detail: str) -> ManifestError:
    return ManifestError(f"Forbidden: {detail}", path)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _key(path: str, key: str) -> str:
    return f"{path}[{key}]"


# ---------------------------------------------------------------------------------------------
# Types. JSON (and so the API server) does not convert between strings, numbers and booleans.


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _wrong_type(path: str, value: Any, expected: str) -> ManifestError:
    return ManifestError(f"Invalid value: {_type_name(value)}: must be {expected}", path)


def _mapping(value: Any, path: str, *, required: bool = False) -> dict:
    if value is None:
        if required:
            raise _required(path)
        return {}
    if not isinstance(value, dict):
        raise _wrong_type(path, value, "an object")
    return value


def _sequence(value: Any, path: str, *, required: bool = False) -> list:
    if value is None:
        if required:
            raise _required(path)
        return []
    if not isinstance(value, list):
        raise _wrong_type(path, value, "an array")
    return value


def _string(value: Any, path: str, *, required: bool = False, default: str = "") -> str:
    if value is None:
        if required:
            raise _required(path)
        return default
    if not isinstance(value, str):
        raise _wrong_type(path, value, "a string")
    if required and value == "":
        raise _required(path)
    return value


def _integer(
    value: Any,
    path: str,
    *,
    required: bool = False,
    default: Optional[int] = None,
    minimum: Optional[int] = None,
    maximum: Optional[int] = INT32_MAX,
) -> Optional[int]:
    if value is None:
        if required:
            raise _required(path)
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(path, value, "an integer")
    if minimum is not None and value < minimum:
        raise _invalid(path, value, f"must be greater than or equal to {minimum}")
    if maximum is not None and value > maximum:
        raise _invalid(path, value, f"must be less than or equal to {maximum}")
    return value


def _boolean(value: Any, path: str, *, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(path, value, "a boolean")
    return value


def _known_fields(obj: dict, allowed: Iterable[str], path: str) -> None:
    """kubectl's strict field validation: ``unknown field "spec.foo"``."""
    allowed_set = set(allowed)
    for key in obj:
        if key not in allowed_set:
            where = _child(path, str(key))
            raise ManifestError(f'unknown field "{where}"', where)


def _enum(value: Any, path: str, allowed: Iterable[str], default: str) -> str:
    allowed = tuple(allowed)
    text = _string(value, path, default=default)
    if text not in allowed:
        raise _unsupported(path, text, allowed)
    return text


# ---------------------------------------------------------------------------------------------
# Names and labels (k8s.io/apimachinery/pkg/util/validation/validation.go), with its messages.

_DNS1123_LABEL_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + r")*"
_QUALIFIED_NAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = r"(" + _QUALIFIED_NAME_FMT + r")?"

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    f"for validation is '{_DNS1123_LABEL_FMT}')"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_DNS1123_SUBDOMAIN_FMT}')"
)
_QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{_QUALIFIED_NAME_FMT}')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  "
    f"or '12345', regex used for validation is '{_LABEL_VALUE_FMT}')"
)


def dns1123_label_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS-1123 label (Kubernetes ``IsDNS1123Label``); empty if it is."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not re.fullmatch(_DNS1123_LABEL_FMT, value):
        errs.append(_DNS1123_LABEL_MSG)
    return errs


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value):
        errs.append(_DNS1123_SUBDOMAIN_MSG)
    return errs


def _qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = _dns1123_subdomain_errors(prefix)
        if errs:
            return ["prefix part " + e for e in errs]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    errs = []
    if len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not re.fullmatch(_QUALIFIED_NAME_FMT, name):
        errs.append(_QUALIFIED_NAME_MSG)
    return errs


def _label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_LABEL_VALUE_MSG)
    return errs


def _check(errors: list[str], path: str, value: Any) -> None:
    if errors:
        raise _invalid(path, value, "; ".join(errors))


def _dns_subdomain(value: Any, path: str, *, required: bool = True) -> str:
    text = _string(value, path, required=required)
    if text:
        _check(_dns1123_subdomain_errors(text), path, text)
    return text


def _dns_label(value: Any, path: str, *, required: bool = True) -> str:
    text = _string(value, path, required=required)
    if text:
        _check(dns1123_label_errors(text), path, text)
    return text


def _labels(value: Any, path: str, *, max_items: Optional[int] = None) -> dict[str, str]:
    """metav1validation.ValidateLabels: qualified-name keys, label values."""
    raw = _mapping(value, path)
    if max_items is not None and len(raw) > max_items:
        raise _too_many(path, len(raw), max_items)
    out: dict[str, str] = {}
    for key, val in raw.items():
        if not isinstance(key, str):
            raise _wrong_type(path, key, "an object with string keys")
        _check(_qualified_name_errors(key), path, key)
        kpath = _key(path, key)
        if not isinstance(val, str):
            raise _wrong_type(kpath, val, "a string")
        _check(_label_value_errors(val), kpath, val)
        out[key] = val
    return out


def _annotations(value: Any, path: str) -> dict[str, str]:
    raw = _mapping(value, path)
    out: dict[str, str] = {}
    for key, val in raw.items():
        if not isinstance(key, str):
            raise _wrong_type(path, key, "an object with string keys")
        _check(_qualified_name_errors(key.lower()), path, key)
        kpath = _key(path, key)
        if not isinstance(val, str):
            raise _wrong_type(kpath, val, "a string")
        out[key] = val
    return out


# ---------------------------------------------------------------------------------------------
# Quantities and resource names.


def _quantity(value: Any, path: str, *, required: bool = False) -> Optional[Fraction]:
    if value is None:
        if required:
            raise _required(path)
        return None
    return parse_quantity(value, path)


def _non_negative(q: Fraction, path: str, original: Any) -> None:
    if q < 0:
        raise _invalid(path, original, "must be greater than or equal to 0")


def _resource_name(name: Any, path: str) -> str:
    text = _string(name, path, required=True)
    _check(_qualified_name_errors(text), path, text)
    return text


def _is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_extended_resource(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a non-native, fully qualified name (``nvidia.com/gpu``)."""
    if _is_native_resource(name) or name.startswith("requests."):
        return False
    return not _qualified_name_errors("requests." + name)


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


_STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _container_resource_name(name: Any, path: str) -> str:
    """validateContainerResourceName (pkg/apis/core/validation/validation.go)."""
    text = _resource_name(name, path)
    if "/" not in text:
        if text not in _STANDARD_CONTAINER_RESOURCES and not _is_hugepages(text):
            raise _invalid(path, text, "must be a standard resource for containers")
    elif _is_native_resource(text):
        raise _invalid(path, text, "must be a standard resource type or fully qualified")
    return text


def _quantity_map(value: Any, path: str) -> dict[str, tuple[Fraction, Any]]:
    raw = _mapping(value, path)
    out: dict[str, tuple[Fraction, Any]] = {}
    for name, q in raw.items():
        if not isinstance(name, str):
            raise _wrong_type(path, name, "an object with string keys")
        qpath = _key(path, name)
        out[name] = (parse_quantity(q, qpath), q)
    return out


# ---------------------------------------------------------------------------------------------
# Selectors, taints and tolerations.

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


# ---------------------------------------------------------------------------------------------
# Pods: a pod template's per-pod requests, as Kubernetes (and so Kueue) computes them.


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
    canonical units, validated as ``ValidateResourceRequirements`` does. Without
    ``pod_validation`` (a Kueue Workload's PodSet template, which the API server does not validate
    as a Pod: Kueue's own tests give extended resources as requests only) the rule that extended
    resources need a limit equal to the request is not applied."""
    c = _mapping(c, path, required=True)
    name = _dns_label(c.get("name"), _child(path, "name"))
    if name in seen_names:
        raise _duplicate(_child(path, "name"), name)
    seen_names.add(name)
    rpath = _child(path, "resources")
    res = _mapping(c.get("resources"), rpath)
    _known_fields(res, ("requests", "limits", "claims"), rpath)
    req_path, lim_path = _child(rpath, "requests"), _child(rpath, "limits")
    requests = _quantity_map(res.get("requests"), req_path)
    limits = _quantity_map(res.get("limits"), lim_path)
    for rname, (q, raw) in limits.items():
        p = _key(lim_path, rname)
        _container_resource_name(rname, p)
        _non_negative(q, p, raw)
        if _is_extended_resource(rname) and q.denominator != 1:
            raise _invalid(p, raw, "must be an integer")
    effective = dict(limits)
    effective.update(requests)
    for rname, (q, raw) in requests.items():
        p = _key(req_path, rname)
        _container_resource_name(rname, p)  # also rejects "pods", which Kueue reserves
        _non_negative(q, p, raw)
        extended = _is_extended_resource(rname)
        if extended and q.denominator != 1:
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


_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _required_node_affinity(value: Any, path: str) -> list:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` as
    lists of requirements (terms ORed, expressions ANDed), validated as the API server does
    (``ValidateNodeSelectorRequirement``). Preferred affinity and pod (anti-)affinity do not
    restrict flavors and are ignored."""
    affinity = _mapping(value, path)
    na_path = _child(path, "nodeAffinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), na_path)
    req_path = _child(na_path, "requiredDuringSchedulingIgnoredDuringExecution")
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path)
    if not required:
        return []
    terms_path = _child(req_path, "nodeSelectorTerms")
    terms = _sequence(required.get("nodeSelectorTerms"), terms_path, required=True)
    if not terms:
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
            key = _string(e.get("key"), _child(ep, "key"), required=True)
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


# ---------------------------------------------------------------------------------------------
# YAML: safe loading, with a repeated key in a mapping rejected (as the API server's strict
# decoding does) instead of silently keeping the last one.


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML API
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen[key] = True
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, source: str) -> list:
    if not isinstance(text, str):
        raise TypeError(f"load_text: text must be str, got {type(text).__name__}")
    docs: list = []
    try:
        loader = _StrictLoader(text)  # the reader refuses non-printable characters up front
    except yaml.YAMLError as exc:
        raise ManifestError(f"invalid YAML: {exc}", source=source, index=0) from None
    try:
        while True:
            try:
                if not loader.check_data():
                    break
                doc = loader.get_data()
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
                problem = getattr(exc, "problem", None) or str(exc)
                raise ManifestError(f"invalid YAML: {problem}{where}", source=source, index=len(docs)) from None
            if doc is not None:
                docs.append(doc)
    finally:
        loader.dispose()
    return docs


# ---------------------------------------------------------------------------------------------
# Time.


def _timestamp(value: Any, path: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = _dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise _invalid(path, value, "must be an RFC 3339 date-time such as 2024-05-01T09:30:00Z") from None
    else:
        raise _wrong_type(path, value, "an RFC 3339 date-time string")
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return stamp.timestamp()


# ---------------------------------------------------------------------------------------------
# The loader.

_KUEUE_VERSIONS = ("v1beta1", "v1beta2")
_COHORT_VERSIONS = ("v1alpha1", "v1beta1", "v1beta2")
_CONFIG_VERSIONS = ("v1beta1", "v1beta2")

_JOB_SPEC_FIELDS = (
    "parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "successPolicy",
    "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "selector", "manualSelector",
    "template", "ttlSecondsAfterFinished", "completionMode", "suspend", "podReplacementPolicy",
    "managedBy",
)
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
# Kueue's PodSet order for Kubeflow jobs (pkg/controller/jobs/kubeflow/...: OrderedReplicaTypes).
_KUBEFLOW = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker"), "pytorch"),
    "TFJob": ("tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator"), "tensorflow"),
}


@dataclass
class _PriorityRef:
    """What a job asks for; resolved against the priority classes once all documents are read."""

    label: str = ""  # kueue.x-k8s.io/priority-class (a WorkloadPriorityClass, else PriorityClass)
    pod_class: str = ""  # a pod PriorityClass name
    pod_class_path: str = ""


@dataclass
class _Draft:
    workload: model.Workload
    index: int
    kind: str
    name: str
    priority: Optional[_PriorityRef]  # None: fixed (a Workload object)
    source: str = ""  # the file it came from, when several are loaded together


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, _, version = api_version.rpartition("/")
        return group, version
    return "", api_version


def _ignored_entry(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{api_version}/{kind} {namespace + '/' if namespace else ''}{name}"


class _Builder:
    def __init__(self, source: str, priority_config: Optional[model.ClusterConfig] = None):
        self.source = source
        self.config = model.ClusterConfig()
        self.priority_config = priority_config  # None: resolve against self.config
        self.drafts: list[_Draft] = []
        self.ignored: list[str] = []
        self.warnings: list[str] = []
        self._seen: dict[tuple[str, str, str, str], int] = {}
        self._workload_keys: dict[str, tuple[int, str]] = {}
        self._configuration_index: Optional[int] = None
        self._index = 0
        self._kind = ""
        self._name = ""

    # -- bookkeeping -------------------------------------------------------------------------

    def warn(self, path: str, message: str) -> None:
        where = f"{self.source}: document {self._index}: {self._kind}/{self._name}"
        self.warnings.append(f"{where}: {path}: {message}")

    def _register(self, group: str, kind: str, namespace: str, name: str, path: str = "metadata.name") -> None:
        key = (group, kind, namespace, name)
        if key in self._seen:
            what = f"{namespace}/{name}" if namespace else name
            raise _duplicate(path, name, f"{kind} {what} is already defined in document {self._seen[key]}")
        self._seen[key] = self._index

    # -- documents ---------------------------------------------------------------------------

    def add(self, doc: Any, index: int) -> None:
        self._index = index
        self._kind, self._name = "", ""
        if isinstance(doc, dict):
            kind = doc.get("kind")
            self._kind = kind if isinstance(kind, str) else ""
            meta = doc.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                self._name = meta["name"]
        try:
            self._add(doc)
        except ManifestError as exc:
            raise exc.located(source=self.source, index=index, kind=self._kind or None,
                              name=self._name or None) from None

    def _add(self, doc: Any, *, workload_only: bool = False) -> Optional[_Draft]:
        if not isinstance(doc, dict):
            raise ManifestError(
                f"a document must be a Kubernetes object (a mapping with apiVersion, kind and "
                f"metadata), got {_type_name(doc)}"
            )
        api_version = _string(doc.get("apiVersion"), "apiVersion", required=True)
        kind = _string(doc.get("kind"), "kind", required=True)
        group, version = _split_api_version(api_version)

        if group == "config.kueue.x-k8s.io" and kind == "Configuration":
            self._require_version(version, _CONFIG_VERSIONS, group)
            if workload_only:
                raise self._not_a_workload(kind)
            self._configuration(doc, version)
            return None
        if group == "" and kind == "List":
            if workload_only:
                raise self._not_a_workload(kind)
            items = _sequence(doc.get("items"), "items")
            for i, item in enumerate(items):
                item_kind = item.get("kind") if isinstance(item, dict) else None
                item_meta = item.get("metadata") if isinstance(item, dict) else None
                item_name = item_meta.get("name") if isinstance(item_meta, dict) else None
                try:
                    self._add(item)
                except ManifestError as exc:
                    exc.field = _child(_index("items", i), exc.field) if exc.field else _index("items", i)
                    exc.located(kind=item_kind if isinstance(item_kind, str) else None,
                                name=item_name if isinstance(item_name, str) else None)
                    raise
            return None

        meta_path = "metadata"
        meta = _mapping(doc.get("metadata"), meta_path, required=True)
        _known_fields(meta, _OBJECT_META_FIELDS, meta_path)
        name = _string(meta.get("name"), "metadata.name", required=True)
        namespace = _string(meta.get("namespace"), "metadata.namespace")

        handler = self._handler(group, version, kind)
        if handler is None:
            self.ignored.append(_ignored_entry(api_version, kind, namespace, name))
            return None
        config_kind, func = handler
        if workload_only and config_kind:
            raise self._not_a_workload(kind)
        return func(doc, group, version, kind, name)

    def _not_a_workload(self, kind: str) -> ManifestError:
        return ManifestError(
            f"{kind} is not a workload: submit a batch/v1 Job, a kueue.x-k8s.io Workload, a "
            "batch.volcano.sh Job or a kubeflow.org PyTorchJob/TFJob",
            "kind",
        )

    def _require_version(self, version: str, allowed: tuple[str, ...], group: str) -> None:
        if version not in allowed:
            raise _unsupported("apiVersion", f"{group}/{version}" if group else version,
                               [f"{group}/{v}" if group else v for v in allowed])

    def _handler(self, group: str, version: str, kind: str) -> Optional[tuple[bool, Callable]]:
        """(is a configuration kind, handler) for the kinds we read; None for ignored kinds."""
        if group == "" and kind == "Namespace":
            self._require_version(version, ("v1",), group)
            return True, self._namespace
        if group == "scheduling.k8s.io" and kind == "PriorityClass":
            self._require_version(version, ("v1",), group)
            return True, self._priority_class
        if group == KUEUE_GROUP:
            table = {
                "ResourceFlavor": (True, self._resource_flavor),
                "ClusterQueue": (True, self._cluster_queue),
                "Cohort": (True, self._cohort),
                "LocalQueue": (True, self._local_queue),
                "WorkloadPriorityClass": (True, self._workload_priority_class),
                "Workload": (False, self._workload),
            }
            if kind in table:
                self._require_version(version, _COHORT_VERSIONS if kind == "Cohort" else _KUEUE_VERSIONS, group)
                return table[kind]
            return None
        if group == "batch" and kind == "Job":
            self._require_version(version, ("v1",), group)
            return False, self._batch_job
        if group == "batch.volcano.sh" and kind == "Job":
            self._require_version(version, ("v1alpha1",), group)
            return False, self._volcano_job
        if group == "kubeflow.org" and kind in _KUBEFLOW:
            self._require_version(version, ("v1",), group)
            return False, self._kubeflow_job
        return None

    # -- shared pieces -----------------------------------------------------------------------

    def _cluster_scoped_meta(self, doc: dict, *, label_name: bool = False) -> tuple[str, dict, dict]:
        meta = doc["metadata"]
        name = meta["name"]
        if label_name:
            _check(dns1123_label_errors(name), "metadata.name", name)
        else:
            _check(_dns1123_subdomain_errors(name), "metadata.name", name)
        labels = _labels(meta.get("labels"), "metadata.labels")
        annotations = _annotations(meta.get("annotations"), "metadata.annotations")
        _timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        return name, labels, annotations

    def _namespaced_meta(self, doc: dict, *, require_namespace: bool = False) -> tuple[str, str, dict, dict]:
        meta = doc["metadata"]
        name = meta["name"]
        _check(_dns1123_subdomain_errors(name), "metadata.name", name)
        namespace = _string(meta.get("namespace"), "metadata.namespace")
        if not namespace:
            if require_namespace:
                raise _required("metadata.namespace", f"a {doc['kind']} is namespaced: name its namespace")
            namespace = DEFAULT_NAMESPACE
        _check(dns1123_label_errors(namespace), "metadata.namespace", namespace)
        labels = _labels(meta.get("labels"), "metadata.labels")
        annotations = _annotations(meta.get("annotations"), "metadata.annotations")
        return name, namespace, labels, annotations

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

    # -- core / scheduling -------------------------------------------------------------------

    def _namespace(self, doc, group, version, kind, name):
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, labels, _ann = self._cluster_scoped_meta(doc, label_name=True)
        self._register(group, kind, "", name)
        self.config.namespaces[name] = model.Namespace(name=name, labels=labels)

    def _priority_class(self, doc, group, version, kind, name):
        """scheduling.k8s.io/v1 PriorityClass: ValidatePriorityClass and the Priority admission
        plugin (one globalDefault at most)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "value", "globalDefault",
                            "description", "preemptionPolicy"), "")
        name, _labels_, _ann = self._cluster_scoped_meta(doc)
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
        self._register(group, kind, "", name)
        if global_default:
            existing = self.config.default_priority_class()
            if existing is not None:
                raise _forbidden(
                    "globalDefault",
                    f"PriorityClass {existing.name} is already marked as default. Only one default can exist",
                )
        self.config.priority_classes[name] = model.PriorityClass(
            name=name, value=value, kind="PriorityClass", global_default=global_default,
            preemption_policy=policy, description=description,
        )

    # -- Kueue configuration kinds -----------------------------------------------------------

    def _workload_priority_class(self, doc, group, version, kind, name):
        _known_fields(doc, ("apiVersion", "kind", "metadata", "value", "description"), "")
        name, _labels_, _ann = self._cluster_scoped_meta(doc)
        value = _integer(doc.get("value"), "value", required=True, minimum=INT32_MIN)
        description = _string(doc.get("description"), "description")
        self._register(group, kind, "", name)
        self.config.workload_priority_classes[name] = model.PriorityClass(
            name=name, value=value, kind="WorkloadPriorityClass", description=description,
        )

    def _resource_flavor(self, doc, group, version, kind, name):
        """ResourceFlavor: resourceflavor_types.go + pkg/webhooks/resourceflavor_webhook.go."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec"), "")
        name, _labels_, _ann = self._cluster_scoped_meta(doc)
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
            self.warn("spec.topologyName", f"topology {topology!r} ignored: topology-aware scheduling is not supported")
        self._register(group, kind, "", name)
        self.config.resource_flavors[name] = model.ResourceFlavor(
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

    def _cluster_queue(self, doc, group, version, kind, name):
        """ClusterQueue: clusterqueue_types.go + pkg/webhooks/clusterqueue_webhook.go."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, _labels_, _ann = self._cluster_scoped_meta(doc)
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
                self.warn(f"spec.{key}", "ignored: admission checks are not supported; workloads are "
                                         "admitted on quota alone")
        for key in ("admissionScope", "concurrentAdmissionPolicy"):
            if spec.get(key) is not None:
                _mapping(spec[key], f"spec.{key}")
                self.warn(f"spec.{key}", "ignored: not supported")
        if spec.get("excludeResourcePrefixes"):
            for j, prefix in enumerate(_sequence(spec["excludeResourcePrefixes"], "spec.excludeResourcePrefixes")):
                _string(prefix, _index("spec.excludeResourcePrefixes", j), required=True)
            self.warn("spec.excludeResourcePrefixes", "ignored: every requested resource is accounted")
        self._register(group, kind, "", name)
        self.config.cluster_queues[name] = model.ClusterQueue(
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
            self.warn(_child(path, "preference"), "ignored: flavors are tried in order")
        return model.FlavorFungibility(
            when_can_borrow=model.BORROW if borrow == "MayStopSearch" else borrow,
            when_can_preempt=model.PREEMPT if preempt == "MayStopSearch" else preempt,
        )

    def _cohort(self, doc, group, version, kind, name):
        """Cohort (cohort_types.go; pkg/webhooks/cohort_webhook.go). ``spec.parentName`` (v1beta2
        and later v1beta1) or ``spec.parent`` (v1alpha1 and early v1beta1)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, _labels_, _ann = self._cluster_scoped_meta(doc)
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
        self._register(group, kind, "", name)
        self.config.cohorts[name] = model.Cohort(name=name, parent=parent, resource_groups=groups,
                                                 fair_sharing_weight=weight)

    def _local_queue(self, doc, group, version, kind, name):
        """LocalQueue (localqueue_types.go). Unlike ``kubectl`` (which would use the current
        context's namespace) a manifest here must name the namespace."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, namespace, _labels_, _ann = self._namespaced_meta(doc, require_namespace=True)
        spec = _mapping(doc.get("spec"), "spec")
        _known_fields(spec, ("clusterQueue", "stopPolicy", "fairSharing"), "spec")
        cq = _string(spec.get("clusterQueue"), "spec.clusterQueue")
        if not cq:
            raise _required("spec.clusterQueue", "a LocalQueue must name the ClusterQueue that backs it")
        _check(_dns1123_subdomain_errors(cq), "spec.clusterQueue", cq)
        stop = _enum(spec.get("stopPolicy"), "spec.stopPolicy", ("None", "Hold", "HoldAndDrain"), "None")
        if stop != "None":
            self.warn("spec.stopPolicy", f"ignored: LocalQueue stopPolicy {stop} is not supported; "
                                         "stop the ClusterQueue instead")
        if spec.get("fairSharing") is not None:
            self._fair_sharing_weight(spec.get("fairSharing"), "spec.fairSharing")
            self.warn("spec.fairSharing", "ignored: admission fair sharing between LocalQueues is not supported")
        self._register(group, kind, namespace, name)
        lq = model.LocalQueue(namespace=namespace, name=name, cluster_queue=cq)
        self.config.local_queues[lq.key] = lq

    def _configuration(self, doc, version):
        """config.kueue.x-k8s.io Configuration: ``fairSharing`` only (pkg/config/validation.go).
        In v1beta1 ``fairSharing.enable`` switches it on; in v1beta2 the presence of the struct."""
        if self._configuration_index is not None:
            raise _duplicate("kind", "Configuration",
                             f"a Configuration is already defined in document {self._configuration_index}")
        self._configuration_index = self._index
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
        self.config.fair_sharing = fs

    def _resource_transformations(self, value, path: str) -> None:
        """Configuration ``resources``: ``transformations`` (Kueue pkg/config/validation.go
        ``validateResourceTransformations``: a resource name as ``input``, unique; ``strategy``
        Retain (default) or Replace; ``outputs`` a map of non-negative quantities).
        ``excludeResourcePrefixes`` is accepted and ignored (with a warning)."""
        raw = _mapping(value, path)
        _known_fields(raw, ("transformations", "excludeResourcePrefixes", "deviceClassMappings"), path)
        for key in ("excludeResourcePrefixes", "deviceClassMappings"):
            if raw.get(key):
                self.warn(_child(path, key), "ignored: not supported by this engine")
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
            self.config.resource_transformations[name] = model.ResourceTransformation(
                input=name, outputs=outputs, strategy=strategy)

    # -- workloads ---------------------------------------------------------------------------

    def _new_workload(self, *, kind: str, name: str, namespace: str, queue: str, pod_sets: list[model.PodSet],
                      meta: dict, labels: dict, annotations: dict,
                      priority: Optional[_PriorityRef], fixed_priority: Optional[tuple[int, Optional[str], Optional[str]]] = None,
                      max_exec: Optional[int] = None, active: bool = True,
                      admission: Optional[model.Admission] = None) -> _Draft:
        key = f"{namespace}/{name}"
        if key in self._workload_keys:
            prev_index, prev_kind = self._workload_keys[key]
            raise _duplicate("metadata.name", name,
                             f"the workload {key} is already defined by the {prev_kind} in document {prev_index}")
        self._workload_keys[key] = (self._index, kind)
        created = _timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        wl = model.Workload(
            namespace=namespace, name=name, queue_name=queue, pod_sets=pod_sets,
            creation_time=float(self._index) if created is None else created,
            uid=_string(meta.get("uid"), "metadata.uid"),
            maximum_execution_time_seconds=max_exec, active=active, admission=admission,
            labels=dict(labels), annotations=dict(annotations),
        )
        if fixed_priority is not None:
            wl.priority, wl.priority_class, wl.priority_class_kind = fixed_priority
        draft = _Draft(workload=wl, index=self._index, kind=kind, name=name, priority=priority, source=self.source)
        self.drafts.append(draft)
        return draft

    def _job_queue(self, labels: dict, annotations: dict) -> str:
        """queue-name label, else the deprecated annotation; validated as a CRD name
        (jobframework ValidateQueueName)."""
        if labels.get(QUEUE_NAME_LABEL):
            path, queue = _key("metadata.labels", QUEUE_NAME_LABEL), labels[QUEUE_NAME_LABEL]
        elif annotations.get(QUEUE_NAME_LABEL):
            path, queue = _key("metadata.annotations", QUEUE_NAME_LABEL), annotations[QUEUE_NAME_LABEL]
        else:
            return ""
        _check(_dns1123_subdomain_errors(queue), path, queue)
        return queue

    def _job_max_exec(self, labels: dict) -> Optional[int]:
        """jobframework validateCreateForMaxExecTime."""
        if MAX_EXEC_TIME_LABEL not in labels:
            return None
        path = _key("metadata.labels", MAX_EXEC_TIME_LABEL)
        text = labels[MAX_EXEC_TIME_LABEL]
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _invalid(path, text, f'strconv.Atoi: parsing "{text}": invalid syntax')
        value = int(text)
        if value <= 0:
            raise _invalid(path, value, "should be greater than 0")
        if value > INT32_MAX:
            raise _invalid(path, value, f"must be less than or equal to {INT32_MAX}")
        return value

    def _job_common(self, doc, kind) -> Optional[tuple[str, str, str, dict, dict, dict]]:
        """(name, namespace, queue, labels, annotations, metadata), or None when not managed."""
        name, namespace, labels, annotations = self._namespaced_meta(doc)
        queue = self._job_queue(labels, annotations)
        if not queue:
            self.ignored.append(_ignored_entry(doc["apiVersion"], kind, namespace, name))
            return None
        return name, namespace, queue, labels, annotations, doc["metadata"]

    def _batch_job(self, doc, group, version, kind, name):
        """batch/v1 Job → one PodSet "main" (Kueue pkg/controller/jobs/job: PodSets, podsCount)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        spec = _mapping(doc.get("spec"), "spec", required=True)
        _known_fields(spec, _JOB_SPEC_FIELDS, "spec")
        parallelism = _integer(spec.get("parallelism"), "spec.parallelism", default=1, minimum=0)
        completions = _integer(spec.get("completions"), "spec.completions", minimum=0)
        count = parallelism if completions is None else min(parallelism, completions)
        info = _pod_template(spec.get("template"), "spec.template", job_restart_policy=True)
        min_count = None
        if JOB_MIN_PARALLELISM_ANNOTATION in annotations:
            apath = _key("metadata.annotations", JOB_MIN_PARALLELISM_ANNOTATION)
            text = annotations[JOB_MIN_PARALLELISM_ANNOTATION]
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                raise _invalid(apath, text, f'strconv.Atoi: parsing "{text}": invalid syntax')
            min_count = int(text)
            if not 0 < min_count < count:
                raise _invalid(apath, min_count, f"should be between 0 and {count - 1}")
        pod_set = model.PodSet(name="main", count=count, requests=info.requests, min_count=min_count,
                               node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""), pod_class=info.priority_class_name,
                           pod_class_path="spec.template.spec.priorityClassName")
        return self._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=[pod_set],
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))

    def _volcano_job(self, doc, group, version, kind, name):
        """batch.volcano.sh/v1alpha1 Job → one PodSet per task (Volcano's admission webhook:
        tasks required, unique DNS-1123 task names, replicas ≥ 0, 0 ≤ minAvailable ≤ Σ replicas).
        ``minAvailable`` is a gang: Kueue admits every PodSet whole, all or nothing; with a single
        task and ``minAvailable`` < replicas it becomes that PodSet's ``min_count``."""
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        spec = _mapping(doc.get("spec"), "spec", required=True)
        tpath = "spec.tasks"
        tasks = _sequence(spec.get("tasks"), tpath)
        if not tasks:
            raise _required(tpath, "No task specified in job spec")
        if len(tasks) > MAX_POD_SETS:
            raise _too_many(tpath, len(tasks), MAX_POD_SETS)
        pod_sets: list[model.PodSet] = []
        first_pc = ""
        total = 0
        for i, task in enumerate(tasks):
            ipath = _index(tpath, i)
            task = _mapping(task, ipath, required=True)
            tname = _string(task.get("name"), _child(ipath, "name")) or f"default{i}"
            _check(dns1123_label_errors(tname), _child(ipath, "name"), tname)
            if any(ps.name == tname for ps in pod_sets):
                raise _duplicate(_child(ipath, "name"), tname, f"duplicated task name {tname}")
            # TaskSpec.replicas has no default in Volcano: absent is 0 pods.
            replicas = _integer(task.get("replicas"), _child(ipath, "replicas"), default=0, minimum=0)
            task_min = _integer(task.get("minAvailable"), _child(ipath, "minAvailable"), minimum=0)
            if task_min is not None and task_min > replicas:
                raise _invalid(_child(ipath, "minAvailable"), task_min, "'minAvailable' is greater than 'replicas'")
            info = _pod_template(task.get("template"), _child(ipath, "template"))
            if i == 0:
                first_pc = info.priority_class_name
            total += replicas
            pod_sets.append(model.PodSet(name=tname, count=replicas, requests=info.requests,
                                         node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity))
        min_available = _integer(spec.get("minAvailable"), "spec.minAvailable", minimum=0)
        if min_available is not None and min_available > total:
            raise _invalid("spec.minAvailable", min_available,
                           "job 'minAvailable' should not be greater than total replicas in tasks")
        if min_available is not None and len(pod_sets) == 1 and 0 < min_available < pod_sets[0].count:
            pod_sets[0].min_count = min_available
        pc = _dns_subdomain(spec.get("priorityClassName"), "spec.priorityClassName", required=False)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""),
                           pod_class=pc or first_pc,
                           pod_class_path="spec.priorityClassName" if pc else "spec.tasks[0].template.spec.priorityClassName")
        return self._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))

    def _kubeflow_job(self, doc, group, version, kind, name):
        """kubeflow.org/v1 PyTorchJob / TFJob → one PodSet per replica type, named in lower case,
        in Kueue's order (Master, Worker; Chief, Master, PS, Worker, Evaluator). The training
        operator requires the ``pytorch`` / ``tensorflow`` container and at most one
        Master / Chief / Evaluator."""
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        specs_key, order, container = _KUBEFLOW[kind]
        spec = _mapping(doc.get("spec"), "spec", required=True)
        rpath = f"spec.{specs_key}"
        replica_specs = _mapping(spec.get(specs_key), rpath, required=True)
        if not replica_specs:
            raise _required(rpath, "at least one replica spec is needed")
        for rtype in replica_specs:
            if rtype not in order:
                raise _unsupported(rpath, rtype, order)
        pod_sets: list[model.PodSet] = []
        first_pc, first_path = "", ""
        for rtype in order:
            if rtype not in replica_specs:
                continue
            ipath = _key(rpath, rtype)
            rs = _mapping(replica_specs[rtype], ipath, required=True)
            replicas = _integer(rs.get("replicas"), _child(ipath, "replicas"), default=1, minimum=0)
            if rtype in ("Master", "Chief", "Evaluator") and replicas > 1:
                raise _invalid(_child(ipath, "replicas"), replicas, f"there must be only 1 {rtype} replica")
            tpl_path = _child(ipath, "template")
            info = _pod_template(rs.get("template"), tpl_path)
            containers = _mapping(rs.get("template"), tpl_path)["spec"].get("containers") or []
            if not any(isinstance(c, dict) and c.get("name") == container for c in containers):
                raise _invalid(_child(tpl_path, "spec.containers"), [c.get("name") for c in containers if isinstance(c, dict)],
                               f"there is no container named {container} in {kind} {rtype} replica")
            if not pod_sets:
                first_pc, first_path = info.priority_class_name, _child(tpl_path, "spec.priorityClassName")
            pod_sets.append(model.PodSet(name=rtype.lower(), count=replicas, requests=info.requests,
                                         node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity))
        sched_path = "spec.runPolicy.schedulingPolicy"
        run_policy = _mapping(spec.get("runPolicy"), "spec.runPolicy")
        sched = _mapping(run_policy.get("schedulingPolicy"), sched_path)
        pc = _dns_subdomain(sched.get("priorityClass"), _child(sched_path, "priorityClass"), required=False)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""), pod_class=pc or first_pc,
                           pod_class_path=_child(sched_path, "priorityClass") if pc else first_path)
        return self._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))

    def _workload(self, doc, group, version, kind, name):
        """kueue.x-k8s.io Workload (workload_types.go; pkg/webhooks/workload_webhook.go). Its
        ``spec.priority`` is taken as is (0 when absent), as Kueue does for Workload objects."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        name, namespace, labels, annotations = self._namespaced_meta(doc)
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
                self.warn(_child(ipath, "topologyRequest"), "ignored: topology-aware scheduling is not supported")
            info = _pod_template(ps.get("template"), _child(ipath, "template"), pod_validation=False)
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
            self.warn("spec.preemptionGates", "ignored: preemption gates are not supported")
        admission = self._admission(doc.get("status"), pod_sets)
        return self._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                  meta=meta, labels=labels, annotations=annotations, priority=None,
                                  fixed_priority=(priority or 0, pc_name, pc_kind), max_exec=max_exec,
                                  active=active, admission=admission)

    def _admission(self, status: Any, pod_sets: list[model.PodSet]) -> Optional[model.Admission]:
        """``status.admission`` → ``model.Admission`` (webhook validateAdmission: known podSet
        names, resourceUsage a multiple of count; CEL: one assignment per podSet)."""
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
            for rname, fname in _mapping(item.get("flavors"), fpath).items():
                _resource_name(rname, fpath)
                flavors[rname] = _dns_subdomain(fname, _key(fpath, rname))
            upath = _child(ipath, "resourceUsage")
            usage: dict[str, int] = {}
            for rname, (q, qraw) in _quantity_map(item.get("resourceUsage"), upath).items():
                _resource_name(rname, _key(upath, rname))
                _non_negative(q, _key(upath, rname), qraw)
                value = resource_value(rname, q)
                if count > 0 and value % count != 0:
                    raise _invalid(_key(upath, rname), qraw, f"is not a multiple of {count}")
                usage[rname] = value
            assignments.append(model.PodSetAssignment(name=psname, flavors=flavors, resource_usage=usage, count=count))
        if len(assignments) != len(pod_sets):
            raise _invalid(lpath, len(assignments), "podSetAssignments must have the same number of podSets as the spec")
        return model.Admission(cluster_queue=cq, pod_set_assignments=assignments)

    # -- priorities --------------------------------------------------------------------------

    def resolve(self, draft: _Draft) -> None:
        """Kueue's jobframework ExtractPriority: the ``kueue.x-k8s.io/priority-class`` label (a
        WorkloadPriorityClass; here also a PriorityClass of that name), else the pod template's
        PriorityClass, else the globalDefault PriorityClass, else 0."""
        ref = draft.priority
        if ref is None:
            return
        config = self.priority_config if self.priority_config is not None else self.config
        wl = draft.workload
        try:
            if ref.label:
                path = _key("metadata.labels", PRIORITY_CLASS_LABEL)
                pc = config.workload_priority_classes.get(ref.label) or config.priority_classes.get(ref.label)
                if pc is None:
                    raise ManifestError(
                        f"Not found: {_show(ref.label)}: no WorkloadPriorityClass or PriorityClass has this name",
                        path,
                    )
                wl.priority, wl.priority_class, wl.priority_class_kind = pc.value, pc.name, pc.kind
            elif ref.pod_class:
                pc = config.priority_classes.get(ref.pod_class)
                if pc is not None:
                    wl.priority, wl.priority_class, wl.priority_class_kind = pc.value, pc.name, "PriorityClass"
                elif ref.pod_class in SYSTEM_PRIORITY_CLASSES:
                    wl.priority = SYSTEM_PRIORITY_CLASSES[ref.pod_class]
                    wl.priority_class, wl.priority_class_kind = ref.pod_class, "PriorityClass"
                else:
                    raise ManifestError(f"Not found: {_show(ref.pod_class)}: no PriorityClass has this name",
                                        ref.pod_class_path)
            else:
                default = config.default_priority_class()
                if default is not None:
                    wl.priority, wl.priority_class, wl.priority_class_kind = default.value, default.name, "PriorityClass"
                else:
                    wl.priority, wl.priority_class, wl.priority_class_kind = 0, None, None
        except ManifestError as exc:
            raise exc.located(source=draft.source or self.source, index=draft.index, kind=draft.kind,
                              name=draft.name) from None

    def result(self) -> Manifests:
        for draft in self.drafts:
            self.resolve(draft)
        return Manifests(config=self.config, workloads=[d.workload for d in self.drafts],
                         ignored=self.ignored, warnings=self.warnings)


# ---------------------------------------------------------------------------------------------
# Public API.


def parse_yaml_documents(text: str, source: str = "<input>") -> list:
    """The non-empty documents of a YAML stream, parsed safely, with a key repeated in a mapping
    rejected (the API server's strict decoding) instead of silently keeping the last value.

    Returns a list of parsed documents (``None`` for empty documents is dropped), suitable for
    :func:`load_documents` or one by one for :func:`parse_workload_document` (the list position
    is the document index). Raises :class:`ManifestError` with ``source``, the index of the
    failing document and ``invalid YAML: ... (line L, column C)``; ``TypeError`` if ``text`` is
    not a str."""
    return _parse_yaml(text, source)


def load_text(text: str, source: str = "<input>") -> Manifests:
    """Parse and validate a multi-document YAML stream of Kubernetes/Kueue manifests.

    ``text``: the YAML text (the caller reads the file). ``source``: a name for error messages
    (a file name, ``<stdin>``, ``<request>``).

    Returns :class:`Manifests`. Raises :class:`ManifestError` (with ``source``, the 0-based
    ``index`` of the offending non-empty document, its ``kind`` and ``name``, the ``field`` path
    and the ``reason``) on the first problem anywhere in the stream, including YAML syntax errors
    and repeated keys; nothing is returned then. Raises ``TypeError`` when ``text`` is not a str.
    """
    return load_documents(_parse_yaml(text, source), source)


def load_documents(docs: list, source: str = "<input>") -> Manifests:
    """Validate already-parsed documents (dicts, as from ``yaml.safe_load_all``) into
    :class:`Manifests`. ``None`` entries (empty documents) are skipped; the index in errors is
    the position in ``docs``. Raises :class:`ManifestError` on the first problem."""
    builder = _Builder(source)
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        builder.add(doc, index)
    return builder.result()


def load_texts(texts: list[tuple[str, str]]) -> Manifests:
    """Load several YAML streams as one: ``texts`` are (source name, text) pairs, read in order.

    Objects may refer across files (a Job in one file naming a PriorityClass of another); a
    duplicate object across files is an error. Errors name the file they come from."""
    builder = None
    for source, text in texts:
        docs = _parse_yaml(text, source)
        if builder is None:
            builder = _Builder(source)
        builder.source = source
        for index, doc in enumerate(docs):
            if doc is None:
                continue
            builder.add(doc, index)
    if builder is None:
        return Manifests(config=model.ClusterConfig(), workloads=[], ignored=[], warnings=[])
    return builder.result()


def parse_workload_document(
    doc: dict, config: model.ClusterConfig, source: str = "<input>", index: int = 0
) -> Optional[model.Workload]:
    """Turn ONE submitted manifest into a ``model.Workload``, with priority classes resolved
    against ``config`` (the live cluster configuration; it is not modified).

    ``doc``: a parsed batch/v1 Job, kueue.x-k8s.io Workload, Volcano Job or Kubeflow
    PyTorchJob/TFJob. Returns ``None`` for a kind that :func:`load_text` would list as ignored
    (e.g. a Job without the ``kueue.x-k8s.io/queue-name`` label, a ConfigMap). Raises
    :class:`ManifestError` located at ``source``/``index`` when the document is invalid, names an
    unknown priority class, or is a configuration kind (ClusterQueue, LocalQueue, ...: not a
    workload). The queue name is not checked against ``config``: an unknown LocalQueue is
    Kueue's ``Inadmissible``, not a validation error.
    """
    builder = _Builder(source, priority_config=config)
    builder._index = index
    builder._kind = doc.get("kind", "") if isinstance(doc, dict) and isinstance(doc.get("kind"), str) else ""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    builder._name = meta.get("name", "") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
    try:
        draft = builder._add(doc, workload_only=True)
    except ManifestError as exc:
        raise exc.located(source=source, index=index, kind=builder._kind or None, name=builder._name or None) from None
    if draft is None:
        return None
    builder.resolve(draft)
    return draft.workload


_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([dhms])")


def parse_duration(text: Any, field: str = "maxRuntime") -> int:
    """A duration in whole seconds: ``"90s"`` → 90, ``"10m"`` → 600, ``"1h30m"`` → 5400,
    ``"2d"`` → 172800, ``"1.5h"`` → 5400, ``600`` or ``"600"`` → 600 (plain numbers are seconds).

    Units ``d`` (86400 s), ``h``, ``m``, ``s``, combined as in Go's ``time.ParseDuration``.
    Raises ``ManifestError(reason, field)`` when the text is malformed, is not a whole number of
    seconds, is ≤ 0, or exceeds 2147483647 s (Kueue's ``maximumExecutionTimeSeconds`` is int32).
    """
    if isinstance(text, bool) or text is None:
        raise ManifestError(f"Invalid value: {_show(text)}: a duration such as 600, \"10m\" or \"1h30m\" is required",
                            field)
    if isinstance(text, int):
        seconds = Fraction(text)
    elif isinstance(text, float):
        if not math.isfinite(text):
            raise ManifestError(f"Invalid value: {text!r}: must be a finite number of seconds", field)
        seconds = Fraction(repr(text))
    elif isinstance(text, str):
        s = text.strip()
        if re.fullmatch(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", s):
            seconds = Fraction(s)
        elif s and _DURATION_RE.sub("", s) == "":
            seconds = sum((Fraction(n) * _DURATION_UNITS[u] for n, u in _DURATION_RE.findall(s)), Fraction(0))
        else:
            raise ManifestError(
                f"Invalid value: {_show(text)}: not a duration: use seconds (600) or a number with a unit "
                "d, h, m or s, combinable (\"10m\", \"1h30m\", \"2d\")",
                field,
            )
    else:
        raise ManifestError(f"Invalid value: {_type_name(text)}: a duration must be a string or a number", field)
    if seconds <= 0:
        raise ManifestError(f"Invalid value: {_show(text)}: must be greater than 0", field)
    if seconds.denominator != 1:
        raise ManifestError(f"Invalid value: {_show(text)}: must be a whole number of seconds", field)
    if seconds > INT32_MAX:
        raise ManifestError(f"Invalid value: {_show(text)}: must be at most {INT32_MAX} seconds", field)
    return int(seconds)
