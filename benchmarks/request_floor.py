"""What one HTTP request costs the server, below any handler (not a test): the floor under
``bench submit`` with one submission per request.

    .venv/bin/python benchmarks/request_floor.py            # 6,000 requests per row, 8 clients
    .venv/bin/python benchmarks/request_floor.py --n 20000

Three rows, each with the same client as ``bench submit`` (aiohttp in this process, 8 clients,
one keep-alive connection each, each waiting for its answer before it sends the next request,
cookies kept as ``bench/server.py``'s ``client_session`` does):

1. a bare tornado server (``tornado.web.Application``, one handler that parses the JSON body and
   answers 201 with a small JSON body): the HTTP floor of Python's web stack on this machine;
2. ``POST gpuqueue/api/estimate`` on the bench's jupyter_server (token auth, the queue
   running): a cheap handler behind jupyter_server's full request path (authentication,
   authorization, XSRF and host checks, security headers, the request log and its metrics);
3. ``POST gpuqueue/api/workloads``, one SubmitRequest per request: a real, durable submission.

Each row prints requests/s and the server's CPU time per request (from /proc, user + system,
all threads). One server process is bound by its CPU time per request: 1 / (CPU per request)
is its ceiling, whatever the clients do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jupyter_gpuqueue.bench import measure  # noqa: E402
from jupyter_gpuqueue.bench.server import BenchServer, client_session, free_port  # noqa: E402

BARE_SERVER = r"""
import json, sys
import tornado.ioloop, tornado.web

class Handler(tornado.web.RequestHandler):
    def post(self):
        json.loads(self.request.body)
        self.set_status(201)
        self.set_header("Content-Type", "application/json")
        self.finish('{"ok": true}')

tornado.web.Application([(r"/x", Handler)]).listen(int(sys.argv[1]), "127.0.0.1")
tornado.ioloop.IOLoop.current().start()
"""


async def hammer(url: str, headers: dict, body, n: int, clients: int, pid: int) -> tuple[float, float]:
    """``n`` POSTs to ``url`` from ``clients`` clients; returns (requests/s, server CPU ms per request).
    ``body(i)`` is the i-th request's body."""
    import aiohttp

    count = [0]

    async def client(session) -> None:
        while count[0] < n:
            i = count[0]
            count[0] += 1
            async with session.post(url, data=body(i), headers=headers) as r:
                await r.read()
                if r.status >= 400:
                    raise RuntimeError(f"{url}: {r.status} {await r.text()}")

    sessions = [client_session(connector=aiohttp.TCPConnector(limit=1)) for _ in range(clients)]
    try:
        # warm up: connections open, login cookies set
        await asyncio.gather(*(s.post(url, data=body(-1 - k), headers=headers) for k, s in enumerate(sessions)))
        cpu0, t0 = measure.process_cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(client(s) for s in sessions))
        elapsed, cpu1 = time.perf_counter() - t0, measure.process_cpu_seconds(pid)
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    return n / elapsed, (cpu1 - cpu0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6000, help="requests per row (6000)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    args = ap.parse_args()
    json_headers = {"Content-Type": "application/json"}
    rows = []

    port = free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])
    try:
        time.sleep(1.5)
        rows.append(("bare tornado, JSON POST", asyncio.run(hammer(
            f"http://127.0.0.1:{port}/x", {**json_headers, "Authorization": "token x"},
            lambda i: '{"gpus": 1}', args.n, args.clients, bare.pid))))
    finally:
        bare.kill()
        bare.wait()

    with BenchServer() as server:
        headers = {**server.headers, **json_headers}
        estimate = json.dumps({"gpus": 2, "localQueue": "team-a/team-a-queue"})
        rows.append(("jupyter_server, POST estimate", asyncio.run(hammer(
            server.api + "estimate", headers, lambda i: estimate, args.n, args.clients, server.pid))))
        rows.append(("jupyter_server, POST workloads (one submission)", asyncio.run(hammer(
            server.api + "workloads", headers,
            lambda i: json.dumps({"name": f"floor-{i + 1000}", "gpus": 1, "localQueue": "team-a/team-a-queue",
                                  "command": ["sleep", "600"]}),
            args.n, args.clients, server.pid))))

    print(f"{'server':<50} {'requests/s':>10} {'server CPU ms/request':>22}")
    for name, (rate, cpu) in rows:
        print(f"{name:<50} {rate:>10.0f} {cpu:>22.3f}")
    print(f"load average: {measure.load_average()}")


if __name__ == "__main__":
    main()
