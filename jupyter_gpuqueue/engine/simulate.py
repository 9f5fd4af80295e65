"""``jupyter gpuqueue simulate``: load Kueue objects and workloads, run cycles until nothing changes.

No time passes and nothing finishes; a preempted workload stops at once, goes back to its queue
(``evictions`` counts it) and is admitted again when it fits. The output is a contract other tools rely on::

    {"workloads": {"<namespace>/<name>": {
        "state": "admitted" | "pending",
        "clusterQueue": "<name>" | null,           # pending: its LocalQueue's, null if none exists
        "podSets": {"<podSet>": {"count": <int>, "flavors": {"<resource>": "<flavor>"}}},
        "evictions": <int>,
        "positionInClusterQueue": <int> | null,     # 0-based, pending only
        "positionInLocalQueue": <int> | null,
        "reason": "<why pending>" | null}},
     "cycles": <int>}

Raises ``ManifestError`` on invalid input (the CLI prints it and exits 2).
"""

from __future__ import annotations

from typing import Optional

from .manifests import load_texts
from .model import ClusterConfig, Workload
from .scheduler import Scheduler, SchedulerOptions


def simulate_text(texts: list[tuple[str, str]], options: Optional[SchedulerOptions] = None) -> dict:
    """Simulate the objects in ``texts`` — (source name, YAML text) pairs, read in order."""
    m = load_texts(texts)
    config, workloads = m.config, list(m.workloads)
    return simulate(config, workloads, options)


def simulate(config: ClusterConfig, workloads: list[Workload], options: Optional[SchedulerOptions] = None) -> dict:
    """Run ``workloads`` (in input order: FIFO ties resolve by it) against ``config``."""
    # No time passes here, so Kueue's 1 s batching of requeues collapses to "at once".
    sched = Scheduler(config, None, options or SchedulerOptions(requeue_batch_seconds=0.0))
    for seq, wl in enumerate(workloads):
        if not wl.uid:
            wl.uid = f"{seq:09d}"
        sched.add_workload(wl)
    cycles = 0
    while cycles < 1_000_000:
        r = sched.schedule(0.0)
        # No time passes: a victim stops at once, is back in its queue, and counts an eviction.
        for p in r.preempted:
            if p.victim in sched.admitted:
                sched.evict(p.victim, 0.0)
        if r.heads == 0:
            break
        cycles += 1
        if not r.changed:
            break
    out: dict[str, dict] = {}
    for wl in workloads:
        out[wl.key] = workload_status(sched, wl)
    return {"workloads": out, "cycles": cycles}


def workload_status(sched: Scheduler, wl: Workload) -> dict:
    """One workload's entry in the ``simulate`` contract."""
    if wl.admission is not None:
        return {
            "state": "admitted",
            "clusterQueue": wl.admission.cluster_queue,
            "podSets": {
                psa.name: {"count": psa.count, "flavors": dict(psa.flavors)}
                for psa in wl.admission.pod_set_assignments
            },
            "evictions": wl.evictions,
            "positionInClusterQueue": None,
            "positionInLocalQueue": None,
            "reason": None,
        }
    pos = sched.position(wl.key)
    reason = sched.reason(wl.key)
    return {
        "state": "pending",
        "clusterQueue": sched.cluster_queue_name(wl),
        "podSets": {ps.name: {"count": ps.count, "flavors": {}} for ps in wl.pod_sets},
        "evictions": wl.evictions,
        "positionInClusterQueue": pos[0] if pos else None,
        "positionInLocalQueue": pos[1] if pos else None,
        "reason": reason[0] if reason else None,
    }
