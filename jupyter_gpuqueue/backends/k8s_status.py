"""What a Kubernetes backend reads from the API server's objects, as pure functions (no I/O): times
(``metav1.Time``), conditions, a run's outcome from its Job and Pods (``Complete`` / ``Failed``,
the container's exit code), what keeps an admitted run's Pods from starting (waiting reasons,
``Unschedulable``, the Job controller's ``FailedCreate`` events), the errors the service shows for
failed writes, and :class:`JobRun`, what the backend tracks of one run."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field
from typing import Optional

from ..errors import Conflict, Forbidden, GpuQueueError, ValidationError
from .base import FAILED, SUCCEEDED, RunStatus
from .k8s_client import KubeApiError
from .k8s_jobs import JobRequest

RUNNING = "Running"
WAITING = "Waiting"  # admitted, a Pod cannot start yet (message says why)
STARTED = "Started"  # a start done in a worker thread has created (or adopted) the Job
_WAITING_PROBLEMS = ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName",
                     "CreateContainerError", "RunContainerError", "CrashLoopBackOff")


def parse_time(value) -> Optional[float]:
    """RFC 3339 ``2026-11-22T17:30:41Z`` (as the API server writes metav1.Time) → seconds since the
    epoch; None when absent or unparseable."""
    if not value or not isinstance(value, str):
        return None
    text = value.strip().replace("Z", "")
    frac = 0.0
    if "." in text:
        text, f = text.split(".", 1)
        f = f.split("+")[0]
        frac = float("0." + f) if f.isdigit() else 0.0
    text = text.split("+")[0]
    try:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")) + frac
    except ValueError:
        return None


def condition(obj: dict, typ: str) -> Optional[dict]:
    """The ``status.conditions`` entry of type ``typ`` whose status is "True", else None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == typ and c.get("status") == "True":
            return c
    return None


def user_error(err: KubeApiError, what: str) -> GpuQueueError:
    """The service-facing error for a failed write, with the API server's own message:
    422 → ValidationError (field of the first cause), 403 → Forbidden, 409 → Conflict,
    404 → ValidationError(field="metadata.namespace") (the namespace does not exist: answered 400
    with that field), anything else → GpuQueueError."""
    msg = f"{what}: {err.field_message()}"
    if err.status == 422:
        field = (err.causes[0].get("field") if err.causes else None) or "manifest"
        return ValidationError(msg, field)
    if err.status == 403:
        return Forbidden(msg, "namespace")
    if err.status == 409:
        return Conflict(msg, "metadata.name")
    if err.status == 404:
        return ValidationError(msg, "metadata.namespace")
    return GpuQueueError(msg, None)


@dataclass
class JobRun:
    """One run the backend tracks: its Job, what is being done to it (``mode``, ``op`` a write
    still to do, retried with backoff), and what was reported of it (``reported``)."""

    uid: str
    namespace: str
    name: str
    req: Optional[JobRequest] = None
    mode: str = "active"  # active | suspending | deleting
    reason: str = ""
    seen: bool = False  # the Job has been in the informer's cache
    since: float = field(default_factory=time.time)
    floor: float = 0.0  # started here at this time: no observation is earlier (0 when adopted)
    reported: set = field(default_factory=set)  # observation keys already reported
    resumed_at: Optional[float] = None  # when this run's Job was last unsuspended by us
    phase: str = ""  # Kueue: "pending" | "admitted" as last reported ("" after adopt: unknown)
    sig: object = None  # Kueue: the last reported pending (reason, message, positions)
    op: Optional[str] = None  # a write still to do: "start" | "suspend" | "delete"
    op_attempts: int = 0
    op_next: float = 0.0
    op_first: float = 0.0
    last_error: str = ""
    inflight: bool = False  # its start runs in a worker thread (start_concurrency)
    notices: list = field(default_factory=list)  # messages for poll to report (Waiting), e.g. a 403
    forbidden: int = 0  # consecutive 403 answers to the pending write ``op``
    unready_since: Optional[float] = None  # PodsReady false since (waitForPodsReady), None: ready
    was_ready: bool = False  # every Pod was Ready once since the last admission
    stopped_at: Optional[float] = None  # eviction: when its Pods stopped running (billing ends)
    evict_reason: str = ""  # Kueue's Evicted reason (PodsReadyTimeout)
    deleted_pods: list = field(default_factory=list)  # Pods of it deleted by someone else, by name
    pod_finished_at: Optional[float] = None  # the latest container finishedAt seen of its Pods
    pod_exit_code: Optional[int] = None  # its container's exit code as last seen
    pod_names: set = field(default_factory=set)  # names of its Pods seen so far


EVICTED = "Evicted"  # the run was stopped for a reason not the job's; the service requeues it


def pod_condition(pod: dict, typ: str) -> Optional[dict]:
    """The Pod's ``status.conditions`` entry of type ``typ`` (any status), else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return c
    return None


def node_ready(node: Optional[dict]) -> bool:
    """A Node whose ``Ready`` condition is True (kubelet heartbeating, node lifecycle controller)."""
    if node is None:
        return False
    c = pod_condition(node, "Ready")
    return c is not None and c.get("status") == "True"


def live_pods(pods: list[dict]) -> list[dict]:
    """Pods that may still hold a GPU: not Succeeded/Failed (terminating ones included)."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def exit_code(pods: list[dict]) -> Optional[int]:
    code = None
    for p in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term and term.get("exitCode") is not None:
                code = int(term["exitCode"])
    return code


def finished_status(run: JobRun, job: dict, pods: list[dict], now: float) -> Optional[RunStatus]:
    done = condition(job, "Complete")
    # metav1.Time has whole seconds: never report a time before this run started here.
    if done:
        at = parse_time(done.get("lastTransitionTime")) or parse_time(job["status"].get("completionTime")) or now
        return RunStatus(run.uid, SUCCEEDED, 0, max(at, run.floor), "Job completed")
    failed = condition(job, "Failed")
    if failed:
        at = max(parse_time(failed.get("lastTransitionTime")) or now, run.floor)
        code = exit_code(pods)
        msg = f"Job failed: {failed.get('reason') or 'Failed'}: {failed.get('message') or ''}".rstrip(": ")
        if code is not None:
            msg += f" (exit code {code})"
        return RunStatus(run.uid, FAILED, code, at, msg)
    return None


def pod_observations(run: JobRun, pods: list[dict], now: float) -> list[RunStatus]:
    out = []
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running and "running" not in run.reported:
        run.reported.add("running")
        at = max(run.floor, min(parse_time(p["status"].get("startTime")) or now for p in running))
        out.append(RunStatus(run.uid, RUNNING, None, at, ""))
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            w = (cs.get("state") or {}).get("waiting") or {}
            if w.get("reason") in _WAITING_PROBLEMS:
                key = f"waiting:{p['metadata'].get('name')}:{w['reason']}"
                if key not in run.reported:
                    run.reported.add(key)
                    msg = f"pod {p['metadata'].get('name')}: {w['reason']}: {w.get('message') or ''}".rstrip(": ")
                    out.append(RunStatus(run.uid, WAITING, None, now, msg))
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                key = f"unschedulable:{p['metadata'].get('name')}:{c.get('message')}"
                if key not in run.reported:
                    run.reported.add(key)
                    out.append(RunStatus(run.uid, WAITING, None, now,
                                         f"pod {p['metadata'].get('name')} is unschedulable: {c.get('message') or ''}"))
    return out


def failed_create(events: list[dict], job: dict) -> Optional[dict]:
    """The newest ``FailedCreate`` event of this Job (this incarnation: matched by uid)."""
    uid = (job.get("metadata") or {}).get("uid")
    newest = None
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if obj.get("uid") == uid and ev.get("reason") == "FailedCreate":
            if newest is None or (ev.get("lastTimestamp") or "") >= (newest.get("lastTimestamp") or ""):
                newest = ev
    return newest


def pods_ready(job: dict, pods: list[dict], nodes: dict[str, dict]) -> tuple[bool, list[str], Optional[float]]:
    """Kueue's ``PodsReady`` of a batch/v1 Job (``pkg/controller/jobs/job``: ``succeeded + ready >=
    podsCount``, podsCount = parallelism, at most completions): Pods Ready (condition ``Ready``,
    not terminating, on a Node that is Ready; ``nodes``: name → Node, from the Node watch) plus
    Pods that succeeded. Returns ``(ready, why_not, since)``: ``why_not`` one line per Pod that is
    not ready, naming its node; ``since`` when the earliest of them stopped being ready (its
    ``Ready`` condition's or its Node's transition time), None when unknown."""
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    succeeded = max(int((job.get("status") or {}).get("succeeded") or 0),
                    sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"))
    ready, why, since = 0, [], []
    for p in pods:
        st, md = p.get("status") or {}, p.get("metadata") or {}
        if st.get("phase") in ("Succeeded", "Failed"):
            continue
        name, node = md.get("name"), (p.get("spec") or {}).get("nodeName")
        cond = pod_condition(p, "Ready") or {}
        node_obj = nodes.get(node) if node else None
        if node and not node_ready(node_obj):
            nc = pod_condition(node_obj, "Ready") if node_obj else None
            state = f"{nc.get('status')}" if nc else "gone"
            why.append(f"pod {name} on node {node}: the node is not Ready ({'NotReady' if state == 'False' else state})")
            since.append(parse_time((nc or {}).get("lastTransitionTime")) if nc else None)
        elif md.get("deletionTimestamp"):
            why.append(f"pod {name} on node {node} is terminating")
            since.append(parse_time(md.get("deletionTimestamp")))
        elif cond.get("status") == "True" and st.get("phase") == "Running":
            ready += 1
            continue
        elif not node:
            sched = pod_condition(p, "PodScheduled") or {}
            why.append(f"pod {name} is not scheduled: {sched.get('reason') or 'Pending'}: {sched.get('message') or ''}"
                       .rstrip(": "))
        else:
            waiting = [((cs.get("state") or {}).get("waiting") or {}).get("reason")
                       for cs in st.get("containerStatuses") or []]
            detail = ", ".join(w for w in waiting if w) or cond.get("reason") or "not Ready"
            why.append(f"pod {name} on node {node}: {detail}")
            since.append(parse_time(cond.get("lastTransitionTime")) if cond.get("status") == "False" else None)
    if not pods or (not why and ready + succeeded < count):
        why.append(f"{ready + succeeded} of {count} Pods ready")
    known = [s for s in since if s is not None]
    return ready + succeeded >= count, why, (min(known) if known else None)
