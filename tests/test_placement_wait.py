"""A placement waits for the devices of a job being stopped rather than preempting another (issue 34
item 8, "simply waiting would do"): the live QueueService tells the engine which running workloads
it is stopping (``Scheduler.terminating``), on real local processes.

The queue's quota (100 GPUs) is above the hardware (4 GPUs): alice's experiment-high 1-GPU job is
cancelled but ignores SIGTERM, so it holds its GPU for the stop grace period; another
experiment-high 1-GPU job then waits for that GPU and evicts nobody (before, it evicted bob's
experiment-normal 3-GPU job at once, the only lower-priority one).
"""

from __future__ import annotations

import sys
import time

import pytest

from servicetools import service_factory, stop_jobs

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-lab}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 100}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: lab}
spec: {clusterQueue: cq-lab}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: experiment-normal}
value: 10000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: experiment-high}
value: 100000
"""

INVENTORY = "nodes:\n- name: box\n  labels: {model: a}\n  gpus:\n" + "".join(
    f"  - {{index: {i}, uuid: GPU-aaaaaaaa-0000-0000-0000-00000000000{i}, product: Model A, memoryMiB: 1024}}\n"
    for i in range(4))

def stubborn(ready) -> str:
    """A job that ignores SIGTERM (so it holds its GPU for the stop grace period), then says so."""
    return (f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open({str(ready)!r}, 'w').write('ready'); time.sleep(600)")


@pytest.fixture
def env(tmp_path):
    make = service_factory(tmp_path, CLUSTER, INVENTORY, stop_grace_seconds=4.0)
    yield make
    stop_jobs(make.services)


def job(name, gpus, priority, code="import time; time.sleep(600)"):
    return {"name": name, "gpus": gpus, "priorityClass": priority, "maxRuntime": "1h",
            "command": [sys.executable, "-c", code]}


def wait(svc, pred, timeout=30.0, check=lambda: None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        check()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_a_placement_waits_for_a_job_being_cancelled_instead_of_preempting(env, tmp_path):
    svc = env()
    get = lambda name: svc.get_workload("lab", name)  # noqa: E731
    ready = tmp_path / "stubborn-ready"
    # experiment-high itself, so not a candidate victim of the next experiment-high job
    svc.submit(job("alice-1gpu", 1, "experiment-high", stubborn(ready)), user="alice")
    svc.submit(job("bob-3gpu", 3, "experiment-normal"), user="bob")
    wait(svc, lambda: get("alice-1gpu")["state"] == get("bob-3gpu")["state"] == "Running" and ready.exists())
    freed = get("alice-1gpu")["placement"][0]["devices"]
    svc.cancel("lab", "alice-1gpu", user="alice")  # SIGTERM ignored: it holds the GPU ~4 s more
    started = time.time()
    svc.submit(job("high-1gpu", 1, "experiment-high"), user="alice")

    def bob_untouched():
        b = get("bob-3gpu")
        assert b["state"] == "Running" and b["evictions"] == 0 and not b["evictionDeadline"], b

    wait(svc, lambda: get("high-1gpu")["state"] == "Running", check=bob_untouched)
    assert time.time() - started >= 2.0  # it waited for the cancelled job's process to go
    assert get("high-1gpu")["placement"][0]["devices"] == freed
    bob_untouched()
