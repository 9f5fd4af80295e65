"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact numbers, and Kueue's canonical units.

Grammar (``k8s.io/apimachinery/pkg/api/resource/quantity.go``)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <sign>            ::= "+" | "-"
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an integer exponent)

As ``ParseQuantity`` does, a non-zero value is rounded *away from zero* to a whole number of nano
units (``1e-12`` becomes ``1n``), and a binary-suffixed value is capped at 2^63-1. Unlike the Go
implementation (whose hand-written scanner lets a lone sign, a lone "." or a bare suffix such as
"Ki" through as zero), a number must have at least one digit, exactly as the grammar says.

Kueue's canonical units (``pkg/resources/requests.go``: ``ResourceValue``): ``cpu`` in millicores,
every other resource in whole base units (bytes, devices), rounded away from zero like
``Quantity.Value()``.

No I/O here; errors are :class:`~jupyter_gpuqueue.engine.errors.ManifestError` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Optional, Union

from .errors import ManifestError

__all__ = ["parse_quantity", "resource_value", "format_quantity", "QuantityInput"]

QuantityInput = Union[str, int, float, Fraction]

# The expression Kubernetes quotes in its format error (quantity.go: splitREString).
_K8S_SPLIT_RE = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)"
    r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)"
    r"|[eE](?P<exponent>[+-]?[0-9]+)"
    r"|(?P<decimal>[numkMGTPE]?))"
)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of two
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_NANO = 10**9
_MAX_INT64 = 2**63 - 1
# Exponents beyond this are refused rather than expanded into enormous integers.
_MAX_EXPONENT = 1000

# Resources that Kueue formats with binary suffixes (pkg/resources: ResourceQuantity).
_BINARY_RESOURCES = ("memory", "ephemeral-storage")
_BINARY_FORMAT_SUFFIXES = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def _show(value: object) -> str:
    """A value as Kubernetes prints it in a field error: strings in double quotes."""
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _format_error(value: str) -> str:
    return (
        f"Invalid value: {_show(value)}: quantities must match the regular expression "
        f"'{_K8S_SPLIT_RE}'"
    )


def _round_away_from_zero(value: Fraction) -> int:
    return math.ceil(value) if value >= 0 else math.floor(value)


def parse_quantity(value: QuantityInput, field: Optional[str] = None) -> Fraction:
    """Parse a Kubernetes quantity into an exact :class:`fractions.Fraction` of base units.

    ``value``: a string such as ``"500m"``, ``"16Gi"``, ``"1.5"``, ``"1e3"``, ``"-2"``; an ``int``
    (YAML's ``nvidia.com/gpu: 1``); a finite ``float`` (YAML's ``0.5``, read as its shortest
    decimal spelling); or a ``Fraction`` (returned unchanged). ``field`` is the field path used in
    errors (e.g. ``spec.resourceGroups[0].flavors[0].resources[0].nominalQuota``).

    Returns the value in base units (cores for cpu, bytes for memory, devices for GPUs), rounded
    away from zero to a multiple of 1e-9 as Kubernetes does; binary-suffixed values are capped at
    2^63-1.

    Raises ``ManifestError(reason, field)`` for an empty or malformed string, an unknown suffix,
    a boolean, ``None``, a list or mapping, or a non-finite float.
    Source: ``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``ParseQuantity``).
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool) or value is None:
        raise ManifestError(
            f"Invalid value: {_show(value)}: a quantity must be a string or a number, "
            f"got {type(value).__name__}",
            field,
        )
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ManifestError(f"Invalid value: {_show(value)}: a quantity must be finite", field)
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ManifestError(
            f"Invalid value: {_show(value)}: a quantity must be a string or a number, "
            f"got {type(value).__name__}",
            field,
        )
    if text == "":
        raise ManifestError("Invalid value: \"\": quantity must not be empty", field)
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        split = re.fullmatch(_K8S_SPLIT_RE, text)
        if split and re.fullmatch(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", split.group(1)):
            raise ManifestError(
                f"Invalid value: {_show(text)}: unable to parse quantity's suffix", field
            )
        raise ManifestError(_format_error(text), field)

    number = Fraction(m.group("number"))  # Fraction accepts "1.", ".5", "007"
    if m.group("sign") == "-":
        number = -number
    binary = m.group("binary")
    if binary is not None:
        amount = number * (2 ** _BINARY[binary])
    else:
        exp_text = m.group("exponent")
        exponent = int(exp_text) if exp_text is not None else _DECIMAL[m.group("decimal") or ""]
        if abs(exponent) > _MAX_EXPONENT:
            raise ManifestError(
                f"Invalid value: {_show(text)}: exponent out of range (at most {_MAX_EXPONENT} in "
                "magnitude)",
                field,
            )
        amount = number * Fraction(10) ** exponent

    if amount != 0 and (amount * _NANO).denominator != 1:
        amount = Fraction(_round_away_from_zero(amount * _NANO), _NANO)
    if binary is not None and abs(amount) > _MAX_INT64:
        amount = Fraction(_MAX_INT64 if amount > 0 else -_MAX_INT64)
    return amount


def resource_value(resource_name: str, q: QuantityInput) -> int:
    """Kueue's canonical integer for a quantity of ``resource_name``.

    ``cpu`` → millicores (``"500m"`` → 500, ``"2"`` → 2000); every other resource → base units
    (``"16Gi"`` → 17179869184 bytes, ``"1"`` → 1 GPU), rounded away from zero
    (``"0.5"`` GPUs → 1), as Kueue's ``resources.ResourceValue`` (``pkg/resources/requests.go``)
    does with ``Quantity.MilliValue()`` / ``Quantity.Value()``.

    ``q`` is a ``Fraction`` from :func:`parse_quantity` or anything it accepts (then parsed with
    ``resource_name`` as the field). Raises ``ManifestError`` for a malformed quantity.
    """
    amount = q if isinstance(q, Fraction) else parse_quantity(q, resource_name)
    if resource_name == "cpu":
        amount = amount * 1000
    return _round_away_from_zero(amount)


def format_quantity(resource_name: str, value: int) -> str:
    """Format a canonical integer of ``resource_name`` back into a Kubernetes quantity string.

    ``cpu`` (millicores): ``500`` → ``"500m"``, ``2000`` → ``"2"``.
    ``memory``, ``ephemeral-storage`` and ``hugepages-*`` (bytes; formatted in binary SI like
    Kueue's ``resources.ResourceQuantity``): ``17179869184`` → ``"16Gi"`` when an exact multiple
    of a power of 1024, otherwise the plain integer (``1500`` → ``"1500"``).
    Everything else (GPUs, MIG slices, pods …): the plain integer (``4`` → ``"4"``).

    ``parse_quantity`` and ``resource_value`` invert it exactly. Raises ``TypeError`` when
    ``value`` is not an ``int`` (booleans included).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"format_quantity: value must be an int, got {type(value).__name__}")
    if resource_name == "cpu":
        if value % 1000 == 0:
            return str(value // 1000)
        return f"{value}m"
    if value != 0 and (resource_name in _BINARY_RESOURCES or resource_name.startswith("hugepages-")):
        magnitude = abs(value)
        for suffix, power in _BINARY_FORMAT_SUFFIXES:
            if magnitude % (1 << power) == 0:
                return f"{value // (1 << power)}{suffix}"
    return str(value)
