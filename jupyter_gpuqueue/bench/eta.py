"""``jupyter gpuqueue bench eta``: estimated start times on a live queue (issue 35).

A real server (:class:`.server.BenchServer`, local backend: the jobs really sleep) with 8 GPUs
(one node) shared by three teams in a cohort (nominal quotas 3 / 3 / 2, borrowing unlimited,
BestEffortFIFO, priority classes ``normal`` and ``high``), and a seeded stream through the REST
API: nine scripts, each with its GPUs and declared maximum run time, repeated with run times at
20–90 % of their maximum (uniform; the script sleeps that long, given in its environment so the
command — what the run-time history learns by — stays the script's), arrivals in bursts, a few
high-priority jobs (``high_share``) and cancels (``cancel_share``: cancelled a few seconds after
submission, waiting or running). Times are compressed by ``time_scale`` (declared maxima of
8–36 s at 1.0).

Measured, for the jobs that started after waiting ≥ ``min_wait`` s (2):

* **coverage**: the share whose POST answer carried an estimated start (``estimatedStartAt``),
  and the share with one at any read before they started;
* **error at submission**: |estimate in the POST answer − actual admission| (a job whose answer
  had none: its first estimate read), median and p90, against the **rate baseline**: (position in
  its ClusterQueue + 1) × its ClusterQueue's admission interval (the admissions seen since the
  bench began, at most the last 5 minutes, before that moment; no admission yet: "now");
* **error at half the wait**: the estimate last read at or before submission + wait / 2 (reads
  every ``poll_interval`` s of ``GET workloads?state=Pending``), against the rate baseline at that
  read;
* **range coverage**: the share of starts within the POST answer's ``estimatedStartRange``
  (``cycle_interval`` of slack: an admission waits for the next scheduling pass);
* **consistency**: reads whose point lies outside its own range, or in the past (before the
  moment of the read, 1 s of slack);
* **range misses** by side (early / late), and the late ones whose ``waitingFor`` named running
  workloads only (where the late bound may be capped by their declared maxima); the range's
  **width** (late − early of the POST answer), median in seconds and median of width / wait;
* **cost**: the server's CPU seconds (its own, and its children's: the forked estimate
  processes and the jobs' shells) per minute, and the POST latency.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import requests
import yaml

from . import stream

SCRIPTS = (  # (name, GPUs, declared maximum s at time_scale 1)
    ("prep", 1, 8), ("eval", 1, 12), ("tune", 1, 20), ("train-s", 2, 16), ("train-m", 2, 24),
    ("sweep", 2, 30), ("train-l", 4, 36), ("notebook-batch", 1, 28), ("finetune", 2, 20),
)
TEAMS = ("team-a", "team-b", "team-c")
QUOTAS = {"team-a": 3, "team-b": 3, "team-c": 2}
TEAM_WEIGHTS = (0.4, 0.35, 0.25)


@dataclass
class EtaJob:
    index: int
    team: str
    script: str
    gpus: int
    max_s: float
    run_s: float
    at: float  # s after the start of the stream
    high: bool
    cancel_after: Optional[float]
    name: str = ""
    post: dict = field(default_factory=dict)
    post_latency: float = 0.0
    reads: list = field(default_factory=list)  # (t, estimatedStartAt, early, late, position, [(kind, end)])


def eta_stream(n: int, seed: int, *, time_scale: float = 1.0, mean_gap: float = 2.0, high_share: float = 0.05,
               cancel_share: float = 0.05) -> list[EtaJob]:
    """The seeded stream: ``n`` jobs; bursts of 1–6 jobs 0.2 s apart at exponential gaps of mean
    ``mean_gap`` × burst size seconds."""
    rng = random.Random(seed)
    jobs: list[EtaJob] = []
    t = 0.0
    while len(jobs) < n:
        burst = min(n - len(jobs), rng.choice((1, 1, 2, 3, 4, 6)))
        t += rng.expovariate(1.0 / (mean_gap * burst))
        for b in range(burst):
            team = rng.choices(TEAMS, TEAM_WEIGHTS)[0]
            name, gpus, max_s = rng.choice(SCRIPTS)
            max_s *= time_scale
            run_s = max_s * rng.uniform(0.2, 0.9)
            high = rng.random() < high_share
            cancel = rng.uniform(2.0, 15.0) * time_scale if rng.random() < cancel_share else None
            i = len(jobs)
            jobs.append(EtaJob(i, team, name, gpus, max_s, run_s, t + 0.2 * b, high, cancel,
                               name=f"{name}-{i:04d}"))
    return jobs


def cluster_yaml() -> str:
    """One A100 flavor, three teams in the cohort ``lab`` (quotas 3 / 3 / 2 GPUs), priority classes
    ``normal`` (default) and ``high``."""
    docs = yaml.safe_load_all(stream.cluster_yaml(borrowing=True, quotas=QUOTAS))
    docs = list(docs)
    docs.insert(2, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
                    "value": 10000, "description": "a few urgent jobs"})
    return yaml.safe_dump_all(docs, sort_keys=False)


def submit_request(job: EtaJob) -> dict:
    req = {"name": job.name, "localQueue": f"{job.team}/{job.team}-queue", "gpus": job.gpus,
           "command": ["sh", "-c", 'exec sleep "$ETA_SLEEP"', job.script],
           "env": {"ETA_SLEEP": f"{job.run_s:.3f}"}, "maxRuntimeSeconds": max(1, int(math.ceil(job.max_s)))}
    if job.high:
        req["priorityClass"] = "high"
    return req


def _cpu(pid: Optional[int]) -> Optional[tuple[float, float]]:
    """(own, children's) CPU seconds of process ``pid`` (/proc), or None."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (int(parts[11]) + int(parts[12])) / hz, (int(parts[13]) + int(parts[14])) / hz


def _pct(xs: list[float], q: float) -> Optional[float]:
    if not xs:
        return None
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    i = int(pos)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (pos - i)


def run_eta(server, *, n: int = 80, seed: int = 42, time_scale: float = 1.0, mean_gap: float = 2.0,
            poll_interval: float = 1.0, min_wait: float = 2.0, cycle_interval: float = 0.5,
            drain_timeout: float = 900.0) -> dict:
    """Run the stream against ``server`` (its queues those of :func:`cluster_yaml`) and measure
    (module docstring). Returns the figures as a dict."""
    jobs = eta_stream(n, seed, time_scale=time_scale, mean_gap=mean_gap)
    by_name = {j.name: j for j in jobs}
    session = requests.Session()
    session.headers.update(server.headers)
    api = server.api
    errors: list[str] = []
    stop = threading.Event()
    cpu0 = _cpu(server.pid)
    t_begin = time.time()

    def poll() -> None:
        s = requests.Session()
        s.headers.update(server.headers)
        while not stop.is_set():
            t = time.time()
            try:
                items = s.get(api + "workloads", params={"state": "Pending"}, timeout=30).json()["items"]
            except (requests.RequestException, ValueError, KeyError) as exc:
                errors.append(f"poll: {exc}")
                items = []
            for v in items:
                j = by_name.get(v["name"])
                if j is None:
                    continue
                rng = v.get("estimatedStartRange") or {}
                j.reads.append((t, v.get("estimatedStartAt"), rng.get("early"), rng.get("late"),
                                v.get("positionInClusterQueue"),
                                [(w["kind"], w["expectedEndAt"]) for w in v.get("waitingFor") or []]))
            stop.wait(max(0.0, poll_interval - (time.time() - t)))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    cancels: list[tuple[float, EtaJob]] = []
    t0 = time.monotonic()
    try:
        for j in jobs:
            while True:
                due = [c for c in cancels if c[0] <= time.monotonic() - t0]
                for c in due:
                    cancels.remove(c)
                    r = session.delete(api + f"workloads/{c[1].team}/{c[1].name}", timeout=30)
                    if r.status_code not in (200, 202, 204, 404, 409):
                        errors.append(f"cancel {c[1].name}: {r.status_code}")
                wait = j.at - (time.monotonic() - t0)
                if wait <= 0:
                    break
                time.sleep(min(wait, 0.1))
            ts = time.perf_counter()
            r = session.post(api + "workloads", json=submit_request(j), timeout=60)
            j.post_latency = time.perf_counter() - ts
            if r.status_code not in (200, 201):
                errors.append(f"submit {j.name}: {r.status_code} {r.text[:200]}")
                continue
            j.post = r.json()
            if j.cancel_after is not None:
                cancels.append((j.at + j.cancel_after, j))
        for at, j in sorted(cancels, key=lambda c: c[0]):
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            session.delete(api + f"workloads/{j.team}/{j.name}", timeout=30)
        # until every job has ended
        deadline = time.monotonic() + drain_timeout
        final: dict[str, dict] = {}
        while time.monotonic() < deadline:
            items = session.get(api + "workloads", timeout=60).json()["items"]
            final = {v["name"]: v for v in items if v["name"] in by_name}
            if len(final) == len(jobs) and all(v["state"] in ("Succeeded", "Failed", "Cancelled")
                                               for v in final.values()):
                break
            time.sleep(1.0)
        else:
            errors.append("not every job ended within the drain timeout")
    finally:
        stop.set()
        poller.join(10)
    elapsed = time.time() - t_begin
    cpu1 = _cpu(server.pid)
    return _figures(jobs, final, errors, t_begin, elapsed, cpu0, cpu1, min_wait=min_wait, slack=cycle_interval,
                    seed=seed, time_scale=time_scale)


def _rate_wait(position: Optional[int], cq_admissions: list[float], t: float, t_begin: float) -> float:
    """The rate baseline: (position + 1) × the admission interval of the ClusterQueue (its
    admissions before ``t`` since ``t_begin``, at most the last 300 s); 0 without one."""
    if position is None:
        return 0.0
    lo = max(t_begin, t - 300.0)
    count = sum(1 for a in cq_admissions if lo <= a < t)
    if count == 0:
        return 0.0
    return (position + 1) * (t - lo) / count


def _figures(jobs, final, errors, t_begin, elapsed, cpu0, cpu1, *, min_wait, slack, seed, time_scale) -> dict:
    adm_by_cq: dict[str, list[float]] = {}
    for v in final.values():
        if v.get("admittedAt") is not None:
            adm_by_cq.setdefault(v.get("clusterQueue") or "?", []).append(v["admittedAt"])
    for xs in adm_by_cq.values():
        xs.sort()
    cov_post = cov_any = 0
    sub_err, sub_rate, half_err, half_rate, in_range, has_range = [], [], [], [], 0, 0
    early_miss = late_miss = capped = 0
    widths, width_ratios = [], []
    waits = []
    started = 0
    contradictions = {"pointOutsideRange": 0, "inThePast": 0, "reads": 0}
    for j in jobs:
        for t, est, early, late, _pos, wf in j.reads:
            if est is None:
                continue
            contradictions["reads"] += 1
            if early is not None and late is not None and not (early - 1e-3 <= est <= late + 1e-3):
                contradictions["pointOutsideRange"] += 1
            if est < t - 1.0:  # a read's estimate before the moment of the read (1 s: the poll's own time)
                contradictions["inThePast"] += 1
        v = final.get(j.name)
        if not j.post or v is None or v.get("admittedAt") is None:
            continue
        started += 1
        created, admitted = j.post["createdAt"], v["admittedAt"]
        wait = admitted - created
        if wait < min_wait:
            continue
        waits.append(wait)
        cq = v.get("clusterQueue") or "?"
        est = j.post.get("estimatedStartAt")
        reads_before = [r for r in j.reads if r[0] < admitted and r[1] is not None]
        if est is not None:
            cov_post += 1
        if est is not None or reads_before:
            cov_any += 1
        first = est if est is not None else (reads_before[0][1] if reads_before else created)
        sub_err.append(abs(first - admitted))
        sub_rate.append(abs(created + _rate_wait(j.post.get("positionInClusterQueue"), adm_by_cq.get(cq, []),
                                                 created, t_begin) - admitted))
        rng = j.post.get("estimatedStartRange")
        if rng and rng.get("late") is not None:
            has_range += 1
            widths.append(rng["late"] - rng["early"])
            width_ratios.append((rng["late"] - rng["early"]) / wait)
            if rng["early"] - slack <= admitted <= rng["late"] + slack:
                in_range += 1
            elif admitted < rng["early"]:
                early_miss += 1
            else:
                late_miss += 1
                capped += bool(j.post.get("waitingFor")) and all(
                    w["kind"] == "running" for w in j.post["waitingFor"])
        half = created + wait / 2.0
        before = [r for r in j.reads if r[0] <= half]
        if before and before[-1][1] is not None:
            t, e, _, _, pos, _ = before[-1]
            half_err.append(abs(e - admitted))
            half_rate.append(abs(t + _rate_wait(pos, adm_by_cq.get(cq, []), t, t_begin) - admitted))
        else:
            half_err.append(abs(first - admitted))
            half_rate.append(sub_rate[-1])
    n_w = len(waits)
    per_job = []  # what each job was told and what happened (to diagnose range misses offline)
    for j in jobs:
        v = final.get(j.name) or {}
        post = j.post or {}
        rng = post.get("estimatedStartRange") or {}
        per_job.append({
            "name": j.name, "team": j.team, "script": j.script, "gpus": j.gpus, "maxS": round(j.max_s, 3),
            "runS": round(j.run_s, 3), "high": j.high, "cancelAfter": j.cancel_after,
            "clusterQueue": v.get("clusterQueue"), "state": v.get("state"), "createdAt": post.get("createdAt"),
            "admittedAt": v.get("admittedAt"), "finishedAt": v.get("finishedAt"),
            "post": {"estimatedStartAt": post.get("estimatedStartAt"), "early": rng.get("early"),
                     "late": rng.get("late"), "position": post.get("positionInClusterQueue"),
                     "waitingFor": [[w.get("namespace"), w.get("name"), w["kind"], w["expectedEndAt"]]
                                    for w in post.get("waitingFor") or []]},
            "reads": [[round(t, 3), e, lo, hi, pos, len(wf)] for t, e, lo, hi, pos, wf in j.reads]})
    cpu = None
    if cpu0 and cpu1:
        minutes = max(elapsed / 60.0, 1e-9)
        cpu = {"serverCpuSecondsPerMinute": round((cpu1[0] - cpu0[0]) / minutes, 3),
               "childrenCpuSecondsPerMinute": round((cpu1[1] - cpu0[1]) / minutes, 3)}
    lat = [j.post_latency for j in jobs if j.post]
    r3 = lambda x: None if x is None else round(x, 2)  # noqa: E731
    med_sub, med_rate = _pct(sub_err, 0.5), _pct(sub_rate, 0.5)
    return {
        "seed": seed, "timeScale": time_scale, "jobs": len(jobs), "started": started,
        "cancelled": sum(1 for v in final.values() if v["state"] == "Cancelled"),
        "succeeded": sum(1 for v in final.values() if v["state"] == "Succeeded"),
        "ended": sum(1 for v in final.values() if v["state"] in ("Succeeded", "Failed", "Cancelled")),
        "waited": n_w, "minWait": min_wait, "medianWait": r3(_pct(waits, 0.5)), "seconds": round(elapsed, 1),
        "coverageAtSubmission": r3(cov_post / n_w if n_w else None),
        "coverageBeforeStart": r3(cov_any / n_w if n_w else None),
        "submission": {"medianError": r3(med_sub), "p90Error": r3(_pct(sub_err, 0.9)),
                       "rateMedianError": r3(med_rate), "rateP90Error": r3(_pct(sub_rate, 0.9)),
                       "ratio": r3(med_sub / med_rate if med_sub is not None and med_rate else None)},
        "halfWait": {"medianError": r3(_pct(half_err, 0.5)), "p90Error": r3(_pct(half_err, 0.9)),
                     "rateMedianError": r3(_pct(half_rate, 0.5)), "rateP90Error": r3(_pct(half_rate, 0.9))},
        "rangeCoverage": r3(in_range / has_range if has_range else None), "withRange": has_range,
        "rangeMisses": {"early": early_miss, "late": late_miss, "lateWaitingForRunningOnly": capped},
        "rangeWidth": {"medianSeconds": r3(_pct(widths, 0.5)), "medianOverWait": r3(_pct(width_ratios, 0.5))},
        "consistency": contradictions,
        "cost": {**(cpu or {}), "postLatencyMedianMs": r3(1000 * (_pct(lat, 0.5) or 0)),
                 "postLatencyP90Ms": r3(1000 * (_pct(lat, 0.9) or 0))},
        "errors": errors[:20], "errorCount": len(errors), "tBegin": round(t_begin, 3),
        "perJob": per_job,
    }


def format_eta(r: dict) -> str:
    s, h = r["submission"], r["halfWait"]
    lines = [
        f"bench eta (seed {r['seed']}, time scale {r['timeScale']:g}): {r['jobs']} jobs, {r['started']} started, "
        f"{r['cancelled']} cancelled, {r['waited']} waited ≥ {r['minWait']:g} s (median wait {r['medianWait']} s), "
        f"{r['seconds']} s",
        f"  coverage: {r['coverageAtSubmission']} in the POST answer, {r['coverageBeforeStart']} before the start",
        f"  at submission: median error {s['medianError']} s (p90 {s['p90Error']}) vs rate {s['rateMedianError']} s "
        f"(p90 {s['rateP90Error']}): ratio {s['ratio']}",
        f"  at half the wait: median error {h['medianError']} s (p90 {h['p90Error']}) vs rate "
        f"{h['rateMedianError']} s (p90 {h['rateP90Error']})",
        f"  range holds {r['rangeCoverage']} of {r['withRange']} starts (missed: {r['rangeMisses']}; width: "
        f"median {r['rangeWidth']['medianSeconds']} s, {r['rangeWidth']['medianOverWait']} × the wait)",
        f"  consistency over {r['consistency']['reads']} reads: {r['consistency']['pointOutsideRange']} point outside "
        f"its range, {r['consistency']['inThePast']} in the past",
        f"  cost: {r['cost']}",
    ]
    if r["errorCount"]:
        lines.append(f"  errors ({r['errorCount']}): {r['errors'][:3]}")
    return "\n".join(lines)


__all__ = ["SCRIPTS", "cluster_yaml", "eta_stream", "format_eta", "run_eta", "submit_request"]
