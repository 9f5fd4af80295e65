"""Shared pieces of manifest validation: Kueue's labels and limits, field-path errors in the API
server's wording, typed field readers, names and labels (DNS-1123, qualified names), quantities
and resource names, timestamps and durations."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from fractions import Fraction
from typing import Any, Iterable, Optional

from ..errors import ManifestError
from ..quantity import parse_quantity


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


INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


# scheduling.k8s.io: HighestUserDefinablePriority and the two built-in system classes.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}


KUEUE_GROUP = "kueue.x-k8s.io"


WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"


PC_SOURCE = "scheduling.k8s.io/priorityclass"


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
