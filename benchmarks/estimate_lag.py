"""How late estimates come on a machine whose cores other work saturates (a shared lab machine):
a QueueService with PENDING waiting jobs over 4 GPUs, HOGS busy processes at nice 0, and the
estimator's forked child at nice NICE; a submission every second, 8 times, and the seconds until
its workload view has an estimate (BENCHMARKS.md, "Estimated start times in the live service").

    .venv/bin/python benchmarks/estimate_lag.py NICE HOGS [PENDING=1500]

Real local processes (sleep jobs) and a SQLite ledger in a temporary directory.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time

from tempservice import temp_service

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: one}
spec: {clusterQueue: cq}
"""
INVENTORY = "nodes:\n- name: box\n  labels: {model: a}\n  gpus:\n" + "".join(
    f"  - {{index: {i}, uuid: GPU-00000000-0000-0000-0000-00000000000{i}, product: Model A, memoryMiB: 1024}}\n"
    for i in range(4))
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def main() -> None:
    nice, hogs = int(sys.argv[1]), int(sys.argv[2])
    pending = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
    svc = temp_service(CLUSTER, INVENTORY)
    svc.estimates.child_nice = nice
    procs: list[subprocess.Popen] = []

    def submit(name: str) -> None:
        svc.submit({"name": name, "command": SLEEP, "gpus": 1, "localQueue": "one/q", "maxRuntimeSeconds": 600},
                   user="alice")

    async def run() -> None:
        await svc.start()
        for i in range(4 + pending):
            submit(f"w{i}")
        await asyncio.sleep(3)
        for _ in range(hogs):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        await asyncio.sleep(1)
        lags = []
        for k in range(8):
            name, t0 = f"probe{k}", time.monotonic()
            submit(name)
            while svc.get_workload("one", name)["estimatedStartAt"] is None and time.monotonic() - t0 < 120:
                await asyncio.sleep(0.02)
            lags.append(time.monotonic() - t0)
            await asyncio.sleep(1.0)
        print(f"nice {nice}, {hogs} busy processes, {pending} pending: submission -> estimate "
              f"median {statistics.median(lags):.2f} s, max {max(lags):.2f} s")
        await svc.stop()

    try:
        asyncio.run(run())
    finally:
        for p in procs:
            p.kill()
        for uid in list(svc.backend.running()):
            svc.backend.stop(uid, "benchmark over", 0.0)


if __name__ == "__main__":
    main()
