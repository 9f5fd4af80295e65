"""An HTTP-level fake Kubernetes API server, with the controllers our backends depend on.

Written from the Kubernetes documentation, not from what our backend sends:

- API conventions (sig-architecture/api-conventions.md) and "Kubernetes API Concepts":
  ``metadata.uid`` / ``resourceVersion`` (one global, increasing counter, opaque to clients) /
  ``generation`` (bumped when the spec changes) / ``creationTimestamp``; ``generateName``;
  errors as ``Status`` objects (``404 NotFound``, ``409 AlreadyExists``, ``409 Conflict`` for an
  update with a stale resourceVersion, ``422 Invalid`` with ``details.causes``, ``403 Forbidden``,
  ``410 Expired`` for a watch from a compacted resourceVersion - sent as an ``ERROR`` watch event, as
  the watch cache does); list with ``labelSelector`` (equality and set-based) and a list
  ``resourceVersion``; watch as newline-delimited ``WatchEvent`` JSON over chunked HTTP with
  ``?watch=true&resourceVersion=&timeoutSeconds=`` (no resourceVersion: synthetic ADDED events of
  the current state first; ``allowWatchBookmarks``: a BOOKMARK before the stream ends); PUT
  (replace, resourceVersion precondition), PATCH (merge, strategic-merge treated as JSON merge
  patch, JSON patch), the ``status`` subresource (status ignored on the main resource);
  DELETE with ``propagationPolicy`` Foreground / Background / Orphan - batch/v1 Jobs default to
  Orphan when none is given (legacy default of the REST API) - and graceful Pod deletion.
- The Job controller (concepts/workloads/controllers/job.md, "Suspending a Job"): a suspended Job
  creates no Pods; suspending deletes its active Pods, adds the ``Suspended`` condition and resets
  ``status.startTime``; resuming creates Pods; the Job is ``Complete`` when ``completions`` Pods
  succeeded, ``Failed`` (``BackoffLimitExceeded``) after more than ``backoffLimit`` failed Pods or
  (``DeadlineExceeded``) after ``activeDeadlineSeconds``; the pod template is immutable except the
  scheduling directives of a suspended Job that has not started (KEP-2926).
- The scheduler (nodeSelector, taints NoSchedule/NoExecute vs tolerations, extended resources vs
  allocatable, ``spec.unschedulable``), a kubelet (Pending → Running; test-driven exit), the garbage
  collector (ownerReferences), and - optionally - Volcano gang scheduling (PodGroup ``minMember``)
  and Kueue (a Workload per queue-labelled Job, admission/eviction driven by the test, suspension
  of the Job; visibility API ``pendingworkloads``; Kueue's docs: concepts/workload.md,
  tasks/manage/monitor_pending_workloads).

Controllers run when the test calls :meth:`FakeCluster.step` (or in a background thread with
:meth:`FakeCluster.run_controllers`); the clock is :attr:`FakeCluster.now`, advanced by the test.
Faults: :meth:`FakeCluster.fail_next` (any status for matching requests), :meth:`FakeCluster.deny`
(RBAC 403), :meth:`FakeCluster.compact` (watch history gone → 410).
"""

from __future__ import annotations

import calendar
import copy
import hashlib
import json
import random
import re
import string
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlparse

# (group, plural) -> (version(s), kind, namespaced, has status subresource)
RESOURCES = {
    ("", "pods"): (("v1",), "Pod", True, True),
    ("", "nodes"): (("v1",), "Node", False, True),
    ("", "namespaces"): (("v1",), "Namespace", False, True),
    ("batch", "jobs"): (("v1",), "Job", True, True),
    ("kueue.x-k8s.io", "workloads"): (("v1beta1", "v1beta2"), "Workload", True, True),
    ("scheduling.volcano.sh", "podgroups"): (("v1beta1",), "PodGroup", True, True),
    ("scheduling.k8s.io", "priorityclasses"): (("v1",), "PriorityClass", False, False),
    ("", "events"): (("v1",), "Event", True, False),
}
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TEMPLATE_MUTABLE = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Optional[dict] = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def invalid(group: str, plural: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 as the API server words it: ``Job.batch "x" is invalid: field: message``."""
    gk = f"{kind}.{group}" if group else kind
    parts = list(dict.fromkeys(f"{f}: {m}" for f, _r, m in causes))  # an aggregate: duplicates once
    text = parts[0] if len(parts) == 1 else f"[{', '.join(parts)}]"
    return ApiError(422, "Invalid", f'{gk} "{name}" is invalid: {text}', {
        "name": name, "group": group, "kind": kind,
        "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


# -- label selectors (apimachinery labels.Parse) -------------------------------------------------------
def _split_selector(sel: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def selector_matches(sel: Optional[str], labels: dict) -> bool:
    if not sel:
        return True
    for req in _split_selector(sel):
        m = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", req)
        if m:
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in" and labels.get(key) not in vals:
                return False
            if op == "notin" and key in labels and labels[key] in vals:
                return False
            continue
        if "!=" in req:
            k, v = req.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "==" in req or "=" in req:
            k, v = re.split(r"==?", req, maxsplit=1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


def field_matches(sel: Optional[str], obj: dict) -> bool:
    """A field selector of ``path=value`` / ``path!=value`` terms (``involvedObject.kind=Job``)."""
    for term in (sel or "").split(","):
        term = term.strip()
        if not term:
            continue
        neg = "!=" in term
        path, _, want = term.partition("!=" if neg else "=")
        want = want.lstrip("=")
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if (str(cur if cur is not None else "") == want) == neg:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(doc: Any, ops: list) -> Any:
    """RFC 6902 (add, replace, remove, test) - enough for status and label edits."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if op["op"] == "add":
                    parent.insert(idx, op["value"])
                else:
                    parent[idx] = op["value"]
            else:
                if op["op"] == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"replace operation does not apply: doc is missing path: {op['path']}")
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last)
        elif op["op"] == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op["value"]:
                raise ApiError(422, "Invalid", f"testing value {op['path']} failed")
    return doc


@dataclass
class Fault:
    method: str
    pattern: str
    code: int
    times: int
    reason: str
    message: str


class FakeCluster:
    """The API server's storage and the controllers. Thread-safe (one lock)."""

    def __init__(self, *, history_limit: int = 10_000, schema_check: bool = True, kueue: bool = False):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._rv = 1000
        self.now = 1_800_000_000.0
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = {k: {} for k in RESOURCES}
        self.events: dict[tuple[str, str], list[tuple[int, str, dict]]] = {k: [] for k in RESOURCES}
        self.compacted: dict[tuple[str, str], int] = {k: 0 for k in RESOURCES}
        self.history_limit = history_limit
        self.schema_check = schema_check
        self.schema_errors: list[str] = []
        self.faults: list[Fault] = []
        self.denied: list[tuple[str, str, Optional[str]]] = []
        self.requests: list[tuple[str, str, dict]] = []
        self.received: list[dict] = []  # every object body POSTed / PUT / PATCHed (after patching)
        self.job_counts: dict[str, dict[str, set]] = {}
        self.pod_logs: dict[tuple[str, str], bytes] = {}  # (namespace, pod) -> what its container wrote
        self.kueue = kueue
        self.kueue_flavor_labels: dict[str, dict[str, str]] = {}  # ResourceFlavor nodeLabels
        self.kueue_flavor_tolerations: dict[str, list[dict]] = {}  # ResourceFlavor tolerations
        self.local_queues: dict[str, str] = {}  # "ns/lq" -> ClusterQueue
        self.priorities: dict[str, int] = {}
        self.stopping = False
        self.watch_epoch = 0  # bumped by drop_watches(): open streams end
        self.watch_gate = threading.Event()  # cleared: new watch requests wait (an API server restarting)
        self.watch_gate.set()
        self._controller_thread: Optional[threading.Thread] = None
        self.controller_error: Optional[BaseException] = None  # raised in the controllers' thread
        for ns in ("default", "kube-system"):
            self.add_namespace(ns)

    # -- storage primitives ----------------------------------------------------------------------------
    def next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, res, typ: str, obj: dict) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self.events[res].append((rv, typ, copy.deepcopy(obj)))
        if len(self.events[res]) > self.history_limit:
            drop = self.events[res][: len(self.events[res]) - self.history_limit]
            self.compacted[res] = drop[-1][0]
            del self.events[res][: len(drop)]
        self.cond.notify_all()

    def put(self, res, obj: dict, typ: str = "MODIFIED") -> dict:
        """Store ``obj`` with a new resourceVersion and record the watch event."""
        with self.lock:
            meta = obj["metadata"]
            meta["resourceVersion"] = str(self.next_rv())
            self.objects[res][(meta.get("namespace") or "", meta["name"])] = obj
            self._record(res, typ, obj)
            return obj

    def remove(self, res, obj: dict) -> None:
        with self.lock:
            meta = obj["metadata"]
            if self.objects[res].pop((meta.get("namespace") or "", meta["name"]), None) is None:
                return
            gone = copy.deepcopy(obj)
            gone["metadata"]["resourceVersion"] = str(self.next_rv())
            self._record(res, "DELETED", gone)

    def get(self, res, namespace: str, name: str) -> Optional[dict]:
        with self.lock:
            return self.objects[res].get((namespace or "", name))

    def list(self, res, namespace: Optional[str] = None, selector: Optional[str] = None,
             fields: Optional[str] = None) -> list[dict]:
        with self.lock:
            return [o for (ns, _), o in sorted(self.objects[res].items())
                    if (namespace is None or ns == namespace)
                    and selector_matches(selector, o["metadata"].get("labels") or {})
                    and field_matches(fields, o)]

    def drop_watches(self, hold: bool = False) -> None:
        """End every open watch stream (a restarting API server / dropped connections); with
        ``hold`` new watches wait until :meth:`release_watches`."""
        with self.lock:
            if hold:
                self.watch_gate.clear()
            self.watch_epoch += 1
            self.cond.notify_all()

    def release_watches(self) -> None:
        self.watch_gate.set()

    def compact(self) -> None:
        """Forget the watch history (etcd compaction): watches from older versions get 410."""
        with self.lock:
            for res in self.events:
                self.compacted[res] = self._rv
                self.events[res] = []

    # -- setup helpers -----------------------------------------------------------------------------------
    def _new_meta(self, meta: dict, namespace: Optional[str]) -> dict:
        meta = dict(meta)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.now)
        meta["generation"] = 1
        if namespace:
            meta["namespace"] = namespace
        return meta

    def add_namespace(self, name: str) -> dict:
        with self.lock:
            obj = {"apiVersion": "v1", "kind": "Namespace",
                   "metadata": self._new_meta({"name": name, "labels": {"kubernetes.io/metadata.name": name}}, None),
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            return self.put(("", "namespaces"), obj, "ADDED")

    def add_node(self, name: str, *, labels: Optional[dict] = None, allocatable: Optional[dict] = None,
                 taints: Optional[list] = None, unschedulable: bool = False, ready: bool = True) -> dict:
        alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", **(allocatable or {})}
        obj = {"apiVersion": "v1", "kind": "Node",
               "metadata": self._new_meta({"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}, None),
               "spec": {"taints": list(taints or []), **({"unschedulable": True} if unschedulable else {})},
               "status": {"capacity": dict(alloc), "allocatable": dict(alloc),
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        if not obj["spec"]["taints"]:
            del obj["spec"]["taints"]
        with self.lock:
            return self.put(("", "nodes"), obj, "ADDED")

    def add_pod(self, namespace: str, name: str, *, node: str, requests: dict, labels: Optional[dict] = None,
                phase: str = "Running") -> dict:
        """A pod of someone else (not created through a Job), bound to ``node``."""
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": self._new_meta({"name": name, "labels": dict(labels or {})}, namespace),
               "spec": {"nodeName": node, "restartPolicy": "Always",
                        "containers": [{"name": "c", "image": "x", "resources": {"requests": dict(requests),
                                                                                 "limits": dict(requests)}}]},
               "status": {"phase": phase}}
        with self.lock:
            return self.put(("", "pods"), obj, "ADDED")

    # -- faults ------------------------------------------------------------------------------------------
    def fail_next(self, method: str, pattern: str, code: int, times: int = 1, reason: str = "",
                  message: str = "") -> None:
        """The next ``times`` requests with ``method`` whose path contains ``pattern`` get ``code``."""
        reasons = {500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout", 429: "TooManyRequests",
                   409: "Conflict", 403: "Forbidden"}
        with self.lock:
            self.faults.append(Fault(method.upper(), pattern, code, times, reason or reasons.get(code, "Unknown"),
                                     message or f"injected {code}"))

    def deny(self, verb: str, plural: str, namespace: Optional[str] = None) -> None:
        """RBAC: ``verb`` on ``plural`` (in ``namespace``, or anywhere) is forbidden."""
        with self.lock:
            self.denied.append((verb, plural, namespace))

    # -- controllers -------------------------------------------------------------------------------------
    def step(self, rounds: int = 1) -> None:
        """Run the controllers once (``rounds`` times): Kueue, Job controller, scheduler, kubelet, GC."""
        for _ in range(rounds):
            with self.lock:
                if self.kueue:
                    self._kueue_controller()
                self._job_controller()
                self._scheduler()
                self._kubelet()
                self._garbage_collector()

    def run_controllers(self, interval: float = 0.02, real_time: bool = False) -> None:
        """Run :meth:`step` every ``interval`` seconds in a thread; with ``real_time`` the fake's clock
        follows ``time.time()``."""
        def loop():
            try:
                while not self.stopping:
                    if real_time:
                        self.now = time.time()
                    self.step()
                    time.sleep(interval)
            except BaseException as exc:  # noqa: BLE001 - a controller's bug fails the test (stop_controllers)
                self.controller_error = exc
                raise
        self._controller_thread = threading.Thread(target=loop, daemon=True, name="fake-controllers")
        self._controller_thread.start()

    def stop_controllers(self, timeout: float = 30.0) -> None:
        """Stop the thread of :meth:`run_controllers` and wait for it; the exception a controller
        raised in it, if any, is raised here (in the test's thread)."""
        self.stopping = True
        with self.lock:
            self.cond.notify_all()
        t = self._controller_thread
        if t is not None:
            t.join(timeout)
            assert not t.is_alive(), "the fake's controllers did not stop"
        if self.controller_error is not None:
            raise self.controller_error

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds

    # Job controller
    def _job_pods(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        return [p for p in self.list(("", "pods"), job["metadata"]["namespace"])
                if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])]

    @staticmethod
    def _cond(obj: dict, typ: str) -> Optional[dict]:
        for c in obj.setdefault("status", {}).get("conditions") or []:
            if c["type"] == typ:
                return c
        return None

    def _set_cond(self, obj: dict, typ: str, status: str, reason: str, message: str) -> bool:
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        c = self._cond(obj, typ)
        if c is not None and (c["status"], c.get("reason"), c.get("message")) == (status, reason, message):
            return False
        now = rfc3339(self.now)
        # A Job's conditions (JobCondition) have lastProbeTime; a Kueue Workload's are
        # metav1.Condition, which has none (Kueue's CRD refuses it under strict validation).
        probe = {"lastProbeTime": now} if obj.get("kind") != "Workload" else {}
        if c is None:
            conds.append({"type": typ, "status": status, "reason": reason, "message": message,
                          **probe, "lastTransitionTime": now})
        else:
            if c["status"] != status:
                c["lastTransitionTime"] = now
            c.update(status=status, reason=reason, message=message, **probe)
        return True

    def _delete_pod(self, pod: dict, grace: Optional[int] = None) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            return
        phase = pod.get("status", {}).get("phase")
        if grace == 0 or not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            self.remove(("", "pods"), pod)
            return
        pod["metadata"]["deletionTimestamp"] = rfc3339(self.now)
        pod["metadata"]["deletionGracePeriodSeconds"] = 30 if grace is None else grace
        self.put(("", "pods"), pod)

    def _job_controller(self) -> None:
        for job in self.list(("batch", "jobs")):
            if job["metadata"].get("deletionTimestamp"):
                continue
            before = json.dumps(job.get("status"), sort_keys=True)
            st = job.setdefault("status", {})
            spec = job["spec"]
            pods = self._job_pods(job)
            counts = self.job_counts.setdefault(job["metadata"]["uid"], {"succeeded": set(), "failed": set()})
            for p in pods:
                ph = p.get("status", {}).get("phase")
                if ph == "Succeeded":
                    counts["succeeded"].add(p["metadata"]["uid"])
                elif ph == "Failed":
                    counts["failed"].add(p["metadata"]["uid"])
            active = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                      and not p["metadata"].get("deletionTimestamp")]
            terminating = [p for p in pods if p["metadata"].get("deletionTimestamp")
                           and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
            finished = any(self._cond(job, t) and self._cond(job, t)["status"] == "True" for t in ("Complete", "Failed"))
            if not finished:
                completions = spec.get("completions")
                parallelism = spec.get("parallelism", 1)
                succeeded, failed = len(counts["succeeded"]), len(counts["failed"])
                if spec.get("suspend"):
                    for p in active:
                        self._delete_pod(p)
                    active = []
                    # v1.28's Job controller keeps status.startTime on suspend (Kueue clears it).
                    self._set_cond(job, "Suspended", "True", "JobSuspended", "Job suspended")
                else:
                    c = self._cond(job, "Suspended")
                    if c is not None and c["status"] == "True":
                        self._set_cond(job, "Suspended", "False", "JobResumed", "Job resumed")
                        st["startTime"] = rfc3339(self.now)  # reset on resume
                    st.setdefault("startTime", rfc3339(self.now))
                    ads = spec.get("activeDeadlineSeconds")
                    start = calendar.timegm(time.strptime(st["startTime"], "%Y-%m-%dT%H:%M:%SZ"))
                    fail = None
                    if failed > spec.get("backoffLimit", 6):
                        fail = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                    elif ads is not None and self.now - start >= ads:
                        fail = ("DeadlineExceeded", "Job was active longer than specified deadline")
                    if fail:
                        for p in active:
                            self._delete_pod(p)
                        active = []
                        self._set_cond(job, "FailureTarget", "True", *fail)
                        self._set_cond(job, "Failed", "True", *fail)
                    elif succeeded >= (completions if completions is not None else 1) or (
                            completions is None and succeeded > 0 and not active):
                        self._set_cond(job, "SuccessCriteriaMet", "True", "CompletionsReached",
                                       "Reached expected number of succeeded pods")
                        self._set_cond(job, "Complete", "True", "CompletionsReached",
                                       "Reached expected number of succeeded pods")
                        st["completionTime"] = rfc3339(self.now)
                    else:
                        remaining = (completions - succeeded) if completions is not None else parallelism
                        want = min(parallelism, remaining) - len(active) - len(terminating)
                        for _ in range(max(0, want)):
                            pod = self._create_job_pod(job)
                            if pod is not None:
                                active.append(pod)
            st["active"] = len(active)
            st["ready"] = sum(1 for p in active if p.get("status", {}).get("phase") == "Running")
            st["terminating"] = len(terminating)
            st["succeeded"] = len(counts["succeeded"])
            st["failed"] = len(counts["failed"])
            if json.dumps(st, sort_keys=True) != before:
                self.put(("batch", "jobs"), job)

    def add_priority_class(self, name: str, value: int) -> dict:
        return self.put(("scheduling.k8s.io", "priorityclasses"), {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": int(value),
            "metadata": self._new_meta({"name": name}, None)}, "ADDED")

    def _event(self, obj: dict, typ: str, reason: str, message: str) -> None:
        """An Event about ``obj``, as controllers record them (``involvedObject``, count)."""
        meta = obj["metadata"]
        name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
        self.put(("", "events"), {
            "apiVersion": "v1", "kind": "Event", "type": typ, "reason": reason, "message": message,
            "involvedObject": {"kind": obj.get("kind"), "namespace": meta.get("namespace"), "name": meta["name"],
                               "uid": meta["uid"], "apiVersion": obj.get("apiVersion")},
            "firstTimestamp": rfc3339(self.now), "lastTimestamp": rfc3339(self.now), "count": 1,
            "source": {"component": "job-controller"},
            "metadata": self._new_meta({"name": name}, meta.get("namespace"))}, "ADDED")

    def _create_job_pod(self, job: dict) -> Optional[dict]:
        pc = ((job["spec"].get("template") or {}).get("spec") or {}).get("priorityClassName")
        if pc and self.get(("scheduling.k8s.io", "priorityclasses"), "", pc) is None:
            # Pod admission (the Priority plugin) refuses the Pod; the Job controller records it.
            key = ("failedcreate", job["metadata"]["uid"])
            if key not in self.job_counts:
                self.job_counts[key] = {}
                self._event(job, "Warning", "FailedCreate",
                            f'Error creating: pods "{job["metadata"]["name"]}-" is forbidden: no PriorityClass '
                            f"with name {pc} was found")
            return None
        t = copy.deepcopy(job["spec"]["template"])
        meta = t.get("metadata") or {}
        name = f"{job['metadata']['name']}-{''.join(random.choices(string.ascii_lowercase + string.digits, k=5))}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": self._new_meta({"name": name, "labels": dict(meta.get("labels") or {}),
                                           "annotations": dict(meta.get("annotations") or {}),
                                           "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                                "name": job["metadata"]["name"],
                                                                "uid": job["metadata"]["uid"], "controller": True,
                                                                "blockOwnerDeletion": True}]},
                                          job["metadata"]["namespace"]),
               "spec": t.get("spec") or {},
               "status": {"phase": "Pending", "conditions": []}}
        pod["spec"].setdefault("schedulerName", "default-scheduler")
        return self.put(("", "pods"), pod, "ADDED")

    # scheduler
    @staticmethod
    def _requests(pod: dict) -> dict[str, float]:
        from kubernetes.utils import parse_quantity

        out: dict[str, float] = {}
        for c in pod["spec"].get("containers") or []:
            res = c.get("resources") or {}
            for r, q in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
                out[r] = out.get(r, 0) + float(parse_quantity(q))
        return out

    def _fits(self, pod: dict, node: dict, extra_used: dict[str, float]) -> Optional[str]:
        from kubernetes.utils import parse_quantity

        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        labels = node["metadata"].get("labels") or {}
        for k, v in (pod["spec"].get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                return "node(s) didn't match Pod's node affinity/selector"
        tols = pod["spec"].get("tolerations") or []
        for t in node["spec"].get("taints") or []:
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            ok = any((not tol.get("key") or tol.get("key") == t["key"])
                     and (not tol.get("effect") or tol.get("effect") == t.get("effect"))
                     and (tol.get("operator") == "Exists" or tol.get("value", "") == t.get("value", ""))
                     for tol in tols)
            if not ok:
                return f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"
        used: dict[str, float] = dict(extra_used)
        for p in self.list(("", "pods")):
            if p["spec"].get("nodeName") == node["metadata"]["name"] and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                for r, q in self._requests(p).items():
                    used[r] = used.get(r, 0) + q
        alloc = node.get("status", {}).get("allocatable") or {}
        for r, q in self._requests(pod).items():
            if r in ("cpu", "memory"):
                continue
            if used.get(r, 0) + q > float(parse_quantity(alloc.get(r, "0"))):
                return f"Insufficient {r}"
        return None

    def _bind(self, pod: dict, node: str) -> None:
        pod["spec"]["nodeName"] = node
        self._set_cond(pod, "PodScheduled", "True", "", "")
        self.put(("", "pods"), pod)

    def _scheduler(self) -> None:
        nodes = self.list(("", "nodes"))
        pending = [p for p in self.list(("", "pods")) if not p["spec"].get("nodeName")
                   and not p["metadata"].get("deletionTimestamp") and p.get("status", {}).get("phase") == "Pending"]
        groups: dict[tuple[str, str], list[dict]] = {}
        for pod in pending:
            if pod["spec"].get("schedulerName") == "volcano":
                g = (pod["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name", "")
                groups.setdefault((pod["metadata"]["namespace"], g), []).append(pod)
                continue
            if pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            reasons = [self._fits(pod, n, {}) for n in nodes]
            fit = [n for n, r in zip(nodes, reasons) if r is None]
            if fit:
                self._bind(pod, fit[0]["metadata"]["name"])
            else:
                why = ", ".join(sorted({r for r in reasons if r})) or "no nodes available"
                if self._set_cond(pod, "PodScheduled", "False", "Unschedulable",
                                  f"0/{len(nodes)} nodes are available: {why}."):
                    self.put(("", "pods"), pod)
        for (ns, g), pods in groups.items():  # Volcano: a gang is bound whole or not at all
            pg = self.get(("scheduling.volcano.sh", "podgroups"), ns, g)
            if pg is None or len(pods) < int(pg["spec"].get("minMember", 1)):
                continue
            used: dict[str, dict[str, float]] = {}
            plan = []
            for pod in pods:
                for n in nodes:
                    nu = used.setdefault(n["metadata"]["name"], {})
                    if self._fits(pod, n, nu) is None:
                        for r, q in self._requests(pod).items():
                            nu[r] = nu.get(r, 0) + q
                        plan.append((pod, n["metadata"]["name"]))
                        break
            if len(plan) == len(pods):
                for pod, node in plan:
                    self._bind(pod, node)

    # kubelet
    def _kubelet(self) -> None:
        for pod in self.list(("", "pods")):
            if pod["metadata"].get("deletionTimestamp"):
                self.remove(("", "pods"), pod)  # containers killed, pod finalized
                continue
            if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") == "Pending" \
                    and any(r.get("kind") == "Job" for r in pod["metadata"].get("ownerReferences") or []):
                st = pod["status"]
                st["phase"] = "Running"
                st["startTime"] = rfc3339(self.now)
                st["containerStatuses"] = [{"name": c["name"], "ready": True, "restartCount": 0, "image": c.get("image", ""),
                                            "state": {"running": {"startedAt": rfc3339(self.now)}}}
                                           for c in pod["spec"].get("containers") or []]
                self._set_cond(pod, "Ready", "True", "", "")
                self.put(("", "pods"), pod)

    def finish_pods(self, namespace: str, job_name: str, exit_code: int = 0) -> int:
        """The kubelet reports the Running pods of Job ``job_name`` terminated with ``exit_code``."""
        n = 0
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            if job is None:
                return 0
            for pod in self._job_pods(job):
                if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                    continue
                pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                pod["status"]["containerStatuses"] = [
                    {"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""),
                     "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                              "finishedAt": rfc3339(self.now)}}}
                    for c in pod["spec"].get("containers") or []]
                self._set_cond(pod, "Ready", "False", "PodCompleted", "")
                self.put(("", "pods"), pod)
                n += 1
        return n

    def write_job_log(self, namespace: str, job_name: str, text: str) -> str:
        """The container of Job ``job_name``'s newest pod writes ``text`` (appended to that pod's
        log, served by ``GET …/pods/{name}/log``); returns the pod's name."""
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            pods = self._job_pods(job) if job is not None else []
            if not pods:
                raise AssertionError(f"Job {namespace}/{job_name} has no pod")
            pod = max(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
            key = (namespace, pod["metadata"]["name"])
            self.pod_logs[key] = self.pod_logs.get(key, b"") + text.encode("utf-8")
            return pod["metadata"]["name"]

    def pod_log(self, namespace: str, name: str, q: dict) -> bytes:
        """``GET …/pods/{name}/log`` as the API server answers it: 404 for a missing pod, 400 while
        its container has not started (phase Pending), else the log, cut at ``limitBytes``."""
        self._check_rbac("get", ("", "pods/log"), namespace)
        pod = self.get(("", "pods"), namespace, name)
        if pod is None:
            raise self._not_found(("", "pods"), name)
        if pod.get("status", {}).get("phase", "Pending") == "Pending":
            container = (pod["spec"].get("containers") or [{}])[0].get("name", "main")
            raise ApiError(400, "BadRequest",
                           f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        data = self.pod_logs.get((namespace, name), b"")
        if "limitBytes" in q:
            data = data[:int(q["limitBytes"])]
        return data

    def set_waiting(self, namespace: str, job_name: str, reason: str, message: str) -> None:
        """A container of the Job's pods cannot start (e.g. ImagePullBackOff)."""
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            for pod in self._job_pods(job):
                pod["status"]["phase"] = "Pending"
                pod["status"]["containerStatuses"] = [{"name": c["name"], "ready": False, "restartCount": 0,
                                                       "image": c.get("image", ""),
                                                       "state": {"waiting": {"reason": reason, "message": message}}}
                                                      for c in pod["spec"]["containers"]]
                self.put(("", "pods"), pod)

    # garbage collector
    def _garbage_collector(self) -> None:
        uids = {o["metadata"]["uid"] for res in self.objects for o in self.objects[res].values()}
        for res in self.objects:
            for obj in list(self.objects[res].values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if refs and not any(r.get("uid") in uids for r in refs):
                    if res == ("", "pods"):
                        self._delete_pod(obj)
                    else:
                        self.remove(res, obj)
        for res in self.objects:  # foreground deletion: the owner goes once its dependents are gone
            for obj in list(self.objects[res].values()):
                if "foregroundDeletion" in (obj["metadata"].get("finalizers") or []):
                    uid = obj["metadata"]["uid"]
                    deps = [o for r2 in self.objects for o in self.objects[r2].values()
                            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]
                    for d in deps:
                        if d["kind"] == "Pod":
                            self._delete_pod(d)
                        else:
                            self.remove((d["apiVersion"].split("/")[0] if "/" in d["apiVersion"] else "",
                                         d["kind"].lower() + "s"), d)
                    if not deps:
                        self.remove(res, obj)

    # -- Kueue ---------------------------------------------------------------------------------------------
    def _workload_for(self, job: dict) -> Optional[dict]:
        uid = job["metadata"]["uid"]
        for wl in self.list(("kueue.x-k8s.io", "workloads"), job["metadata"]["namespace"]):
            if (wl["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") == uid:
                return wl
        return None

    def _kueue_controller(self) -> None:
        for job in self.list(("batch", "jobs")):
            labels = job["metadata"].get("labels") or {}
            q = labels.get("kueue.x-k8s.io/queue-name")
            if not q or job["metadata"].get("deletionTimestamp"):
                continue
            wl = self._workload_for(job)
            if wl is None:
                digest = hashlib.sha1(f"{job['metadata']['name']}Job{job['metadata']['uid']}".encode()).hexdigest()[:5]
                # Kueue (jobframework ExtractPriority): the WorkloadPriorityClass label first, else the
                # pod PriorityClass; the Workload says which (spec.priorityClassSource).
                wpc = labels.get("kueue.x-k8s.io/priority-class")
                pc = wpc or job["spec"]["template"].get("spec", {}).get("priorityClassName")
                source = ("kueue.x-k8s.io/workloadpriorityclass" if wpc else "scheduling.k8s.io/priorityclass") if pc else ""
                wl = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                      "metadata": self._new_meta({
                          "name": f"job-{job['metadata']['name']}-{digest}",
                          "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
                          "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                               "uid": job["metadata"]["uid"], "controller": True,
                                               "blockOwnerDeletion": True}]}, job["metadata"]["namespace"]),
                      "spec": {"queueName": q, "priority": self.priorities.get(pc or "", 0),
                               **({"priorityClassName": pc} if pc else {}), "priorityClassSource": source,
                               "podSets": [{"name": "main", "count": job["spec"].get("parallelism", 1),
                                            "template": copy.deepcopy(job["spec"]["template"])}]},
                      "status": {}}
                self._set_cond(wl, "QuotaReserved", "False", "Pending", "waiting for quota")
                self.put(("kueue.x-k8s.io", "workloads"), wl, "ADDED")
                continue
            finished = next((t for t in ("Complete", "Failed") if (self._cond(job, t) or {}).get("status") == "True"), None)
            if finished and (self._cond(wl, "Finished") or {}).get("status") != "True":
                self._set_cond(wl, "Finished", "True", "Succeeded" if finished == "Complete" else "Failed",
                               "Job finished successfully" if finished == "Complete" else "Job failed")
                self.put(("kueue.x-k8s.io", "workloads"), wl)

    def kueue_workload(self, namespace: str, job_name: str) -> dict:
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            wl = self._workload_for(job) if job else None
            if wl is None:
                raise KeyError(f"no Workload for Job {namespace}/{job_name}")
            return wl

    def kueue_admit(self, namespace: str, job_name: str, cluster_queue: str, flavors: dict[str, str]) -> None:
        """Kueue's scheduler admits the Job's Workload; its job reconciler unsuspends the Job and injects
        the flavors' node labels (Kueue: jobframework ``startJob`` → ``podset.Merge``)."""
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            wl = self._workload_for(job)
            ps = wl["spec"]["podSets"][0]
            reqs = self._requests({"spec": ps["template"]["spec"]})
            usage = {r: str(int(q * ps["count"])) for r, q in reqs.items() if r in flavors}
            wl["status"]["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [
                {"name": "main", "flavors": dict(flavors), "resourceUsage": usage, "count": ps["count"]}]}
            self._set_cond(wl, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}")
            self._set_cond(wl, "Admitted", "True", "Admitted", "The workload is admitted")
            if self._cond(wl, "Evicted") is not None:
                self._set_cond(wl, "Evicted", "False", "Admitted", "")
            self.put(("kueue.x-k8s.io", "workloads"), wl)
            sel = {}
            for f in flavors.values():
                sel.update(self.kueue_flavor_labels.get(f, {}))
            pod_spec = job["spec"]["template"].setdefault("spec", {})
            if sel:
                pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **sel}
            tols = [t for f in flavors.values() for t in self.kueue_flavor_tolerations.get(f, [])]
            if tols:
                pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + tols
            job["spec"]["suspend"] = False
            job["metadata"]["generation"] += 1
            self.put(("batch", "jobs"), job)

    def kueue_evict(self, namespace: str, job_name: str, reason: str = "Preempted",
                    message: str = "Preempted to accommodate a workload due to prioritization in the ClusterQueue") -> None:
        with self.lock:
            job = self.get(("batch", "jobs"), namespace, job_name)
            wl = self._workload_for(job)
            self._set_cond(wl, "Evicted", "True", reason, message)
            self._set_cond(wl, "Admitted", "False", "NoReservation", "The workload has no reservation")
            self._set_cond(wl, "QuotaReserved", "False", "Pending", message)
            wl["status"].pop("admission", None)
            self.put(("kueue.x-k8s.io", "workloads"), wl)
            job["spec"]["suspend"] = True
            job["spec"]["template"].get("spec", {}).pop("nodeSelector", None)  # Kueue restores the template
            job["spec"]["template"].get("spec", {}).pop("tolerations", None)
            job["metadata"]["generation"] += 1
            self.put(("batch", "jobs"), job)

    def kueue_set_pending(self, namespace: str, job_name: str, message: str) -> None:
        with self.lock:
            wl = self.kueue_workload(namespace, job_name)
            self._set_cond(wl, "QuotaReserved", "False", "Pending", message)
            self.put(("kueue.x-k8s.io", "workloads"), wl)

    def pending_workloads(self, namespace: Optional[str], local_queue: Optional[str],
                          cluster_queue: Optional[str]) -> list[dict]:
        """Kueue visibility: pending (no quota reserved, not finished) Workloads of a queue, ordered
        by priority then creation, with 0-based positions in their ClusterQueue and LocalQueue."""
        with self.lock:
            pending = []
            for wl in self.list(("kueue.x-k8s.io", "workloads")):
                if (self._cond(wl, "QuotaReserved") or {}).get("status") == "True":
                    continue
                if (self._cond(wl, "Finished") or {}).get("status") == "True":
                    continue
                lq_key = f"{wl['metadata']['namespace']}/{wl['spec']['queueName']}"
                if lq_key not in self.local_queues:
                    continue
                pending.append((self.local_queues[lq_key], lq_key, wl))
            pending.sort(key=lambda t: (-int(t[2]["spec"].get("priority") or 0), t[2]["metadata"]["creationTimestamp"],
                                        t[2]["metadata"]["uid"]))
            out, pos_cq, pos_lq = [], {}, {}
            for cq, lq_key, wl in pending:
                pcq = pos_cq.setdefault(cq, 0)
                plq = pos_lq.setdefault(lq_key, 0)
                pos_cq[cq] += 1
                pos_lq[lq_key] += 1
                if cluster_queue and cq != cluster_queue:
                    continue
                if local_queue and lq_key != f"{namespace}/{local_queue}":
                    continue
                m = wl["metadata"]
                out.append({"metadata": {"name": m["name"], "namespace": m["namespace"],
                                         "creationTimestamp": m["creationTimestamp"],
                                         "ownerReferences": m.get("ownerReferences", [])},
                            "priority": int(wl["spec"].get("priority") or 0), "localQueueName": wl["spec"]["queueName"],
                            "positionInClusterQueue": pcq, "positionInLocalQueue": plq})
            return out

    # -- validation (a subset of the API server's; messages in its words) ----------------------------------
    def _validate(self, res, obj: dict, old: Optional[dict]) -> None:
        group, plural = res
        _, kind, _, _ = RESOURCES[res]
        name = obj["metadata"].get("name", "")
        causes: list[tuple[str, str, str]] = []
        if not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
            causes.append(("metadata.name", "FieldValueInvalid",
                           f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                           "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
        for k, v in (obj["metadata"].get("labels") or {}).items():
            if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
                causes.append((f"metadata.labels", "FieldValueInvalid",
                               f'Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric '
                               "characters, '-', '_' or '.', and must start and end with an alphanumeric character"))
        if res == ("batch", "jobs"):
            if len(name) > 63:
                causes.append(("metadata.name", "FieldValueInvalid",
                               f'Invalid value: "{name}": must be no more than 63 characters'))
            spec = obj.get("spec") or {}
            tspec = (spec.get("template") or {}).get("spec") or {}
            rp = tspec.get("restartPolicy")
            if rp not in ("Never", "OnFailure"):
                causes.append(("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                               f'Unsupported value: "{rp or ""}": supported values: "OnFailure", "Never"'))
            causes += self._validate_pod_spec(tspec, "spec.template.spec")
            if old is not None:
                causes += self._job_update_rules(old, obj)
        if res == ("", "pods"):
            causes += self._validate_pod_spec(obj.get("spec") or {}, "spec")
        if causes:
            raise invalid(group, plural, kind, name, causes)

    @staticmethod
    def _validate_pod_spec(ps: dict, path: str) -> list[tuple[str, str, str]]:
        from kubernetes.utils import parse_quantity

        causes = []
        containers = ps.get("containers") or []
        if not containers:
            causes.append((f"{path}.containers", "FieldValueRequired", "Required value"))
        for i, c in enumerate(containers):
            cp = f"{path}.containers[{i}]"
            if not c.get("name") or not DNS1123_LABEL.match(c.get("name", "")):
                causes.append((f"{cp}.name", "FieldValueRequired" if not c.get("name") else "FieldValueInvalid",
                               "Required value" if not c.get("name") else f'Invalid value: "{c["name"]}"'))
            if not c.get("image"):
                causes.append((f"{cp}.image", "FieldValueRequired", "Required value"))
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for r in set(req) | set(lim):
                if "/" in r and not r.startswith(("kubernetes.io/", "requests.")) and not r.startswith("hugepages-"):
                    if r in req and r not in lim:
                        causes.append((f"{cp}.resources.limits", "FieldValueRequired",
                                       f"Required value: Limit must be set for non overcommitable resources"))
                    elif r in req and parse_quantity(req[r]) != parse_quantity(lim[r]):
                        causes.append((f"{cp}.resources.requests", "FieldValueInvalid",
                                       f'Invalid value: "{req[r]}": must be equal to {r} limit of {lim[r]}'))
                    if r in lim and parse_quantity(lim[r]) != int(parse_quantity(lim[r])):
                        causes.append((f"{cp}.resources.limits[{r}]", "FieldValueInvalid",
                                       f'Invalid value: "{lim[r]}": must be an integer'))
        return causes

    @staticmethod
    def _job_template_labels(job: dict) -> list[tuple[str, str, str]]:
        """The generated selector must keep matching the template: the labels the API server added
        on create may not be dropped (v1.28 ``ValidateGeneratedSelector``)."""
        spec = job.get("spec") or {}
        if spec.get("manualSelector"):
            return []
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        meta = job.get("metadata") or {}
        expected = {"controller-uid": meta.get("uid"), "job-name": meta.get("name"),
                    "batch.kubernetes.io/controller-uid": meta.get("uid"),
                    "batch.kubernetes.io/job-name": meta.get("name")}
        causes = []
        for k in ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"):
            if labels.get(k) != expected[k]:
                causes.append((f"spec.template.metadata.labels[{k}]", "FieldValueRequired",
                               f"Required value: must be '{expected[k]}'"))
        want = ((spec.get("selector") or {}).get("matchLabels") or {})
        if any(labels.get(k) != v for k, v in want.items()):
            shown = ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items()))
            cause = ("spec.template.metadata.labels", "FieldValueInvalid",
                     f"Invalid value: map[string]string{{{shown}}}: `selector` does not match template `labels`")
            causes += [cause, cause]  # v1.28 reports it twice (ValidateJob and the update's check)
        return causes

    def _job_update_rules(self, old: dict, new: dict) -> list[tuple[str, str, str]]:
        causes = self._job_template_labels(new)
        o, n = old.get("spec") or {}, new.get("spec") or {}
        if o.get("selector") != n.get("selector"):
            causes.append(("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable"))
        if o.get("completions") != n.get("completions"):
            causes.append(("spec.completions", "FieldValueInvalid", "Invalid value: field is immutable"))
        ot, nt = copy.deepcopy(o.get("template") or {}), copy.deepcopy(n.get("template") or {})
        # KEP-2926: scheduling directives of a suspended Job that has not started may change.
        mutable = o.get("suspend") and not (old.get("status") or {}).get("startTime")
        if mutable:
            for t in (ot, nt):
                for k in TEMPLATE_MUTABLE:
                    (t.get("spec") or {}).pop(k, None)
                (t.get("metadata") or {}).pop("labels", None)
                (t.get("metadata") or {}).pop("annotations", None)
        if ot != nt:
            causes.append(("spec.template", "FieldValueInvalid", "Invalid value: field is immutable"))
        return causes

    def _schema(self, obj: dict) -> None:
        if not self.schema_check or obj.get("kind") not in ("Job", "Pod", "Node", "Namespace"):
            return
        import kubernetes_validate

        try:
            kubernetes_validate.validate(obj, "1.33", strict=True)
        except kubernetes_validate.ValidationError as e:
            msg = f"{obj.get('kind')} {obj['metadata'].get('name')}: {str(e).splitlines()[0]}"
            self.schema_errors.append(msg)
            raise ApiError(422, "Invalid", f".{msg} (strict decoding error)")

    # -- defaulting ----------------------------------------------------------------------------------------
    def _default_job(self, job: dict) -> None:
        spec = job.setdefault("spec", {})
        if "parallelism" not in spec and "completions" not in spec:
            spec["parallelism"] = spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")
        uid = job["metadata"]["uid"]
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tl = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
            tl.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job["metadata"]["name"],
                       "controller-uid": uid, "job-name": job["metadata"]["name"]})
        job["metadata"].setdefault("labels", {}).setdefault("batch.kubernetes.io/job-name", job["metadata"]["name"])

    # -- REST verbs ------------------------------------------------------------------------------------------
    def _check_rbac(self, verb: str, res, namespace: Optional[str]) -> None:
        group, plural = res
        for v, p, ns in self.denied:
            if v == verb and p == plural and (ns is None or ns == namespace):
                where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
                raise ApiError(403, "Forbidden",
                               f'{_qualified(group, plural)} is forbidden: User "system:serviceaccount:jupyterhub:gpuqueue" '
                               f'cannot {verb} resource "{plural}" in API group "{group}"{where}',
                               {"group": group, "kind": plural})

    def _not_found(self, res, name: str) -> ApiError:
        group, plural = res
        return ApiError(404, "NotFound", f'{_qualified(group, plural)} "{name}" not found',
                        {"name": name, "group": group, "kind": plural})

    def create(self, res, namespace: Optional[str], body: dict, dry_run: bool = False) -> dict:
        with self.lock:
            _, kind, namespaced, has_status = RESOURCES[res]
            self._check_rbac("create", res, namespace)
            if body.get("kind") != kind:
                raise ApiError(400, "BadRequest", f"the object provided is unrecognized (kind {body.get('kind')!r})")
            meta = dict(body.get("metadata") or {})
            if namespaced:
                if meta.get("namespace") and meta["namespace"] != namespace:
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                      "namespace sent on the request")
                if self.get(("", "namespaces"), "", namespace) is None:
                    raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                                   {"name": namespace, "kind": "namespaces"})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            if not meta.get("name"):
                raise invalid(res[0], res[1], kind, "", [("metadata.name", "FieldValueRequired",
                                                          "Required value: name or generateName is required")])
            if self.get(res, namespace if namespaced else "", meta["name"]) is not None:
                raise ApiError(409, "AlreadyExists", f'{_qualified(*res)} "{meta["name"]}" already exists',
                               {"name": meta["name"], "group": res[0], "kind": res[1]})
            obj = copy.deepcopy(body)
            for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
                meta.pop(k, None)
            obj["metadata"] = self._new_meta(meta, namespace if namespaced else None)
            if has_status:
                obj["status"] = {}
            self._schema(body)
            if res == ("batch", "jobs"):
                self._default_job(obj)
                q = (obj["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
                if self.kueue and q:
                    obj["spec"]["suspend"] = True  # Kueue's mutating webhook suspends queued Jobs
            self._validate(res, obj, None)
            self.received.append(copy.deepcopy(obj))
            if dry_run:
                obj["metadata"]["resourceVersion"] = ""
                return obj
            return self.put(res, obj, "ADDED")

    def update(self, res, namespace: str, name: str, body: dict, subresource: Optional[str]) -> dict:
        with self.lock:
            self._check_rbac("update", res, namespace)
            old = self.get(res, namespace, name)
            if old is None:
                raise self._not_found(res, name)
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if not rv:
                raise invalid(res[0], res[1], RESOURCES[res][1], name, [
                    ("metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0x0: must be specified for an update")])
            if rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(*res)} "{name}": the object '
                                                "has been modified; please apply your changes to the latest version and try again",
                               {"name": name, "group": res[0], "kind": res[1]})
            return self._store_update(res, old, body, subresource)

    def _store_update(self, res, old: dict, body: dict, subresource: Optional[str]) -> dict:
        new = copy.deepcopy(body)
        meta = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp"):
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status") or {}
            new = merged
        else:
            if RESOURCES[res][3]:
                new["status"] = copy.deepcopy(old.get("status") or {})
            self._schema(new)
            self._validate(res, new, old)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        self.received.append(copy.deepcopy(new))
        return self.put(res, new)

    def patch(self, res, namespace: str, name: str, patch: Any, content_type: str, subresource: Optional[str]) -> dict:
        with self.lock:
            self._check_rbac("patch", res, namespace)
            old = self.get(res, namespace, name)
            if old is None:
                raise self._not_found(res, name)
            if "json-patch" in content_type:
                new = json_patch(old, patch)
            elif "merge-patch" in content_type:
                new = merge_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                            f"accepted media types include: application/json-patch+json, "
                                                            f"application/merge-patch+json, application/strategic-merge-patch+json")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(*res)} "{name}": the object '
                                                "has been modified; please apply your changes to the latest version and try again")
            return self._store_update(res, old, new, subresource)

    def delete(self, res, namespace: str, name: str, options: dict) -> dict:
        with self.lock:
            self._check_rbac("delete", res, namespace)
            obj = self.get(res, namespace, name)
            if obj is None:
                raise self._not_found(res, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"] or \
                    pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(*res)} "{name}": '
                                                "Precondition failed")
            policy = options.get("propagationPolicy")
            if policy is None and options.get("orphanDependents") is not None:
                policy = "Orphan" if options["orphanDependents"] else "Background"
            if policy is None:
                policy = "Orphan" if res == ("batch", "jobs") else "Background"
            if res == ("", "pods"):
                self._delete_pod(obj, options.get("gracePeriodSeconds"))
                return obj
            uid = obj["metadata"]["uid"]
            if policy == "Orphan":
                for r2 in self.objects:
                    for dep in list(self.objects[r2].values()):
                        refs = dep["metadata"].get("ownerReferences") or []
                        if any(r.get("uid") == uid for r in refs):
                            dep["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                            self.put(r2, dep)
            if policy == "Foreground":
                obj["metadata"]["deletionTimestamp"] = rfc3339(self.now)
                obj["metadata"].setdefault("finalizers", []).append("foregroundDeletion")
                return self.put(res, obj)
            self.remove(res, obj)
            return obj


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster: FakeCluster = None  # set on the subclass

    def log_message(self, *args):  # quiet
        pass

    # -- plumbing --
    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw.strip() else None

    def _route(self):
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        plural = rest[0] if rest else ""
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return group, version, plural, namespace, name, sub, q

    def _fault(self, method: str) -> None:
        c = self.cluster
        with c.lock:
            for f in c.faults:
                if f.times > 0 and f.method == method and f.pattern in self.path:
                    f.times -= 1
                    raise ApiError(f.code, f.reason, f.message)

    def _handle(self, method: str) -> None:
        c = self.cluster
        try:
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            group, version, plural, ns, name, sub, q = self._route()
            with c.lock:
                c.requests.append((method, self.path, q))
            self._fault(method)
            if group == "visibility.kueue.x-k8s.io":
                return self._visibility(version, plural, ns, name, sub, q)
            res = (group, plural)
            if res not in RESOURCES or version not in RESOURCES[res][0]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            namespaced = RESOURCES[res][2]
            if method == "GET" and res == ("", "pods") and name and sub == "log":
                with c.lock:
                    data = c.pod_log(ns or "", name, q)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if method == "GET" and name is None:
                if q.get("watch") in ("true", "1"):
                    return self._watch(res, ns, q)
                c._check_rbac("list", res, ns)
                with c.lock:
                    items = c.list(res, ns, q.get("labelSelector"), q.get("fieldSelector"))
                    rv = str(c._rv)
                kind = RESOURCES[res][1]
                return self._send(200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}" if group else version,
                                        "metadata": {"resourceVersion": rv}, "items": items})
            if method == "GET":
                c._check_rbac("get", res, ns)
                obj = c.get(res, ns if namespaced else "", name)
                if obj is None:
                    raise c._not_found(res, name)
                return self._send(200, obj)
            if method == "POST":
                return self._send(201, c.create(res, ns, body or {}, dry_run=q.get("dryRun") == "All"))
            if method == "PUT":
                return self._send(200, c.update(res, ns or "", name, body or {}, sub))
            if method == "PATCH":
                return self._send(200, c.patch(res, ns or "", name, body, self.headers.get("Content-Type", ""), sub))
            if method == "DELETE":
                opts = dict(body or {})
                if "propagationPolicy" in q:
                    opts["propagationPolicy"] = q["propagationPolicy"]
                if "gracePeriodSeconds" in q:
                    opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
                return self._send(200, c.delete(res, ns or "", name, opts))
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")
        except ApiError as e:
            self._send(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _visibility(self, version, plural, ns, name, sub, q) -> None:
        c = self.cluster
        if version not in ("v1beta1", "v1beta2") or sub != "pendingworkloads" or plural not in ("localqueues", "clusterqueues"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        c._check_rbac("get", ("visibility.kueue.x-k8s.io", f"{plural}/pendingworkloads"), ns)
        if plural == "localqueues":
            items = c.pending_workloads(ns, name, None)
        else:
            items = c.pending_workloads(None, None, name)
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", 1000))
        self._send(200, {"kind": "PendingWorkloadsSummary", "apiVersion": f"visibility.kueue.x-k8s.io/{version}",
                         "metadata": {"creationTimestamp": None}, "items": items[offset: offset + limit]})

    def _watch(self, res, ns, q) -> None:
        c = self.cluster
        c._check_rbac("watch", res, ns)
        # The epoch of the connection is taken when the request arrives: a drop_watches() while it
        # waits at the gate (or right after) ends it, as a dropped connection would.
        epoch = c.watch_epoch
        c.watch_gate.wait(10)
        sel = q.get("labelSelector")
        timeout = float(q.get("timeoutSeconds", 1800))
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(ev: dict) -> None:
            data = (json.dumps(ev) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def match(obj: dict) -> bool:
            return (ns is None or obj["metadata"].get("namespace") == ns) and \
                selector_matches(sel, obj["metadata"].get("labels") or {}) and field_matches(q.get("fieldSelector"), obj)

        try:
            with c.lock:
                rv_text = q.get("resourceVersion", "")
                if rv_text in ("", "0"):
                    initial = [o for o in c.list(res, ns, sel, q.get("fieldSelector"))]
                    last = c._rv
                    pending = [{"type": "ADDED", "object": copy.deepcopy(o)} for o in initial]
                else:
                    last = int(rv_text)
                    if last < c.compacted[res]:
                        pending = [{"type": "ERROR", "object": {
                            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": f"too old resource version: {last} ({c.compacted[res] + 1})",
                            "reason": "Expired", "code": 410}}]
                        last = None
                    else:
                        pending = []
            for ev in pending:
                emit(ev)
            while last is not None and not c.stopping and c.watch_epoch == epoch:
                with c.lock:
                    if c.watch_epoch != epoch:  # dropped meanwhile: deliver nothing more
                        break
                    evs = [(rv, t, o) for rv, t, o in c.events[res] if rv > last]
                    if not evs:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        c.cond.wait(min(remaining, 0.2))
                        if c.watch_epoch != epoch:
                            break
                        evs = [(rv, t, o) for rv, t, o in c.events[res] if rv > last]
                for rv, t, o in evs:
                    last = rv
                    if match(o):
                        emit({"type": t, "object": o})
                if time.monotonic() >= deadline:
                    break
            if last is not None and q.get("allowWatchBookmarks") == "true":
                emit({"type": "BOOKMARK", "object": {"kind": RESOURCES[res][1], "apiVersion": "v1",
                                                     "metadata": {"resourceVersion": str(last)}}})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")


class FakeApiServer:
    """Serves a :class:`FakeCluster` over real HTTP on 127.0.0.1 (a random port). ``api_client()``
    gives an official ``kubernetes.client.ApiClient`` pointed at it."""

    def __init__(self, cluster: Optional[FakeCluster] = None):
        self.cluster = cluster or FakeCluster()
        handler = type("Handler", (_Handler,), {"cluster": self.cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> "FakeApiServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cluster.stopping = True
        with self.cluster.lock:
            self.cluster.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.cluster.stop_controllers()  # raises what a controller raised in its thread

    def api_client(self):
        from kubernetes import client

        cfg = client.Configuration(host=self.url)
        return client.ApiClient(cfg)
