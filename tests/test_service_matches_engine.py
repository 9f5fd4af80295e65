"""The live service and the engine take the same decisions for the same sequence of events.

Random submissions and cancellations are applied to a real QueueService (SQLite ledger, real
processes started and stopped by the local backend, preemption by stopping processes) and to a bare
engine ``Scheduler`` that evicts at once, as ``simulate`` and the simulator do. After every event,
once the service has settled (every stopped process reaped), both must have admitted the same
workloads on the same flavors and devices, and queue the rest in the same positions.
"""

from __future__ import annotations

import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuqueue.engine.model import Workload
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions
from jupyter_gpuqueue.engine import serialize
from jupyter_gpuqueue.service import create_service

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-b}
spec: {nodeLabels: {model: b}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-one}
spec:
  cohort: lab
  namespaceSelector: {}
  # reclaimWithinCohort: Any here and LowerPriority in cq-two can livelock under Kueue v0.14's
  # ordering; the service (and the reference below) take a ready preemptor first, which settles.
  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - {name: gpu-a, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}
    - {name: gpu-b, resources: [{name: nvidia.com/gpu, nominalQuota: 0}]}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-two}
spec:
  cohort: lab
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerOrNewerEqualPriority, reclaimWithinCohort: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - {name: gpu-a, resources: [{name: nvidia.com/gpu, nominalQuota: 1}]}
    - {name: gpu-b, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: one}
spec: {clusterQueue: cq-one}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: two}
spec: {clusterQueue: cq-two}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: mid}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""

INVENTORY = """
nodes:
- name: box-a
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-0000000000a0, product: A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-0000000000a1, product: A, memoryMiB: 1024}
  - {index: 2, uuid: GPU-00000000-0000-0000-0000-0000000000a2, product: A, memoryMiB: 1024}
- name: box-b
  labels: {model: b}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-0000000000b0, product: B, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-0000000000b1, product: B, memoryMiB: 1024}
"""

events = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(["one/q", "two/q"]), st.integers(1, 2),
                  st.sampled_from(["low", "mid", "high"])),
        st.tuples(st.just("submit"), st.sampled_from(["one/q", "two/q"]), st.integers(1, 3),
                  st.sampled_from(["low", "mid", "high"])),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
    ),
    min_size=2,
    max_size=9,
)


def settle(svc, timeout=20.0):
    """Tick until every stopped process is reaped and a tick changes nothing."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        if not svc.stopping and not svc.dirty:
            svc.tick()
            if not svc.stopping and not svc.dirty:
                return
        time.sleep(0.02)
    raise AssertionError("the service did not settle")


def snapshot_service(svc):
    admitted, pending = {}, {}
    for w in svc.list_workloads(states=["Pending", "Admitted", "Running"]):
        key = f"{w['namespace']}/{w['name']}"
        if w["state"] == "Pending":
            pending[key] = (w["positionInClusterQueue"], w["positionInLocalQueue"])
        else:
            a = w["admission"]["podSetAssignments"][0]
            admitted[key] = (a["flavors"]["nvidia.com/gpu"], tuple(p["devices"][0] for p in w["placement"]))
    return admitted, pending


def snapshot_engine(s: Scheduler):
    admitted = {}
    for key, w in s.admitted.items():
        admitted[key] = (w.admission.pod_set_assignments[0].flavors["nvidia.com/gpu"],
                         tuple(p.devices[0] for p in w.admission.placements))
    pending = {key: s.position(key) for q in s.queues.values() for key in q.ordered_keys()}
    return admitted, pending


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(evs=events)
def test_service_and_engine_decide_alike(tmp_path_factory, evs):
    tmp = tmp_path_factory.mktemp("svc")
    (tmp / "cluster.yaml").write_text(CLUSTER)
    (tmp / "inventory.yaml").write_text(INVENTORY)
    svc = create_service(config_paths=[str(tmp / "cluster.yaml")], inventory_path=str(tmp / "inventory.yaml"),
                         db_url=f"sqlite:///{tmp / 'q.sqlite'}", root_dir=str(tmp), data_dir=str(tmp / "data"),
                         stop_grace_seconds=2.0)
    svc.restore()
    ref = Scheduler(svc.config, svc.inventory, SchedulerOptions(requeue_batch_seconds=0.0, preemptor_first=True))
    names: list[str] = []
    try:
        for i, ev in enumerate(evs):
            if ev[0] == "submit":
                _, lq, gpus, pc = ev
                w = svc.submit({"name": f"w{i}", "localQueue": lq, "gpus": gpus, "priorityClass": pc,
                                "command": [sys.executable, "-c", "import time; time.sleep(60)"]}, user="u")
                ns, lqn = lq.split("/")
                ref.add_workload(Workload(
                    ns, w["name"], lqn, [serialize.pod_set_from_dict(p) for p in svc.records[w["uid"]]["spec"]["podSets"]],
                    priority=w["priority"], creation_time=w["createdAt"], uid=w["uid"],
                ))
                names.append(f"{ns}/{w['name']}")
            else:
                live = [k for k in names if k in ref.workloads]
                if not live:
                    continue
                key = live[ev[1] % len(live)]
                ns, name = key.split("/")
                svc.cancel(ns, name, user="u")
                ref.remove_workload(key)
            settle(svc)
            # The wall clock, as the service's: Kueue orders preemption candidates by admission
            # time, so the reference must see the same order of admissions.
            ref.run_until_stable(time.time())
            assert snapshot_service(svc) == snapshot_engine(ref), f"after event {i}: {ev}"
    finally:
        for uid in list(svc.backend.running()):
            svc.backend.stop(uid, "test teardown", 0.2)
        deadline = time.time() + 5
        while svc.backend.running() and time.time() < deadline:
            svc.backend.poll()
            time.sleep(0.02)
        svc.ledger.close()
