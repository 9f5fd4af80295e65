"""MIG as a first-class, billed resource: slices are packed so that whole GPUs stay free; NVML
discovers MIG GPU instances and samples utilization through the NVML seam (a pynvml-shaped
object: this machine has no GPU); a slice costs its share of the GPU's compute slices."""

from __future__ import annotations

import pytest
import pynvml

from jupyter_gpuqueue.engine.model import GPU, GpuDevice, Inventory, MigDevice, Node, PodSet, ResourceFlavor
from jupyter_gpuqueue.engine.placement import DeviceAllocator
from jupyter_gpuqueue.inventory.nvml import discover, utilization_rates
from jupyter_gpuqueue.ledger import Prices

MIG_1G = "nvidia.com/mig-1g.10gb"


def mig_gpu(index: int, node: str, profiles=("1g.10gb",) * 7) -> GpuDevice:
    devs = [MigDevice(uuid=f"MIG-{node}-{index}-{j}", profile=p, slices=int(p[0])) for j, p in enumerate(profiles)]
    return GpuDevice(index=index, uuid=f"GPU-{node}-{index}", product="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig=devs)


def place(alloc: DeviceAllocator, key: str, resource: str, qty: int = 1, flavor=None):
    placed, why = alloc.place(key, [(PodSet("main", 1, {resource: qty}), 1, {resource: "mig"})],
                              {"mig": flavor or ResourceFlavor("mig")})
    assert placed is not None, why
    return placed[0]


def test_slices_are_packed_onto_the_busiest_gpu_so_whole_gpus_stay_free():
    inv = Inventory(nodes=[Node("n1", {}, gpus=[mig_gpu(0, "n1"), mig_gpu(1, "n1")])])
    alloc = DeviceAllocator(inv)
    first = place(alloc, "ns/a", MIG_1G)
    gpu_of = {d.uuid: g.index for g in inv.nodes[0].gpus for d in g.mig}
    packed_on = gpu_of[first.devices[0]]
    for k in range(6):  # the next six slices go to the same GPU, the other stays untouched
        p = place(alloc, f"ns/b{k}", MIG_1G)
        assert gpu_of[p.devices[0]] == packed_on
    assert all(d.uuid not in alloc.owner for g in inv.nodes[0].gpus if g.index != packed_on for d in g.mig)
    # The eighth slice must open the other GPU.
    assert gpu_of[place(alloc, "ns/c", MIG_1G).devices[0]] != packed_on
    # Freeing a slice on the full GPU: the next request fills that hole, not the newly opened GPU's.
    alloc.release("ns/b3")
    assert gpu_of[place(alloc, "ns/d", MIG_1G).devices[0]] == packed_on


def test_slices_pack_onto_the_node_already_in_use_and_whole_gpus_are_best_fit():
    inv = Inventory(nodes=[
        Node("n1", {}, gpus=[mig_gpu(0, "n1")]),
        Node("n2", {}, gpus=[mig_gpu(0, "n2")]),
        Node("n3", {}, gpus=[GpuDevice(index=i, uuid=f"GPU-n3-{i}") for i in range(2)]),
        Node("n4", {}, gpus=[GpuDevice(index=i, uuid=f"GPU-n4-{i}") for i in range(4)]),
    ])
    alloc = DeviceAllocator(inv)
    nodes = {place(alloc, f"ns/s{k}", MIG_1G).node for k in range(3)}
    assert len(nodes) == 1  # all three slices on one node's GPU; the other MIG GPU stays whole
    # A 1-GPU job goes to the node with the fewest free GPUs that fit (n3), keeping n4's 4 together.
    assert place(alloc, "ns/one", GPU).node == "n3"
    assert place(alloc, "ns/four", GPU, qty=4).node == "n4"


def test_a_slice_costs_its_share_of_the_gpus_compute_slices():
    prices = Prices({"nvidia-a100": 2.21})
    assert prices.price("nvidia-a100-mig") == 2.21  # a -mig flavor is its base GPU, split
    assert prices.usd_per_hour("nvidia-a100-mig", MIG_1G, 1) == pytest.approx(2.21 / 7)
    assert prices.usd_per_hour("nvidia-a100-mig", "nvidia.com/mig-3g.40gb", 1) == pytest.approx(3 * 2.21 / 7)
    assert prices.usd_per_hour("nvidia-a100-mig", "nvidia.com/mig-1c.3g.40gb", 1) == pytest.approx(3 * 2.21 / 7)
    seven = sum(prices.usd_per_hour("nvidia-a100-mig", MIG_1G, 1) for _ in range(7))
    assert seven == pytest.approx(prices.usd_per_hour("nvidia-a100", GPU, 1))  # 7 × 1g = one GPU


class Nvml:
    """The pynvml functions the inventory uses, with pynvml's shapes and errors, for one A100 in
    MIG mode (3g.40gb + 2g.20gb + 2 × 1g.10gb) and one whole A100; NVML cannot sample MIG devices."""

    MIB = 1024 * 1024

    def __init__(self):
        self.mig = {0: ("MIG-3g", 3, 40192), 1: ("MIG-2g", 2, 19968), 4: ("MIG-1g-a", 1, 9856), 5: ("MIG-1g-b", 1, 9856)}
        self.util = {"GPU-whole": 87, "GPU-mig": 0}
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetIndex(self, h):
        return h[1]

    def nvmlDeviceGetUUID(self, h):
        return self.mig[h[2]][0] if h[0] == "mig" else ("GPU-mig", "GPU-whole")[h[1]]

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, h):
        class M:
            total = 81920 * Nvml.MIB
        return M()

    def nvmlDeviceGetMigMode(self, h):
        return [pynvml.NVML_DEVICE_MIG_ENABLE if h[1] == 0 else pynvml.NVML_DEVICE_MIG_DISABLE, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j not in self.mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h[1], j)

    def nvmlDeviceGetAttributes(self, mh):
        _u, slices, mb = self.mig[mh[2]]
        a = pynvml.c_nvmlDeviceAttributes()
        a.gpuInstanceSliceCount = slices
        a.memorySizeMB = mb
        return a

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if uuid.startswith("MIG-"):
            return ("mig-handle", uuid)
        if uuid not in self.util:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("handle", uuid)

    def nvmlDeviceGetUtilizationRates(self, h):
        if h[0] == "mig-handle":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = self.util[h[1]], 10
        return u


def test_nvml_discovers_mig_gpu_instances_and_places_onto_them():
    nvml = Nvml()
    inv = discover(nvml)
    mig, whole = inv.nodes[0].gpus
    assert [(d.uuid, d.profile, d.slices) for d in mig.mig] == [
        ("MIG-3g", "3g.40gb", 3), ("MIG-2g", "2g.20gb", 2), ("MIG-1g-a", "1g.10gb", 1), ("MIG-1g-b", "1g.10gb", 1)]
    assert whole.mig is None and inv.nodes[0].labels["nvidia.com/mig.strategy"] == "mixed"
    alloc = DeviceAllocator(inv)
    assert alloc.totals(MIG_1G, inv.nodes) == (2, 2)
    assert place(alloc, "ns/x", "nvidia.com/mig-3g.40gb").devices == ["MIG-3g"]


def test_nvml_utilization_is_sampled_for_whole_gpus_and_never_invented():
    nvml = Nvml()
    assert utilization_rates(["GPU-whole", "MIG-1g-a", "GPU-gone"], nvml) == {"GPU-whole": 87.0}
    assert nvml.inits == nvml.shutdowns == 1

    class NoNvml:
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    assert utilization_rates(["GPU-whole"], NoNvml()) == {}
    assert utilization_rates([], nvml) == {}
    assert utilization_rates(["GPU-not-a-real-uuid"]) == {}  # the real pynvml: no driver here, or no such GPU


# --------------------------------------------------------------------------- the service side

SPOT_CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: l4-spot}
spec:
  nodeLabels: {model: a}
  nodeTaints: [{key: gpuqueue.io/spot, value: "true", effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: l4-spot
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: cq}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""

INVENTORY = """
nodes:
- name: box
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: NVIDIA L4, memoryMiB: 23034}
"""

SPOT_JOB = r"""
import json, os, signal, sys, time
def notice(signum, frame):
    with open(os.environ["GPUQUEUE_PREEMPTION_NOTICE_FILE"]) as f:
        n = json.load(f)
    print("notice", signal.Signals(signum).name, n["reason"], round(n["deadline"] - time.time()), time.time(), flush=True)
def term(signum, frame):  # one write: a second SIGTERM (the group's and the wrapper's) cannot split it
    os.write(1, ("term %r\n" % time.time()).encode())
    sys.exit(0)
signal.signal(signal.SIGUSR1, notice)
signal.signal(signal.SIGTERM, term)
print("spot", os.environ["GPUQUEUE_SPOT"], os.environ["GPUQUEUE_PREEMPTION_SIGNAL"], flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def spot_service(tmp_path):
    import sys

    from servicetools import service_factory, stop_jobs

    svc = service_factory(tmp_path, SPOT_CLUSTER, INVENTORY, prices={"l4-spot": 0.3}, default_local_queue="team-a/q",
                          stop_grace_seconds=2.0, lease_priority_class=None)(restore=False)
    svc.configure_costs(spot_flavors=["l4-spot"], spot_grace_seconds=1.0, utilization_interval=0.2,
                        utilization_sampler=lambda uuids: utilization_rates(uuids, Nvml0()))
    svc.restore()
    svc.py = sys.executable
    yield svc
    stop_jobs([svc], grace=0.2)
    svc.ledger.close()


class Nvml0(Nvml):
    """The NVML seam answering for the test inventory's GPU 0."""

    def __init__(self):
        super().__init__()
        self.util = {"GPU-00000000-0000-0000-0000-000000000000": 64}


def tick_until(svc, pred, timeout=20.0):
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_spot_jobs_are_told_before_preemption_and_utilization_is_sampled(spot_service):
    from jupyter_gpuqueue.errors import ValidationError

    svc = spot_service
    st = lambda name: svc.get_workload("team-a", name)  # noqa: E731
    # Only submissions that accept spot tolerate the spot flavor's taint.
    with pytest.raises(ValidationError) as e:
        svc.submit({"name": "on-demand", "command": [svc.py, "-c", "print(1)"], "gpus": 1}, user="alice")
    assert e.value.field == "gpus" and "exceeds max quota" in e.value.message
    w = svc.submit({"name": "cheap", "command": [svc.py, "-c", SPOT_JOB], "gpus": 1, "acceptSpot": True,
                    "priorityClass": "low"}, user="alice")
    assert w["acceptSpot"] is True and w["pricePerHourUsd"] == pytest.approx(0.3)
    tick_until(svc, lambda: "spot 1 SIGUSR1" in svc.read_log("team-a", "cheap", user="alice")["text"])
    tick_until(svc, lambda: svc.ledger.utilization().get(w["uid"]) is not None)  # NVML samples (the seam)
    # A high-priority job preempts it: first the notice (file + SIGUSR1), SIGTERM one grace period later.
    svc.submit({"name": "urgent", "command": [svc.py, "-c", "import time; time.sleep(30)"], "gpus": 1,
                "acceptSpot": True, "priorityClass": "high"}, user="alice")
    tick_until(svc, lambda: st("urgent")["state"] == "Running" and st("cheap")["state"] == "Pending")
    import os

    with open(os.path.join(svc.log_dir, "team-a", f"cheap-{w['uid'][:8]}.log")) as f:  # its run is over
        log = f.read()
    notice = next(line for line in log.splitlines() if line.startswith("notice"))
    term = next(line for line in log.splitlines() if line.startswith("term"))
    _, sig, reason, left, t_notice = notice.split()
    assert (sig, reason, int(left)) == ("SIGUSR1", "InClusterQueue", 1)
    assert float(term.split()[1]) - float(t_notice) >= 0.9  # the grace period before SIGTERM
    cheap = st("cheap")
    assert cheap["evictions"] == 1 and cheap["reason"] in ("Preempted", "NoFit")
    # Its cost covers the time it held the GPU, up to the stop, not the grace after it was requeued.
    (iv,) = svc.ledger.intervals(w["uid"])
    assert iv["end"] is not None and iv["usd_per_hour"] == pytest.approx(0.3)

    jobs = {j["name"]: j for j in svc.report("jobs")["items"]}
    assert jobs["cheap"]["avgGpuUtilization"] == pytest.approx(64.0)


# --------------------------------------------------------------------------- MIG as GPU-equivalents

SLICES_CLUSTER = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
resources:
  transformations:
  - {input: nvidia.com/gpu, strategy: Replace, outputs: {gpuqueue.io/gpu-slices: "7"}}
  - {input: nvidia.com/mig-1g.10gb, strategy: Replace, outputs: {gpuqueue.io/gpu-slices: "1"}}
  - {input: nvidia.com/mig-3g.40gb, strategy: Replace, outputs: {gpuqueue.io/gpu-slices: "3"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {model: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [gpuqueue.io/gpu-slices]
    flavors:
    - name: a100
      resources: [{name: gpuqueue.io/gpu-slices, nominalQuota: 14}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: cq}
"""

SLICES_INVENTORY = """
nodes:
- name: box
  labels: {model: a100}
  gpus:
  - {index: 0, uuid: GPU-0, product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}
  - {index: 1, uuid: GPU-1, product: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}
  - index: 2
    uuid: GPU-2
    product: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    mig: [{uuid: MIG-a, profile: 1g.10gb}, {uuid: MIG-b, profile: 1g.10gb}, {uuid: MIG-c, profile: 1g.10gb},
          {uuid: MIG-d, profile: 1g.10gb}, {uuid: MIG-e, profile: 3g.40gb}]
"""


def test_kueue_resource_transformations_count_mig_slices_and_gpus_against_one_quota(tmp_path):
    import sys

    from jupyter_gpuqueue.engine.errors import ManifestError
    from jupyter_gpuqueue.engine.manifests import load_text
    from servicetools import service_factory

    svc = service_factory(tmp_path, SLICES_CLUSTER, SLICES_INVENTORY, prices={"a100": 2.1},
                          default_local_queue="team-a/q", lease_priority_class=None)(restore=False)
    svc.configure_costs()
    svc.restore()
    try:
        sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
        assert svc.info("alice")["migProfiles"] == ["1g.10gb", "3g.40gb"]
        est = svc.estimate({"migProfile": "1g.10gb", "maxRuntime": "1h"}, user="alice")
        assert (est["flavor"], est["costUsd"]) == ("a100", pytest.approx(0.3))  # 2.10 / 7
        svc.submit({"name": "whole", "command": sleep, "gpus": 1}, user="alice")  # 7 slices
        svc.submit({"name": "s1", "command": sleep, "migProfile": "1g.10gb"}, user="alice")  # 1
        svc.submit({"name": "s3", "command": sleep, "migProfile": "3g.40gb"}, user="alice")  # 3 → 11 of 14
        svc.submit({"name": "second", "command": sleep, "gpus": 1}, user="alice")  # 7 more: 18 > 14
        st = lambda n: svc.get_workload("team-a", n)  # noqa: E731
        tick_until(svc, lambda: all(st(n)["state"] == "Running" for n in ("whole", "s1", "s3")))
        second = st("second")
        assert second["state"] == "Pending" and second["reason"] == "NoFit"
        assert "gpuqueue.io/gpu-slices" in second["message"]
        assert st("s3")["admission"]["podSetAssignments"][0]["resourceUsage"] == {"gpuqueue.io/gpu-slices": "3"}
        assert st("s3")["visibleDevices"] == "MIG-e" and st("whole")["visibleDevices"] in ("0", "1")
        assert st("s1")["pricePerHourUsd"] == pytest.approx(0.3)
        # Billing is by device: a MIG slice as its share of the GPU, in the flavor of its slices.
        ivs = {i["workload_uid"]: i for i in svc.ledger.open_intervals()}
        s3 = ivs[st("s3")["uid"]]
        assert (s3["flavor"], s3["resource"], s3["gpu_equivalent"]) == ("a100", "nvidia.com/mig-3g.40gb",
                                                                         pytest.approx(3 / 7))
        assert svc.capacity_by_flavor() == {"a100": pytest.approx(2 + 7 / 7)}
        # Freeing 4 slices lets the second GPU job in (7 + 7 = 14).
        svc.cancel("team-a", "s1", user="alice")
        svc.cancel("team-a", "s3", user="alice")
        tick_until(svc, lambda: st("second")["state"] == "Running")
        for n in ("whole", "second"):
            svc.cancel("team-a", n, user="alice")
        tick_until(svc, lambda: not svc.backend.running())
    finally:
        svc.ledger.close()
    # Kueue's validation of the Configuration, with the field path.
    bad = SLICES_CLUSTER.replace("strategy: Replace, outputs: {gpuqueue.io/gpu-slices: \"1\"}", "strategy: Swap, outputs: {}")
    with pytest.raises(ManifestError) as e:
        load_text(bad, "cluster.yaml")
    assert e.value.field == "resources.transformations[1].strategy" and "Unsupported value" in str(e.value)
    dup = SLICES_CLUSTER.replace("input: nvidia.com/mig-3g.40gb", "input: nvidia.com/mig-1g.10gb")
    with pytest.raises(ManifestError) as e:
        load_text(dup, "cluster.yaml")
    assert e.value.field == "resources.transformations[2].input"
