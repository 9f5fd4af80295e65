"""The SVG plot of a replay report: utilization and queueing delay over time."""

from __future__ import annotations

import math

from .metrics import percentile
from .summary import fmt_duration


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``raw`` (> 0)."""
    if raw <= 0:
        return 1.0
    exp = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * 10 ** exp
        if step >= raw * (1 - 1e-12):
            return step
    return 10.0 ** (exp + 1)


def plot_svg(report: dict, *, width: int = 960, height: int = 560, top_queues: int = 5) -> str:
    """An SVG of the timeline: GPU utilization over time (cluster-wide and the busiest
    ClusterQueues) above, mean and p95 queueing delay of the jobs submitted in each bin below."""
    tl = report["timeline"]
    n = len(tl["t"])
    w = tl["binSeconds"]
    t0 = tl["start"]
    xs_days = [(t - t0 + w / 2) / 86400.0 for t in tl["t"]]
    span_days = max((n * w) / 86400.0, 1e-9)
    unit, div = ("days", 1.0) if span_days >= 2 else ("hours", 1 / 24.0) if span_days * 24 >= 2 else ("seconds", 1 / 86400.0)
    xs = [x / div for x in xs_days]
    xmax = span_days / div
    ml, mr, mt, mb, gap = 70, 190, 30, 45, 50
    ph = (height - mt - mb - gap) / 2
    pw = width - ml - mr
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]

    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def poly(values, y0, ymax, color, dash=""):
        pts = []
        segs = []
        for x, v in zip(xs, values):
            if v is None:
                if pts:
                    segs.append(pts)
                    pts = []
                continue
            px = ml + pw * (x / xmax if xmax else 0)
            py = y0 + ph - ph * (min(v, ymax) / ymax if ymax else 0)
            pts.append(f"{px:.1f},{py:.1f}")
        if pts:
            segs.append(pts)
        for seg in segs:  # a lone point: a short dash, so that it shows
            if len(seg) == 1:
                x, y = map(float, seg[0].split(","))
                seg[:] = [f"{x - 1.5:.1f},{y:.1f}", f"{x + 1.5:.1f},{y:.1f}"]
        d = f' stroke-dasharray="{dash}"' if dash else ""
        return "".join(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.3"{d} points="{" ".join(s)}"/>' for s in segs
        )

    xstep = _nice_step(xmax / 5)

    def axes(y0, ymax, label, fmt):
        # ``ymax`` is a multiple of 4 nice steps (``nice_max``): ticks at round values.
        parts = [f'<rect x="{ml}" y="{y0:.1f}" width="{pw}" height="{ph:.1f}" fill="none" stroke="#888"/>']
        for k in range(5):
            v = ymax * k / 4
            py = y0 + ph - ph * k / 4
            parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{ml - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="11">{fmt(v)}</text>')
        k = 0
        while xmax and k * xstep <= xmax * (1 + 1e-9):
            x = k * xstep
            px = ml + pw * x / xmax
            parts.append(f'<text x="{px:.1f}" y="{y0 + ph + 14:.1f}" text-anchor="middle" font-size="11">{x:g}</text>')
            k += 1
        parts.append(f'<text x="{ml}" y="{y0 - 8:.1f}" font-size="13" font-weight="bold">{esc(label)}</text>')
        return "".join(parts)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    # Panel 1: utilization.
    y1 = mt
    series = [("cluster-wide", tl["clusterGpuUtilization"], "#000")]
    by_use = sorted(tl["clusterQueueGpusInUse"].items(), key=lambda kv: -sum(kv[1]))
    for i, (cq, _) in enumerate(by_use[:top_queues]):
        vals = tl["clusterQueueGpuUtilization"].get(cq)
        if vals and any(v is not None for v in vals):
            series.append((cq, vals, colors[i % len(colors)]))
    umax = max([v for _, vals, _ in series for v in vals if v is not None] + [1.0])
    umax = 4 * _nice_step(umax / 4)
    svg.append(axes(y1, umax, "GPU utilization (GPUs in use / nominal quota)", lambda v: f"{100 * v:.0f}%"))
    for k, (name, vals, color) in enumerate(series):
        svg.append(poly(vals, y1, umax, color))
        ly = y1 + 12 + 16 * k
        svg.append(f'<line x1="{ml + pw + 10}" x2="{ml + pw + 30}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        svg.append(f'<text x="{ml + pw + 35}" y="{ly + 4}" font-size="11">{esc(name)}</text>')
    # Panel 2: queueing delay (hours unless short).
    y2 = mt + ph + gap
    dmean = tl["meanQueueingDelayS"]
    dp95 = tl["p95QueueingDelayS"]
    dmax_s = max([v for v in dmean + dp95 if v is not None] + [1.0])
    dunit, ddiv = ("h", 3600.0) if dmax_s >= 7200 else ("min", 60.0) if dmax_s >= 120 else ("s", 1.0)
    dmax = 4 * _nice_step(dmax_s / ddiv / 4)
    svg.append(axes(y2, dmax, f"queueing delay of jobs submitted in each bin ({dunit})",
                    lambda v: f"{v:g}"))
    svg.append(poly([None if v is None else v / ddiv for v in dp95], y2, dmax, "#d62728", "4,3"))
    svg.append(poly([None if v is None else v / ddiv for v in dmean], y2, dmax, "#1f77b4"))
    for k, (name, color) in enumerate((("mean", "#1f77b4"), ("p95", "#d62728"))):
        ly = y2 + 12 + 16 * k
        svg.append(f'<line x1="{ml + pw + 10}" x2="{ml + pw + 30}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        svg.append(f'<text x="{ml + pw + 35}" y="{ly + 4}" font-size="11">{name}</text>')
    svg.append(f'<text x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle" font-size="12">'
               f'simulated time ({unit}); bins of {esc(fmt_duration(w))}</text>')
    svg.append("</svg>\n")
    return "".join(svg)


def eta_plot_svg(eta: dict, *, width: int = 760, height: int = 420) -> str:
    """An SVG of the estimates' error distribution (``report["eta"]``): for the model and each
    baseline, the share of estimates made at submission whose absolute error is at most x, x on
    a log scale from 1 minute to 10 days."""
    series = [("model (" + eta.get("runtimeModel", "?") + ")", eta["errorsSeconds"]["model"], "#1f77b4", ""),
              ("rate baseline", eta["errorsSeconds"]["rate"], "#d62728", "6,4"),
              ("oracle baseline", eta["errorsSeconds"]["oracle"], "#2ca02c", "2,3")]
    ml, mr, mt, mb = 70, 200, 48, 50
    pw, ph = width - ml - mr, height - mt - mb
    lo, hi = math.log10(60.0), math.log10(10 * 86400.0)

    def px(x: float) -> float:
        v = math.log10(max(x, 60.0))
        return ml + pw * (min(v, hi) - lo) / (hi - lo)

    def py(f: float) -> float:
        return mt + ph - ph * f

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{ml}" y="18" font-size="14">Estimated start times: absolute error of the estimates '
           f'made at submission</text>',
           f'<text x="{ml}" y="34" font-size="11" fill="#555">{eta.get("jobsSampled", 0):,} waiting jobs '
           f'(every {eta.get("sampled", 1)}th of {eta.get("jobsWaited", 0):,})</text>']
    for f in (0, 0.25, 0.5, 0.75, 1.0):
        y = py(f)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml - 8}" y="{y + 4:.1f}" text-anchor="end">{int(f * 100)}%</text>')
    for secs, label in ((60, "1 min"), (600, "10 min"), (3600, "1 h"), (6 * 3600, "6 h"), (86400, "1 d"),
                        (10 * 86400, "10 d")):
        x = px(secs)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 18}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 10}" text-anchor="middle">|estimated start − actual start| '
               f'(≤ 1 min at the left edge)</text>')
    out.append(f'<text x="16" y="{mt + ph / 2}" transform="rotate(-90 16 {mt + ph / 2})" '
               f'text-anchor="middle">share of estimates</text>')
    for i, (name, errs, color, dash) in enumerate(series):
        xs = sorted(errs)
        n = len(xs)
        if n:
            pts = [f"{px(60):.1f},{py(0):.1f}"]
            for j, e in enumerate(xs):
                pts.append(f"{px(e):.1f},{py(j / n):.1f}")
                pts.append(f"{px(e):.1f},{py((j + 1) / n):.1f}")
            pts.append(f"{ml + pw:.1f},{py(1.0):.1f}")
            d = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{d} points="{" ".join(pts)}"/>')
        med = percentile(xs, 50)
        y = mt + 20 + 36 * i
        out.append(f'<line x1="{ml + pw + 14}" y1="{y}" x2="{ml + pw + 40}" y2="{y}" stroke="{color}" '
                   f'stroke-width="2"{(" stroke-dasharray=" + chr(34) + dash + chr(34)) if dash else ""}/>')
        out.append(f'<text x="{ml + pw + 46}" y="{y + 4}">{name}</text>')
        out.append(f'<text x="{ml + pw + 46}" y="{y + 17}" fill="#555" font-size="10">median '
                   f'{fmt_duration(med)}</text>')
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


__all__ = ["eta_plot_svg", "plot_svg"]
