"""Make a ledger with the code on ``PYTHONPATH`` (a release) and dump it as SQL.

    git archive <release> | tar -x -C /tmp/release
    PYTHONPATH=/tmp/release .venv/bin/python tests/ledger_dumps/make_dump.py sqlite OUT.sql
    PYTHONPATH=/tmp/release .venv/bin/python tests/ledger_dumps/make_dump.py postgresql OUT.sql

A real QueueService (local backend, real processes) on the cluster below fills the ledger with
workloads in every state (Succeeded ``done``, Failed ``broken``, Running ``runner``, Pending
``waiter``, Cancelled ``dropped``, Admitted ``starter``: the server stopped between its admission
and its start, written by rewriting its row, as a crash leaves it), their usage intervals, GPU
utilization samples, a budget, a stored configuration (a patched ClusterQueue and new prices)
and their audit entries. The service is then dropped without a clean stop (as a crash), the
running job killed, and the database dumped: SQLite with ``iterdump``, PostgreSQL with
``pg_dump --inserts`` of a throw-away server (``tests/pgtools.py``).

``tests/test_migrations.py`` loads each dump, upgrades it with the code of the day and checks
every record and the service's restore (``EXPECTED`` there lists what this script made).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/ (pgtools)

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


def fill(url: str, work: str) -> None:
    from jupyter_gpuqueue import admin
    from jupyter_gpuqueue.ledger import Prices
    from jupyter_gpuqueue.service import create_service

    for name, text in (("cluster.yaml", CLUSTER), ("inventory.yaml", INVENTORY)):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(work, "root"), exist_ok=True)
    svc = create_service(config_paths=[os.path.join(work, "cluster.yaml")],
                         inventory_path=os.path.join(work, "inventory.yaml"), db_url=url,
                         root_dir=os.path.join(work, "root"), data_dir=os.path.join(work, "data"),
                         default_local_queue="one/q", stop_grace_seconds=0.5)
    svc.restore()

    def wait(pred, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            svc.tick()
            if pred():
                return
            time.sleep(0.05)
        raise SystemExit("condition not reached")

    def state(ns, name):
        return svc.get_workload(ns, name)["state"]

    svc.submit({"name": "done", "command": ["true"], "gpus": 1, "flavor": "gpu-a"}, user="alice")
    svc.submit({"name": "broken", "command": ["false"], "gpus": 1, "flavor": "gpu-a",
                "priorityClass": "low"}, user="alice")
    wait(lambda: state("one", "done") == "Succeeded" and state("one", "broken") == "Failed")
    svc.submit({"name": "runner", "command": ["sleep", "600"], "gpus": 2, "flavor": "gpu-b",
                "localQueue": "two/q"}, user="bob")
    wait(lambda: state("two", "runner") == "Running")
    svc.submit({"name": "waiter", "command": ["true"], "gpus": 1, "flavor": "gpu-b"}, user="alice")
    svc.submit({"name": "dropped", "command": ["true"], "gpus": 1, "flavor": "gpu-b"}, user="alice")
    svc.cancel("one", "dropped", user="alice")
    svc.submit({"name": "starter", "command": ["sleep", "600"], "gpus": 1, "flavor": "gpu-a",
                "localQueue": "two/q"}, user="bob")
    wait(lambda: state("two", "starter") == "Running")
    for _ in range(3):
        svc.tick()
    assert state("one", "waiter") == "Pending"
    svc.set_budget("one", {"monthlyUSD": 500, "warnAt": 0.8, "hard": False}, actor="admin")
    new, before, after = admin.patch_cluster_queue(svc.config, "cq-one", {"resources": [
        {"flavor": "gpu-a", "resource": "nvidia.com/gpu", "nominalQuota": "2"}]})
    svc.apply_config(new, actor="admin", operation="patch-cluster-queue", target="cq-one",
                     before=before, after=after, prices=Prices({"gpu-a": 2.21, "gpu-b": 0.81}))
    runner = svc.ledger.find_workload("two", "runner")
    t = time.time()
    svc.ledger.add_utilization_samples([(runner["uid"], "GPU-00000000-0000-0000-0000-000000000010", t - 1, 40.0),
                                        (runner["uid"], "GPU-00000000-0000-0000-0000-000000000011", t, 60.0)])
    # "starter": the server stopped after admitting it and before starting it (a crash): no run.
    starter = svc.ledger.find_workload("two", "starter")
    svc.ledger.update_workload(starter["uid"], state="Admitted", run=None, started_at=None)
    for row in (runner, starter):  # a crash: the jobs' processes end with the server
        pgid = (row.get("run") or {}).get("pgid")
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    svc.ledger.close()


def main(argv: list[str]) -> int:
    kind, out = argv[1], os.path.abspath(argv[2])
    with tempfile.TemporaryDirectory() as work:
        if kind == "sqlite":
            path = os.path.join(work, "ledger.sqlite")
            fill(f"sqlite:///{path}", work)
            con = sqlite3.connect(path)
            with open(out, "w", encoding="utf-8") as f:
                for line in con.iterdump():
                    f.write(line + "\n")
            con.close()
        elif kind == "postgresql":
            import pgtools
            from sqlalchemy.engine import make_url

            server = pgtools.PostgresServer().start()
            try:
                url = server.create_database("dump")
                fill(url, work)
                u = make_url(url)
                dump = subprocess.run(
                    [os.path.join(server.bindir, "pg_dump"), "--inserts", "--no-owner", "--no-privileges",
                     "-h", u.query["host"], "-p", str(u.query["port"]), "-U", "postgres", u.database],
                    check=True, capture_output=True, text=True).stdout
                with open(out, "w", encoding="utf-8") as f:
                    f.write(dump)
            finally:
                server.stop()
        else:
            raise SystemExit("kind: sqlite | postgresql")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
