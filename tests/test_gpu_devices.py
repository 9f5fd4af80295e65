"""Each job on the GPU it is billed for (issue 32): CUDA_VISIBLE_DEVICES names the GPUs the queue
assigned by UUID where NVML discovered them (CUDA's own order, fastest first, can differ from
NVML's on a host with mixed models), MIG devices by theirs; a static inventory keeps indices, with
CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA counts as NVML does.

What is checked is each job's real environment: the job is a real process that prints it. NVML is
tests/test_inventory.py's stand-in (no GPU here); discovery, configuration, service and local
backend are the real ones.
"""

from __future__ import annotations

import json
import sys

import pytest
from servicetools import service_factory, stop_jobs, tick_until
from test_gpu_memory import CLUSTER, GPU0, INVENTORY, MIG
from test_inventory import FakeNvml

from jupyter_gpuqueue import inventory
from jupyter_gpuqueue.inventory.nvml import discover

PY = sys.executable
ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPUQUEUE_FLAVOR")
PRINT_ENV = [PY, "-c", f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))"]
SLEEP = [PY, "-c", "import time; time.sleep(60)"]

UUID0 = "GPU-5d8e3a1c-0000-4000-8000-000000000000"
UUID1 = "GPU-9b2f7c4e-0000-4000-8000-000000000001"
MIG_UUID = "MIG-1f0c2b7a-0000-4000-8000-00000000a001"


def _env_of(svc, ns: str, name: str, user: str) -> dict:
    tick_until(svc, lambda: svc.get_workload(ns, name)["state"] in ("Succeeded", "Failed"))
    assert svc.get_workload(ns, name)["state"] == "Succeeded"
    line = [ln for ln in svc.read_log(ns, name, user=user)["text"].splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


@pytest.fixture
def discovered(tmp_path, monkeypatch):
    """A service on a machine whose GPUs NVML found: two H100s and an A100 in MIG mode (a mixed
    host, where CUDA's default order and NVML's differ), no configuration given."""
    from jupyter_gpuqueue.service.factory import create_service

    fake = FakeNvml(gpus=[
        {"uuid": UUID0, "name": "NVIDIA H100 80GB HBM3", "mib": 81559, "mig": "unsupported"},
        {"uuid": UUID1, "name": "NVIDIA H100 80GB HBM3", "mib": 81559, "mig": "unsupported"},
        {"uuid": "GPU-a100", "name": "NVIDIA A100-SXM4-80GB", "mib": 81920, "mig": {0: (MIG_UUID, 1, 9856)}},
    ])
    monkeypatch.setattr(inventory, "discover", lambda: discover(fake))
    monkeypatch.setattr("socket.gethostname", lambda: "ws")
    svc = create_service(config_paths=None, inventory_path=None, db_url=None, root_dir=str(tmp_path),
                         data_dir=str(tmp_path / "data"), default_local_queue="default/default-queue",
                         lease_priority_class=None, stop_grace_seconds=0.5)
    svc.configure_costs(utilization_sampler=None)
    svc.restore()
    yield svc
    stop_jobs([svc], grace=0.0)
    svc.ledger.close()


def test_a_job_on_discovered_gpus_sees_them_by_uuid(discovered):
    svc = discovered
    assert svc.inventory.source == "nvml"
    # A host with two models: a node per model, a flavor per family (each billed as what it is).
    assert [(n.name, [g.index for g in n.gpus]) for n in svc.inventory.nodes] == [
        ("ws-nvidia-h100", [0, 1]), ("ws-nvidia-a100-80gb", [2])]
    assert sorted(svc.config.resource_flavors) == ["nvidia-a100-80gb-mig", "nvidia-h100"]
    svc.submit({"name": "holder", "command": SLEEP, "gpus": 1}, user="alice")
    tick_until(svc, lambda: svc.get_workload("default", "holder")["state"] == "Running")
    held = svc.get_workload("default", "holder")
    assert held["placement"][0]["devices"] == ["0"] and held["visibleDevices"] == UUID0
    svc.submit({"name": "env", "command": PRINT_ENV, "gpus": 1}, user="alice")
    env = _env_of(svc, "default", "env", "alice")
    w = svc.get_workload("default", "env")
    # Placed on NVML index 1, named to CUDA by that GPU's UUID, billed as its family.
    assert w["placement"][0]["devices"] == ["1"]
    assert env == {"CUDA_VISIBLE_DEVICES": UUID1, "NVIDIA_VISIBLE_DEVICES": UUID1,
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPUQUEUE_FLAVOR": "nvidia-h100"}
    assert w["visibleDevices"] == UUID1 and w["pricePerHourUsd"] == 3.75

    svc.submit({"name": "slice", "command": PRINT_ENV, "migProfile": "1g.10gb"}, user="alice")
    env = _env_of(svc, "default", "slice", "alice")
    assert env == {"CUDA_VISIBLE_DEVICES": MIG_UUID, "NVIDIA_VISIBLE_DEVICES": MIG_UUID,
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPUQUEUE_FLAVOR": "nvidia-a100-80gb-mig"}
    assert svc.get_workload("default", "slice")["pricePerHourUsd"] == pytest.approx(2.21 / 7)


def test_a_job_on_a_static_inventory_sees_indices_in_pci_bus_order(tmp_path):
    """A static inventory's UUIDs may be made up (the demo's are): indices, counted as NVML counts."""
    svc = service_factory(tmp_path, CLUSTER, INVENTORY, default_local_queue="lab/q", lease_priority_class=None,
                          stop_grace_seconds=0.5)()
    try:
        svc.submit({"name": "env", "command": PRINT_ENV, "gpus": 2}, user="alice")
        env = _env_of(svc, "lab", "env", "alice")
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1" == svc.get_workload("lab", "env")["visibleDevices"]
        assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        svc.submit({"name": "slice", "command": PRINT_ENV, "migProfile": "1g.10gb"}, user="alice")
        assert _env_of(svc, "lab", "slice", "alice")["CUDA_VISIBLE_DEVICES"] == MIG
        assert GPU0 not in svc.get_workload("lab", "env")["visibleDevices"]
    finally:
        stop_jobs([svc], grace=0.0)
        svc.ledger.close()


def test_a_notebook_lease_environment_names_the_same_devices():
    from jupyter_gpuqueue.hub.lease import lease_environment

    env = lease_environment({"namespace": "default", "name": "nb", "visibleDevices": UUID1})
    assert env == {"CUDA_VISIBLE_DEVICES": UUID1, "NVIDIA_VISIBLE_DEVICES": UUID1, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "GPUQUEUE_LEASE": "default/nb"}
