"""The human summary of a replay report (the text the CLI prints)."""

from __future__ import annotations

import io
from typing import Optional


def _secs(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:,.1f} s"


def fmt_duration(seconds: Optional[float]) -> str:
    """``42 s``, ``12.5 min``, ``3.2 h``, ``4.1 d``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:.1f} s" if abs(s) < 10 and s != int(s) else f"{s:.0f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def summary_text(report: dict) -> str:
    """A short human summary of :func:`replay_trace`'s report: one row per team, one per
    ClusterQueue, the overall figures and the wall time."""
    tr, ov, sim = report["trace"], report["overall"], report["simulation"]
    span = report["windowS"]["end"] - report["windowS"]["start"]
    out = io.StringIO()
    out.write(
        f"Replay of {tr['source']}: {tr['jobs']:,} jobs from {tr['tenants']} tenants over "
        f"{fmt_duration(span)} simulated; {len(report['clusterQueues'])} ClusterQueues, "
        f"{report['capacity']['gpus']:,} GPUs of quota\n\n"
    )
    hdr = f"{'team':10} {'LocalQueue':24} {'jobs':>7} {'delay mean':>11} {'median':>9} {'p95':>9} " \
          f"{'JCT mean':>9} {'GPU-h':>9} {'share':>6} {'preempted':>9}\n"
    out.write(hdr)

    def row(name, lq, st, share):
        d = st["queueingDelayS"]
        out.write(
            f"{name[:10]:10} {lq[:24]:24} {st['jobs']:>7,} {fmt_duration(d['mean']):>11} "
            f"{fmt_duration(d['median']):>9} {fmt_duration(d['p95']):>9} "
            f"{fmt_duration(st['completionTimeS']['mean']):>9} {st['gpuHours']:>9,.0f} "
            f"{share:>6} {st['preemptions']:>9,}\n"
        )

    for team, st in report["teams"].items():
        row(team, st["localQueue"], st, _pct(st["dominantShare"]))
    row("all", "", ov, "")
    out.write(f"\n{'ClusterQueue':24} {'nominal GPUs':>12} {'utilization':>11} {'borrowed GPU-h':>14} "
              f"{'preempted':>9}\n")
    for name, st in report["clusterQueues"].items():
        out.write(
            f"{name[:24]:24} {st['nominalGpus']:>12,} {_pct(st['gpuUtilization']):>11} "
            f"{st['borrowedGpuHours']:>14,.0f} {st['preemptions']:>9,}\n"
        )
    cf = ov.get("contendedFairness") or {}
    jc = cf.get("jainIndexMean")
    out.write(
        f"\ncluster-wide GPU utilization {_pct(ov['gpuUtilization'])}, borrowed {ov['borrowedGpuHours']:,.0f} "
        f"GPU-h, {ov['preemptions']:,} preemptions ({sim['lostGpuHoursToPreemption']:,.0f} GPU-h lost, "
        f"{_pct(ov.get('preemptionLossShare'))} of GPU-hours)\n"
        f"fairness over contended time ({fmt_duration((cf.get('contendedHours') or 0) * 3600)} with work pending): "
        f"Jain's index of allocation / fair share {('-' if jc is None else f'{jc:.3f}')} (time-weighted mean)\n"
    )
    wt = report["wallTimeS"]
    out.write(
        f"wall time {wt['total']:.2f} s (read {wt.get('read', 0):.2f}, simulate {wt['simulate']:.2f}, "
        f"metrics {wt['metrics']:.2f}); {sim['cycles']:,} scheduling cycles at {sim['instants']:,} instants\n"
    )
    if report.get("eta"):
        out.write(eta_text(report["eta"]))
    return out.getvalue()


def eta_text(eta: dict) -> str:
    """The start-time estimates' accuracy (``report["eta"]``), one row per estimator."""
    out = io.StringIO()
    out.write(
        f"\nestimated start times: {eta['jobsWaited']:,} jobs waited; every {eta['sampled']} sampled "
        f"({eta['jobsSampled']:,}), estimated at submission (median wait {fmt_duration(eta['medianWaitSeconds'])})\n"
        f"{'estimator':22} {'coverage':>9} {'median |err|':>13} {'p90 |err|':>10} {'within x2':>10}\n"
    )

    def row(name, b):
        out.write(f"{name:22} {_pct(b['coverage']):>9} {fmt_duration(b['medianAbsErrorSeconds']):>13} "
                  f"{fmt_duration(b['p90AbsErrorSeconds']):>10} {_pct(b['withinFactor2']):>10}\n")

    row(f"model ({eta['runtimeModel']})", eta)
    if eta.get("simulationOnly"):
        row("  simulation alone", eta["simulationOnly"])
    for name, b in eta["baselines"].items():
        row(f"baseline {name}", b)
    if eta.get("rangeCoverage") is not None:
        out.write(f"actual start within the estimated range: {_pct(eta['rangeCoverage'])}\n")
    vs = eta.get("vsRate")
    if vs:
        lo, hi = vs["interval90"]
        out.write(f"model / rate median error: {vs['ratio']:.3f} x (90 % interval {lo:.2f}-{hi:.2f} over "
                  f"{vs['resamples']:,} resamples of the {vs['jobs']:,} jobs"
                  + (f"; at most {vs['target']:g} x in {_pct(vs['atMostTarget'])} of them" if vs.get("atMostTarget") is not None
                     else "") + ")\n")
    return out.getvalue()
