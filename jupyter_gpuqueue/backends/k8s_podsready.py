"""Kueue's ``waitForPodsReady`` for the Kubernetes backend (Kueue: ``pkg/controller/jobframework``
and ``pkg/controller/core/workload_controller.go``, PodsReady timeout; the Job's PodsReady from
``pkg/controller/jobs/job``): from admission until every Pod of the Job is Ready, whether Pods
exist or not (FailedCreate, Unschedulable, ImagePullBackOff, a Node that is not Ready), at most
``timeout`` seconds; once they were all Ready, a Pod that stops being Ready (its Node lost) has
``recovery_timeout`` seconds to be Ready again (Kueue's ``recoveryTimeout``). Past it the workload
is evicted, reason ``PodsReadyTimeout``: :meth:`PodsReadyWatch.check` says which write stops its
Job, :meth:`PodsReadyWatch.evicted` when the run may be reported ``Evicted`` (the service requeues
it with Kueue's ``requeuingStrategy`` backoff, ``service/admission.py``).

Billing stops at the eviction for Pods that never ran, and, for a run whose Pods were all Ready,
when they stopped running (the Pod's or its Node's ``Ready`` transition time: a reason not the
job's). A Pod on a Node that is not Ready (or gone) is *lost*: it holds no GPU the queue could give
(its Node is not schedulable) and it stays ``Terminating`` until the Node comes back, so a run
with such Pods has its Job deleted rather than suspended: Kubernetes 1.28 does not replace a
terminating Pod of a Job that has a ``podFailurePolicy`` (``onlyReplaceFailedPods``), so a resumed
Job would never run again; it is created anew on re-admission. (Kueue leaves these "zombie" Pods
to its opt-in ``failureRecoveryPolicy``, KEP-6757.)
"""

from __future__ import annotations

from typing import Optional

from .base import RunStatus
from .k8s_informer import Informer
from .k8s_status import EVICTED, JobRun, live_pods, node_ready, pods_ready

REASON = "PodsReadyTimeout"


class PodsReadyWatch:
    """``nodes``: the backend's Node informer; ``timeout`` / ``recovery_timeout`` in seconds
    (``recovery_timeout`` None: ``timeout``)."""

    def __init__(self, nodes: Informer, timeout: float, recovery_timeout: Optional[float] = None):
        self.nodes = nodes
        self.timeout = float(timeout)
        self.recovery_timeout = self.timeout if recovery_timeout is None else float(recovery_timeout)

    def lost(self, pod: dict) -> bool:
        """The Pod is bound to a Node that is not Ready (or gone): it runs nothing we can count on,
        and holds no GPU we could give (the Node is not schedulable either)."""
        node = (pod.get("spec") or {}).get("nodeName")
        return bool(node) and self.nodes.synced.is_set() and not node_ready(self.nodes.get("", node))

    def holding(self, pods: list[dict]) -> list[dict]:
        """The Pods that may still hold a GPU the queue could give to another job: not finished,
        and not lost (a Pod terminating on a Ready Node does hold its GPU until it is gone)."""
        return [p for p in live_pods(pods) if not self.lost(p)]

    def node_map(self) -> dict[str, dict]:
        """Node name → Node from the watch's cache ({} until it has listed); once per poll."""
        return {n["metadata"]["name"]: n for n in self.nodes.snapshot()} if self.nodes.synced.is_set() else {}

    def check(self, run: JobRun, job: dict, pods: list[dict], now: float,
              failed_create: Optional[dict] = None, nodes: Optional[dict[str, dict]] = None) -> Optional[str]:
        """Follow ``run``'s PodsReady; at the timeout mark it evicting (``run.mode``, ``reason``,
        ``stopped_at``: when billing ends) and return the write that stops its Job
        (``"suspend"``, or ``"delete"`` with Pods on a lost Node); else None.
        ``failed_create``: the Job controller's newest FailedCreate event, shown as the cause;
        ``nodes``: :meth:`node_map` (None: read now)."""
        nodes = self.node_map() if nodes is None else nodes
        if not nodes:  # no Node watch (yet, or forbidden): what the Pods say
            nodes = {p["spec"]["nodeName"]: {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
                     for p in pods if (p.get("spec") or {}).get("nodeName")}
        ready, why, since = pods_ready(job, pods, nodes)
        if ready:
            run.unready_since, run.was_ready = None, True
            return None
        if run.unready_since is None:
            start = run.resumed_at if not run.was_ready and run.resumed_at is not None else (since or now)
            run.unready_since = max(run.floor, min(start, now))
        timeout = self.recovery_timeout if run.was_ready else self.timeout
        if now - run.unready_since <= timeout:
            return None
        detail = "; ".join(why)
        if failed_create is not None:
            detail = f"the Job cannot create its Pods: FailedCreate: {failed_create.get('message') or ''}"
        run.mode, run.evict_reason = "evicting", REASON
        run.stopped_at = max(run.floor, min(now, since if (run.was_ready and since) else now))
        what = "were not Ready again" if run.was_ready else "were not all Ready"
        run.reason = (f"Exceeded the PodsReady timeout {run.namespace}/{run.name}: its Pods {what} within "
                      f"{timeout:.0f} s: {detail}")
        return "delete" if any(self.lost(p) for p in live_pods(pods)) else "suspend"

    def evicted(self, run: JobRun, job: Optional[dict], pods: list[dict], now: float) -> list[RunStatus]:
        """An evicting run is reported ``Evicted`` (details ``reason``) once its write is done, its
        Job suspended or gone, and none of its Pods holds a GPU any more."""
        if run.op is not None:
            return []
        if job is not None and not (job.get("spec") or {}).get("suspend"):
            return []
        if self.holding(pods):
            return []
        return [RunStatus(run.uid, EVICTED, None, run.stopped_at or now, run.reason, details={"reason": run.evict_reason})]
