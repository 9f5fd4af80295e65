"""Kueue delegation: an installed Kueue admits; this backend only creates the Jobs and reports what
Kueue decided, so that the service shows the same views (state, reason, positions, cost).

- :meth:`KueueBackend.start` is called by the service when a workload is *submitted* (the engine
  does not admit in this mode): it creates the Job suspended with ``kueue.x-k8s.io/queue-name``
  and the priority (``kueue.x-k8s.io/priority-class`` for a WorkloadPriorityClass,
  ``priorityClassName`` for a PriorityClass) and never unsuspends it: Kueue's job reconciler does,
  after admission, injecting the flavor's node labels and tolerations itself.
- State comes from Kueue's ``Workload`` of the Job (``kueue.x-k8s.io/<version>``; found by the
  ``kueue.x-k8s.io/job-uid`` label Kueue puts on it, or its ownerReference): conditions
  ``QuotaReserved`` / ``Admitted`` (→ ``Admitted`` with ``status.admission`` converted to our
  admission dict, at the ``Admitted`` condition's lastTransitionTime: billing starts there),
  ``Evicted`` (→ ``Evicted``, requeued by the service; billing stops at its transition time),
  ``QuotaReserved=False`` (→ ``Pending`` with Kueue's reason and message). Running / Succeeded /
  Failed come from the Job and its Pods, as in :mod:`.kubernetes`.
- Positions come from Kueue's visibility API (``visibility.kueue.x-k8s.io/<version>``
  ``namespaces/{ns}/localqueues/{lq}/pendingworkloads`` → ``positionInClusterQueue``,
  ``positionInLocalQueue``, 0-based), polled by a daemon thread every ``visibility_interval``
  seconds for the LocalQueues that have pending work of ours. Without the visibility API (403,
  404, 503: not installed, or the ``VisibilityOnDemand`` feature gate off) positions are unknown.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from ..engine.quantity import resource_value
from .base import RunStatus
from .k8s_client import KubeApiError, path_for
from .k8s_informer import Informer
from .k8s_status import JobRun as _Run, condition, parse_time
from .kubernetes import KubernetesBackend

log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def admission_from_kueue(adm: dict, pod_sets: list[dict]) -> dict:
    """Kueue's ``status.admission`` → our admission dict (``engine.serialize`` shape). Quantities
    become canonical integers (``engine.quantity.resource_value``); a missing ``count`` is the
    PodSet's. Raises ValueError on an unparseable quantity."""
    counts = {p.get("name"): int(p.get("count") or 1) for p in pod_sets}
    out = []
    for psa in adm.get("podSetAssignments") or []:
        name = psa.get("name") or "main"
        usage = {r: resource_value(r, q) for r, q in (psa.get("resourceUsage") or {}).items()}
        out.append({"name": name, "flavors": dict(psa.get("flavors") or {}), "resourceUsage": usage,
                    "count": int(psa.get("count") or counts.get(name, 1))})
    return {"clusterQueue": adm.get("clusterQueue") or "", "podSetAssignments": out, "placements": []}


class KueueBackend(KubernetesBackend):
    """See the module docstring. ``kueue_version``: the Workload API version to watch
    (``v1beta1``; ``v1beta2`` on Kueue ≥ 0.15); ``visibility_version``: the visibility API's
    (default: the same). Other arguments as :class:`KubernetesBackend` (``volcano`` is ignored:
    Kueue does the gang admission)."""

    delegates_admission = True
    resume_on_adopt = False  # Kueue owns spec.suspend
    incremental = False  # a run follows its Workload and Kueue's positions too: every run, every poll
    access_kinds = ("kueue",)

    def __init__(self, client, *, kueue_version: str = "v1beta1", visibility_version: Optional[str] = None,
                 visibility_interval: float = 2.0, start_informers: bool = True, **kw):
        kw["volcano"] = False
        super().__init__(client, start_informers=False, **kw)
        self.kueue_version = kueue_version
        self.visibility_version = visibility_version or kueue_version
        self.visibility_interval = visibility_interval
        self.workloads = Informer(self.client, path_for(KUEUE_GROUP, kueue_version, "workloads"), None,
                                  on_change=self._changed, name="workloads")
        self._informers.append(self.workloads)
        self._gating.append(self.workloads)
        self._wanted: frozenset = frozenset()  # {(namespace, local queue)} with pending runs
        self._positions: dict[tuple[str, str], tuple[int, int]] = {}  # (ns, workload name) -> positions
        self.visibility_error: Optional[str] = None
        self._vis_stop = threading.Event()
        self._vis_wake = threading.Event()
        self._vis_thread: Optional[threading.Thread] = None
        if start_informers:
            self.start_informers()

    def start_informers(self) -> None:
        super().start_informers()
        if self._vis_thread is None:
            self._vis_thread = threading.Thread(target=self._visibility_loop, name="kueue-visibility", daemon=True)
            self._vis_thread.start()

    def close(self) -> None:
        super().close()
        self._vis_stop.set()
        self._vis_wake.set()

    # -- creating: suspended, queue-labelled, never resumed by us ------------------------------------
    def _desired_job(self, req, suspend: bool = True):
        req.admission = None
        from .k8s_jobs import build_job

        return build_job(req, self.config, image=self.image, suspend=True, volcano=False,
                         pod_template=self.pod_template, ttl_seconds_after_finished=self.ttl_seconds_after_finished)

    def _job_to_create(self, req):
        return self._desired_job(req)  # suspended: Kueue resumes it on admission

    def _create_and_resume(self, run: _Run, job: dict) -> None:
        self._create(run, job)
        if not run.phase:
            run.phase = "pending"

    # -- visibility -------------------------------------------------------------------------------------
    def refresh_positions(self) -> None:
        """Query the visibility API for every wanted LocalQueue (also called by the thread)."""
        positions: dict[tuple[str, str], tuple[int, int]] = {}
        for ns, lq in sorted(self._wanted):
            path = path_for(VISIBILITY_GROUP, self.visibility_version, "localqueues", namespace=ns, name=lq,
                            subresource="pendingworkloads")
            try:
                data = self.client.get(path, query=[("limit", "1000")], attempts=2)
            except KubeApiError as err:
                if self.visibility_error != err.message:
                    log.warning("kueue visibility API unavailable for %s/%s: %s", ns, lq, err)
                self.visibility_error = err.message
                continue
            self.visibility_error = None
            for item in data.get("items") or []:
                m = item.get("metadata") or {}
                positions[(m.get("namespace") or ns, m.get("name") or "")] = (
                    item.get("positionInClusterQueue"), item.get("positionInLocalQueue"))
        self._positions = positions

    def _visibility_loop(self) -> None:
        while not self._vis_stop.is_set():
            if self._wanted:
                try:
                    self.refresh_positions()
                except Exception:  # pragma: no cover - keep polling
                    log.exception("kueue visibility poll failed")
            self._vis_wake.wait(self.visibility_interval)
            self._vis_wake.clear()

    # -- observing ----------------------------------------------------------------------------------------
    def _workload_of(self, job: dict) -> Optional[dict]:
        uid = (job.get("metadata") or {}).get("uid")
        ns = (job.get("metadata") or {}).get("namespace")
        for wl in self.workloads.snapshot():
            meta = wl.get("metadata") or {}
            if meta.get("namespace") != ns:
                continue
            if (meta.get("labels") or {}).get(JOB_UID_LABEL) == uid or \
                    any(r.get("uid") == uid for r in meta.get("ownerReferences") or []):
                return wl
        return None

    def _observe(self, run: _Run, job, pods, now):
        if run.mode != "active" or job is None:
            return super()._observe(run, job, pods, now)
        run.seen = True
        fin = self._finished(run, job, pods, now)
        if fin is not None:
            return [fin]
        wl = self._workload_of(job)
        out: list[RunStatus] = []
        if wl is not None:
            admitted = condition(wl, "Admitted")
            adm = (wl.get("status") or {}).get("admission")
            if admitted and adm:
                if run.phase != "admitted":
                    at = parse_time(admitted.get("lastTransitionTime")) or now
                    details = {"admission": admission_from_kueue(adm, (wl.get("spec") or {}).get("podSets") or []),
                               "workload": wl["metadata"].get("name")}
                    out.append(RunStatus(run.uid, "Admitted", None, at, admitted.get("message") or "", details))
                    run.phase, run.sig = "admitted", None
                    run.reported.discard("running")
            else:
                if run.phase in ("admitted", ""):
                    ev = condition(wl, "Evicted")
                    at = parse_time((ev or {}).get("lastTransitionTime")) or now
                    reason = (ev or {}).get("reason") or "Evicted"
                    msg = (ev or {}).get("message") or "evicted by Kueue"
                    out.append(RunStatus(run.uid, "Evicted", None, at, msg, {"reason": reason}))
                    run.phase = "pending"
                qr = next((c for c in (wl.get("status") or {}).get("conditions") or []
                           if c.get("type") == "QuotaReserved"), None) or {}
                pos = self._positions.get((wl["metadata"].get("namespace"), wl["metadata"].get("name")), (None, None))
                sig = (qr.get("reason") or "Pending", qr.get("message") or "", pos)
                if sig != run.sig:
                    run.sig = sig
                    out.append(RunStatus(run.uid, "Pending", None, now, sig[1], {
                        "reason": sig[0], "positionInClusterQueue": pos[0], "positionInLocalQueue": pos[1],
                        "workload": wl["metadata"].get("name")}))
        if run.phase == "admitted":
            out.extend(self._pod_observations(run, pods, now))
        return out

    def poll(self):
        wanted = set()
        for run in self._runs.values():
            if run.phase != "admitted" and run.mode == "active":
                job = self.jobs.get(run.namespace, run.name)
                lq = ((job or {}).get("metadata", {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
                if lq:
                    wanted.add((run.namespace, lq))
        if frozenset(wanted) != self._wanted:
            self._wanted = frozenset(wanted)
            self._vis_wake.set()
        return super().poll()
