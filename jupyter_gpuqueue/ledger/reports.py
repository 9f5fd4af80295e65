"""Cost reports from the ledger's usage intervals (DESIGN.md "Costs"): never from counters.

Every figure here is recomputed from ``usage_intervals`` rows: an interval holds ``gpu_equivalent``
GPUs at ``usd_per_hour`` USD per hour from ``start`` to ``end`` (an open interval up to ``now``).
A report over a period [``since``, ``until``) counts only the part of each interval inside it, so an
interval that spans a UTC month boundary is split at the boundary: its hours before midnight of the
1st belong to the old month, the rest to the new one. Preempted-and-resumed workloads have one
interval per admission and the gap between them costs nothing.

Units: time in seconds since the Unix epoch, GPU-hours (GPU-equivalents × hours; a MIG slice counts
as its share of the GPU's compute slices, fixed when the interval was opened), money in USD. Sums
are kept unrounded (``math.fsum``); only :func:`to_csv` rounds money, to the cent, for display.

Functions (all raise ``ValidationError`` naming the bad field, and change nothing):

- :func:`parse_period`: ``month`` ("2026-11"), or ``from`` / ``to`` (UTC dates) → (since, until, label).
- :func:`job_report`, :func:`user_report`, :func:`team_report`, :func:`flavor_report`,
  :func:`month_report`, :func:`daily_spend`: rows as dicts (shapes in their docstrings).
- :func:`idle_capacity`: GPU-hours nobody used per flavor, and what they cost.
- :func:`wait_report`: wait times and preemption losses per team.
- :func:`to_csv`: rows as CSV text.
"""

from __future__ import annotations

import calendar
import csv
import io
import math
import re
import statistics
from datetime import date, datetime, timezone
from typing import Any, Iterable, Optional

from ..errors import ValidationError

_MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
TOP_JOBS = 5


# -------------------------------------------------------------------------------------- periods


def month_bounds(year: int, month: int) -> tuple[float, float]:
    """(first second of the UTC month, first second of the next), seconds since the epoch."""
    start = calendar.timegm((year, month, 1, 0, 0, 0))
    ny, nm = (year + 1, 1) if month == 12 else (year, month + 1)
    return float(start), float(calendar.timegm((ny, nm, 1, 0, 0, 0)))


def month_of(ts: float) -> str:
    """The UTC month ``"YYYY-MM"`` of a time in seconds since the epoch."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m")


def parse_month(text: Any, field: str = "month") -> tuple[float, float]:
    """``"2026-11"`` → :func:`month_bounds`. Raises ValidationError(field) otherwise."""
    m = _MONTH_RE.match(text) if isinstance(text, str) else None
    if not m or not 1 <= int(m.group(2)) <= 12 or int(m.group(1)) < 1970:
        raise ValidationError(f"must be a UTC month like 2026-11, got {text!r}", field=field)
    return month_bounds(int(m.group(1)), int(m.group(2)))


def _parse_date(text: Any, field: str) -> float:
    m = _DATE_RE.match(text) if isinstance(text, str) else None
    try:
        if not m:
            raise ValueError
        d = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise ValidationError(f"must be a UTC date like 2026-11-01, got {text!r}", field=field) from None
    return float(calendar.timegm(d.timetuple()))


def parse_period(month: Optional[str], date_from: Optional[str], date_to: Optional[str],
                 now: float) -> tuple[float, float, str]:
    """The report period: ``month`` ("YYYY-MM"), or ``date_from`` / ``date_to`` (UTC dates
    "YYYY-MM-DD", ``to`` exclusive, default ``now``), or,
    with none of them, the current UTC month. Returns (since, until, label) in seconds.

    Raises ValidationError naming ``month``, ``from`` or ``to`` (a malformed value, ``month``
    together with a date, or ``from`` not before ``to``)."""
    if month not in (None, ""):
        if date_from not in (None, "") or date_to not in (None, ""):
            raise ValidationError("give either month or from/to, not both", field="month")
        since, until = parse_month(month)
        return since, until, month
    if date_from in (None, "") and date_to in (None, ""):
        label = month_of(now)
        since, until = parse_month(label)
        return since, until, label
    if date_from in (None, ""):
        raise ValidationError("required with to (a UTC date like 2026-11-01)", field="from")
    since = _parse_date(date_from, "from")
    until = _parse_date(date_to, "to") if date_to not in (None, "") else float(now)
    if until <= since:
        raise ValidationError(f"must be after from ({date_from}), got {date_to!r}", field="to")
    return since, until, f"{date_from}..{date_to or ''}"


# -------------------------------------------------------------------------------------- pieces


def clip(interval: dict, since: float, until: float) -> Optional[dict]:
    """The part of ``interval`` (a ``Ledger.report_intervals`` row) inside [since, until), with
    ``seconds``, ``gpuHours`` and ``costUsd`` of that part; None when nothing is inside."""
    start, end = max(interval["start"], since), min(interval["end"], until)
    if end <= start:
        return None
    seconds = end - start
    piece = dict(interval)
    piece.update(start=start, end=end, seconds=seconds,
                 gpuHours=interval["gpu_equivalent"] * seconds / 3600.0,
                 costUsd=interval["usd_per_hour"] * seconds / 3600.0)
    return piece


def pieces(intervals: Iterable[dict], since: float, until: float) -> list[dict]:
    """:func:`clip` of every interval, the empty ones left out."""
    return [p for p in (clip(i, since, until) for i in intervals) if p is not None]


def split_by_month(interval: dict) -> list[tuple[str, dict]]:
    """``interval`` cut at every UTC month boundary it spans: ``[("YYYY-MM", piece), ...]``."""
    out = []
    t = interval["start"]
    while t < interval["end"]:
        since, until = parse_month(month_of(t))
        p = clip(interval, since, until)
        if p is not None:
            out.append((month_of(t), p))
        t = until
    return out


def _sum(values: Iterable[float]) -> float:
    return math.fsum(values)


def _mean_utilization(uids: Iterable[str], utilization: dict[str, tuple[float, int]]) -> Optional[float]:
    """Sample-weighted mean GPU utilization (percent) of ``uids``; None when none has a sample."""
    total = n = 0.0
    for uid in set(uids):
        if uid in utilization:
            mean, count = utilization[uid]
            total += mean * count
            n += count
    return total / n if n else None


# -------------------------------------------------------------------------------------- reports


def job_report(intervals: Iterable[dict], since: float, until: float,
               utilization: Optional[dict[str, tuple[float, int]]] = None) -> list[dict]:
    """Per job (workload) over [since, until): ``[{"uid", "namespace", "name", "owner", "state",
    "flavors": [str], "resources": [str], "gpuHours", "costUsd", "firstStart", "lastEnd",
    "running": bool, "avgGpuUtilization": percent | None}]``, costliest first (then by name).
    ``utilization``: ``Ledger.utilization`` of the same period."""
    utilization = utilization or {}
    jobs: dict[str, dict] = {}
    for p in pieces(intervals, since, until):
        j = jobs.get(p["workload_uid"])
        if j is None:
            j = jobs[p["workload_uid"]] = {
                "uid": p["workload_uid"], "namespace": p["namespace"], "name": p["name"], "owner": p["owner"],
                "state": p["state"], "flavors": set(), "resources": set(), "_gpu": [], "_usd": [],
                "firstStart": p["start"], "lastEnd": p["end"], "running": False,
            }
        j["flavors"].add(p["flavor"])
        j["resources"].add(p["resource"])
        j["_gpu"].append(p["gpuHours"])
        j["_usd"].append(p["costUsd"])
        j["firstStart"] = min(j["firstStart"], p["start"])
        j["lastEnd"] = max(j["lastEnd"], p["end"])
        j["running"] = j["running"] or bool(p.get("open"))
    out = []
    for j in jobs.values():
        j["flavors"], j["resources"] = sorted(j["flavors"]), sorted(j["resources"])
        j["gpuHours"], j["costUsd"] = _sum(j.pop("_gpu")), _sum(j.pop("_usd"))
        u = utilization.get(j["uid"])
        j["avgGpuUtilization"] = u[0] if u else None
        out.append(j)
    out.sort(key=lambda j: (-j["costUsd"], j["namespace"], j["name"]))
    return out


def user_report(intervals: Iterable[dict], since: float, until: float) -> list[dict]:
    """Per user and team over [since, until): ``[{"owner", "namespace", "jobs", "gpuHours",
    "costUsd"}]``, costliest first."""
    acc: dict[tuple[str, str], dict] = {}
    for p in pieces(intervals, since, until):
        a = acc.setdefault((p["owner"], p["namespace"]), {"uids": set(), "gpu": [], "usd": []})
        a["uids"].add(p["workload_uid"])
        a["gpu"].append(p["gpuHours"])
        a["usd"].append(p["costUsd"])
    out = [{"owner": o, "namespace": ns, "jobs": len(a["uids"]), "gpuHours": _sum(a["gpu"]), "costUsd": _sum(a["usd"])}
           for (o, ns), a in acc.items()]
    out.sort(key=lambda r: (-r["costUsd"], r["owner"], r["namespace"]))
    return out


def team_report(intervals: Iterable[dict], since: float, until: float,
                utilization: Optional[dict[str, tuple[float, int]]] = None,
                namespaces: Iterable[str] = ()) -> list[dict]:
    """Per team (namespace) over [since, until) (a month: the monthly team report):
    ``[{"namespace", "gpuHours", "costUsd", "jobs", "topJobs": [{"uid", "name", "owner",
    "gpuHours", "costUsd"}] (the five costliest), "avgGpuUtilization": percent | None}]`` by
    namespace. ``namespaces``: teams to list even without usage (zeros). The utilization is the
    mean of the NVML samples of the team's jobs in the period; None (never invented) when there
    are none."""
    utilization = utilization or {}
    jobs = job_report(intervals, since, until, utilization)
    teams: dict[str, list[dict]] = {ns: [] for ns in namespaces}
    for j in jobs:
        teams.setdefault(j["namespace"], []).append(j)
    out = []
    for ns in sorted(teams):
        js = teams[ns]
        out.append({
            "namespace": ns,
            "gpuHours": _sum(j["gpuHours"] for j in js),
            "costUsd": _sum(j["costUsd"] for j in js),
            "jobs": len(js),
            "topJobs": [{"uid": j["uid"], "name": j["name"], "owner": j["owner"], "gpuHours": j["gpuHours"],
                         "costUsd": j["costUsd"]} for j in js[:TOP_JOBS]],
            "avgGpuUtilization": _mean_utilization((j["uid"] for j in js), utilization),
        })
    return out


def _nearest_rank(sorted_values: list[float], share: float) -> float:
    """The ``share`` (0-1] percentile of ``sorted_values`` by the nearest-rank method."""
    return sorted_values[max(0, math.ceil(share * len(sorted_values)) - 1)]


def wait_report(intervals: Iterable[dict], workloads: dict[str, dict], since: float, until: float,
                namespaces: Iterable[str] = ()) -> list[dict]:
    """Wait times and preemption losses per team (namespace) over [since, until):
    ``[{"namespace", "admissions", "waitMedianSeconds", "waitP90Seconds", "waitMaxSeconds"
    (null without an admission), "preemptions", "preemptedGpuHours", "preemptedCostUsd"}]`` by
    namespace.

    A run is the intervals of a workload opened at one admission (one ``start``); intervals are
    opened only at admission (service/billing.py). Its wait is from the workload's creation (its
    first run) or from the preemption that ended its previous run, to its start; a run counts
    where it started in the period. A run ended by a preemption (one of ``workloads[uid]
    ["preemptions"]``, times within a second of the run's end) is lost: its whole GPU-hours and
    USD count where the preemption fell in the period (the job starts over; Kueue evicts, it does
    not checkpoint; a workload keeps its last 20 preemptions, service/admission.py, so runs of one
    preempted more often than that count as waits only). Percentiles by the nearest-rank method (p90 of 10 waits: the 9th smallest).

    ``intervals``: ``Ledger.report_intervals`` rows of the period (unclipped); ``workloads``:
    ``{uid: {"created_at", "preemptions": [seconds]}}`` (``Ledger.wait_history``)."""
    runs: dict[str, dict[float, list[dict]]] = {}
    for i in intervals:
        runs.setdefault(i["workload_uid"], {}).setdefault(float(i["start"]), []).append(i)
    waits: dict[str, list[float]] = {ns: [] for ns in namespaces}
    lost: dict[str, dict] = {ns: {"n": 0, "gpu": [], "usd": []} for ns in namespaces}
    for uid, by_start in runs.items():
        w = workloads.get(uid)
        if w is None:
            continue
        preemptions = sorted(float(p) for p in w.get("preemptions") or [])
        for start in sorted(by_start):
            ivs = by_start[start]
            ns = ivs[0]["namespace"]
            waits.setdefault(ns, [])
            lost.setdefault(ns, {"n": 0, "gpu": [], "usd": []})
            if since <= start < until:
                queued = max([float(w["created_at"])] + [p for p in preemptions if p <= start])
                waits[ns].append(max(0.0, start - queued))
            if any(i.get("open") for i in ivs):
                continue
            end = max(float(i["end"]) for i in ivs)
            hit = [p for p in preemptions if abs(p - end) <= 1.0]
            if hit and since <= hit[0] < until:
                a = lost[ns]
                a["n"] += 1
                for i in ivs:
                    hours = max(0.0, float(i["end"]) - float(i["start"])) / 3600.0
                    a["gpu"].append(i["gpu_equivalent"] * hours)
                    a["usd"].append(i["usd_per_hour"] * hours)
    out = []
    for ns in sorted(set(waits) | set(lost)):
        ws = sorted(waits.get(ns, []))
        a = lost.get(ns, {"n": 0, "gpu": [], "usd": []})
        out.append({"namespace": ns, "admissions": len(ws),
                    "waitMedianSeconds": statistics.median(ws) if ws else None,
                    "waitP90Seconds": _nearest_rank(ws, 0.9) if ws else None,
                    "waitMaxSeconds": ws[-1] if ws else None,
                    "preemptions": a["n"], "preemptedGpuHours": _sum(a["gpu"]), "preemptedCostUsd": _sum(a["usd"])})
    return out


def idle_reclaimed_by_team(reclaims: Iterable[dict], namespaces: Iterable[str] = ()) -> dict[str, dict]:
    """GPU-hours reclaimed from idle notebooks per team: ``{namespace: {"idleReclaimedGpuHours",
    "idleReclaims"}}`` summed over ``reclaims`` (``Ledger.idle_reclaims``: one row per notebook
    lease released as idle, its ``gpuHours`` = GPU-equivalents × the time from the release to the
    lease's scheduled end, service/idle.py). ``namespaces``: teams to list even without one."""
    acc: dict[str, list[float]] = {ns: [] for ns in namespaces}
    for r in reclaims:
        acc.setdefault(r["namespace"], []).append(float(r["gpuHours"]))
    return {ns: {"idleReclaimedGpuHours": _sum(v), "idleReclaims": len(v)} for ns, v in sorted(acc.items())}


def idle_capacity(intervals: Iterable[dict], since: float, until: float, capacity: dict[str, float],
                  price_of) -> list[dict]:
    """GPU-hours of each flavor that nobody used over [since, until): ``[{"flavor",
    "capacityGpus", "capacityGpuHours", "usedGpuHours", "idleGpuHours", "idleCostUsd",
    "pricePerGpuHourUsd"}]`` by flavor.

    ``capacity``: flavor → GPU-equivalents of the inventory it covers (whole GPUs, and MIG slices
    as their share of the GPU); ``price_of(flavor)``: USD per GPU-hour. Capacity × hours − used
    GPU-hours, never below 0 (work admitted beyond the inventory, e.g. on a cluster, is not idle)."""
    used: dict[str, list[float]] = {}
    for p in pieces(intervals, since, until):
        used.setdefault(p["flavor"], []).append(p["gpuHours"])
    hours = max(0.0, until - since) / 3600.0
    out = []
    for flavor in sorted(set(capacity) | set(used)):
        cap = float(capacity.get(flavor, 0.0))
        u = _sum(used.get(flavor, []))
        idle = max(0.0, cap * hours - u)
        price = float(price_of(flavor))
        out.append({"flavor": flavor, "capacityGpus": cap, "capacityGpuHours": cap * hours, "usedGpuHours": u,
                    "idleGpuHours": idle, "idleCostUsd": idle * price, "pricePerGpuHourUsd": price})
    return out


def flavor_report(intervals: Iterable[dict], since: float, until: float, capacity: dict[str, float],
                  price_of) -> list[dict]:
    """Per ResourceFlavor over [since, until): ``[{"flavor", "jobs", "gpuHours", "costUsd",
    "capacityGpuHours", "idleGpuHours", "idleCostUsd"}]`` by flavor (the idle part as in
    :func:`idle_capacity`)."""
    intervals = list(intervals)
    acc: dict[str, dict] = {}
    for p in pieces(intervals, since, until):
        a = acc.setdefault(p["flavor"], {"uids": set(), "gpu": [], "usd": []})
        a["uids"].add(p["workload_uid"])
        a["gpu"].append(p["gpuHours"])
        a["usd"].append(p["costUsd"])
    out = []
    for idle in idle_capacity(intervals, since, until, capacity, price_of):
        a = acc.get(idle["flavor"], {"uids": set(), "gpu": [], "usd": []})
        out.append({"flavor": idle["flavor"], "jobs": len(a["uids"]), "gpuHours": _sum(a["gpu"]),
                    "costUsd": _sum(a["usd"]), "capacityGpuHours": idle["capacityGpuHours"],
                    "idleGpuHours": idle["idleGpuHours"], "idleCostUsd": idle["idleCostUsd"]})
    return out


def month_report(intervals: Iterable[dict], since: float, until: float) -> list[dict]:
    """Per UTC month and team over [since, until), intervals split at month boundaries:
    ``[{"month": "YYYY-MM", "namespace", "jobs", "gpuHours", "costUsd"}]`` by month, namespace."""
    acc: dict[tuple[str, str], dict] = {}
    for p in pieces(intervals, since, until):
        for month, q in split_by_month(p):
            a = acc.setdefault((month, q["namespace"]), {"uids": set(), "gpu": [], "usd": []})
            a["uids"].add(q["workload_uid"])
            a["gpu"].append(q["gpuHours"])
            a["usd"].append(q["costUsd"])
    return [{"month": m, "namespace": ns, "jobs": len(a["uids"]), "gpuHours": _sum(a["gpu"]), "costUsd": _sum(a["usd"])}
            for (m, ns), a in sorted(acc.items())]


def daily_spend(intervals: Iterable[dict], since: float, until: float) -> list[dict]:
    """USD and GPU-hours per UTC day of [since, until) (every day listed, zeros included):
    ``[{"date": "YYYY-MM-DD", "gpuHours", "costUsd", "byNamespace": {ns: usd}}]``."""
    ps = pieces(intervals, since, until)
    out = []
    day = since - (since % 86400)
    while day < until:
        lo, hi = max(day, since), min(day + 86400, until)
        usd: list[float] = []
        gpu: list[float] = []
        by_ns: dict[str, list[float]] = {}
        for p in ps:
            q = clip(p, lo, hi)
            if q is not None:
                usd.append(q["costUsd"])
                gpu.append(q["gpuHours"])
                by_ns.setdefault(q["namespace"], []).append(q["costUsd"])
        out.append({"date": datetime.fromtimestamp(day, tz=timezone.utc).strftime("%Y-%m-%d"),
                    "gpuHours": _sum(gpu), "costUsd": _sum(usd),
                    "byNamespace": {ns: _sum(v) for ns, v in sorted(by_ns.items())}})
        day += 86400
    return out


# -------------------------------------------------------------------------------------- CSV


def _cell(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if key in ("firstStart", "lastEnd"):
            return datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if key.lower().endswith("usd"):
            return f"{value:.2f}"  # money: to the cent, for display
        return f"{value:.4f}" if key.lower().endswith(("hours", "gpus")) else f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) if not isinstance(v, dict) else str(v.get("name", "")) for v in value)
    return str(value)


def to_csv(rows: list[dict], columns: list[str]) -> str:
    """``rows`` as CSV (RFC 4180, header line first) with ``columns`` in that order; money
    columns (``...Usd``) to the cent, GPU-hours to 4 decimals, lists joined with ``;``, None as an
    empty cell."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(c, r.get(c)) for c in columns])
    return buf.getvalue()


CSV_COLUMNS = {
    "jobs": ["namespace", "name", "owner", "state", "flavors", "gpuHours", "costUsd", "firstStart", "lastEnd",
             "avgGpuUtilization", "uid"],
    "users": ["owner", "namespace", "jobs", "gpuHours", "costUsd"],
    "teams": ["namespace", "month", "jobs", "gpuHours", "costUsd", "avgGpuUtilization", "budgetUsd", "topJobs",
              "idleReclaimedGpuHours", "idleReclaims"],
    "flavors": ["flavor", "jobs", "gpuHours", "costUsd", "capacityGpuHours", "idleGpuHours", "idleCostUsd"],
    "months": ["month", "namespace", "jobs", "gpuHours", "costUsd"],
    "idle": ["flavor", "capacityGpus", "capacityGpuHours", "usedGpuHours", "idleGpuHours", "idleCostUsd",
             "pricePerGpuHourUsd"],
    "daily": ["date", "gpuHours", "costUsd"],
    "waits": ["namespace", "admissions", "waitMedianSeconds", "waitP90Seconds", "waitMaxSeconds", "preemptions",
              "preemptedGpuHours", "preemptedCostUsd"],
}
"""The CSV columns of each report kind (``?format=csv``)."""
