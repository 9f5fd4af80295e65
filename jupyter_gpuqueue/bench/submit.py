"""``bench submit``: N submissions through the real REST API from C concurrent clients.

Each client is one HTTP/1.1 keep-alive connection (aiohttp) that sends one submission, waits for
its acknowledgement (``201`` with the Workload), and sends the next: a closed loop, as a person or a
script submitting one job after another. With ``batch`` > 1 each request is a SubmitBatch of that
many submissions (``{"items": [...]}``, as a sweep or a job array sends them), acknowledged together
by one ``201 {"items": [Workload]}``. Clients take the next jobs of the shared stream
(:func:`.stream.job_stream`) from a common counter. Every acknowledgement means the submission is
durable (the server commits it to its ledger before answering; see
``jupyter_gpuqueue/ledger/group_commit.py``).

Reported: submissions/s (N over the time from the first request to the last acknowledgement),
acknowledgement latency p50 / p99, and the time until every workload has an admission or a
position (the acknowledgements carry them; then ``GET /queues`` is polled until the server accounts
for all N). Checked: every submission acknowledged exactly once (N distinct uids, no error), and,
for a server started here, the ledger holds exactly those N workloads.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from . import measure, stream
from .server import client_session

# Jobs that outlast the benchmark: as in slurm.md's measurement (jobs submitted into a DOWN
# partition), the submission rate is measured without jobs finishing meanwhile. With
# ``--command "sleep 1"`` jobs churn during the run: every completion makes the scheduler walk
# the whole queue (Kueue's requeue of inadmissible workloads), see BENCHMARKS.md.
DEFAULT_COMMAND = ("sleep", "600")


async def _client(session, api: str, headers: dict, jobs: list, counter: list, command: list[str],
                  acks: dict, latencies: list, errors: list, t0: float, batch: int = 1) -> None:
    while True:
        i = counter[0]
        if i >= len(jobs):
            return
        counter[0] = j = min(len(jobs), i + max(1, batch))
        await _post(session, api, headers, jobs, range(i, j), command, acks, latencies, errors, t0, batch > 1)


async def _post(session, api: str, headers: dict, jobs: list, indices: range, command: list[str],
                acks: dict, latencies: list, errors: list, t0: float, as_batch: bool) -> None:
    """One ``POST workloads`` of the jobs ``indices``: a SubmitBatch (``as_batch``) or a single
    SubmitRequest. Each acknowledgement is recorded with the request's latency; errors name the
    job index."""
    import aiohttp

    reqs = [stream.submit_request(jobs[i], command) for i in indices]
    body = json.dumps({"items": reqs} if as_batch else reqs[0])
    start = time.perf_counter()
    try:
        async with session.post(api + "workloads", data=body, headers=headers) as r:
            text = await r.text()
            status = r.status
    except aiohttp.ClientError as exc:
        errors.extend((i, None, repr(exc)) for i in indices)
        return
    end = time.perf_counter()
    if status != 201:
        errors.extend((i, status, text[:300]) for i in indices)
        return
    items = json.loads(text)["items"] if as_batch else [json.loads(text)]
    if len(items) != len(indices):
        errors.append((indices[0], status, f"{len(items)} acknowledgements for {len(indices)} submissions"))
    for i, wl in zip(indices, items):
        if i in acks:
            errors.append((i, status, "acknowledged twice"))
        acks[i] = (wl["uid"], wl["namespace"], wl["name"], wl["state"], wl.get("positionInClusterQueue"),
                   end - t0)
        latencies.append(end - start)


async def _placed(session, api: str, headers: dict, uids: set, timeout: float) -> tuple[bool, int]:
    """Poll ``GET /queues`` and the finished states until every uid is admitted (or done) or has
    a position. Returns (all placed, how many are pending with a position)."""
    deadline = time.monotonic() + timeout
    while True:
        async with session.get(api + "queues", headers=headers) as r:
            queues = await r.json()
        pending = sum(1 for cq in queues["clusterQueues"] for p in cq["pending"]
                      if p["positionInClusterQueue"] is not None)
        admitted = sum(cq["admittedWorkloads"] for cq in queues["clusterQueues"])
        # Pending with a position + admitted now; what finished in between is in the ledger.
        async with session.get(api + "workloads", headers=headers,
                               params={"state": "Succeeded,Failed,Cancelled"}) as r:
            finished = len((await r.json())["items"]) if r.status == 200 else 0
        if pending + admitted + finished >= len(uids) or time.monotonic() > deadline:
            return pending + admitted + finished >= len(uids), pending
        await asyncio.sleep(0.1)


async def run_submit(server, *, n: int, clients: int, command: Optional[list[str]] = None,
                     seed: int = 42, placed_timeout: float = 120.0, batch: int = 1) -> dict:
    """Run the benchmark against ``server`` (a :class:`.server.ExternalServer` or a started
    :class:`.server.BenchServer`); returns the figures (see the module docstring) as a dict:
    ``n, clients, seconds, submissionsPerSecond, ackLatencyP50Ms, ackLatencyP99Ms,
    secondsUntilAllPlaced, ackedWithPosition, ackedAdmitted, errors, acknowledged, distinctUids,
    ledgerRows, serverCpuSeconds, clientCpuSeconds, load``."""
    import aiohttp

    command = command or list(DEFAULT_COMMAND)
    jobs = stream.job_stream(n, seed)
    acks: dict[int, tuple] = {}
    latencies: list[float] = []
    errors: list[tuple] = []
    counter = [0]
    headers = {**server.headers, "Content-Type": "application/json"}
    sessions = [client_session(connector=aiohttp.TCPConnector(limit=1, force_close=False),
                                      timeout=aiohttp.ClientTimeout(total=120)) for _ in range(clients)]
    load_before = measure.load_average()
    try:
        # One warm-up request per client opens its connection (not counted).
        await asyncio.gather(*(s.get(server.api + "info", headers=server.headers) for s in sessions))
        cpu0_server = measure.process_cpu_seconds(server.pid)
        cpu0_client = measure.own_cpu_seconds()
        t0 = time.perf_counter()
        await asyncio.gather(*(
            _client(s, server.api, headers, jobs, counter, command, acks, latencies, errors, t0, batch)
            for s in sessions))
        t_acked = time.perf_counter() - t0
        cpu_server = measure.process_cpu_seconds(server.pid)
        cpu_client = measure.own_cpu_seconds() - cpu0_client
        uids = {a[0] for a in acks.values()}
        all_placed, _ = await _placed(sessions[0], server.api, server.headers, uids, placed_timeout)
        t_placed = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    ledger_rows = None
    if getattr(server, "ledger_path", None):
        rows = {r[0] for r in server.ledger_rows("SELECT uid FROM workloads")}
        ledger_rows = len(rows)
        missing = uids - rows
        if missing:
            errors.append((None, None, f"{len(missing)} acknowledged workloads are not in the ledger"))
    with_position = sum(1 for a in acks.values() if a[3] == "Pending" and a[4] is not None)
    admitted = sum(1 for a in acks.values() if a[3] != "Pending")
    return {
        "n": n,
        "clients": clients,
        "batch": batch,
        "seconds": t_acked,
        "submissionsPerSecond": len(acks) / t_acked if t_acked > 0 else None,
        "ackLatencyP50Ms": (measure.percentile(latencies, 50) or 0) * 1000,
        "ackLatencyP99Ms": (measure.percentile(latencies, 99) or 0) * 1000,
        "secondsUntilAllPlaced": t_placed if all_placed else None,
        "ackedWithPosition": with_position,
        "ackedAdmitted": admitted,
        "acknowledged": len(acks),
        "distinctUids": len(uids),
        "ledgerRows": ledger_rows,
        "errors": [list(e) for e in errors[:20]],
        "errorCount": len(errors),
        "serverCpuSeconds": (cpu_server - cpu0_server) if cpu_server is not None and cpu0_server is not None else None,
        "clientCpuSeconds": cpu_client,
        "load": {"before": load_before, "after": measure.load_average()},
    }


def format_submit(r: dict) -> str:
    """A human-readable summary of :func:`run_submit`'s figures."""
    lines = [
        f"bench submit: {r['acknowledged']}/{r['n']} acknowledged from {r['clients']} clients"
        f"{'' if r.get('batch', 1) == 1 else ' in batches of ' + str(r['batch'])} "
        f"in {r['seconds']:.2f} s = {measure.fmt(r['submissionsPerSecond'], '/s', 0)}",
        f"  ack latency p50 {r['ackLatencyP50Ms']:.1f} ms, p99 {r['ackLatencyP99Ms']:.1f} ms",
        f"  every workload admitted or with a position after {measure.fmt(r['secondsUntilAllPlaced'], ' s')} "
        f"({r['ackedWithPosition']} acks carried a position, {r['ackedAdmitted']} were already admitted)",
        f"  distinct uids {r['distinctUids']}, ledger rows {r['ledgerRows'] if r['ledgerRows'] is not None else '-'}, "
        f"errors {r['errorCount']}",
        f"  CPU: server {measure.fmt(r['serverCpuSeconds'], ' s')}, client {measure.fmt(r['clientCpuSeconds'], ' s')}; "
        f"load before {r['load']['before'][0]:.2f}, after {r['load']['after'][0]:.2f}",
    ]
    for e in r["errors"][:5]:
        lines.append(f"  error: {e}")
    return "\n".join(lines)
