"""Metrics of a replay: queueing delay, completion time, utilization, borrowing, preemptions,
fairness (Jain's index), and the timeline in bins."""

from __future__ import annotations

import math
import random
from typing import Optional

from ..engine.model import GPU
from ..engine.simulator import SimJob, Simulator
from .trace import DEFAULT_BINS, ReplayConfig


def percentile(sorted_xs: list[float], p: float) -> Optional[float]:
    """The ``p``-th percentile (0–100) of the sorted list, linearly interpolated (NumPy's default);
    None for an empty list."""
    n = len(sorted_xs)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_xs[0])
    pos = (n - 1) * p / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * frac


def median_ratio(pairs: list[tuple[float, float]], *, resamples: int = 2000, seed: int = 0,
                 target: Optional[float] = None) -> Optional[dict]:
    """How sure a ratio of two medians is: ``pairs`` of (error of one estimator, error of the
    other) for the same jobs (seconds). Returns ``{"jobs", "ratio", "interval90", "resamples",
    "target", "atMostTarget"}``: the ratio of the first's median to the second's, its 5th and 95th
    percentiles over ``resamples`` paired bootstrap resamples of the jobs (the same job's two
    errors stay together; fixed ``seed``: the same figures on every run), and with ``target`` the
    share of resamples whose ratio is at most it (else None). None without a pair whose second
    median is positive."""
    pairs = [(float(a), float(b)) for a, b in pairs]
    n = len(pairs)
    if n == 0:
        return None

    def ratio(sample) -> Optional[float]:
        den = percentile(sorted(b for _, b in sample), 50)
        return None if not den else percentile(sorted(a for a, _ in sample), 50) / den

    point = ratio(pairs)
    if point is None:
        return None
    rng = random.Random(seed)
    ratios = sorted(r for r in (ratio([pairs[rng.randrange(n)] for _ in range(n)]) for _ in range(max(1, resamples)))
                    if r is not None)
    return {
        "jobs": n,
        "ratio": point,
        "interval90": [percentile(ratios, 5), percentile(ratios, 95)],
        "resamples": len(ratios),
        "target": target,
        "atMostTarget": (sum(r <= target for r in ratios) / len(ratios)) if target is not None else None,
    }


def jain_index(xs: list[float]) -> Optional[float]:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = all equal, 1/n = one takes everything. None for
    no values; 1.0 when all are 0."""
    n = len(xs)
    if n == 0:
        return None
    s2 = sum(x * x for x in xs)
    if s2 == 0:
        return 1.0
    s = sum(xs)
    return s * s / (n * s2)


def _delay_stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "mean": (sum(xs) / len(xs)) if xs else None,
        "median": percentile(xs, 50),
        "p95": percentile(xs, 95),
    }


def nice_bin(span: float, bins: int = DEFAULT_BINS) -> float:
    """A bin width of about ``span / bins`` seconds, rounded up to 1, 2, 5, 10, 15, 30 s / min,
    1, 2, 3, 6, 12 h, or whole days."""
    raw = max(span / max(bins, 1), 1e-3)
    steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
             900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
    for s in steps:
        if s >= raw:
            return float(s)
    return float(86400 * math.ceil(raw / 86400))


class _Bins:
    """Accumulates ∫ level dt of step functions into fixed bins over [t0, t1)."""

    __slots__ = ("t0", "w", "n", "acc")

    def __init__(self, t0: float, w: float, n: int):
        self.t0, self.w, self.n = t0, w, n
        self.acc = [0.0] * n

    def add(self, a: float, b: float, level: float) -> None:
        if b <= a or level == 0:
            return
        t0, w, acc = self.t0, self.w, self.acc
        i = int((a - t0) // w)
        last = min(int((b - t0) // w), self.n - 1)
        if i < 0:
            i = 0
        while i <= last:
            lo = t0 + i * w
            hi = lo + w
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                acc[i] += level * overlap
            i += 1

    def averages(self) -> list[float]:
        return [x / self.w for x in self.acc]


def _sweep(events: list[tuple[float, float]]):
    """Yield (a, b, level) for the step function Σ deltas at times (sorted here)."""
    events.sort()
    level = 0.0
    prev = None
    for t, d in events:
        if prev is not None and t > prev:
            yield prev, t, level
        level += d
        prev = t


def trace_metrics(sim: Simulator, rc: ReplayConfig, *, bin_seconds: Optional[float] = None) -> dict:
    """The replay report of a finished simulation (see the module docstring for definitions)."""
    sched = sim.scheduler
    tree = sched.tree
    jobs = list(sim.jobs.values())
    if not jobs:
        t0 = t1 = 0.0
    else:
        t0 = min(j.submit_time for j in jobs)
        t1 = max([sim.stats.end_time] + [j.finish_time for j in jobs if j.finish_time is not None])
    window = max(t1 - t0, 0.0)
    w = bin_seconds if bin_seconds and bin_seconds > 0 else nice_bin(window)
    nbins = max(1, int(math.ceil(window / w))) if window > 0 else 1

    # Quota: per ClusterQueue nominal GPUs; cluster capacity per resource = Σ over the roots'
    # subtree quota (what the cohort trees can hand out).
    cq_nominal_gpu: dict[str, int] = {}
    for name, node in tree.cluster_queues.items():
        cq_nominal_gpu[name] = sum(q for (f, r), q in node.nominal.items() if r == GPU)
    capacity: dict[str, int] = {}
    for root in tree.roots():
        for (f, r), q in root.subtree_quota.items():
            capacity[r] = capacity.get(r, 0) + q
    cap_gpu = capacity.get(GPU, 0)

    # Step-function events.
    cq_events: dict[tuple[str, tuple[str, str]], list] = {}
    team_events: dict[str, list] = {}
    pending_events: list[tuple[float, float]] = []
    team_of: dict[str, str] = {}
    team_lq: dict[str, str] = {}
    by_team: dict[str, list] = {}
    cq_preempted: dict[str, int] = {}
    cq_admissions: dict[str, int] = {}
    delays_by_bin: list[list[float]] = [[] for _ in range(nbins)]
    for j in jobs:
        team = str(j.tag)
        team_of[j.key] = team
        team_lq.setdefault(team, f"{j.workload.namespace}/{j.workload.queue_name}")
        by_team.setdefault(team, []).append(j)
        tev = team_events.setdefault(team, [])
        wait_from = j.submit_time
        for run in j.runs:
            end = run.end if run.end is not None else t1
            pending_events.append((wait_from, 1.0))
            pending_events.append((run.start, -1.0))
            cq_admissions[run.cluster_queue] = cq_admissions.get(run.cluster_queue, 0) + 1
            if run.preempted:
                cq_preempted[run.cluster_queue] = cq_preempted.get(run.cluster_queue, 0) + 1
            for fr, q in run.usage:
                ev = cq_events.setdefault((run.cluster_queue, fr), [])
                ev.append((run.start, q))
                ev.append((end, -q))
                tev.append((run.start, fr[1], q))
                tev.append((end, fr[1], -q))
            wait_from = end if run.preempted else None
        if wait_from is not None and j.finish_time is None:
            pending_events.append((wait_from, 1.0))
            pending_events.append((t1, -1.0))
        if j.first_admit_time is not None and window > 0:
            b = min(int((j.submit_time - t0) // w), nbins - 1)
            delays_by_bin[b].append(j.first_admit_time - j.submit_time)

    # ClusterQueues: used and borrowed GPU-seconds, timeline.
    cluster_bins = _Bins(t0, w, nbins)
    cq_bins: dict[str, _Bins] = {}
    cq_used: dict[str, float] = {}
    cq_borrowed: dict[str, float] = {}
    for (cq, fr), ev in cq_events.items():
        nominal = tree.cluster_queues[cq].nominal.get(fr, 0) if cq in tree.cluster_queues else 0
        is_gpu = fr[1] == GPU
        bins = cq_bins.get(cq)
        if bins is None and is_gpu:
            bins = cq_bins[cq] = _Bins(t0, w, nbins)
        used = borrowed = 0.0
        for a, b, level in _sweep(ev):
            dt = b - a
            used += level * dt
            if level > nominal:
                borrowed += (level - nominal) * dt
            if is_gpu:
                bins.add(a, b, level)
                cluster_bins.add(a, b, level)
        if is_gpu:
            cq_used[cq] = cq_used.get(cq, 0.0) + used
            cq_borrowed[cq] = cq_borrowed.get(cq, 0.0) + borrowed

    pending_bins = _Bins(t0, w, nbins)
    for a, b, level in _sweep(pending_events):
        pending_bins.add(a, b, level)

    # Teams: dominant share, time-averaged.
    dominant: dict[str, float] = {}
    for team, ev in team_events.items():
        ev.sort(key=lambda x: x[0])
        usage: dict[str, float] = {}
        acc = 0.0
        prev = None
        for t, r, d in ev:
            if prev is not None and t > prev and usage:
                share = max((u / capacity[r_]) for r_, u in usage.items() if capacity.get(r_))  \
                    if any(capacity.get(r_) for r_ in usage) else 0.0
                acc += share * (t - prev)
            usage[r] = usage.get(r, 0.0) + d
            prev = t
        dominant[team] = acc / window if window > 0 else 0.0

    lq_cq = {k: lq.cluster_queue for k, lq in rc.config.local_queues.items()}
    teams_out: dict[str, dict] = {}
    for team in sorted(by_team):
        tj = by_team[team]
        cq = lq_cq.get(team_lq[team])
        teams_out[team] = _group_stats(tj) | {
            "localQueue": team_lq[team],
            "clusterQueue": cq,
            "dominantShare": dominant.get(team, 0.0),
        }
    weighted = []
    for team, st in teams_out.items():
        cq = st["clusterQueue"]
        quota_share = (cq_nominal_gpu.get(cq, 0) / cap_gpu) if cap_gpu else 0.0
        if quota_share > 0:
            weighted.append(st["dominantShare"] / quota_share)

    cqs_out: dict[str, dict] = {}
    for name in sorted(tree.cluster_queues):
        nominal = cq_nominal_gpu.get(name, 0)
        used = cq_used.get(name, 0.0)
        cqs_out[name] = {
            "nominalGpus": nominal,
            "gpuHours": used / 3600.0,
            "gpuUtilization": (used / (nominal * window)) if nominal and window > 0 else None,
            "borrowedGpuHours": cq_borrowed.get(name, 0.0) / 3600.0,
            "admissions": cq_admissions.get(name, 0),
            "preemptions": cq_preempted.get(name, 0),
        }

    total_used = sum(cq_used.values())
    overall = _group_stats(jobs) | {
        "gpuUtilization": (total_used / (cap_gpu * window)) if cap_gpu and window > 0 else None,
        "borrowedGpuHours": sum(cq_borrowed.values()) / 3600.0,
        "jainIndexOfMeanDominantShares": jain_index(list(dominant.values())),
        "jainIndexOfMeanDominantSharesWeighted": jain_index(weighted),
    }
    contended = contended_fairness(sim, rc, t0, w, nbins)
    overall["contendedFairness"] = contended["summary"]
    gpu_s_all = total_used
    lost = _lost_gpu_hours(sim) * 3600.0
    overall["preemptionLossShare"] = (lost / gpu_s_all) if gpu_s_all > 0 else 0.0

    timeline = {
        "start": t0,
        "binSeconds": w,
        "t": [t0 + i * w for i in range(nbins)],
        "clusterGpuUtilization": [round(x / cap_gpu, 5) if cap_gpu else None for x in cluster_bins.averages()],
        "clusterQueueGpuUtilization": {
            cq: [round(x / cq_nominal_gpu[cq], 5) if cq_nominal_gpu.get(cq) else None for x in b.averages()]
            for cq, b in sorted(cq_bins.items())
        },
        "clusterQueueGpusInUse": {cq: [round(x, 3) for x in b.averages()] for cq, b in sorted(cq_bins.items())},
        "pendingWorkloads": [round(x, 3) for x in pending_bins.averages()],
        "meanQueueingDelayS": [round(sum(d) / len(d), 3) if d else None for d in delays_by_bin],
        "p95QueueingDelayS": [round(percentile(sorted(d), 95), 3) if d else None for d in delays_by_bin],
        "contendedJainIndex": contended["bins"],
    }
    return {
        "windowS": {"start": t0, "end": t1},
        "capacity": {"gpus": cap_gpu, **{r: q for r, q in capacity.items() if r != GPU}},
        "overall": overall,
        "teams": teams_out,
        "clusterQueues": cqs_out,
        "timeline": timeline,
        "simulation": _sim_stats(sim),
    }


def fair_shares(capacity: float, demand: dict[str, float], weight: dict[str, float]) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` (progressive filling): each ClusterQueue gets
    at most its ``demand``, the rest is shared in proportion to ``weight``; ClusterQueues of weight
    0 share what the others leave, equally."""
    out = {k: 0.0 for k in demand}
    left = float(capacity)
    for tier in ([k for k in demand if weight.get(k, 0) > 0], [k for k in demand if weight.get(k, 0) <= 0]):
        active = [k for k in tier if demand[k] > 0]
        wts = {k: (weight[k] if weight.get(k, 0) > 0 else 1.0) for k in active}
        while active and left > 1e-9:
            total_w = sum(wts[k] for k in active)
            unit = left / total_w
            done = [k for k in active if demand[k] - out[k] <= unit * wts[k] + 1e-9]
            if not done:
                for k in active:
                    out[k] += unit * wts[k]
                left = 0.0
                break
            for k in done:
                left -= demand[k] - out[k]
                out[k] = demand[k]
            active = [k for k in active if k not in done]
    return out


def contended_fairness(sim: Simulator, rc: ReplayConfig, t0: float, w: float, nbins: int) -> dict:
    """Fairness over contended time (see the package docstring): in every interval where some
    ClusterQueue has a pending workload, each ClusterQueue with demand (GPUs held + GPUs its pending
    workloads request) gets x = allocated GPUs / fair share, the fair share being the weighted
    max-min share of the GPUs its cohort tree can lend (weights: nominal GPU quota × the
    ClusterQueue's fairSharing weight, Kueue's dominant resource share being usage relative to
    nominal quota, divided by the weight); Jain's index of the x's, time-weighted per timeline bin
    and over all contended time."""
    tree = sim.scheduler.tree
    cfg = rc.config
    weight: dict[str, float] = {}
    for name, node in tree.cluster_queues.items():
        nominal = sum(q for (f, r), q in node.nominal.items() if r == GPU)
        cq = cfg.cluster_queues.get(name)
        weight[name] = nominal * (cq.fair_sharing_weight if cq is not None else 1.0)
    # One pool: every GPU any cohort tree can lend. Within one cohort this is Kueue's sharing;
    # across separate trees (static partitions), idle quota while another team queues is unfair.
    root_of = {name: "cluster" for name in tree.cluster_queues}
    root_cap = {"cluster": float(sum(q for root in tree.roots()
                                     for (f, r), q in root.subtree_quota.items() if r == GPU))}
    # Events: (time, cq, d_alloc, d_pending_gpus, d_pending_count)
    lq_cq = {k: lq.cluster_queue for k, lq in cfg.local_queues.items()}
    ev: list[tuple[float, str, float, float, int]] = []
    for j in sim.jobs.values():
        cq = lq_cq.get(f"{j.workload.namespace}/{j.workload.queue_name}")
        if cq is None:
            continue
        gpus = float(j.workload.total_requests().get(GPU, 0))
        wait_from = j.submit_time
        for run in j.runs:
            g = sum(q for fr, q in run.usage if fr[1] == GPU)
            if wait_from is not None and run.start > wait_from:
                ev.append((wait_from, cq, 0.0, gpus, 1))
                ev.append((run.start, cq, 0.0, -gpus, -1))
            ev.append((run.start, run.cluster_queue, float(g), 0.0, 0))
            if run.end is not None:
                ev.append((run.end, run.cluster_queue, -float(g), 0.0, 0))
            wait_from = run.end if run.preempted else None
        if wait_from is not None and j.finish_time is None and not (j.runs and j.runs[-1].end is None):
            ev.append((wait_from, cq, 0.0, gpus, 1))
    ev.sort(key=lambda e: e[0])
    alloc = {k: 0.0 for k in weight}
    pend_gpus = {k: 0.0 for k in weight}
    pend_n = {k: 0 for k in weight}
    bins_acc = [0.0] * nbins
    bins_t = [0.0] * nbins
    total = 0.0
    contended_t = 0.0
    prev = None
    n_pending = 0
    intervals = 0
    i = 0
    n = len(ev)
    while i < n:
        t = ev[i][0]
        if prev is not None and t > prev and n_pending > 0:
            x = _jain_now(alloc, pend_gpus, pend_n, weight, root_of, root_cap)
            if x is not None:
                dt = t - prev
                total += x * dt
                contended_t += dt
                intervals += 1
                _spread(bins_acc, bins_t, t0, w, nbins, prev, t, x)
        while i < n and ev[i][0] == t:
            _, cq, da, dp, dn = ev[i]
            alloc[cq] = alloc.get(cq, 0.0) + da
            pend_gpus[cq] = pend_gpus.get(cq, 0.0) + dp
            pend_n[cq] = pend_n.get(cq, 0) + dn
            n_pending += dn
            i += 1
        prev = t
    return {
        "summary": {
            "jainIndexMean": (total / contended_t) if contended_t > 0 else None,
            "contendedHours": contended_t / 3600.0,
            "contendedIntervals": intervals,
        },
        "bins": [round(a / b, 4) if b > 0 else None for a, b in zip(bins_acc, bins_t)],
    }


def _jain_now(alloc, pend_gpus, pend_n, weight, root_of, root_cap) -> Optional[float]:
    demand = {k: alloc[k] + pend_gpus[k] for k in alloc if alloc[k] + pend_gpus[k] > 0}
    if not demand:
        return None
    xs = []
    by_root: dict[str, dict[str, float]] = {}
    for k, d in demand.items():
        by_root.setdefault(root_of.get(k, k), {})[k] = d
    for root, dem in by_root.items():
        shares = fair_shares(root_cap.get(root, 0.0), dem, weight)
        for k, f in shares.items():
            if f > 1e-9:
                xs.append(alloc[k] / f)
    return jain_index(xs) if xs else None


def _spread(acc: list[float], tt: list[float], t0: float, w: float, nbins: int, a: float, b: float, x: float) -> None:
    i = max(0, int((a - t0) // w))
    last = min(int((b - t0) // w), nbins - 1)
    while i <= last:
        lo = t0 + i * w
        ov = min(b, lo + w) - max(a, lo)
        if ov > 0:
            acc[i] += x * ov
            tt[i] += ov
        i += 1


def _group_stats(jobs: list[SimJob]) -> dict:
    delays = [j.first_admit_time - j.submit_time for j in jobs if j.first_admit_time is not None]
    jct = [j.finish_time - j.submit_time for j in jobs if j.finish_time is not None]
    gpu_s = 0.0
    for j in jobs:
        for run in j.runs:
            if run.end is None:
                continue
            g = sum(q for fr, q in run.usage if fr[1] == GPU)
            gpu_s += g * (run.end - run.start)
    return {
        "jobs": len(jobs),
        "admitted": len(delays),
        "finished": len(jct),
        "queueingDelayS": _delay_stats(delays),
        "completionTimeS": {"mean": (sum(jct) / len(jct)) if jct else None},
        "gpuHours": gpu_s / 3600.0,
        "preemptions": sum(j.evictions for j in jobs),
    }


def _sim_stats(sim: Simulator) -> dict:
    s = sim.stats
    return {
        "cycles": s.cycles,
        "idleCycles": s.idle_cycles,
        "instants": s.instants,
        "arrivals": s.arrivals,
        "admissions": s.admissions,
        "completions": s.completions,
        "preemptions": s.preemptions,
        "maxCyclesInInstant": s.max_cycles_in_instant,
        "skippedInstants": s.skipped_instants,
        "endTimeS": s.end_time,
        "lostGpuHoursToPreemption": _lost_gpu_hours(sim),
    }


def _lost_gpu_hours(sim: Simulator) -> float:
    if sim.resume_preempted:
        return 0.0
    lost = 0.0
    for j in sim.jobs.values():
        for run in j.runs:
            if run.preempted and run.end is not None:
                lost += sum(q for fr, q in run.usage if fr[1] == GPU) * (run.end - run.start)
    return lost / 3600.0
