"""``bench panels``: live panels (event-stream subscribers) while ``bench drain`` runs.

``clients`` websocket subscribers connect to ``{base}gpuqueue/api/events`` (token auth, as the
JupyterLab panel does, and with ``?batch=1`` as it does: several events of one moment come as one
``batch`` message), then ``bench drain`` runs in a separate process against the same server.
Each panel also asks for a position now and then: every ``query_interval`` seconds (with jitter)
it reads one workload it heard of that is still Pending (``GET workloads/{ns}/{name}``), as a
user looking at where their job stands.

Measured:

- event delay: receive time (this process's clock, the same host clock as the server's) minus
  the time of the state change the event reports: ``createdAt`` for Pending (the submission),
  ``startedAt`` for Running, ``finishedAt`` for Succeeded / Failed (when the process ended, so the
  time to notice the exit is included); p50 / p99 / max over every state change of every client
  (the events of one batch message share its receive time; an event that repeats the state, as a
  pending workload's new reason, has no time of its own and is not timed);
- position queries: latency p50 / p99, errors;
- starvation: every client must receive every workload event (per-client counts equal) and no
  client's own p99 may stand out (the worst client's p99 is reported).

Also reported: the event delay per state, the messages and events received, and the CPU seconds
of the server and of this process (the panels) during the drain.
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
from .server import client_session

_STATE_TIME = {"Pending": "createdAt", "Running": "startedAt", "Succeeded": "finishedAt", "Failed": "finishedAt",
               "Admitted": "admittedAt"}


class _Panel:
    def __init__(self, index: int):
        self.index = index
        self.delays: list[float] = []
        self.last_state: dict[str, str] = {}  # uid -> the state of its last event
        self.delays_by_state: dict[str, list[float]] = {}
        self.messages = 0
        self.events = 0
        self.workload_events = 0
        self.pending: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self.query_latencies: list[float] = []
        self.query_errors = 0
        self.query_error_kinds: dict[str, int] = {}  # "HTTP 404" / an exception's name -> count
        self.errors: list[str] = []
        self.connected = asyncio.Event()


class _Decoder:
    """Decodes each distinct message once for every panel: the server encodes each flush once
    and sends the same text to every panel, so the bench's own client (which shares the CPUs with
    the server) parses it once instead of once per panel. A message becomes ``(events, workloads)``:
    how many events it holds (one, or a batch's) and, per workload event in order,
    ``(time of the state change or None, state, uid, namespace, name)``."""

    def __init__(self, size: int = 512):
        self.size = size
        self._cache: dict[str, tuple[int, list[tuple]]] = {}

    def decode(self, text: str) -> tuple[int, list[tuple]]:
        out = self._cache.get(text)
        if out is not None:
            return out
        if text.startswith('{"type": "workload"') or text.startswith('{"type": "batch"'):
            event = json.loads(text)
            events = event["events"] if event["type"] == "batch" else [event]
        else:  # hello / queues / inventory / ping: one event, nothing to time (no need to parse)
            events = [None]
        workloads = []
        for e in events:
            if e is not None and e.get("type") == "workload":
                wl = e["workload"]
                at = wl.get(_STATE_TIME.get(wl["state"], ""))
                workloads.append((at or None, wl["state"], wl["uid"], wl["namespace"], wl["name"]))
        out = (len(events), workloads)
        if len(self._cache) >= self.size:
            del self._cache[next(iter(self._cache))]  # the oldest
        self._cache[text] = out
        return out


async def _subscribe(panel: _Panel, session, server, decoder: _Decoder) -> None:
    """Read the event stream until cancelled (the end of the run) or closed by the server (an error)."""
    import aiohttp

    try:
        # batch=1: several events of one moment come as one message, as to the JupyterLab panel.
        async with session.ws_connect(server.ws_url + "?batch=1", headers=server.headers, heartbeat=None,
                                      max_msg_size=0) as ws:
            panel.connected.set()
            while True:
                msg = await ws.receive()
                now = time.time()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                        panel.errors.append(f"stream closed: {msg.type}")
                        return
                    continue
                panel.messages += 1
                events, workloads = decoder.decode(msg.data)
                panel.events += events
                panel.workload_events += len(workloads)
                for at, state, uid, ns, name in workloads:
                    # Only a state change is timed: a later event in the same state (a pending
                    # workload's new reason, say) has no time of its own, and its createdAt /
                    # startedAt would count how long the workload has been in that state.
                    if at and panel.last_state.get(uid) != state:
                        panel.delays.append(now - at)
                        by_state = panel.delays_by_state.get(state)
                        if by_state is None:
                            by_state = panel.delays_by_state[state] = []
                        by_state.append(now - at)
                    panel.last_state[uid] = state
                    if state == "Pending":
                        panel.pending[uid] = (ns, name)
                    else:
                        panel.pending.pop(uid, None)
    except asyncio.CancelledError:
        pass  # the run is over
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
                    error = None if r.status == 200 else f"HTTP {r.status}"
            except Exception as exc:
                error = type(exc).__name__
            if error is None:
                panel.query_latencies.append(time.perf_counter() - start)
            else:
                panel.query_errors += 1
                panel.query_error_kinds[error] = panel.query_error_kinds.get(error, 0) + 1
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
    sessions = [client_session(timeout=aiohttp.ClientTimeout(total=60)) for _ in panels]
    decoder = _Decoder()
    subs = [asyncio.create_task(_subscribe(p, s, server, decoder)) for p, s in zip(panels, sessions)]
    await asyncio.gather(*(p.connected.wait() for p in panels))
    queries = [asyncio.create_task(_query(p, s, server, stop, query_interval)) for p, s in zip(panels, sessions)]
    out = tempfile.NamedTemporaryFile(prefix="gpuqueue-drain-", suffix=".json", delete=False)
    out.close()
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", "drain", "--url", server.url,
           "--token", server.token, "--n", str(n), "--json", out.name,
           "--borrowing" if borrowing else "--no-borrowing", *(drain_args or [])]
    env = dict(os.environ)
    t0 = time.time()
    cpu0 = (measure.process_cpu_seconds(server.pid), measure.own_cpu_seconds())
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        await asyncio.sleep(1.0)  # the last events
        stop.set()
        for task in subs:
            task.cancel()
        await asyncio.gather(*subs, *queries, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in sessions))
    cpu1 = (measure.process_cpu_seconds(server.pid), measure.own_cpu_seconds())
    drain = None
    try:
        with open(out.name) as f:
            drain = json.load(f)
    except (OSError, ValueError):
        pass
    finally:
        os.unlink(out.name)
    delays = [d for p in panels for d in p.delays]
    by_state: dict[str, list[float]] = {}
    for p in panels:
        for state, d in p.delays_by_state.items():
            by_state.setdefault(state, []).extend(d)
    latencies = [q for p in panels for q in p.query_latencies]
    counts = [p.workload_events for p in panels]
    per_client_p99 = [measure.percentile(p.delays, 99) for p in panels if p.delays]
    return {
        "clients": clients,
        "seconds": time.time() - t0,
        "drainExitCode": proc.returncode,
        "drainOutput": output.decode("utf-8", "replace")[-2000:],
        "drain": drain,
        "messages": sum(p.messages for p in panels),
        "events": sum(p.events for p in panels),
        "workloadEventsPerClientMin": min(counts) if counts else 0,
        "workloadEventsPerClientMax": max(counts) if counts else 0,
        "eventDelayP50Ms": (measure.percentile(delays, 50) or 0) * 1000,
        "eventDelayP99Ms": (measure.percentile(delays, 99) or 0) * 1000,
        "eventDelayMaxMs": (max(delays) if delays else 0) * 1000,
        "worstClientP99Ms": (max(per_client_p99) if per_client_p99 else 0) * 1000,
        "eventDelayByState": {state: {"events": len(d), "p50Ms": measure.percentile(d, 50) * 1000,
                                      "p99Ms": measure.percentile(d, 99) * 1000, "maxMs": max(d) * 1000}
                              for state, d in sorted(by_state.items())},
        "queries": len(latencies),
        "queryP50Ms": (measure.percentile(latencies, 50) or 0) * 1000,
        "queryP99Ms": (measure.percentile(latencies, 99) or 0) * 1000,
        "queryErrors": sum(p.query_errors for p in panels),
        "queryErrorKinds": _merged(p.query_error_kinds for p in panels),
        "streamErrors": [e for p in panels for e in p.errors][:20],
        "streamErrorCount": sum(len(p.errors) for p in panels),
        "load": measure.load_average(),
        # CPU seconds during the drain: the server's (None for --url) and this client's (100 panels)
        "serverCpuSeconds": cpu1[0] - cpu0[0] if cpu0[0] is not None and cpu1[0] is not None else None,
        "clientCpuSeconds": cpu1[1] - cpu0[1],
    }


def _merged(counts) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def format_panels(r: dict) -> str:
    """A human-readable summary of :func:`run_panels`' figures."""
    starved = r["workloadEventsPerClientMin"] != r["workloadEventsPerClientMax"]
    lines = [
        f"bench panels: {r['clients']} subscribers during a drain ({r['seconds']:.1f} s, drain exit {r['drainExitCode']})",
        f"  events received {r['events']} in {r.get('messages', r['events'])} messages; "
        f"workload events per client {r['workloadEventsPerClientMin']}.."
        f"{r['workloadEventsPerClientMax']} ({'a client missed events' if starved else 'every client got every event'})",
        f"  state change -> event: p50 {r['eventDelayP50Ms']:.0f} ms, p99 {r['eventDelayP99Ms']:.0f} ms, "
        f"max {r['eventDelayMaxMs']:.0f} ms; worst client's p99 {r['worstClientP99Ms']:.0f} ms",
        "  by state: " + "; ".join(f"{k} p50 {v['p50Ms']:.0f} / p99 {v['p99Ms']:.0f} ms"
                                   for k, v in r.get("eventDelayByState", {}).items()),
        f"  position queries: {r['queries']}, p50 {r['queryP50Ms']:.1f} ms, p99 {r['queryP99Ms']:.1f} ms, "
        f"errors {r['queryErrors']}" + (f" ({', '.join(f'{k} × {v}' for k, v in sorted(r['queryErrorKinds'].items()))})"
                                        if r.get("queryErrorKinds") else "")
        + f"; stream errors {r['streamErrorCount']}",
        f"  load {r['load'][0]:.2f}; CPU during the drain: server "
        f"{measure.fmt(r.get('serverCpuSeconds'), ' s', 1)}, panels {measure.fmt(r.get('clientCpuSeconds'), ' s', 1)}",
    ]
    if r.get("drain"):
        from .drain import format_drain

        lines.append(format_drain(r["drain"]))
    else:
        lines.append(r["drainOutput"])
    return "\n".join(lines)
