"""GPU memory over time on a job's page (issue 15): NVML's memory of a running job's devices,
sampled with its utilization in one NVML pass, stored in the ledger (revision 0003) and returned
by the job's timeline (``memory``).

This machine has no GPU: NVML is the seam ``inventory/nvml.gpu_samples(uuids, nvml)``, given an
object with the pynvml functions it calls, answering with pynvml's own structs and errors
(``nvmlDeviceGetMemoryInfo``: ``c_nvmlMemory_t`` with ``.total``, ``.free``, ``.used`` in bytes;
a MIG device's handle, found by its UUID, answers for the MIG device's own memory and raises
NOT_SUPPORTED for its utilization). Everything else is real: the local backend's processes, the
SQLite ledger, the Jupyter server's REST API.
"""

from __future__ import annotations

import sys

import pynvml
import pytest
from test_rest import call, check_schema, ok, openapi_doc, wait_for_state  # noqa: F401 (fixtures)

from servicetools import tick_until

from jupyter_gpuqueue.inventory.nvml import DeviceSample, gpu_samples

MIB = 1024 * 1024
GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-00000000-0000-0000-0000-000000000001"
MIG = "MIG-00000000-0000-0000-0000-00000000a001"  # a 1g.10gb MIG device of GPU 2
LOST = "GPU-00000000-0000-0000-0000-00000000dead"  # fell off the bus


class Nvml:
    """pynvml's functions for sampling: GPU0 and GPU1 (80 GiB A100s), the MIG device ``MIG``
    (9856 MiB), ``LOST`` (found, but every query raises GPU_IS_LOST). Each pass (nvmlInit) the
    memory in use grows by 1 GiB, as a training job's would."""

    def __init__(self):
        self.used_mib = {GPU0: 30000, GPU1: 12000, MIG: 2000}
        self.total_mib = {GPU0: 81920, GPU1: 81920, MIG: 9856}
        self.util = {GPU0: 91, GPU1: 35}
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        self.inits += 1
        if self.inits > 1:
            for u in self.used_mib:
                self.used_mib[u] += 1024

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        assert isinstance(uuid, bytes)  # pynvml passes it to C as char*
        uuid = uuid.decode()
        if uuid not in self.total_mib and uuid != LOST:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig" if uuid.startswith("MIG-") else "gpu", uuid)

    def nvmlDeviceGetUtilizationRates(self, h):
        if h[1] == LOST:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if h[0] == "mig":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = self.util[h[1]], 20
        return u

    def nvmlDeviceGetMemoryInfo(self, h):
        if h[1] == LOST:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        m = pynvml.c_nvmlMemory_t()
        m.total = self.total_mib[h[1]] * MIB
        m.used = self.used_mib[h[1]] * MIB + 512 * 1024  # and half a MiB
        m.free = m.total - m.used
        return m


def test_one_nvml_pass_samples_utilization_and_memory_and_invents_nothing():
    nvml = Nvml()
    got = gpu_samples([GPU0, MIG, LOST, "GPU-not-here", GPU1, GPU0], nvml)
    assert got == {
        GPU0: DeviceSample(percent=91.0, memory_used_mib=30000.5, memory_total_mib=81920.0),
        GPU1: DeviceSample(percent=35.0, memory_used_mib=12000.5, memory_total_mib=81920.0),
        # a MIG device: its own memory (not its GPU's); NVML cannot sample its utilization
        MIG: DeviceSample(percent=None, memory_used_mib=2000.5, memory_total_mib=9856.0),
    }  # the lost GPU and the unknown UUID are left out, not zeros
    assert nvml.inits == nvml.shutdowns == 1  # one pass

    # A device whose memory NVML cannot read keeps its utilization, and nothing more.
    class NoMemory(Nvml):
        def nvmlDeviceGetMemoryInfo(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    assert gpu_samples([GPU0, MIG], NoMemory()) == {GPU0: DeviceSample(91.0, None, None)}

    class NoNvml:  # no driver
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    assert gpu_samples([GPU0], NoNvml()) == {}
    assert gpu_samples([], Nvml()) == {}


CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, nvidia.com/mig-1g.10gb]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}, {name: nvidia.com/mig-1g.10gb, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: lab}
spec: {clusterQueue: cq}
"""

INVENTORY = f"""
nodes:
- name: box
  labels: {{}}
  gpus:
  - {{index: 0, uuid: {GPU0}, product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}}
  - {{index: 1, uuid: {GPU1}, product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}}
  - index: 2
    uuid: GPU-00000000-0000-0000-0000-000000000002
    product: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig: [{{uuid: {MIG}, profile: 1g.10gb}}]
"""


@pytest.fixture
def service(tmp_path):
    from servicetools import service_factory, stop_jobs

    svc = service_factory(tmp_path, CLUSTER, INVENTORY, default_local_queue="lab/q", lease_priority_class=None,
                          stop_grace_seconds=0.5)(restore=False)
    svc.nvml = Nvml()
    svc.configure_costs(utilization_interval=0.1, utilization_sampler=lambda uuids: gpu_samples(uuids, svc.nvml))
    svc.restore()
    yield svc
    stop_jobs([svc], grace=0.0)
    svc.ledger.close()


def test_a_running_jobs_memory_is_stored_and_its_timeline_returns_it(service):
    svc = service
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    train = svc.submit({"name": "train", "command": sleep, "gpus": 2}, user="alice")
    small = svc.submit({"name": "small", "command": sleep, "migProfile": "1g.10gb"}, user="alice")
    tick_until(svc, lambda: len({s["at"] for s in svc.timeline("lab", "train")["memory"]}) >= 3
               and len(svc.timeline("lab", "small")["memory"]) >= 3)
    t = svc.timeline("lab", "train")
    assert {s["device"] for s in t["memory"]} == {GPU0, GPU1}
    mine = [s for s in t["memory"] if s["device"] == GPU0]
    assert [s["at"] for s in mine] == sorted(s["at"] for s in mine)  # oldest first
    used = [s["memoryUsedMiB"] for s in mine]
    # NVML's bytes / 2^20, as it answered in each pass (1 GiB more each time): nothing made up
    assert all(u - 30000.5 == pytest.approx(round(u - 30000.5)) and (u - 30000.5) % 1024 == 0 for u in used)
    assert used == sorted(used) and used[-1] > used[0]
    assert all(s["memoryTotalMiB"] == 81920.0 for s in t["memory"])
    assert {s["device"] for s in t["utilization"]} == {GPU0, GPU1}  # the same pass
    assert {s["at"] for s in t["memory"]} <= {s["at"] for s in t["utilization"]}

    # The MIG job: its own device's memory; no utilization (NVML cannot sample MIG devices).
    m = svc.timeline("lab", "small")
    assert {s["device"] for s in m["memory"]} == {MIG}
    assert all(s["memoryTotalMiB"] == 9856.0 and 2000.5 <= s["memoryUsedMiB"] < 9856 for s in m["memory"])
    assert m["utilization"] == []

    # The reports' average utilization is the utilization samples' alone, as before.
    jobs = {j["name"]: j for j in svc.report("jobs")["items"]}
    expected = svc.ledger.utilization()[train["uid"]][0]
    assert expected == pytest.approx((91 + 35) / 2)
    assert jobs["train"]["avgGpuUtilization"] == pytest.approx(expected)
    assert jobs["small"]["avgGpuUtilization"] is None and small["uid"] not in svc.ledger.utilization()


def test_memory_samples_are_checked_and_go_with_their_workload(tmp_path):
    from jupyter_gpuqueue.errors import ValidationError
    from jupyter_gpuqueue.ledger import Ledger

    led = Ledger(str(tmp_path / "l.sqlite"))
    led.add_workload({"uid": "u1", "namespace": "n", "name": "a", "owner": "o", "local_queue": "q",
                      "state": "Running", "spec": {}, "created_at": 1.0})
    assert led.add_memory_samples([("u1", GPU0, 2.0, 100.0, 81920.0), ("u1", MIG, 2.0, 5.0, None)]) == 2
    assert led.memory_samples("u1") == [
        {"device": GPU0, "at": 2.0, "memoryUsedMiB": 100.0, "memoryTotalMiB": 81920.0},
        {"device": MIG, "at": 2.0, "memoryUsedMiB": 5.0, "memoryTotalMiB": None}]
    for bad, field in (((-1.0, 10.0), "used_mib"), (("lots", 10.0), "used_mib"), ((1.0, 0.0), "total_mib")):
        with pytest.raises(ValidationError) as e:
            led.add_memory_samples([("u1", GPU0, 3.0, *bad)])
        assert e.value.field == field
    assert len(led.memory_samples("u1")) == 2  # nothing written on error
    led.delete_workload("u1")
    assert led.memory_samples("u1") == []
    led.close()


async def test_the_rest_timeline_has_the_memory_samples_as_documented(jp_fetch, gpuqueue_service, check_schema):
    """The server's answer, with samples the service took of a real running job (demo cluster and
    inventory; NVML through the seam), matches the OpenAPI document's Timeline."""
    import asyncio

    svc = gpuqueue_service
    h100 = {n.name: n for n in svc.inventory.nodes}["node-b"].gpus[0].uuid
    nvml = Nvml()
    nvml.used_mib[h100], nvml.total_mib[h100], nvml.util[h100] = 40000, 81559, 77
    svc.costs.utilization_interval = 0.1
    svc.costs.utilization_sampler = lambda uuids: gpu_samples(uuids, nvml)
    await ok(jp_fetch, "workloads", method="POST", expect=201, body={
        "name": "mem", "localQueue": "team-b/team-b-queue", "command": [sys.executable, "-c", "import time; time.sleep(30)"],
        "gpus": 1, "flavor": "nvidia-h100", "maxRuntime": "5m"})
    try:
        await wait_for_state(jp_fetch, "team-b", "mem", ("Running",))
        for _ in range(100):
            t = await ok(jp_fetch, "workloads", "team-b", "mem", "timeline")
            if len(t["memory"]) >= 2:
                break
            await asyncio.sleep(0.1)
        check_schema("Timeline", t)
        assert {s["device"] for s in t["memory"]} == {h100}, t["memory"]
        assert t["memory"][0]["memoryUsedMiB"] >= 40000.5 and t["memory"][0]["memoryTotalMiB"] == 81559.0
        assert [s["percent"] for s in t["utilization"]][:1] == [77.0]
    finally:
        await call(jp_fetch, "workloads", "team-b", "mem", method="DELETE")


class NvmlV2(Nvml):
    """A driver with ``nvmlDeviceGetMemoryInfo_v2`` (R510 on): version 2 leaves the 480 MiB the
    driver reserves out of ``used`` (as nvidia-smi shows it; version 1 counts them as used: what
    the issue measured on an idle H100). A MIG device's handle answers version 1 only here."""

    RESERVED_MIB = 480

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if version is None:
            m = super().nvmlDeviceGetMemoryInfo(h)
            m.used += self.RESERVED_MIB * MIB
            m.free -= self.RESERVED_MIB * MIB
            return m
        assert version == pynvml.nvmlMemory_v2
        if h[0] == "mig":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        v1 = super().nvmlDeviceGetMemoryInfo(h)
        m = pynvml.c_nvmlMemory_v2_t()
        m.version, m.total, m.reserved = version, v1.total, self.RESERVED_MIB * MIB
        m.used, m.free = v1.used, v1.total - v1.used - self.RESERVED_MIB * MIB
        return m


def test_memory_is_read_as_nvidia_smi_shows_it_version_2_then_version_1():
    got = gpu_samples([GPU0, MIG], NvmlV2())
    # v2: without the driver's reserved memory (what nvidia-smi shows)
    assert got[GPU0] == DeviceSample(91.0, 30000.5, 81920.0)
    assert got[MIG] == DeviceSample(None, 2000.5 + 480, 9856.0)  # v2 not supported there: v1

    class OldDriver(NvmlV2):  # before R510: no nvmlDeviceGetMemoryInfo_v2 in the library
        def nvmlDeviceGetMemoryInfo(self, h, version=None):
            if version is not None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return super().nvmlDeviceGetMemoryInfo(h)

    assert gpu_samples([GPU0], OldDriver())[GPU0] == DeviceSample(91.0, 30000.5 + 480, 81920.0)
    # The binding the service imports passes the version through (nvidia-ml-py's signature).
    import inspect

    assert "version" in inspect.signature(pynvml.nvmlDeviceGetMemoryInfo).parameters
    assert pynvml.nvmlMemory_v2 == 40 | 2 << 24


def test_nvml_is_initialised_once_and_shut_down_when_the_service_stops(tmp_path):
    """The service's sampler initialises NVML at its first pass, not at each one (each nvmlInit
    held the event loop ~17 ms), and shuts it down when the service stops."""
    import asyncio

    from servicetools import service_factory, stop_jobs

    from jupyter_gpuqueue.inventory.nvml import NvmlSampler

    svc = service_factory(tmp_path, CLUSTER, INVENTORY, default_local_queue="lab/q", lease_priority_class=None,
                          stop_grace_seconds=0.5)(restore=False)
    svc.inventory.source = "nvml"  # as discovered: the sampler is NVML's
    nvml = NvmlV2()
    svc.configure_costs(utilization_interval=0.1)
    assert isinstance(svc.costs.utilization_sampler, NvmlSampler)
    svc.costs.utilization_sampler = sampler = NvmlSampler(nvml)
    svc.restore()
    try:
        svc.submit({"name": "train", "command": [sys.executable, "-c", "import time; time.sleep(60)"], "gpus": 1},
                   user="alice")
        tick_until(svc, lambda: len({s["at"] for s in svc.timeline("lab", "train")["memory"]}) >= 4)
        assert (nvml.inits, nvml.shutdowns) == (1, 0) == (sampler.inits, sampler.shutdowns)
        assert {s["memoryUsedMiB"] for s in svc.timeline("lab", "train")["memory"]} == {30000.5}  # v2, one init
    finally:
        stop_jobs([svc], grace=0.0)
        asyncio.run(svc.stop())
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    # Without a driver: nothing sampled, and nvmlInit is not tried at every pass.
    from jupyter_gpuqueue.inventory.nvml import NvmlSampler as S

    class NoDriver(Nvml):
        def nvmlInit(self):
            self.inits += 1
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    nd = NoDriver()
    s = S(nd)
    assert [s([GPU0]) for _ in range(5)] == [{}] * 5 and nd.inits == 1
    s.close()
    assert nd.shutdowns == 0
