"""QueueService end to end without the web layer: a real ledger (SQLite and a real PostgreSQL server: every test runs on both), real local processes, real
restarts. The loop is driven by calling ``tick()``, as the server's background task does."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from servicetools import service_factory, stop_jobs, tick_until as wait

from jupyter_gpuqueue.errors import Conflict, Forbidden, NotFound, ValidationError

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
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
    - name: gpu-b
      resources: [{name: nvidia.com/gpu, nominalQuota: 0}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-two}
spec:
  cohort: lab
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
    - name: gpu-b
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
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
metadata: {name: high}
value: 1000
"""

INVENTORY = """
nodes:
- name: box-a
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
- name: box-b
  labels: {model: b}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000010, product: Model B, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000011, product: Model B, memoryMiB: 1024}
"""

PY = sys.executable


@pytest.fixture
def env(tmp_path, ledger_url):
    # Every test here runs on SQLite and on a real PostgreSQL server (tests/conftest.py, ledger_url).
    make = service_factory(tmp_path, CLUSTER, INVENTORY, default_local_queue="one/q", stop_grace_seconds=2.0,
                           db_url=ledger_url)
    yield make, tmp_path
    stop_jobs(make.services, grace=0.5)


def state(svc, ns, name):
    return svc.get_workload(ns, name)["state"]


def test_submission_is_durable_before_it_is_acknowledged_and_runs_to_success(env):
    make, tmp = env
    svc = make()
    w = svc.submit({"name": "hello", "command": [PY, "-c", "print('hi from the job')"], "gpus": 1,
                    "maxRuntimeSeconds": 60}, user="alice")
    assert w["state"] == "Pending" and w["positionInClusterQueue"] == 0
    assert svc.ledger.find_workload("one", "hello")["state"] == "Pending"  # on disk already
    wait(svc, lambda: state(svc, "one", "hello") == "Succeeded")
    done = svc.get_workload("one", "hello")
    assert done["exitCode"] == 0
    assert done["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "gpu-a"}
    assert done["visibleDevices"] in ("0", "1")
    assert done["costUsd"] > 0
    assert "hi from the job" in svc.read_log("one", "hello", user="alice")["text"]


def test_job_gets_its_devices_and_queue_variables(env):
    make, tmp = env
    svc = make()
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['GPUQUEUE_WORKLOAD_NAME'], os.environ['GPUQUEUE_FLAVOR'])"
    svc.submit({"name": "env", "command": [PY, "-c", code], "gpus": 2, "flavor": "gpu-b",
                "localQueue": "two/q", "maxRuntimeSeconds": 60}, user="bob")
    wait(svc, lambda: state(svc, "two", "env") == "Succeeded")
    assert svc.read_log("two", "env", user="bob")["text"].split() == ["0,1", "env", "gpu-b"]


def test_waits_with_position_while_another_team_holds_the_gpus_then_runs(env):
    make, tmp = env
    svc = make()
    svc.submit({"name": "holder", "command": [PY, "-c", "import time; time.sleep(60)"], "gpus": 2,
                "flavor": "gpu-b", "localQueue": "two/q"}, user="bob")
    wait(svc, lambda: state(svc, "two", "holder") == "Running")
    svc.submit({"name": "waiter", "command": [PY, "-c", "print(1)"], "gpus": 1, "flavor": "gpu-b"}, user="alice")
    svc.submit({"name": "second", "command": [PY, "-c", "print(2)"], "gpus": 1, "flavor": "gpu-b"}, user="alice")
    for _ in range(5):
        svc.tick()
    w = svc.get_workload("one", "waiter")
    assert w["state"] == "Pending"
    assert (w["positionInClusterQueue"], w["positionInLocalQueue"]) == (0, 0)
    assert svc.get_workload("one", "second")["positionInLocalQueue"] == 1
    assert w["reason"] == "NoFit" and "insufficient unused quota" in w["message"]
    svc.cancel("two", "holder", user="bob")
    wait(svc, lambda: state(svc, "one", "waiter") == "Succeeded" and state(svc, "one", "second") == "Succeeded")
    assert state(svc, "two", "holder") == "Cancelled"


def test_bad_input_names_the_field_and_changes_nothing(env):
    make, tmp = env
    svc = make()
    base = {"command": [PY, "-c", "pass"], "gpus": 1}
    cases = [
        ({"flavor": "tpu"}, "flavor"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": 9}, "gpus"),
        ({"gpus": "two"}, "gpus"),
        ({"localQueue": "nope/q"}, "localQueue"),
        ({"priorityClass": "urgent"}, "priorityClass"),
        ({"name": "Not_DNS"}, "name"),
        ({"command": ["surely-not-a-command-xyz"]}, "command"),
        ({"maxRuntime": "ten minutes"}, "maxRuntime"),
        ({"migProfile": "9g.99gb"}, "migProfile"),
        ({"script": "missing.py", "command": None}, "script"),
    ]
    for extra, field in cases:
        with pytest.raises(ValidationError) as err:
            svc.submit({**base, **extra}, user="alice")
        assert err.value.field == field, (extra, err.value)
    assert "exceeds max quota" in str(pytest.raises(ValidationError, svc.submit, {**base, "gpus": 9}, user="a").value)
    assert svc.ledger.list_workloads() == []


def test_duplicate_name_conflicts(env):
    make, _ = env
    svc = make()
    svc.submit({"name": "dup", "command": [PY, "-c", "pass"]}, user="alice")
    with pytest.raises(Conflict):
        svc.submit({"name": "dup", "command": [PY, "-c", "pass"]}, user="alice")


def test_only_the_owner_reads_logs_and_cancels(env):
    make, _ = env
    svc = make()
    svc.submit({"name": "mine", "command": [PY, "-c", "pass"]}, user="alice")
    with pytest.raises(Forbidden):
        svc.read_log("one", "mine", user="mallory")
    with pytest.raises(Forbidden):
        svc.cancel("one", "mine", user="mallory")
    with pytest.raises(NotFound):
        svc.get_workload("one", "nothing")


def test_restart_adopts_running_jobs_keeps_pending_ones_and_never_double_assigns(env):
    make, tmp = env
    a = make()
    a.submit({"name": "long", "command": [PY, "-c", "import time; time.sleep(30)"], "gpus": 2, "flavor": "gpu-a",
              "localQueue": "two/q"}, user="bob")
    wait(a, lambda: state(a, "two", "long") == "Running")
    a.submit({"name": "next", "command": [PY, "-c", "print('next')"], "gpus": 1, "flavor": "gpu-a"}, user="alice")
    for _ in range(3):
        a.tick()
    assert state(a, "one", "next") == "Pending"
    pid = a.get_workload("two", "long")
    a.ledger.close()  # the server goes away; its jobs do not

    b = make()
    assert state(b, "two", "long") == "Running"
    assert b.get_workload("one", "next")["positionInClusterQueue"] == 0
    for _ in range(3):
        b.tick()
    assert state(b, "one", "next") == "Pending"  # the adopted job still holds both gpu-a devices
    held = {d for n in b.inventory_view()["nodes"] for g in n["gpus"] if g["assignedTo"] for d in [g["assignedTo"]]}
    assert held == {"two/long"}
    b.cancel("two", "long", user="bob")
    wait(b, lambda: state(b, "one", "next") == "Succeeded")
    assert pid["visibleDevices"] == "0,1"


def test_job_that_died_while_the_server_was_down_is_marked_failed(env):
    make, tmp = env
    a = make()
    a.submit({"name": "victim", "command": [PY, "-c", "import time; time.sleep(30)"]}, user="alice")
    wait(a, lambda: state(a, "one", "victim") == "Running")
    run = a.ledger.find_workload("one", "victim")["run"]
    a.ledger.close()
    os.killpg(run["pgid"], signal.SIGKILL)
    time.sleep(0.3)
    b = make()
    w = b.get_workload("one", "victim")
    assert w["state"] == "Failed"
    assert w["finishedAt"] is not None
    assert b.ledger.open_intervals() == []


def test_maximum_run_time_is_enforced(env):
    make, _ = env
    svc = make()
    svc.submit({"name": "slow", "command": [PY, "-c", "import time; time.sleep(60)"], "maxRuntimeSeconds": 1},
               user="alice")
    wait(svc, lambda: state(svc, "one", "slow") == "Failed", timeout=30)
    w = svc.get_workload("one", "slow")
    assert w["reason"] == "MaximumExecutionTimeExceeded"


def test_script_submission_runs_with_the_server_python(env):
    make, tmp = env
    svc = make()
    (tmp / "root" / "job.py").write_text("import sys; print(sys.executable)\n")
    w = svc.submit({"script": "job.py", "gpus": 1}, user="alice")
    assert w["name"].startswith("job-")
    wait(svc, lambda: state(svc, "one", w["name"]) == "Succeeded")
    assert svc.read_log("one", w["name"], user="alice")["text"].strip() == svc.python_executable


def test_estimate_uses_the_flavor_price_and_max_runtime(env):
    make, _ = env
    svc = make(prices={"gpu-a": 2.0, "gpu-b": 4.0})
    e = svc.estimate({"gpus": 2, "flavor": "gpu-a", "maxRuntime": "30m"}, user="alice")
    assert e["costUsd"] == pytest.approx(2.0)
    assert e["gpuHours"] == pytest.approx(1.0)
    any_ = svc.estimate({"gpus": 1, "flavor": "any", "maxRuntime": "1h"}, user="alice")
    # issue 34 item 7: the flavor the queue would pick now (the ClusterQueue's first with free
    # quota), not the dearest; and the range over every flavor it could land on
    assert any_["flavor"] == "gpu-a" and any_["costUsd"] == pytest.approx(2.0), any_
    assert any_["eligibleFlavors"] == ["gpu-a", "gpu-b"] and any_["costRangeUsd"] == [2.0, 4.0]


def test_manifest_submission(env):
    make, tmp = env
    svc = make()
    text = f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: from-yaml
  namespace: two
  labels: {{kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: high}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: ignored-locally
        command: ["{PY}", "-c", "print('yaml job')"]
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""
    (w,) = svc.submit_manifest(text, user="bob")
    assert w["priority"] == 1000 and w["localQueue"] == "q"
    wait(svc, lambda: state(svc, "two", "from-yaml") == "Succeeded")
    with pytest.raises(ValidationError) as err:
        svc.submit_manifest("kind: Job\napiVersion: batch/v1\nmetadata: {name: x}\nspec: {parallelism: -1}", user="bob")
    assert err.value.field


def test_a_workload_kueue_would_never_admit_is_refused(env):
    """A Workload whose request is above its limit: Kueue creates it and never admits it
    (ValidateResources); the service refuses it with Kueue's message instead of queueing it."""
    make, _tmp = env
    svc = make()
    text = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: over, namespace: two}}
spec:
  queueName: q
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: main
          command: ["{PY}", "-c", "print(1)"]
          resources: {{requests: {{nvidia.com/gpu: 2}}, limits: {{nvidia.com/gpu: 1}}}}
"""
    with pytest.raises(ValidationError) as err:
        svc.submit_manifest(text, user="bob")
    assert err.value.field == "spec.podSets"
    assert "resources validation failed: spec.podSets[0].template.spec.containers[0]" in err.value.message
    assert "Kueue would queue this Workload but never admit it" in err.value.message
    assert svc.list_workloads() == []


def test_preemption_stops_the_victim_requeues_it_and_runs_the_preemptor(env):
    make, tmp = env
    (tmp / "cluster.yaml").write_text(CLUSTER.replace(
        "metadata: {name: cq-one}\nspec:\n", "metadata: {name: cq-one}\nspec:\n  preemption: {withinClusterQueue: LowerPriority}\n"))
    svc = make()
    # "low" holds both gpu-a devices (its nominal 1 + the idle 1 of cq-two it borrows).
    svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(60)"], "flavor": "gpu-a",
                "gpus": 2, "priorityClass": "low"}, user="alice")
    wait(svc, lambda: state(svc, "one", "low") == "Running")
    svc.submit({"name": "high", "command": [PY, "-c", "print('urgent')"], "flavor": "gpu-a",
                "priorityClass": "high"}, user="alice")
    wait(svc, lambda: state(svc, "one", "high") == "Succeeded")
    low = svc.get_workload("one", "low")
    assert low["evictions"] == 1
    # The victim was billed only while it ran, and comes back when the quota is free again.
    wait(svc, lambda: state(svc, "one", "low") == "Running")
    assert len(svc.ledger.intervals(low["uid"])) == 2
    svc.cancel("one", "low", user="alice")


def test_view_cost_from_memory_equals_the_ledger_through_eviction_cancel_and_restart(env):
    """The cost in a Workload view is summed from the intervals the service opened and closed
    (no SQL per view); it must equal Ledger.cost_usd, the record of billing, at every step."""
    _, tmp = env
    cluster = CLUSTER.replace("metadata: {name: cq-two}\nspec:\n",
                              "metadata: {name: cq-two}\nspec:\n  preemption: {withinClusterQueue: LowerPriority}\n")
    assert cluster != CLUSTER
    (tmp / "p").mkdir()
    make = service_factory(tmp / "p", cluster, INVENTORY, default_local_queue="one/q", stop_grace_seconds=0.5)
    svc = make()

    def same(ns, name):
        rec = svc.record(ns, name)
        now = svc.clock()
        assert svc.billing.cost_usd(rec, now) == pytest.approx(svc.ledger.cost_usd(rec["uid"], now), rel=1e-9, abs=1e-12)

    svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(60)"], "gpus": 2,
                "flavor": "gpu-b", "localQueue": "two/q", "priorityClass": "low"}, user="bob")
    wait(svc, lambda: state(svc, "two", "low") == "Running")
    assert svc.record("two", "low")["uid"] in svc.billing._billing
    time.sleep(0.2)
    same("two", "low")
    # a preemption closes its interval and requeues it; it is admitted again later (a new interval)
    svc.submit({"name": "high", "command": [PY, "-c", "import time; time.sleep(0.5)"], "gpus": 2,
                "flavor": "gpu-b", "localQueue": "two/q", "priorityClass": "high"}, user="bob")
    wait(svc, lambda: svc.record("two", "low")["evictions"] >= 1)
    same("two", "low")
    wait(svc, lambda: state(svc, "two", "low") == "Running")
    time.sleep(0.1)
    same("two", "low")
    assert len(svc.ledger.intervals(svc.record("two", "low")["uid"])) == 2
    # a restart: the intervals of the running job are not all known in memory: the ledger answers
    svc2 = make()
    assert svc2.record("two", "low")["uid"] not in svc2.billing._billing
    svc = svc2
    same("two", "low")
    svc.cancel("two", "low", user="bob")
    same("two", "low")
    stop_jobs(make.services, grace=0.2)
