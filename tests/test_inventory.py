"""Inventory loaders: static YAML, NVML discovery (through a fake NVML), and the fallback order."""

from __future__ import annotations

import os

import pynvml
import pytest

import jupyter_gpuqueue.inventory as inventory
from jupyter_gpuqueue.engine.model import Inventory
from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.inventory import discover, load_inventory, load_inventory_file, load_inventory_text

GOOD = """
nodes:
- name: node-a
  labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB, nvidia.com/mig.strategy: mixed, nvidia.com/gpu.count: 2}
  taints: [{key: dedicated, value: research, effect: NoSchedule}]
  gpus:
  - {index: 0, uuid: GPU-aaaa, product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}
  - index: 6
    uuid: GPU-bbbb
    product: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig:
    - {uuid: MIG-1111, profile: 3g.40gb}
    - {uuid: MIG-2222, profile: 2g.20gb}
    - {uuid: MIG-3333, profile: 1g.10gb}
    - {uuid: MIG-4444, profile: 1g.10gb}
- name: node-b
  gpus:
  - {index: 0, uuid: GPU-cccc, product: NVIDIA L4, memoryMiB: 23034}
"""


def test_static_inventory_parses():
    inv = load_inventory_text(GOOD, "static")
    assert isinstance(inv, Inventory) and inv.source == "static"
    a, b = inv.nodes
    assert a.name == "node-a" and b.name == "node-b"
    assert a.labels["nvidia.com/gpu.count"] == "2"  # label values are strings
    assert (a.taints[0].key, a.taints[0].value, a.taints[0].effect) == ("dedicated", "research", "NoSchedule")
    g0, g6 = a.gpus
    assert (g0.index, g0.uuid, g0.memory_mib, g0.mig) == (0, "GPU-aaaa", 81920, None)
    assert [(m.uuid, m.profile, m.slices, m.resource) for m in g6.mig] == [
        ("MIG-1111", "3g.40gb", 3, "nvidia.com/mig-3g.40gb"),
        ("MIG-2222", "2g.20gb", 2, "nvidia.com/mig-2g.20gb"),
        ("MIG-3333", "1g.10gb", 1, "nvidia.com/mig-1g.10gb"),
        ("MIG-4444", "1g.10gb", 1, "nvidia.com/mig-1g.10gb"),
    ]
    assert b.labels == {} and b.taints == [] and b.gpus[0].product == "NVIDIA L4"


@pytest.mark.parametrize(
    "text, field, words",
    [
        ("- a\n- b\n", None, "mapping"),
        ("nodes: {name: x}", "nodes", "list"),
        ("gpus: []", "gpus", "unknown"),
        ("nodes:\n- {name: a}\n- {name: a}", "nodes[1].name", "duplicate node name"),
        ("nodes:\n- {gpus: []}", "nodes[0].name", "required"),
        ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1}, {index: 0, uuid: G2}]", "nodes[0].gpus[1].index",
         "duplicate GPU index"),
        ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1}]\n- name: b\n  gpus: [{index: 0, uuid: G1}]",
         "nodes[1].gpus[0].uuid", "duplicate UUID"),
        ("nodes:\n- name: a\n  gpus: [{index: -1, uuid: G1}]", "nodes[0].gpus[0].index", ">= 0"),
        ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1, memoryMib: 5}]", "nodes[0].gpus[0].memoryMib",
         "unknown field"),
        ("nodes:\n- name: a\n  gpus:\n  - {index: 0, uuid: G1}\n  - {index: 1, uuid: G2}\n"
         "  - {index: 2, uuid: G3, mig: [{uuid: M1, profile: 1g.10gb}, {uuid: M2, profile: 10gb}]}",
         "nodes[0].gpus[2].mig[1].profile", "1g.10gb"),
        ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1, mig: [{uuid: M1, profile: 4g.40gb},"
         " {uuid: M2, profile: 4g.40gb}]}]", "nodes[0].gpus[0].mig", "more than the GPU's 7"),
        ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1, mig: [{uuid: G1, profile: 1g.10gb}]}]",
         "nodes[0].gpus[0].mig[0].uuid", "duplicate UUID"),
        ("nodes:\n- name: a\n  taints: [{key: k, effect: Sometimes}]", "nodes[0].taints[0].effect", "NoSchedule"),
        ("nodes:\n- name: 'bad name'", "nodes[0].name", "node name"),
        ("nodes: [\n", None, "invalid YAML at line"),
    ],
)
def test_static_inventory_errors_name_the_field(text, field, words):
    with pytest.raises(ValidationError) as e:
        load_inventory_text(text, "static", origin="inv.yaml")
    assert e.value.field == field
    assert words in e.value.message and e.value.message.startswith("inv.yaml: ")


def test_a30_max_slices_is_respected():
    text = ("nodes:\n- name: a\n  gpus: [{index: 0, uuid: G1, maxSlices: 4, mig: [{uuid: M1, profile: 2g.12gb},"
            " {uuid: M2, profile: 2g.12gb}, {uuid: M3, profile: 1g.6gb}]}]")
    with pytest.raises(ValidationError) as e:
        load_inventory_text(text, "static")
    assert e.value.field == "nodes[0].gpus[0].mig"


def test_load_inventory_file_and_missing_file(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text(GOOD)
    inv = load_inventory_file(str(p))
    assert inv.source == "static" and len(inv.nodes) == 2
    assert load_inventory(str(p)).source == "static"
    with pytest.raises(ValidationError) as e:
        load_inventory_file(str(tmp_path / "missing.yaml"))
    assert e.value.field == "inventory" and "missing.yaml" in e.value.message


# ------------------------------------------------------------------------ NVML through a fake


class _Mem:
    def __init__(self, total):
        self.total, self.free, self.used = total, total, 0


class FakeNvml:
    """The pynvml functions discover() calls, with pynvml's return shapes and error classes, for a
    machine with an A100-80GB in MIG mode (3g.40gb + 2g.20gb + 1g.10gb) and one without MIG."""

    NVMLError = pynvml.NVMLError
    MIB = 1024 * 1024

    def __init__(self, gpus=None, init_error=None):
        self.init_error = init_error
        self.shutdown_calls = 0
        self.gpus = gpus if gpus is not None else [
            {"uuid": "GPU-0a1b", "name": "NVIDIA A100-SXM4-80GB", "mib": 81920, "mig": None},
            {"uuid": "GPU-1c2d", "name": "NVIDIA A100-SXM4-80GB", "mib": 81920,
             # slots of nvmlDeviceGetMigDeviceHandleByIndex: (uuid, gpuInstanceSliceCount, memorySizeMB)
             "mig": {0: ("MIG-aaaa", 3, 40192), 2: ("MIG-bbbb", 2, 19968), 5: ("MIG-cccc", 1, 9856)}},
        ]

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetIndex(self, h):
        return h[1]

    def _gpu(self, h):
        return self.gpus[h[1]]

    def nvmlDeviceGetUUID(self, h):
        if h[0] == "mig":
            return self._gpu(("gpu", h[1]))["mig"][h[2]][0]
        return self._gpu(h)["uuid"]

    def nvmlDeviceGetName(self, h):
        return self._gpu(h)["name"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return _Mem(self._gpu(h)["mib"] * self.MIB)

    def nvmlDeviceGetMigMode(self, h):
        mig = self._gpu(h)["mig"]
        if mig == "unsupported":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE if mig else pynvml.NVML_DEVICE_MIG_DISABLE, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j not in self._gpu(h)["mig"]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h[1], j)

    def nvmlDeviceGetAttributes(self, mh):
        _uuid, slices, mb = self._gpu(("gpu", mh[1]))["mig"][mh[2]]
        attrs = pynvml.c_nvmlDeviceAttributes()
        attrs.gpuInstanceSliceCount = slices
        attrs.computeInstanceSliceCount = slices
        attrs.memorySizeMB = mb
        return attrs


def test_nvml_discovery_with_a_mig_gpu(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "workstation-1")
    fake = FakeNvml()
    inv = discover(fake)
    assert inv.source == "nvml" and fake.shutdown_calls == 1
    (node,) = inv.nodes
    assert node.name == "workstation-1"
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node.labels["nvidia.com/gpu.count"] == "2"
    assert node.labels["nvidia.com/mig.strategy"] == "mixed"
    g0, g1 = node.gpus
    assert (g0.index, g0.uuid, g0.product, g0.memory_mib, g0.mig) == (0, "GPU-0a1b", "NVIDIA A100-SXM4-80GB", 81920, None)
    assert g1.index == 1 and g1.max_slices == 7
    assert [(m.uuid, m.profile, m.slices) for m in g1.mig] == [
        ("MIG-aaaa", "3g.40gb", 3), ("MIG-bbbb", "2g.20gb", 2), ("MIG-cccc", "1g.10gb", 1),
    ]


def test_nvml_without_mig_and_a100_40gb_profile_names(monkeypatch):
    fake = FakeNvml(gpus=[
        {"uuid": "GPU-l4", "name": "NVIDIA L4", "mib": 23034, "mig": "unsupported"},
    ])
    inv = discover(fake)
    assert inv.nodes[0].labels["nvidia.com/mig.strategy"] == "none"
    assert inv.nodes[0].labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert inv.nodes[0].gpus[0].mig is None
    fake40 = FakeNvml(gpus=[{"uuid": "GPU-40", "name": "NVIDIA A100-SXM4-40GB", "mib": 40960,
                             "mig": {0: ("MIG-x", 1, 4864), 1: ("MIG-y", 3, 19968)}}])
    assert [m.profile for m in discover(fake40).nodes[0].gpus[0].mig] == ["1g.5gb", "3g.20gb"]


def test_nvml_absent_or_empty_gives_none():
    fake = FakeNvml(init_error=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert discover(fake) is None
    empty = FakeNvml(gpus=[])
    assert discover(empty) is None and empty.shutdown_calls == 1


def _nvml_gpu_uuids() -> list[str]:
    """This machine's GPUs as NVML itself lists them (an independent look: pynvml directly, not
    through ``discover``); empty without a driver or without GPUs."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        return [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def test_discover_on_this_machine_matches_nvml():
    """No GPU (no driver): None. On a GPU host: one node with exactly NVML's GPUs, in its order
    (the test holds on either kind of machine)."""
    uuids = _nvml_gpu_uuids()
    inv = discover()
    if not uuids:
        assert inv is None
        return
    assert inv is not None and inv.source == "nvml" and len(inv.nodes) == 1
    assert [g.uuid for g in inv.nodes[0].gpus] == uuids
    assert [g.index for g in inv.nodes[0].gpus] == list(range(len(uuids)))


def test_load_inventory_falls_back_nvml_then_demo(monkeypatch, tmp_path):
    monkeypatch.setattr(inventory, "discover", lambda: discover(FakeNvml()))
    assert load_inventory().source == "nvml"
    demo = tmp_path / "inventory.yaml"
    demo.write_text(GOOD)
    monkeypatch.setattr(inventory, "discover", lambda: None)
    monkeypatch.setattr(inventory, "DEMO_INVENTORY_PATH", str(demo))
    inv = load_inventory()
    assert inv.source == "demo" and [n.name for n in inv.nodes] == ["node-a", "node-b"]


def test_shipped_demo_inventory_is_valid():
    if not os.path.exists(inventory.DEMO_INVENTORY_PATH):
        pytest.skip("demo/inventory.yaml not written yet")
    inv = load_inventory_file(inventory.DEMO_INVENTORY_PATH, source="demo")
    assert inv.nodes and all(n.gpus for n in inv.nodes)


def test_default_config_for_a_discovered_workstation_admits_onto_its_gpus():
    """With real GPUs and no configuration, the generated queue matches the hardware exactly."""
    from jupyter_gpuqueue.engine.model import GPU, GpuDevice, Inventory, MigDevice, Node, PodSet, Workload
    from jupyter_gpuqueue.engine.scheduler import Scheduler
    from jupyter_gpuqueue.inventory.default_config import config_for_inventory

    inv = Inventory(
        nodes=[Node("ws", {"nvidia.com/gpu.product": "NVIDIA-H200"}, gpus=[
            GpuDevice(0, "GPU-a"),
            GpuDevice(1, "GPU-b", mig=[MigDevice("MIG-1", "1g.18gb", 1), MigDevice("MIG-2", "3g.71gb", 3)]),
        ])],
        source="nvml",
    )
    cfg = config_for_inventory(inv)
    assert sorted(cfg.resource_flavors) == ["nvidia-h200", "nvidia-h200-mig"]
    cq = cfg.cluster_queues["default-cq"]
    assert [(f.name, [(r.name, r.nominal_quota) for r in f.resources]) for g in cq.resource_groups for f in g.flavors] == [
        ("nvidia-h200", [(GPU, 1)]),
        ("nvidia-h200-mig", [("nvidia.com/mig-1g.18gb", 1), ("nvidia.com/mig-3g.71gb", 1)]),
    ]
    s = Scheduler(cfg, inv)
    s.add_workload(Workload("default", "whole", "default-queue", [PodSet("main", 1, {GPU: 1})], uid="1"))
    s.add_workload(Workload("default", "slice", "default-queue", [PodSet("main", 1, {"nvidia.com/mig-3g.71gb": 1})], uid="2"))
    s.run_until_stable(0)
    assert s.admitted["default/whole"].admission.placements[0].devices == ["0"]
    assert s.admitted["default/slice"].admission.placements[0].devices == ["MIG-2"]
