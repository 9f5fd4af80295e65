"""The event stream's fan-out with "who sees what" (service/visibility.py): one flush of N workload
events to C connected clients, when every client sees every workload (a standalone server, admins,
``workload_visibility = "all"``) and when C hub users in T teams each see their teams' (one
selection of the events per team, framed once: server/events.py).

    .venv/bin/python benchmarks/bench_event_fanout.py [--clients 100] [--teams 2] [--events 200]

A real QueueService (SQLite in a temporary directory) supplies the teams; the clients are the
broadcaster's view of a connection (user, admin, batches, the frames written to it), not sockets:
this measures the broadcaster's own work, which runs on the server's event loop.
"""

from __future__ import annotations

import argparse
import time

from jupyter_gpuqueue.server.events import EventBroadcaster
from tempservice import temp_service

INVENTORY = """
nodes:
- name: box
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
"""


def cluster(teams: int) -> str:
    docs = ["apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpu}\nspec: {nodeLabels: {model: a}}",
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  namespaceSelector: {}\n"
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: gpu\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]"]
    docs += [f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {{name: q, namespace: team-{t}}}\n"
             "spec: {clusterQueue: cq}" for t in range(teams)]
    return "\n---\n".join(docs) + "\n"


class Client:
    def __init__(self, user: str):
        self.gpuqueue_user, self.gpuqueue_admin, self.batches = user, False, True
        self.frames = 0

    def _write_frame(self, frame: bytes) -> None:
        self.frames += 1


class Service:
    """What the broadcaster reads of a service: its teams (no subscription: flushed by hand)."""

    def __init__(self, teams):
        self.teams = teams

    def subscribe(self, callback):
        return lambda: None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--teams", type=int, default=2)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()
    users = {f"u{i}": [f"team-{i % args.teams}/q"] for i in range(args.clients)}
    svc = temp_service(cluster(args.teams), INVENTORY, user_local_queues=users)
    events = [{"type": "workload", "workload": {"namespace": f"team-{i % args.teams}", "name": f"w{i}",
                                                "owner": f"u{i % args.clients}", "state": "Pending", "pad": "x" * 600}}
              for i in range(args.events)]
    for mode in ("all", "team"):
        svc.teams.set_visibility(mode)
        b = EventBroadcaster(Service(svc.teams), flush_interval=0)
        clients = [Client(u) for u in users]
        for c in clients:
            b.clients[c] = None
        times = []
        for _ in range(args.rounds):
            b._events = list(events)
            t = time.perf_counter()
            b.flush()
            times.append(time.perf_counter() - t)
        times.sort()
        print(f"{mode:>4}: one flush of {args.events} events to {args.clients} clients in {args.teams} teams: "
              f"median {1000 * times[len(times) // 2]:.2f} ms, max {1000 * times[-1]:.2f} ms")


if __name__ == "__main__":
    main()
