"""``bench panels``: live panels (event-stream subscribers) while ``bench drain`` runs.

``clients`` websocket subscribers connect to ``{base}gpuqueue/api/events`` (token auth, as the
JupyterLab panel does), then ``bench drain`` runs in a separate process against the same server.
Each panel also asks for a position now and then: every ``query_interval`` seconds (with jitter)
it reads one workload it heard of that is still Pending (``GET workloads/{ns}/{name}``), as a
user looking at where their job stands.

Measured:

- event delay: receive time (this process's clock, the same host clock as the server's) minus
  the time of the state change the event reports: ``createdAt`` for Pending (the submission),
  ``startedAt`` for Running, ``finishedAt`` for Succeeded / Failed (when the process ended, so the
  time to notice the exit is included); p50 / p99 / max over every event of every client;
- position queries: latency p50 / p99, errors;
- starvation: every client must receive every workload event (per-client counts equal) and no
  client's own p99 may stand out (the worst client's p99 is reported).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Optional

from . import measure

_STATE_TIME = {"Pending": "createdAt", "Running": "startedAt", "Succeeded": "finishedAt", "Failed": "finishedAt",
               "Admitted": "admittedAt"}


class _Panel:
    def __init__(self, index: int):
        self.index = index
        self.delays: list[float] = []
        self.events = 0
        self.workload_events = 0
        self.pending: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self.query_latencies: list[float] = []
        self.query_errors = 0
        self.errors: list[str] = []
        self.connected = asyncio.Event()


async def _subscribe(panel: _Panel, session, server, stop: asyncio.Event) -> None:
    import aiohttp

    try:
        async with session.ws_connect(server.ws_url, headers=server.headers, heartbeat=None,
                                      max_msg_size=0) as ws:
            panel.connected.set()
            while not stop.is_set():
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=0.5)
                except asyncio.TimeoutError:
                    continue
                now = time.time()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                        panel.errors.append(f"stream closed: {msg.type}")
                        return
                    continue
                panel.events += 1
                if not msg.data.startswith('{"type": "workload"'):
                    continue  # queues / inventory / ping: nothing to time (and no need to parse)
                event = json.loads(msg.data)
                panel.workload_events += 1
                wl = event["workload"]
                at = wl.get(_STATE_TIME.get(wl["state"], ""))
                if at:
                    panel.delays.append(now - at)
                if wl["state"] == "Pending":
                    panel.pending[wl["uid"]] = (wl["namespace"], wl["name"])
                else:
                    panel.pending.pop(wl["uid"], None)
    except Exception as exc:  # a failed connection is an error of this client, reported
        panel.errors.append(repr(exc))
        panel.connected.set()


async def _query(panel: _Panel, session, server, stop: asyncio.Event, interval: float) -> None:
    rng = random.Random(panel.index)
    await asyncio.sleep(rng.uniform(0, interval))
    while not stop.is_set():
        if panel.pending:
            uid = rng.choice(list(panel.pending))
            ns, name = panel.pending[uid]
            start = time.perf_counter()
            try:
                async with session.get(f"{server.api}workloads/{ns}/{name}", headers=server.headers) as r:
                    await r.read()
                    ok = r.status == 200
            except Exception:
                ok = False
            if ok:
                panel.query_latencies.append(time.perf_counter() - start)
            else:
                panel.query_errors += 1
        await asyncio.sleep(rng.uniform(0.5 * interval, 1.5 * interval))


async def run_panels(server, *, clients: int = 100, n: int = 2000, borrowing: bool = True,
                     query_interval: float = 1.0, drain_args: Optional[list[str]] = None,
                     timeout: float = 1800.0) -> dict:
    """Connect ``clients`` panels to ``server``, run ``bench drain --n N`` against it in another
    process, and return the figures (see the module docstring) with the drain's own figures
    under ``drain``."""
    import aiohttp

    panels = [_Panel(i) for i in range(clients)]
    stop = asyncio.Event()
    # One connection pool per panel (as separate browsers), websockets plus queries.
    sessions = [aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) for _ in panels]
    subs = [asyncio.create_task(_subscribe(p, s, server, stop)) for p, s in zip(panels, sessions)]
    await asyncio.gather(*(p.connected.wait() for p in panels))
    queries = [asyncio.create_task(_query(p, s, server, stop, query_interval)) for p, s in zip(panels, sessions)]
    out = tempfile.NamedTemporaryFile(prefix="gpuqueue-drain-", suffix=".json", delete=False)
    out.close()
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", "drain", "--url", server.url,
           "--token", server.token, "--n", str(n), "--json", out.name,
           "--borrowing" if borrowing else "--no-borrowing", *(drain_args or [])]
    env = dict(os.environ)
    t0 = time.time()
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        await asyncio.sleep(1.0)  # the last events
        stop.set()
        await asyncio.gather(*subs, *queries, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in sessions))
    drain = None
    try:
        with open(out.name) as f:
            drain = json.load(f)
    except (OSError, ValueError):
        pass
    finally:
        os.unlink(out.name)
    delays = [d for p in panels for d in p.delays]
    latencies = [q for p in panels for q in p.query_latencies]
    counts = [p.workload_events for p in panels]
    per_client_p99 = [measure.percentile(p.delays, 99) for p in panels if p.delays]
    return {
        "clients": clients,
        "seconds": time.time() - t0,
        "drainExitCode": proc.returncode,
        "drainOutput": output.decode("utf-8", "replace")[-2000:],
        "drain": drain,
        "events": sum(p.events for p in panels),
        "workloadEventsPerClientMin": min(counts) if counts else 0,
        "workloadEventsPerClientMax": max(counts) if counts else 0,
        "eventDelayP50Ms": (measure.percentile(delays, 50) or 0) * 1000,
        "eventDelayP99Ms": (measure.percentile(delays, 99) or 0) * 1000,
        "eventDelayMaxMs": (max(delays) if delays else 0) * 1000,
        "worstClientP99Ms": (max(per_client_p99) if per_client_p99 else 0) * 1000,
        "queries": len(latencies),
        "queryP50Ms": (measure.percentile(latencies, 50) or 0) * 1000,
        "queryP99Ms": (measure.percentile(latencies, 99) or 0) * 1000,
        "queryErrors": sum(p.query_errors for p in panels),
        "streamErrors": [e for p in panels for e in p.errors][:20],
        "streamErrorCount": sum(len(p.errors) for p in panels),
        "load": measure.load_average(),
    }


def format_panels(r: dict) -> str:
    """A human-readable summary of :func:`run_panels`' figures."""
    starved = r["workloadEventsPerClientMin"] != r["workloadEventsPerClientMax"]
    lines = [
        f"bench panels: {r['clients']} subscribers during a drain ({r['seconds']:.1f} s, drain exit {r['drainExitCode']})",
        f"  events received {r['events']}; workload events per client {r['workloadEventsPerClientMin']}.."
        f"{r['workloadEventsPerClientMax']} ({'a client missed events' if starved else 'every client got every event'})",
        f"  state change -> event: p50 {r['eventDelayP50Ms']:.0f} ms, p99 {r['eventDelayP99Ms']:.0f} ms, "
        f"max {r['eventDelayMaxMs']:.0f} ms; worst client's p99 {r['worstClientP99Ms']:.0f} ms",
        f"  position queries: {r['queries']}, p50 {r['queryP50Ms']:.1f} ms, p99 {r['queryP99Ms']:.1f} ms, "
        f"errors {r['queryErrors']}; stream errors {r['streamErrorCount']}",
        f"  load {r['load'][0]:.2f}",
    ]
    if r.get("drain"):
        from .drain import format_drain

        lines.append(format_drain(r["drain"]))
    else:
        lines.append(r["drainOutput"])
    return "\n".join(lines)
