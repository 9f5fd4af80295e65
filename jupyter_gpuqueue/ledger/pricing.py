"""GPU prices: USD per GPU-hour per ResourceFlavor, and what a MIG slice counts as.

Rule (DESIGN.md "Costs"): a job is charged ``GPU-equivalents × price of its flavor × hours``. A whole
GPU (``nvidia.com/gpu``) is one GPU-equivalent; a MIG slice ``nvidia.com/mig-<N>g.<mem>`` is charged
by its share of the GPU's compute slices, ``N / 7`` (a ``1g.10gb`` slice of an A100 is 1/7 GPU).
Other resources (cpu, memory) are not billed.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from ..errors import ValidationError
from ..gpu_families import GpuFamily, family_of_node_labels, family_prices

#: USD per GPU-hour by flavor: every GPU family's (``gpu_families.GPU_FAMILIES``, the single source:
#: DESIGN.md's A100-80GB 2.21, A100-40GB 1.65, H100 3.75, L4 0.81, and the others), under the
#: family flavor names discovered GPUs get (``nvidia-h100``, ``nvidia-a100-80gb``) and the names
#: the demo and the seed examples use (``nvidia-a100``, ``a100-80gb``, ``h100-80gb``, ``l4``).
DEFAULT_PRICES: dict[str, float] = family_prices()
#: USD per GPU-hour of a flavor that is not listed (DESIGN.md).
DEFAULT_PRICE = 2.0

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# nvidia.com/mig-1g.10gb, and the compute-instance form nvidia.com/mig-1c.3g.20gb (GPU slices = "3g");
# an optional "+me" / ".me" media-extension suffix.
_MIG_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[.+]me)?$")


def mig_gpu_slices(profile: str) -> int:
    """GPU-instance slices of a MIG profile (``"1g.10gb"`` → 1, ``"3g.40gb"`` → 3).

    Raises ValidationError(field="migProfile") when ``profile`` is not ``<N>g.<M>gb``.
    """
    m = _MIG_RE.match(profile)
    if not m or int(m.group(2)) < 1:
        raise ValidationError(
            f"MIG profile {profile!r} is not of the form '<slices>g.<memory>gb' (e.g. '1g.10gb')",
            field="migProfile",
        )
    return int(m.group(2))


#: The highest price accepted, USD per GPU-hour: above it costs overflow to no number (found by the fuzz).
MAX_PRICE = 1_000_000.0


def _check_price(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"price must be a number (USD per GPU-hour), got {value!r}", field=field)
    value = float(value)
    if not math.isfinite(value) or value < 0 or value > MAX_PRICE:
        raise ValidationError(f"price must be a number from 0 to {MAX_PRICE:,.0f} (USD per GPU-hour), got {value}",
                              field=field)
    return value


class Prices:
    """Price list: USD per GPU-hour per ResourceFlavor.

    ``per_flavor``: flavor name → USD per GPU-hour; ``None`` means :data:`DEFAULT_PRICES`.
    ``default``: USD per GPU-hour of any flavor not listed. ``mig_slices_per_gpu``: compute slices of
    a whole GPU (7 on A100/H100). Raises ValidationError naming ``flavors.<name>``, ``default`` or
    ``migSlicesPerGpu`` for a negative / non-numeric value.

    A flavor named by an admin (``gpu-pool-1``) whose ``nodeLabels`` name a GPU product
    (``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3``; ``gpu_families.family_of_node_labels``) and
    that no price lists is priced as its GPU family (:meth:`bind_flavors`, called by the service with
    the live configuration's ResourceFlavors).
    """

    def __init__(
        self,
        per_flavor: Optional[dict[str, float]] = None,
        default: float = DEFAULT_PRICE,
        mig_slices_per_gpu: int = 7,
    ):
        source = DEFAULT_PRICES if per_flavor is None else per_flavor
        if not isinstance(source, dict):
            raise ValidationError("flavors must be a mapping of flavor name to USD per GPU-hour", field="flavors")
        flavors: dict[str, float] = {}
        for name, value in source.items():
            if not isinstance(name, str) or not name:
                raise ValidationError(f"flavor name must be a non-empty string, got {name!r}", field="flavors")
            flavors[name] = _check_price(value, f"flavors.{name}")
        self.default = _check_price(default, "default")
        if isinstance(mig_slices_per_gpu, bool) or not isinstance(mig_slices_per_gpu, int) or mig_slices_per_gpu < 1:
            raise ValidationError(
                f"must be a positive integer, got {mig_slices_per_gpu!r}", field="migSlicesPerGpu"
            )
        self.per_flavor = flavors
        self.mig_slices_per_gpu = mig_slices_per_gpu
        #: flavor name → the GPU family its nodeLabels name (:meth:`bind_flavors`); not persisted.
        self.families: dict[str, GpuFamily] = {}

    def bind_flavors(self, resource_flavors: dict) -> "Prices":
        """Learn the GPU family of each ResourceFlavor in ``resource_flavors`` (name → object with
        ``node_labels``) from its labels, so that an unlisted flavor is priced as its family;
        returns self."""
        self.families = {}
        for name, flavor in resource_flavors.items():
            family = family_of_node_labels(getattr(flavor, "node_labels", None) or {})
            if family is not None:
                self.families[name] = family
        return self

    def _family_price(self, flavor: str) -> Optional[float]:
        family = self.families.get(flavor)
        if family is None and flavor.endswith("-mig"):
            family = self.families.get(flavor[: -len("-mig")])
        if family is None:
            return None
        return self.per_flavor.get(family.flavor, family.usd_per_gpu_hour)

    def price(self, flavor: str) -> float:
        """USD per GPU-hour of ``flavor``: its listed price; else, for ``<base>-mig``, the base
        flavor's price (a MIG flavor is the same GPUs, split); else ``default``."""
        if flavor in self.per_flavor:
            return self.per_flavor[flavor]
        if flavor.endswith("-mig"):
            base = flavor[: -len("-mig")]
            if base in self.per_flavor:
                return self.per_flavor[base]
        family = self._family_price(flavor)
        return self.default if family is None else family

    def source(self, flavor: str) -> str:
        """Where :meth:`price` of ``flavor`` comes from: ``"listed"``, ``"base flavor"`` (a
        ``<base>-mig`` flavor priced as its base), ``"family"`` (priced as the GPU family its
        nodeLabels name, :meth:`bind_flavors`) or ``"default"`` (none of those: billed at
        ``default``)."""
        if flavor in self.per_flavor:
            return "listed"
        if flavor.endswith("-mig") and flavor[: -len("-mig")] in self.per_flavor:
            return "base flavor"
        if self._family_price(flavor) is not None:
            return "family"
        return "default"

    def family_model(self, flavor: str) -> Optional[str]:
        """The GPU model ("H100") a flavor is priced as, when :meth:`source` is ``"family"``."""
        family = self.families.get(flavor) or (self.families.get(flavor[: -len("-mig")])
                                               if flavor.endswith("-mig") else None)
        return family.model if family is not None else None

    def unpriced(self, flavors) -> list[str]:
        """The names in ``flavors`` that no price lists (:meth:`source` ``"default"``), sorted: they
        are billed at ``default``."""
        return sorted(f for f in flavors if self.source(f) == "default")

    def gpu_equivalent(self, resource: str, quantity: int) -> float:
        """GPUs that ``quantity`` units of ``resource`` amount to.

        ``nvidia.com/gpu`` → ``quantity``; ``nvidia.com/mig-<N>g.<mem>`` → ``quantity × N / 7``
        (``mig_slices_per_gpu``); anything else → 0. Raises ValidationError(field="quantity") for a
        negative quantity and (field="resource") for a malformed MIG resource name.
        """
        if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 0:
            raise ValidationError(f"quantity must be an integer >= 0, got {quantity!r}", field="quantity")
        if resource == GPU_RESOURCE:
            return float(quantity)
        if resource.startswith(MIG_RESOURCE_PREFIX):
            try:
                slices = mig_gpu_slices(resource[len(MIG_RESOURCE_PREFIX):])
            except ValidationError as e:
                raise ValidationError(f"{resource!r}: {e.message}", field="resource") from None
            return quantity * slices / self.mig_slices_per_gpu
        return 0.0

    def usd_per_hour(self, flavor: str, resource: str, quantity: int) -> float:
        """USD per hour of ``quantity`` units of ``resource`` in ``flavor``:
        ``gpu_equivalent(resource, quantity) × price(flavor)``."""
        return self.gpu_equivalent(resource, quantity) * self.price(flavor)

    def to_json(self) -> dict:
        """``{"currency": "USD", "flavors": {name: usd_per_gpu_hour}, "default": 2.0, "migSlicesPerGpu": 7}``
        (the REST ``GET prices`` answer)."""
        return {
            "currency": "USD",
            "flavors": dict(self.per_flavor),
            "default": self.default,
            "migSlicesPerGpu": self.mig_slices_per_gpu,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Prices":
        """Inverse of :meth:`to_json`. Raises ValidationError naming the field (``currency`` must be
        "USD" when present)."""
        if not isinstance(data, dict):
            raise ValidationError("prices must be a JSON object", field="prices")
        unknown = set(data) - {"currency", "flavors", "default", "migSlicesPerGpu"}
        if unknown:
            name = sorted(unknown)[0]
            raise ValidationError("unknown field", field=name)
        if data.get("currency", "USD") != "USD":
            raise ValidationError(f"only USD is supported, got {data.get('currency')!r}", field="currency")
        return cls(
            per_flavor=data.get("flavors", {}),
            default=data.get("default", DEFAULT_PRICE),
            mig_slices_per_gpu=data.get("migSlicesPerGpu", 7),
        )

    def __repr__(self) -> str:
        return f"Prices({self.per_flavor!r}, default={self.default!r}, mig_slices_per_gpu={self.mig_slices_per_gpu})"
