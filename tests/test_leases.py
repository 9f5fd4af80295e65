"""Notebook GPU leases (kind NotebookLease) in the QueueService: real SQLite ledger, real local
processes for the jobs that compete with them, real restarts, wall-clock grace periods.

A lease is admitted like any Workload, is Running (and billed) from admission without a process,
and ends when its owner releases it or, after a warning with ``evictionDeadline``, when a
preemption's grace period is over. Quota is checked after every scheduling pass."""

from __future__ import annotations

import sys
import time

import pytest
from servicetools import service_factory, stop_jobs

from jupyter_gpuqueue.backends.lease import LeaseBackend
from jupyter_gpuqueue.errors import ValidationError

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
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: lab}
spec: {clusterQueue: cq-lab}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: development}
value: 1000
preemptionPolicy: Never
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: experiment-high}
value: 100000
"""

INVENTORY = """
nodes:
- name: box-a
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
"""

PY = sys.executable
QUOTA = 2


@pytest.fixture
def env(tmp_path):
    make = service_factory(tmp_path, CLUSTER, INVENTORY, stop_grace_seconds=2.0)
    yield make
    stop_jobs(make.services)


def check_quota(svc):
    """Admitted usage never exceeds the nominal quota, and no device has two holders."""
    used = sum(
        sum(int(v) for v in psa.resource_usage.values())
        for w in svc.scheduler.admitted.values()
        for psa in w.admission.pod_set_assignments
    )
    assert used <= QUOTA, f"over-committed: {used} GPUs admitted, quota {QUOTA}"
    devices = [d for w in svc.scheduler.admitted.values() for p in w.admission.placements for d in p.devices]
    assert len(devices) == len(set(devices)), f"a device has two holders: {devices}"


def wait(svc, pred, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        check_quota(svc)
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def get(svc, name):
    return svc.get_workload("lab", name)


def lease(name, **kw):
    return {"kind": "NotebookLease", "name": name, "gpus": 1, "maxRuntimeSeconds": 3600, **kw}


def test_lease_is_running_from_admission_billed_and_released_by_its_owner(env):
    svc = env()
    assert isinstance(svc.backend, LeaseBackend)
    t0 = time.time()
    w = svc.submit(lease("nb-alice"), user="alice")
    assert w["kind"] == "NotebookLease" and w["state"] == "Pending"
    assert w["priorityClass"] == "development" and w["priority"] == 1000  # the lease default
    assert w["command"] == []
    wait(svc, lambda: get(svc, "nb-alice")["state"] == "Running")
    w = get(svc, "nb-alice")
    assert w["admittedAt"] >= t0 and w["startedAt"] == pytest.approx(w["admittedAt"], abs=1.0)
    assert w["visibleDevices"] in ("0", "1") and w["evictionDeadline"] is None
    uid = w["uid"]
    # No process: the run is a lease (pid 0), tracked by the wrapper, not by the local backend.
    assert svc.records[uid]["run"]["pid"] == 0 and svc.records[uid]["run"]["exitPath"] == f"lease:{uid}"
    assert uid in svc.backend.running() and uid not in svc.backend.inner.running()
    (iv,) = svc.ledger.intervals(uid)
    assert iv["end"] is None and iv["start"] == pytest.approx(w["admittedAt"], abs=0.01)
    time.sleep(0.2)
    assert get(svc, "nb-alice")["costUsd"] > 0  # billed while held, without any process
    # Releasing = DELETE (cancel): billing stops now, the GPU is free in the next pass.
    released = svc.cancel("lab", "nb-alice", user="alice")
    assert released["state"] == "Cancelled"
    (iv,) = svc.ledger.intervals(uid)
    assert iv["end"] == pytest.approx(released["finishedAt"], abs=0.01)
    svc.submit({"name": "job", "command": [PY, "-c", "print(1)"], "gpus": 2}, user="bob")
    wait(svc, lambda: get(svc, "job")["state"] == "Succeeded")
    assert uid not in svc.backend.running()


def test_lease_input_errors_name_the_field(env):
    svc = env()
    cases = [
        ({"kind": "Notebook"}, "kind"),
        ({"command": [PY, "-c", "pass"]}, "command"),
        ({"script": "x.py"}, "script"),
        ({"env": {"A": "1"}}, "env"),
        ({"gpus": 3}, "gpus"),
    ]
    for extra, field in cases:
        with pytest.raises(ValidationError) as err:
            svc.submit(lease("bad", **extra), user="alice")
        assert err.value.field == field, (extra, err.value)
    assert svc.ledger.find_workload("lab", "bad") is None


def test_lease_priority_class_is_configurable_and_must_exist(env):
    svc = env(lease_priority_class="experiment-high")
    assert svc.submit(lease("nb"), user="alice")["priorityClass"] == "experiment-high"
    # An explicit class wins over the lease default.
    assert svc.submit(lease("nb2", priorityClass="development"), user="alice")["priority"] == 1000
    svc2 = env(lease_priority_class="not-there")  # starts (jobs still run), but leases are refused
    with pytest.raises(ValidationError) as err:
        svc2.submit(lease("nb3"), user="alice")
    assert err.value.field == "priorityClass" and "not-there" in err.value.message


def _fill_with_leases_then_preempt(svc, events):
    svc.subscribe(events.append)
    svc.submit(lease("nb-a", gpus=2), user="alice")
    wait(svc, lambda: get(svc, "nb-a")["state"] == "Running")
    t_submit = time.time()
    svc.submit({"name": "urgent", "command": [PY, "-c", "print('urgent')"], "gpus": 1,
                "priorityClass": "experiment-high"}, user="bob")
    wait(svc, lambda: get(svc, "nb-a")["evictionDeadline"] is not None)
    return t_submit


def test_preempted_lease_gets_a_warning_and_grace_period_then_is_released(env):
    grace = 2.0
    svc = env(lease_preemption_grace_seconds=grace)
    events = []
    t_submit = _fill_with_leases_then_preempt(svc, events)
    w = get(svc, "nb-a")
    deadline = w["evictionDeadline"]
    assert t_submit <= deadline - grace <= time.time()
    assert w["state"] == "Running" and "Preempted to accommodate lab/urgent" in w["message"]
    # The warning went out as a workload event carrying the deadline.
    warned = [e for e in events if e["type"] == "workload" and e["workload"]["name"] == "nb-a"
              and e["workload"]["evictionDeadline"] == deadline]
    assert warned
    # During the grace period the lease keeps its GPUs (and the quota); the preemptor waits.
    for _ in range(5):
        svc.tick()
        check_quota(svc)
        time.sleep(0.05)
    u = get(svc, "urgent")
    assert u["state"] == "Pending" and "preemption" in u["message"]
    assert get(svc, "nb-a")["state"] == "Running"
    # Then it is released: the lease ends (not requeued), usage closes at the deadline.
    wait(svc, lambda: get(svc, "urgent")["state"] in ("Running", "Succeeded"), timeout=grace + 10)
    assert time.time() >= deadline
    done = get(svc, "nb-a")
    assert done["state"] == "Failed" and done["reason"] == "Preempted"
    assert done["finishedAt"] == pytest.approx(deadline, abs=0.01)
    (iv,) = svc.ledger.intervals(done["uid"])
    assert iv["end"] == pytest.approx(deadline, abs=0.01)
    assert done["evictionDeadline"] is None  # only shown while the lease runs
    wait(svc, lambda: get(svc, "urgent")["state"] == "Succeeded")


def test_owner_can_release_during_the_grace_period(env):
    svc = env(lease_preemption_grace_seconds=300)
    events = []
    _fill_with_leases_then_preempt(svc, events)
    t = time.time()
    svc.cancel("lab", "nb-a", user="alice")
    wait(svc, lambda: get(svc, "urgent")["state"] == "Succeeded", timeout=15)
    assert time.time() - t < 15  # nowhere near the 300 s grace
    w = get(svc, "nb-a")
    assert w["state"] == "Cancelled"
    (iv,) = svc.ledger.intervals(w["uid"])
    assert iv["end"] == pytest.approx(w["finishedAt"], abs=0.01)


def test_restart_during_the_grace_period_keeps_lease_quota_and_deadline(env):
    svc = env(lease_preemption_grace_seconds=3.0)
    _fill_with_leases_then_preempt(svc, [])
    deadline = get(svc, "nb-a")["evictionDeadline"]
    svc.ledger.close()
    svc2 = env(lease_preemption_grace_seconds=3.0)  # the same ledger, a fresh service
    w = get(svc2, "nb-a")
    assert w["state"] == "Running" and w["evictionDeadline"] == deadline
    check_quota(svc2)
    for _ in range(3):
        svc2.tick()
        check_quota(svc2)
    assert get(svc2, "nb-a")["evictionDeadline"] == deadline  # not pushed back by the new cycle
    assert get(svc2, "urgent")["state"] == "Pending"
    wait(svc2, lambda: get(svc2, "urgent")["state"] == "Succeeded", timeout=15)
    assert get(svc2, "nb-a")["finishedAt"] == pytest.approx(deadline, abs=0.01)


def test_lease_waits_in_the_queue_with_its_position(env):
    svc = env()
    svc.submit({"name": "holder", "command": [PY, "-c", "import time; time.sleep(60)"], "gpus": 2,
                "priorityClass": "experiment-high"}, user="bob")
    wait(svc, lambda: get(svc, "holder")["state"] == "Running")
    svc.submit(lease("nb-1"), user="alice")
    svc.submit(lease("nb-2"), user="carol")
    for _ in range(3):
        svc.tick()
    w1, w2 = get(svc, "nb-1"), get(svc, "nb-2")
    assert (w1["state"], w1["positionInLocalQueue"]) == ("Pending", 0)
    assert (w2["state"], w2["positionInLocalQueue"]) == ("Pending", 1)
    assert w1["reason"] == "NoFit"
    # development is the lowest class here: a lease does not preempt the higher-priority job.
    assert get(svc, "holder")["state"] == "Running"
    svc.cancel("lab", "holder", user="bob")
    wait(svc, lambda: get(svc, "nb-1")["state"] == "Running" and get(svc, "nb-2")["state"] == "Running")


def test_lease_ends_at_its_maximum_lease_time(env):
    svc = env()
    svc.submit(lease("short", maxRuntimeSeconds=1), user="alice")
    wait(svc, lambda: get(svc, "short")["state"] == "Running")
    started = get(svc, "short")["startedAt"]
    wait(svc, lambda: get(svc, "short")["state"] not in ("Running", "Admitted"), timeout=10)
    w = get(svc, "short")
    # Issue 34: a lease that ran its full time is no failure, and is billed up to its maximum
    # time exactly, never past it (whenever the tick that sees it comes).
    assert (w["state"], w["reason"]) == ("Succeeded", "MaxRuntimeReached"), w
    assert w["message"] == "reached its maximum time (1 s)"
    assert w["finishedAt"] == pytest.approx(started + 1.0, abs=1e-6)
    (iv,) = svc.ledger.intervals(w["uid"])
    assert iv["end"] == pytest.approx(started + 1.0, abs=1e-6)


def test_preempted_lease_is_released_and_billed_no_later_than_its_maximum_time(env):
    """Issue 34, item 2: a preemption's grace period that would outlast the lease's maximum time
    ends at the maximum time: the warning's deadline says so, the GPU is given back then, the lease
    is billed up to it (not to the grace period's end) and recorded as having reached it."""
    svc = env(lease_preemption_grace_seconds=600.0)
    svc.submit(lease("nb-a", gpus=2, maxRuntimeSeconds=3), user="alice")
    wait(svc, lambda: get(svc, "nb-a")["state"] == "Running")
    started = get(svc, "nb-a")["startedAt"]
    svc.submit({"name": "urgent", "command": [PY, "-c", "print('urgent')"], "gpus": 1,
                "priorityClass": "experiment-high"}, user="bob")
    wait(svc, lambda: get(svc, "nb-a")["evictionDeadline"] is not None)
    assert get(svc, "nb-a")["evictionDeadline"] == pytest.approx(started + 3.0, abs=1e-6)
    wait(svc, lambda: get(svc, "urgent")["state"] in ("Running", "Succeeded"), timeout=15)
    assert time.time() < started + 600  # the GPU went to the urgent job long before the grace period's end
    done = get(svc, "nb-a")
    assert (done["state"], done["reason"]) == ("Succeeded", "MaxRuntimeReached"), done
    assert done["finishedAt"] == pytest.approx(started + 3.0, abs=1e-6)
    (iv,) = svc.ledger.intervals(done["uid"])
    assert iv["end"] == pytest.approx(started + 3.0, abs=1e-6)
    assert iv["start"] >= started - 1e-6, (iv, done)
    wait(svc, lambda: get(svc, "urgent")["state"] == "Succeeded")


def test_lease_backend_holds_leases_and_delegates_processes(tmp_path):
    from jupyter_gpuqueue.backends.base import LaunchSpec, RunInfo
    from jupyter_gpuqueue.backends.local import LocalBackend

    now = [1000.0]
    b = LeaseBackend(LocalBackend(), clock=lambda: now[0])
    info = b.start(LaunchSpec(uid="L", key="lab/nb", argv=[], cwd=str(tmp_path)))
    assert (info.pid, info.exit_path, info.started_at) == (0, "lease:L", 1000.0)
    job = b.start(LaunchSpec(uid="J", key="lab/job", argv=[PY, "-c", "pass"], cwd=str(tmp_path),
                             log_path=str(tmp_path / "j.log")))
    assert job.pid > 0 and set(b.running()) == {"L", "J"} and b.inner.running() == ["J"]
    b.stop("L", "preempted", 300)
    b.stop("L", "again, later", 600)  # never pushed back
    assert b.release_at("L") == 1300.0
    b.stop("L", "released by its owner", 0)  # brought forward
    assert b.release_at("L") == 1000.0
    finished = []
    deadline = time.time() + 10
    while len(finished) < 2 and time.time() < deadline:
        finished += b.poll()
        time.sleep(0.05)
    by_uid = {st.uid: st for st in finished}
    assert by_uid["L"].finished_at == 1000.0 and "released by its owner" in by_uid["L"].message
    assert by_uid["J"].state == "Succeeded" and by_uid["J"].exit_code == 0
    assert b.running() == []
    # After a restart: a lease is taken back from its stored run; a pid-0 run without the lease
    # marker is not a lease (and is the inner backend's to judge).
    assert b.adopt("L2", RunInfo.from_json(info.to_json())) and "L2" in b.running()
    other = RunInfo(pid=0, pgid=0, start_ticks=0, log_path="", exit_path="", started_at=0.0)
    from jupyter_gpuqueue.backends.lease import is_lease_run

    assert not is_lease_run(other)


def test_lease_end_is_the_earlier_of_the_preemption_deadline_and_the_maximum_lease_time():
    """When the hub spawner stops a server on a lease (hub/spawner.py, its lease watch): the
    queue releases the lease at the same moment (service.py)."""
    from jupyter_gpuqueue.hub.lease import lease_end

    assert lease_end({"state": "Running", "startedAt": 1000.0, "maxRuntimeSeconds": 0}) is None
    assert lease_end({"state": "Running", "startedAt": 1000.0, "maxRuntimeSeconds": 3600}) == 4600.0
    assert lease_end({"state": "Running", "startedAt": 1000.0, "maxRuntimeSeconds": 3600,
                      "evictionDeadline": 1300.0}) == 1300.0
    assert lease_end({"state": "Running", "startedAt": 1000.0, "maxRuntimeSeconds": 100,
                      "evictionDeadline": 1300.0}) == 1100.0


def test_the_spawner_says_why_the_lease_ends():
    """Issue 34, item 2: the reason the hub logs and acts on is the end that comes first."""
    from jupyter_gpuqueue.hub.lease import lease_end_reason

    assert lease_end_reason({"startedAt": 1000.0, "maxRuntimeSeconds": 240}) == "it reached its maximum time"
    assert lease_end_reason({"startedAt": 1000.0, "maxRuntimeSeconds": 240,
                             "evictionDeadline": 1240.0}) == "it reached its maximum time"
    assert lease_end_reason({"startedAt": 1000.0, "maxRuntimeSeconds": 240,
                             "evictionDeadline": 1100.0}) == "its preemption grace period is over"
    assert lease_end_reason({"evictionDeadline": 1100.0}) == "its preemption grace period is over"
