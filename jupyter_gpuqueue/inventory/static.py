"""A static inventory: the GPUs and MIG devices of each node, written down in YAML.

```yaml
nodes:
- name: node-a
  labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB, nvidia.com/mig.strategy: mixed}
  taints: []                     # optional: [{key, value, effect}]
  gpus:
  - {index: 0, uuid: GPU-..., product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}
  - {index: 6, uuid: GPU-..., memoryMiB: 81920, mig: [{uuid: MIG-..., profile: 1g.10gb}]}
```

Per GPU: ``index`` (int >= 0, what CUDA_VISIBLE_DEVICES names) and ``uuid`` are required;
``product`` (""), ``memoryMiB`` (0), ``mig`` (absent/null: MIG mode off; a list, possibly empty: MIG
mode on with those GPU instances) and ``maxSlices`` (7: compute slices of the whole GPU; 4 on an A30)
are optional. A MIG device's ``slices`` is the leading number of its profile (``1g.10gb`` → 1,
``3g.40gb`` → 3; NVIDIA's profile naming ``<slices>g.<memory>gb``); they may not sum to more than the
GPU's ``maxSlices``. Label values are strings (numbers and booleans are converted, as Kubernetes
label values are strings). Taint effects are Kubernetes' NoSchedule, PreferNoSchedule, NoExecute.

Every error is a ValidationError whose ``field`` is the path of the offending value, e.g.
``nodes[0].gpus[2].mig[1].profile``.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import yaml

from ..engine.model import GpuDevice, Inventory, MigDevice, Node, Taint
from ..errors import ValidationError

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MIG_PROFILE_RE = re.compile(r"^([1-7])g\.([1-9][0-9]*)gb$")
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_NODE_KEYS = ("name", "labels", "taints", "gpus")
_GPU_KEYS = ("index", "uuid", "product", "memoryMiB", "mig", "maxSlices")
_MIG_KEYS = ("uuid", "profile")
_TAINT_KEYS = ("key", "value", "effect")


class _Ctx:
    def __init__(self, origin: Optional[str]):
        self.origin = origin

    def fail(self, field: Optional[str], message: str) -> ValidationError:
        prefix = f"{self.origin}: " if self.origin else ""
        return ValidationError(prefix + message, field=field)

    def mapping(self, value: Any, field: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be a mapping, got {_kind(value)}")
        for k in value:
            if k not in allowed:
                raise self.fail(f"{field}.{k}", f"unknown field; expected one of {', '.join(allowed)}")
        return value

    def string(self, m: dict, key: str, field: str, required: bool = True, default: str = "") -> str:
        if key not in m or m[key] is None:
            if required:
                raise self.fail(f"{field}.{key}", "required")
            return default
        v = m[key]
        if not isinstance(v, str):
            raise self.fail(f"{field}.{key}", f"must be a string, got {_kind(v)}")
        if required and not v.strip():
            raise self.fail(f"{field}.{key}", "must not be empty")
        return v

    def integer(self, m: dict, key: str, field: str, default: Optional[int], lo: int, hi: Optional[int] = None) -> int:
        if key not in m or m[key] is None:
            if default is None:
                raise self.fail(f"{field}.{key}", "required")
            return default
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{field}.{key}", f"must be an integer, got {_kind(v)}")
        if v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"between {lo} and {hi}"
            raise self.fail(f"{field}.{key}", f"must be {rng}, got {v}")
        return v


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, str):
        return f"a string ({v!r})"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


def mig_profile_slices(profile: str) -> Optional[int]:
    """Compute slices of a MIG profile (``"3g.40gb"`` → 3), or None if it is not ``<1-7>g.<N>gb``."""
    m = MIG_PROFILE_RE.match(profile) if isinstance(profile, str) else None
    return int(m.group(1)) if m else None


def _labels(ctx: _Ctx, value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ctx.fail(field, f"must be a mapping of label name to value, got {_kind(value)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            raise ctx.fail(field, f"label names must be non-empty strings, got {k!r}")
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(v)
        elif v is None:
            v = ""
        elif not isinstance(v, str):
            raise ctx.fail(f"{field}.{k}", f"label value must be a string, got {_kind(v)}")
        out[k] = v
    return out


def _taints(ctx: _Ctx, value: Any, field: str) -> list[Taint]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ctx.fail(field, f"must be a list, got {_kind(value)}")
    out = []
    for i, t in enumerate(value):
        f = f"{field}[{i}]"
        t = ctx.mapping(t, f, _TAINT_KEYS)
        key = ctx.string(t, "key", f)
        val = t.get("value", "")
        if isinstance(val, (int, float)) and not isinstance(val, bool):
            val = str(val)
        if val is None:
            val = ""
        if not isinstance(val, str):
            raise ctx.fail(f"{f}.value", f"must be a string, got {_kind(val)}")
        effect = ctx.string(t, "effect", f, required=False, default="NoSchedule")
        if effect not in TAINT_EFFECTS:
            raise ctx.fail(f"{f}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        out.append(Taint(key=key, value=val, effect=effect))
    return out


def _gpus(ctx: _Ctx, value: Any, field: str, uuids: dict[str, str]) -> list[GpuDevice]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ctx.fail(field, f"must be a list, got {_kind(value)}")
    out: list[GpuDevice] = []
    indices: dict[int, str] = {}
    for i, g in enumerate(value):
        f = f"{field}[{i}]"
        g = ctx.mapping(g, f, _GPU_KEYS)
        index = ctx.integer(g, "index", f, default=None, lo=0)
        if index in indices:
            raise ctx.fail(f"{f}.index", f"duplicate GPU index {index} on this node (also {indices[index]})")
        indices[index] = f
        uuid = ctx.string(g, "uuid", f)
        if uuid in uuids:
            raise ctx.fail(f"{f}.uuid", f"duplicate UUID {uuid} (also {uuids[uuid]})")
        uuids[uuid] = f"{f}.uuid"
        product = ctx.string(g, "product", f, required=False)
        memory = ctx.integer(g, "memoryMiB", f, default=0, lo=0)
        max_slices = ctx.integer(g, "maxSlices", f, default=7, lo=1, hi=7)
        mig: Optional[list[MigDevice]] = None
        if g.get("mig") is not None:
            raw = g["mig"]
            if not isinstance(raw, list):
                raise ctx.fail(f"{f}.mig", f"must be a list of MIG devices, got {_kind(raw)}")
            mig = []
            total = 0
            for j, md in enumerate(raw):
                mf = f"{f}.mig[{j}]"
                md = ctx.mapping(md, mf, _MIG_KEYS)
                muuid = ctx.string(md, "uuid", mf)
                if muuid in uuids:
                    raise ctx.fail(f"{mf}.uuid", f"duplicate UUID {muuid} (also {uuids[muuid]})")
                uuids[muuid] = f"{mf}.uuid"
                profile = ctx.string(md, "profile", mf)
                slices = mig_profile_slices(profile)
                if slices is None:
                    raise ctx.fail(
                        f"{mf}.profile",
                        f"MIG profile {profile!r} is not of the form '<slices>g.<memory>gb' with 1-7 slices "
                        "(e.g. '1g.10gb', '3g.40gb')",
                    )
                total += slices
                mig.append(MigDevice(uuid=muuid, profile=profile, slices=slices))
            if total > max_slices:
                raise ctx.fail(
                    f"{f}.mig",
                    f"MIG devices use {total} compute slices, more than the GPU's {max_slices}",
                )
        out.append(
            GpuDevice(index=index, uuid=uuid, product=product, memory_mib=memory, mig=mig, max_slices=max_slices)
        )
    return out


def parse_inventory(data: Any, source: str = "static", origin: Optional[str] = None) -> Inventory:
    """Build an Inventory from already-parsed YAML/JSON ``data`` (see the module docstring).

    ``source`` becomes ``Inventory.source``; ``origin`` (a file name) prefixes error messages.
    Raises ValidationError with the field path of the first problem.
    """
    ctx = _Ctx(origin)
    if not isinstance(data, dict):
        raise ctx.fail(None, f"an inventory must be a mapping with a 'nodes' list, got {_kind(data)}")
    for k in data:
        if k != "nodes":
            raise ctx.fail(str(k), "unknown field; an inventory has only 'nodes'")
    if "nodes" not in data:
        raise ctx.fail("nodes", "required")
    nodes_raw = data["nodes"]
    if nodes_raw is None:
        nodes_raw = []
    if not isinstance(nodes_raw, list):
        raise ctx.fail("nodes", f"must be a list, got {_kind(nodes_raw)}")
    nodes: list[Node] = []
    names: dict[str, str] = {}
    uuids: dict[str, str] = {}
    for i, n in enumerate(nodes_raw):
        f = f"nodes[{i}]"
        n = ctx.mapping(n, f, _NODE_KEYS)
        name = ctx.string(n, "name", f)
        if not _NODE_NAME_RE.match(name):
            raise ctx.fail(
                f"{f}.name",
                f"node name {name!r} must be 1-253 letters, digits, '-', '.' or '_', starting and ending "
                "with a letter or digit",
            )
        if name in names:
            raise ctx.fail(f"{f}.name", f"duplicate node name {name!r} (also {names[name]})")
        names[name] = f
        nodes.append(
            Node(
                name=name,
                labels=_labels(ctx, n.get("labels"), f"{f}.labels"),
                taints=_taints(ctx, n.get("taints"), f"{f}.taints"),
                gpus=_gpus(ctx, n.get("gpus"), f"{f}.gpus", uuids),
            )
        )
    return Inventory(nodes=nodes, source=source)


def load_inventory_text(text: str, source: str = "static", *, origin: Optional[str] = None) -> Inventory:
    """Parse inventory YAML ``text``. ``source`` becomes ``Inventory.source`` ("static", "demo");
    ``origin`` (e.g. the file path) prefixes error messages. Raises ValidationError (field None for
    YAML syntax errors, with the line)."""
    ctx = _Ctx(origin)
    if not isinstance(text, str):
        raise ctx.fail(None, "inventory text must be a string")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ctx.fail(None, f"invalid YAML{where}: {problem}") from None
    return parse_inventory(data, source=source, origin=origin)


def load_inventory_file(path: str, source: str = "static") -> Inventory:
    """Read and parse the inventory YAML file ``path`` (errors are prefixed with the path).
    Raises ValidationError(field="inventory") if the file cannot be read."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValidationError(f"cannot read inventory file {path}: {e.strerror or e}", field="inventory") from None
    return load_inventory_text(text, source, origin=str(path))
