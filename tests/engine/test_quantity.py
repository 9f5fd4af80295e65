"""Kubernetes quantities: parse_quantity, resource_value, format_quantity.

The property tests cross-check ``parse_quantity`` against the Kubernetes Python client's
``kubernetes.utils.parse_quantity`` (a test-only dependency) on strings generated from the
grammar of k8s.io/apimachinery/pkg/api/resource/quantity.go.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuqueue.engine.errors import ManifestError
from jupyter_gpuqueue.engine.quantity import format_quantity, parse_quantity, resource_value

k8s_utils = pytest.importorskip("kubernetes.utils")

GI = 2**30


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", 0),
        ("1", 1),
        ("500m", Fraction(1, 2)),
        ("2", 2),
        ("16Gi", 16 * GI),
        ("1Ki", 1024),
        ("1.5Gi", 3 * GI // 2),
        ("1k", 1000),
        ("1M", 10**6),
        ("1E", 10**18),  # a lone E is the exa suffix ...
        ("1E3", 1000),  # ... followed by digits it is an exponent
        ("1e3", 1000),
        ("2.5e-3", Fraction(25, 10000)),
        ("1e+2", 100),
        ("-2", -2),
        ("+7", 7),
        (".5", Fraction(1, 2)),
        ("1.", 1),
        ("100n", Fraction(1, 10**7)),
        ("3u", Fraction(3, 10**6)),
        ("007", 7),
        (4, 4),  # YAML integers: nvidia.com/gpu: 4
        (0.25, Fraction(1, 4)),  # YAML floats, by their decimal spelling
    ],
)
def test_parse_quantity_examples(text, expected):
    assert parse_quantity(text, "f") == expected


def test_parse_quantity_rounds_up_to_nano_and_caps_binary_at_int64():
    # quantity.go ParseQuantity: non-zero values round away from zero to 1n; BinarySI is capped.
    assert parse_quantity("1e-12", "f") == Fraction(1, 10**9)
    assert parse_quantity("-1e-12", "f") == Fraction(-1, 10**9)
    assert parse_quantity("1.0000000001", "f") == Fraction(1_000_000_001, 10**9)
    assert parse_quantity("9Ei", "f") == 2**63 - 1
    assert parse_quantity("9E", "f") == 9 * 10**18  # decimal values are not capped


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("", "must not be empty"),
        ("abc", "quantities must match the regular expression"),
        ("1.2.3", "quantities must match the regular expression"),
        ("Ki", "quantities must match the regular expression"),  # no digits
        ("-", "quantities must match the regular expression"),
        (".", "quantities must match the regular expression"),
        (" 1", "quantities must match the regular expression"),
        ("1Gb", "quantities must match the regular expression"),
        ("1ki", "unable to parse quantity's suffix"),
        ("1K", "unable to parse quantity's suffix"),  # decimal kilo is a lower-case k
        ("1e", "unable to parse quantity's suffix"),
        ("1e9999", "exponent out of range"),
        (True, "must be a string or a number"),
        (None, "must be a string or a number"),
        ([1], "must be a string or a number"),
        (float("inf"), "must be finite"),
    ],
)
def test_parse_quantity_rejects_malformed_naming_the_field(bad, reason):
    with pytest.raises(ManifestError) as err:
        parse_quantity(bad, "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota")
    assert err.value.field == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert reason in err.value.reason
    assert str(err.value).startswith("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: ")


@pytest.mark.parametrize(
    "resource, q, expected",
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 32, 32000),
        ("cpu", "0.0001", 1),  # MilliValue rounds up
        ("memory", "16Gi", 16 * GI),
        ("memory", "1.5", 2),  # Value rounds up
        ("nvidia.com/gpu", 1, 1),
        ("nvidia.com/gpu", "0.5", 1),
        ("nvidia.com/mig-1g.10gb", "7", 7),
        ("nvidia.com/gpu", Fraction(3), 3),
    ],
)
def test_resource_value_uses_kueue_canonical_units(resource, q, expected):
    assert resource_value(resource, q) == expected


def test_resource_value_names_the_resource_on_a_bad_quantity():
    with pytest.raises(ManifestError) as err:
        resource_value("memory", "16GB")
    assert err.value.field == "memory"


@pytest.mark.parametrize(
    "resource, value, expected",
    [
        ("cpu", 500, "500m"),
        ("cpu", 2000, "2"),
        ("cpu", 0, "0"),
        ("cpu", 1500, "1500m"),
        ("memory", 16 * GI, "16Gi"),
        ("memory", 1536, "1536"),  # 1.5Ki is not a whole multiple: plain integer
        ("memory", 3 * 2**20, "3Mi"),
        ("memory", 1500, "1500"),
        ("memory", 0, "0"),
        ("hugepages-2Mi", 4 * 2**20, "4Mi"),
        ("nvidia.com/gpu", 4, "4"),
        ("nvidia.com/gpu", 1024, "1024"),  # devices are counted, never "1Ki"
    ],
)
def test_format_quantity(resource, value, expected):
    assert format_quantity(resource, value) == expected


def test_format_quantity_rejects_non_integers():
    with pytest.raises(TypeError):
        format_quantity("cpu", 1.5)
    with pytest.raises(TypeError):
        format_quantity("cpu", True)


@settings(max_examples=150, deadline=None)
@given(
    resource=st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]),
    value=st.integers(min_value=-(2**62), max_value=2**62),
)
def test_format_then_parse_round_trips(resource, value):
    assert resource_value(resource, format_quantity(resource, value)) == value


# --- cross-check against the Kubernetes Python client ------------------------------------

_BINARY = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_DECIMAL = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]

digits = st.text("0123456789", min_size=1, max_size=6)
numbers = st.one_of(
    digits,
    st.builds(lambda a, b: f"{a}.{b}", digits, st.text("0123456789", max_size=4)),
    st.builds(lambda b: f".{b}", digits),
)
suffixes = st.one_of(
    st.sampled_from(_BINARY),
    st.sampled_from(_DECIMAL),
    st.builds(lambda e, s, n: f"{e}{s}{n}", st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
              st.integers(min_value=0, max_value=12)),
)
valid_quantities = st.builds(lambda s, n, x: f"{s}{n}{x}", st.sampled_from(["", "+", "-"]), numbers, suffixes)


def _kubernetes_value(text: str) -> Fraction:
    """The client's exact value, then the two adjustments Go's ParseQuantity makes that the
    Python client does not: rounding to whole nano units (away from zero) and the BinarySI cap."""
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        value = Fraction(k8s_utils.parse_quantity(text))
    scaled = value * 10**9
    if scaled.denominator != 1:
        value = Fraction(math.ceil(scaled) if value > 0 else math.floor(scaled), 10**9)
    if text.endswith("i") and abs(value) > 2**63 - 1:
        value = Fraction(2**63 - 1) * (1 if value > 0 else -1)
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_quantities)
def test_parse_quantity_agrees_with_the_kubernetes_client(text):
    assert parse_quantity(text, "q") == _kubernetes_value(text)


bad_suffixes = st.sampled_from(["ki", "mi", "Zi", "B", "KB", "iB", "Gb", "x", "mm", "kk", "e", "E+", "e1.5", "Ki1"])
malformed_quantities = st.one_of(
    st.builds(lambda n, x: f"{n}{x}", numbers.filter(lambda n: n != "."), bad_suffixes),
    st.sampled_from(["", "abc", "1.2.3", "--1", "+-1", "1..0", "1 000", "Ki", "m", "e3x", "1/2"]),
)


@settings(max_examples=150, deadline=None)
@given(malformed_quantities)
def test_malformed_quantities_are_rejected_by_both(text):
    with pytest.raises(ManifestError):
        parse_quantity(text, "q")
    with pytest.raises(ValueError):
        with decimal.localcontext() as ctx:
            ctx.prec = 200
            k8s_utils.parse_quantity(text)
