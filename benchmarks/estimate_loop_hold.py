"""What one refresh of the live estimates costs the event loop at its start (issue 32): the copy
of the Scheduler and the hand-off to the estimates' worker process (or, in an older tree, the
fork), per refresh, wall and CPU time of the loop's thread; and the CPU time the estimates' thread
spends pickling each request (it competes with the loop for the GIL, in turns of at most 5 ms).

A real QueueService (the demo cluster and inventory, a SQLite ledger in a temporary directory,
the local backend's real ``sleep`` processes) with PENDING 1-GPU jobs submitted (36 run, the rest
wait); 25 refreshes, each started when the previous one is published. CPU time is the figure to
compare on a machine that other work loads (wall time then mostly says how busy the cores are).

    .venv/bin/python benchmarks/estimate_loop_hold.py [PENDING=2000]
    PYTHONPATH=/path/to/an/older/tree .venv/bin/python benchmarks/estimate_loop_hold.py   # before
"""

from __future__ import annotations

import asyncio
import pickle
import statistics
import sys
import tempfile
import time


def main() -> int:
    from jupyter_gpuqueue.service import estimates as module
    from jupyter_gpuqueue.service.factory import create_service

    pending = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    pickling: list[tuple[float, int]] = []
    try:
        from jupyter_gpuqueue.service import estimate_worker
    except ImportError:  # a tree from before the worker process (the fork)
        estimate_worker = None
    if estimate_worker is not None:
        real_dumps = pickle.dumps

        class Pickle:
            HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

            @staticmethod
            def dumps(obj, protocol=None):
                c = time.thread_time()
                data = real_dumps(obj, protocol=protocol)
                pickling.append((time.thread_time() - c, len(data)))
                return data

        estimate_worker.pickle = Pickle
    tmp = tempfile.mkdtemp(prefix="estimate-loop-hold-")
    svc = create_service(config_paths=None, inventory_path=None, db_url=None, root_dir=tmp, data_dir=tmp + "/data",
                         lease_priority_class=None)
    svc.configure_costs(utilization_sampler=None)
    print(f"estimates: {module.__file__}")

    async def scenario() -> None:
        await svc.start()
        est = svc.estimates
        est.min_interval = est.refresh_interval = 1e9  # refreshes only when started here
        queues = ["team-a/team-a-queue", "team-b/team-b-queue"]
        for i in range(pending):
            svc.submit({"name": f"j{i}", "command": ["sleep", "600"], "gpus": 1, "localQueue": queues[i % 2]},
                       user="bench")
        await asyncio.sleep(3)
        loop = asyncio.get_running_loop()
        wall, cpu = [], []
        try:
            for _ in range(25):
                while est._running:
                    await asyncio.sleep(0.01)
                n = est.refreshes
                t, c = time.perf_counter(), time.thread_time()
                est._start(loop)
                wall.append(time.perf_counter() - t)
                cpu.append(time.thread_time() - c)
                for _ in range(6000):
                    if est.refreshes > n and not est._running:
                        break
                    await asyncio.sleep(0.01)
        finally:
            for uid in list(svc.backend.running()):
                svc.backend.stop(uid, "benchmark ends", 0.0)
            await svc.stop()
        ms = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e3  # noqa: E731
        print(f"{pending} pending: refresh start on the loop: CPU median {statistics.median(cpu) * 1e3:.1f} ms "
              f"(p90 {ms(cpu, 0.9):.1f}); wall median {statistics.median(wall) * 1e3:.1f} ms "
              f"(p90 {ms(wall, 0.9):.1f}, max {max(wall) * 1e3:.1f})")
        if pickling:
            print(f"pickling on the estimates' thread: CPU median {statistics.median(c for c, _ in pickling) * 1e3:.1f} ms,"
                  f" {statistics.median(n for _, n in pickling) / 1e6:.2f} MB per request")

    asyncio.run(scenario())
    return 0


if __name__ == "__main__":
    sys.exit(main())
