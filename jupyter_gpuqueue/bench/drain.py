"""``bench drain``: the shared job stream run to completion by the local backend, for real.

The jobs of :func:`.stream.job_stream` (2,000 by default: team, 1-8 GPUs on one node, ``sleep 1``
each) are submitted through the REST API by 8 concurrent clients as fast as the server takes them,
on the 16 × 8 A100 inventory with team quotas 64 / 48 / 32 (in one cohort with borrowing, or
without a cohort: a hard cap like Slurm's GrpTRES). Every job is a real process started by the
local backend (its wrapper, then ``sleep 1``). The benchmark waits until every job has finished,
then reads every workload back through the REST API.

Figures (times are the server's own timestamps, seconds since the epoch):

- makespan: first submission sent → last job finished (the submission phase is included: at
  > 1,000 submissions/s it is short, and jobs start while it runs);
- ideal: :func:`.stream.ideal_makespan` (69.7 s with borrowing, 97.2 s without);
- GPU utilisation: Σ GPUs × 1 s (the work) / (GPUs × makespan), as in slurm.md;
  ``heldUtilisation``: Σ GPUs × (finished − admitted) / (GPUs × makespan), what was reserved;
- job starts/s: jobs / makespan;
- wait per team: startedAt − createdAt, mean and p95;
- overhead per job: (finishedAt − startedAt) − 1 s, mean and p95 (process start and reaping).
Checked: every job Succeeded, never more GPUs in use than exist, and (without borrowing) never
more than a team's quota.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from . import measure, stream
from .ledger_read import ledger_rows
from .server import client_session


async def _submit_all(server, jobs: list, command: list[str], clients: int) -> tuple[dict, list]:
    import aiohttp

    headers = {**server.headers, "Content-Type": "application/json"}
    acks: dict[int, dict] = {}
    errors: list = []
    counter = [0]

    async def client(session):
        while counter[0] < len(jobs):
            i = counter[0]
            counter[0] += 1
            body = json.dumps(stream.submit_request(jobs[i], command))
            async with session.post(server.api + "workloads", data=body, headers=headers) as r:
                text = await r.text()
                if r.status != 201:
                    errors.append((i, r.status, text[:300]))
                    continue
                wl = json.loads(text)
                acks[i] = {"namespace": wl["namespace"], "name": wl["name"], "uid": wl["uid"]}

    sessions = [client_session(connector=aiohttp.TCPConnector(limit=1),
                                      timeout=aiohttp.ClientTimeout(total=120)) for _ in range(clients)]
    try:
        await asyncio.gather(*(client(s) for s in sessions))
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    return acks, errors


async def _release(server, config_yaml: str) -> None:
    """Replace ``server``'s configuration by ``config_yaml`` (``PUT admin/config``, the admin
    view's import). Raises RuntimeError with the server's answer unless it is 200."""
    import aiohttp

    async with client_session(timeout=aiohttp.ClientTimeout(total=60)) as session:
        async with session.put(server.api + "admin/config", data=json.dumps({"yaml": config_yaml}),
                               headers={**server.headers, "Content-Type": "application/json"}) as r:
            if r.status != 200:
                raise RuntimeError(f"PUT admin/config: {r.status} {(await r.text())[:300]}")


async def _wait_all_finished(server, uids: set, timeout: float, poll: float = 1.0) -> list[dict]:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with client_session(timeout=aiohttp.ClientTimeout(total=300)) as s:
        while True:
            # Cheap progress check: the ClusterQueues' pending and admitted counts.
            async with s.get(server.api + "queues", headers=server.headers) as r:
                queues = await r.json()
            active = sum(cq["pendingWorkloads"] + cq["admittedWorkloads"] for cq in queues["clusterQueues"])
            if active == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(poll)
        async with s.get(server.api + "workloads", headers=server.headers) as r:
            items = (await r.json())["items"]
    return [w for w in items if w["uid"] in uids]


def _gpus(w: dict) -> int:
    total = 0
    for ps in w["podSets"]:
        q = ps["requests"].get("nvidia.com/gpu", "0")
        total += int(q) * int(ps.get("count", 1))
    return total


def peak_concurrency(intervals: list[tuple[float, float, int]]) -> int:
    """Most units held at once by ``(start, end, units)`` intervals (end exclusive)."""
    events = []
    for start, end, units in intervals:
        events.append((start, units))
        events.append((end, -units))
    events.sort(key=lambda e: (e[0], e[1]))  # releases before acquisitions at the same instant
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def devices_held_twice(server) -> list[str]:
    """``server``: a BenchServer (its ledger, SQLite or PostgreSQL) or the path of a SQLite ledger."""
    if isinstance(server, str):
        from types import SimpleNamespace

        path = server
        server = SimpleNamespace(db_url=f"sqlite:///{path}", ledger_rows=None)
        server.ledger_rows = lambda sql, url=server.db_url: ledger_rows(url, sql)
    return _devices_held_twice(server)


def _devices_held_twice(server) -> list[str]:
    """Devices that two workloads held at once, read from the server's ledger: each admitted
    workload holds the devices of its admission's placements from ``admitted_at`` to
    ``finished_at`` (still held if it has not finished). Returns one line per overlap (empty:
    no GPU or MIG slice was ever assigned twice). Only the last admission of a workload is on
    record, which is every admission in a run without preemption (the bench's stream)."""
    rows = server.ledger_rows("SELECT name, admission, admitted_at, finished_at FROM workloads "
                              "WHERE admitted_at IS NOT NULL")
    held: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for name, admission, start, end in rows:
        if isinstance(admission, str):
            admission = json.loads(admission)
        for p in (admission or {}).get("placements", []):
            for dev in p["devices"]:
                held.setdefault((p["node"], dev), []).append((start, end if end is not None else float("inf"), name))
    out = []
    for (node, dev), spans in sorted(held.items()):
        spans.sort()
        for (s1, e1, n1), (s2, e2, n2) in zip(spans, spans[1:]):
            if s2 < e1:
                out.append(f"{node}/{dev}: {n1} until {e1:.3f} and {n2} from {s2:.3f}")
    return out


def drain_figures(workloads: list[dict], jobs: list, *, t0: float, capacity: int, borrowing: bool,
                  runtime: float = 1.0, quotas: Optional[dict] = None) -> dict:
    """The figures of the module docstring from the finished Workloads (REST views) and the wall
    time ``t0`` (seconds since the epoch) at which the first submission was sent."""
    quotas = quotas or stream.QUOTAS
    done = [w for w in workloads if w.get("finishedAt")]
    succeeded = sum(1 for w in workloads if w["state"] == "Succeeded")
    end = max((w["finishedAt"] for w in done), default=t0)
    makespan = end - t0
    work = sum(_gpus(w) * runtime for w in workloads if w["state"] == "Succeeded")
    held = sum(_gpus(w) * (w["finishedAt"] - w["admittedAt"]) for w in done if w.get("admittedAt"))
    per_team = {}
    for team in quotas:
        waits = [w["startedAt"] - w["createdAt"] for w in workloads if w["namespace"] == team and w.get("startedAt")]
        per_team[team] = {"jobs": len(waits), "meanWait": measure.mean(waits), "p95Wait": measure.percentile(waits, 95)}
    overheads = [(w["finishedAt"] - w["startedAt"]) - runtime for w in done if w.get("startedAt")]
    latency = [w["startedAt"] - w["admittedAt"] for w in done if w.get("startedAt") and w.get("admittedAt")]
    intervals = [(w["admittedAt"], w["finishedAt"], _gpus(w)) for w in done if w.get("admittedAt")]
    peak_team = {team: peak_concurrency([iv for iv, w in zip(intervals, [w for w in done if w.get("admittedAt")])
                                         if w["namespace"] == team]) for team in quotas}
    ideal = stream.ideal_makespan(jobs, borrowing=borrowing, capacity=capacity, runtime=runtime, quotas=quotas)
    return {
        "jobs": len(jobs),
        "succeeded": succeeded,
        "makespan": makespan,
        "ideal": ideal,
        "ratioToIdeal": makespan / ideal if ideal else None,
        "gpuUtilisation": work / (capacity * makespan) if makespan > 0 else None,
        "heldUtilisation": held / (capacity * makespan) if makespan > 0 else None,
        "jobStartsPerSecond": len(done) / makespan if makespan > 0 else None,
        "waitByTeam": per_team,
        "overheadMean": measure.mean(overheads),
        "overheadP95": measure.percentile(overheads, 95),
        "admitToStartMean": measure.mean(latency),
        "peakGpus": peak_concurrency(intervals),
        "peakGpusByTeam": peak_team,
    }


async def run_drain(server, *, n: int = 2000, borrowing: bool = True, clients: int = 8,
                    command: Optional[list[str]] = None, seed: int = 42, capacity: int = 128,
                    runtime: float = 1.0, timeout: float = 1800.0, quotas: Optional[dict] = None,
                    backlog: bool = False) -> dict:
    """Submit the stream to ``server`` (whose queues are :func:`.stream.cluster_yaml` with the same
    ``borrowing`` and ``quotas``: nominal GPUs per team, default :data:`.stream.QUOTAS`), wait for
    every job, and return :func:`drain_figures` plus ``quotas``, ``submitSeconds``,
    ``errors``, ``serverCpuSeconds`` (the server process alone), ``jobCpuSeconds`` (the job
    wrappers and jobs it reaped) and ``load`` (1-minute load average before and after).

    ``backlog``: the server's ClusterQueues were created held (``cluster_yaml(hold=True)``); once
    every job is acknowledged, an admin replaces the configuration with the same one unheld
    (``PUT admin/config``), so every job of the stream waits at once, however slowly the
    submissions went (a loaded machine otherwise admits them one by one as they arrive); the
    makespan is then timed from the release, and ``admittedBeforeRelease`` counts the jobs admitted
    while the ClusterQueues were held (0 unless the hold failed)."""
    command = command or ["sleep", "1"]
    jobs = stream.job_stream(n, seed)
    load_before = measure.load_average()
    cpu0 = measure.process_cpu_seconds(server.pid)
    cpu0_all = measure.process_cpu_seconds(server.pid, children=True)
    t0 = time.time()
    acks, errors = await _submit_all(server, jobs, command, clients)
    submit_seconds = time.time() - t0
    released = None
    if backlog:
        released = time.time()
        await _release(server, stream.cluster_yaml(borrowing=borrowing, quotas=quotas))
    uids = {a["uid"] for a in acks.values()}
    workloads = await _wait_all_finished(server, uids, timeout)
    cpu1 = measure.process_cpu_seconds(server.pid)
    cpu1_all = measure.process_cpu_seconds(server.pid, children=True)
    quotas = dict(quotas or stream.QUOTAS)
    figures = drain_figures(workloads, jobs, t0=t0 if released is None else released, capacity=capacity,
                            borrowing=borrowing, runtime=runtime, quotas=quotas)
    if released is not None:
        figures["admittedBeforeRelease"] = sum(1 for w in workloads if (w.get("admittedAt") or released) < released)
    if getattr(server, "ledger_path", None):  # a server started here: no device given twice
        errors.extend((None, None, f"device held twice: {line}") for line in devices_held_twice(server))
    figures.update({
        "borrowing": borrowing,
        "backlog": backlog,
        "quotas": quotas,
        "submitSeconds": submit_seconds,
        "acknowledged": len(acks),
        "errors": [list(e) for e in errors[:20]],
        "errorCount": len(errors),
        "serverCpuSeconds": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None,
        "jobCpuSeconds": ((cpu1_all - cpu0_all) - (cpu1 - cpu0)) if cpu0 is not None and cpu1_all is not None else None,
        "load": {"before": load_before, "after": measure.load_average()},
    })
    return figures


def format_drain(r: dict) -> str:
    """A human-readable summary of :func:`run_drain`'s figures."""
    f = measure.fmt
    mode = "with borrowing (one cohort)" if r["borrowing"] else "without borrowing (hard quotas)"
    if r.get("backlog"):
        mode += ", a backlog released at once"
    lines = [
        f"bench drain {mode}: {r['succeeded']}/{r['jobs']} succeeded, {r['errorCount']} errors",
        f"  makespan {f(r['makespan'], ' s', 1)} (ideal {f(r['ideal'], ' s', 1)}, ratio {f(r['ratioToIdeal'], '', 3)}); "
        f"submitted in {f(r['submitSeconds'], ' s')}"
        + (" (the makespan from the release)" if r.get("backlog") else ""),
        f"  GPU utilisation {f(100 * r['gpuUtilisation'] if r['gpuUtilisation'] else None, ' %', 1)} "
        f"(held {f(100 * r['heldUtilisation'] if r['heldUtilisation'] else None, ' %', 1)}), "
        f"{f(r['jobStartsPerSecond'], ' job starts/s', 1)}, peak {r['peakGpus']} GPUs in use",
        f"  per job: run − 1 s = {f(r['overheadMean'], ' s', 3)} mean / {f(r['overheadP95'], ' s', 3)} p95; "
        f"admitted → started {f(r['admitToStartMean'], ' s', 3)}",
    ]
    for team, w in r["waitByTeam"].items():
        lines.append(f"  {team}: {w['jobs']} jobs, wait mean {f(w['meanWait'], ' s', 1)}, p95 {f(w['p95Wait'], ' s', 1)}, "
                     f"peak {r['peakGpusByTeam'][team]} GPUs")
    lines.append(f"  CPU: server {f(r['serverCpuSeconds'], ' s', 1)}, job wrappers + jobs {f(r['jobCpuSeconds'], ' s', 1)}; "
                 f"load before {r['load']['before'][0]:.2f}, after {r['load']['after'][0]:.2f}")
    for e in r["errors"][:5]:
        lines.append(f"  error: {e}")
    return "\n".join(lines)
