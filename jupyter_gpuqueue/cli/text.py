"""How the commands that talk to a server print their answers for people: money, durations,
queue positions, tables of workloads, queues and the inventory (``--json`` prints the answers
as they are). ``money`` is also the notebook widget's."""

from __future__ import annotations

import time
from typing import Any, Optional

TERMINAL_STATES = ("Succeeded", "Failed", "Cancelled")


def money(value: Any) -> str:
    """USD for people: cents (``$0.37``), or four decimals below a cent so that a short job does not
    read as free (``$0.0007``); ``-`` for None. The panel formats money the same way."""
    if value is None:
        return "-"
    v = float(value)
    if 0 < abs(v) < 0.01:
        return f"${v:.4f}"
    return f"${v:,.2f}"


def duration(seconds: Any) -> str:
    """A short human duration: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "-"
    s = int(max(0, float(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 and s < 600 else "")
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def starts(workload: dict, now: float) -> str:
    """When a Pending workload is expected to start, from the service's estimate
    (docs/estimates.md): "~12m (5m-30m)", "now" when due, the reason when there is none
    ("BudgetExceeded"), ``-`` unless Pending."""
    if workload.get("state") != "Pending":
        return "-"
    at = workload.get("estimatedStartAt")
    if at is None:
        return workload.get("estimateReason") or "-"
    wait = float(at) - now
    if wait < 30:
        return "now"
    text = "~" + duration(wait)
    rng = workload.get("estimatedStartRange") or {}
    early, late = rng.get("early"), rng.get("late")
    if early is not None and late is not None and late - early >= 60:
        text += f" ({duration(max(0.0, early - now))}-{duration(late - now)})"
    return text


def position(workload: dict) -> str:
    """1-based position in the ClusterQueue (``-`` unless Pending)."""
    pos = workload.get("positionInClusterQueue")
    return "-" if pos is None else str(int(pos) + 1)


def assigned_flavor(workload: dict) -> str:
    """The flavor(s) assigned by admission, ``-`` before admission."""
    admission = workload.get("admission") or {}
    flavors: list[str] = []
    for psa in admission.get("podSetAssignments") or []:
        for f in (psa.get("flavors") or {}).values():
            if f not in flavors:
                flavors.append(f)
    return ",".join(flavors) or "-"


def requested(workload: dict) -> str:
    """What the workload asks for, e.g. ``2 × nvidia.com/gpu``."""
    parts = []
    for ps in workload.get("podSets") or []:
        count = int(ps.get("count", 1))
        for res, q in (ps.get("requests") or {}).items():
            if res == "nvidia.com/gpu" or res.startswith("nvidia.com/mig-"):
                short = res.replace("nvidia.com/", "")
                n = f"{q}" if count == 1 else f"{count}×{q}"
                parts.append(f"{n} {short}")
    return ", ".join(parts) or "-"


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)


def workload_summary(wl: dict) -> str:
    """One line: name, state, position, reason, estimated cost."""
    out = f"{wl['namespace']}/{wl['name']}: {wl.get('state')}"
    if wl.get("state") == "Pending":
        pos = position(wl)
        if pos != "-":
            out += f", position {pos} in {wl.get('clusterQueue') or 'its ClusterQueue'}"
        if wl.get("reason") and wl.get("reason") != "Pending":
            out += f" ({wl['reason']}: {wl.get('message') or ''})".replace(": )", ")")
    elif wl.get("visibleDevices"):
        out += f" on {assigned_flavor(wl)} [{wl['visibleDevices']}]"
    if wl.get("exitCode") is not None and wl.get("state") in TERMINAL_STATES:
        out += f", exit code {wl['exitCode']}"
    out += f"; estimated cost {money(wl.get('estimatedCostUsd'))}"
    if wl.get("state") in TERMINAL_STATES:
        out += f", cost {money(wl.get('costUsd'))}"
    elif wl.get("costUsd"):
        out += f", cost so far {money(wl.get('costUsd'))}"
    nb = wl.get("notebook")
    if isinstance(nb, dict):  # a notebook job: where its executed notebook goes, and how far it got
        out += f"; notebook → {nb.get('output')}"
        if nb.get("failedCell"):
            out += f" (failed at cell {nb['failedCell']} of {nb.get('cells')}: {nb.get('error')})"
        elif nb.get("cell") and wl.get("state") == "Running":
            out += f" (cell {nb['cell']} of {nb.get('cells')})"
    return out


def workloads_table(items: list[dict], *, now: Optional[float] = None, owner: bool = False) -> str:
    now = time.time() if now is None else now
    headers = ["NAMESPACE", "NAME", "STATE", "POS", "STARTS", "PRIORITY", "REQUEST", "FLAVOR", "AGE", "COST", "EST."]
    if owner:
        headers.append("OWNER")
    rows = []
    for w in items:
        row = [
            w.get("namespace"),
            w.get("name"),
            w.get("state"),
            position(w),
            starts(w, now),
            w.get("priorityClass") or w.get("priority"),
            requested(w),
            assigned_flavor(w),
            duration(now - float(w.get("createdAt") or now)),
            money(w.get("costUsd")),
            money(w.get("estimatedCostUsd")),
        ]
        if owner:
            row.append(w.get("owner"))
        rows.append(row)
    if not rows:
        return "no workloads"
    return format_table(headers, rows)


def queues_text(q: dict) -> str:
    lines = []
    for cq in q.get("clusterQueues") or []:
        lines.append(
            f"ClusterQueue {cq['name']}  cohort={cq.get('cohort') or '-'}  "
            f"{cq.get('queueingStrategy', '')}  pending={cq.get('pendingWorkloads', 0)}  "
            f"admitted={cq.get('admittedWorkloads', 0)}"
        )
        rows = [
            [
                r.get("flavor"),
                r.get("resource"),
                r.get("nominalQuota"),
                "-" if r.get("borrowingLimit") is None else r.get("borrowingLimit"),
                "-" if r.get("lendingLimit") is None else r.get("lendingLimit"),
                r.get("usage"),
                r.get("borrowed"),
            ]
            for r in cq.get("resources") or []
        ]
        if rows:
            table = format_table(
                ["FLAVOR", "RESOURCE", "NOMINAL", "BORROW-LIMIT", "LEND-LIMIT", "USAGE", "BORROWED"],
                rows,
            )
            lines.extend("  " + line for line in table.splitlines())
        for p in cq.get("pending") or []:
            who = f"{p['namespace']}/{p['name']}" if p.get("name") else f"{p['namespace']}/(another team's)"
            lines.append(
                f"  #{int(p.get('positionInClusterQueue', 0)) + 1} {who} "
                f"({p.get('owner') or '?'}, priority {p.get('priority')}): {p.get('reason') or ''}"
            )
    lqs = q.get("localQueues") or []
    if lqs:
        lines.append("")
        lines.append(
            format_table(
                ["LOCALQUEUE", "CLUSTERQUEUE", "PENDING", "ADMITTED"],
                [
                    [
                        f"{lq['namespace']}/{lq['name']}",
                        lq.get("clusterQueue"),
                        lq.get("pendingWorkloads", 0),
                        lq.get("admittedWorkloads", 0),
                    ]
                    for lq in lqs
                ],
            )
        )
    return "\n".join(lines) if lines else "no queues"


def inventory_text(inv: dict) -> str:
    lines = [f"source: {inv.get('source', '?')}"]
    rows = [
        [s.get("flavor"), s.get("resource"), s.get("free"), s.get("total")]
        for s in inv.get("summary") or []
    ]
    if rows:
        lines.append(format_table(["FLAVOR", "RESOURCE", "FREE", "TOTAL"], rows))
    for node in inv.get("nodes") or []:
        lines.append("")
        lines.append(f"node {node.get('name')}")
        for gpu in node.get("gpus") or []:
            mig = gpu.get("mig")
            if mig:
                used = sum(1 for m in mig if m.get("assignedTo"))
                desc = f"MIG {len(mig) - used}/{len(mig)} free: " + ", ".join(
                    f"{m.get('profile')}{'*' if m.get('assignedTo') else ''}" for m in mig
                )
            else:
                desc = f"in use by {gpu['assignedTo']}" if gpu.get("assignedTo") else "free"
            lines.append(f"  GPU {gpu.get('index')}  {gpu.get('product', '')}  {desc}")
    return "\n".join(lines)
