"""The Kubernetes backend: each admitted workload runs as a ``batch/v1`` Job in its team's namespace.

Lifecycle (the service drives it from its loop; its methods run on the service's thread, the
creates of ``start_concurrency`` worker threads excepted):

- :meth:`KubernetesBackend.start` (on admission by our engine) creates the Job already running
  (``k8s_jobs.build_job``: labels, priority, the admitted flavor's nodeSelector and tolerations, as
  Kueue injects them on admission, GPU / MIG requests and limits): one request. With Volcano it is
  created suspended, its PodGroup (owned by the Job) created, then it is resumed. A Job that
  already exists with our workload-uid label (a retry, a re-admission after preemption, a restart
  before the run was recorded: ``409 AlreadyExists``) is adopted: its scheduling directives are
  updated to the new admission and it is resumed, keeping the pod-template labels the API server
  added on create (read-modify-write with ``resourceVersion``; a ``409 Conflict`` re-reads and
  retries). With ``start_concurrency`` the create runs in a worker thread and its outcome comes
  from :meth:`KubernetesBackend.poll` (``Started``, or ``Failed``).
- :meth:`KubernetesBackend.suspend` (preemption) sets ``spec.suspend=true``; the Job controller
  deletes the active Pods. Then ``status.startTime`` is cleared through the ``status``
  subresource, as Kueue does (``ResetStatus`` in ``pkg/controller/jobs/job/job_controller.go``):
  Kubernetes 1.28's Job controller does not clear it on suspend, and while it is set the API
  server refuses changes to the pod template's scheduling directives, so the next admission could
  not move the Job to another flavor. The run is reported ended once no Pod of it is left running,
  so that quota and devices are released only when the GPUs are really free; the service requeues
  it.
- :meth:`KubernetesBackend.stop` (cancel, maximum run time) deletes the Job with
  ``propagationPolicy: Background`` (Jobs deleted without it orphan their Pods).
- :meth:`KubernetesBackend.poll` reads the informers' caches (list + watch of our Jobs and Pods,
  ``k8s_informer``; resumed from resourceVersion, re-listed after ``410 Gone``) and reports, once
  each: ``Running`` (a Pod runs), ``Waiting`` (a Pod cannot start: message), ``Succeeded`` (Job
  condition ``Complete``), ``Failed`` (condition ``Failed``, with the container's exit code).
  Between two sweeps of every run (``sweep_interval``, 1 s) it looks again only at the runs whose
  Job or Pods changed since the last poll (the informers' index by our workload-uid label), so that
  a watch event costs one run's observation, not one per run tracked (BENCHMARKS.md, bench k8s).
- :meth:`KubernetesBackend.adopt` after a restart finds the Job by our uid label.
- A Job that cannot create its Pods (the Job controller's ``FailedCreate`` events: a PriorityClass
  missing from the cluster, a ResourceQuota, Pod Security) shows the event's message on the
  workload at once (``Waiting``), as do Pods that cannot start (Unschedulable, ImagePullBackOff).
- Kueue's ``waitForPodsReady`` (``k8s_podsready``): a run whose Pods are not all Ready within
  ``pods_ready_timeout`` of admission, or not Ready again within ``pods_ready_recovery_timeout``
  (a lost Node), is evicted: its Job suspended (deleted when Pods of it are on a lost Node), and
  reported ``Evicted`` (reason ``PodsReadyTimeout``, the message naming each Pod and its Node) once
  none of its Pods holds a GPU; the service requeues it with Kueue's ``requeuingStrategy`` backoff
  (:meth:`KubernetesBackend.requeuing_strategy`) and bills it until its Pods stopped running.
- Missing permissions: at start a ``SelfSubjectAccessReview`` per verb of the documented
  ClusterRole (``k8s_rbac``; :meth:`KubernetesBackend.access`, ``GET /info``); a write refused
  with a final 403 ``forbidden_attempts`` times says on the workload which verb on which resource
  the role lacks (``Waiting``), and goes on being retried (a stop is never dropped). A preemption
  whose ``status.startTime`` reset is refused (no ``update jobs/status``) goes on: the Job is
  suspended and the victim's message says what is missing.
- Nodes and PriorityClasses are followed by watches too: the Node watch tells which Pods are lost
  (and the service keeps the inventory's taints in step with it); a submission naming a
  PriorityClass the cluster no longer has is refused at once.

Why threads for watches but synchronous writes: the protocol is synchronous and polled, so the
watches run in daemon threads feeding caches that :meth:`poll` reads (level-triggered: poll derives
each run's state from the cached objects, so a dropped, repeated or re-listed event cannot mislead
it). Writes happen in the call that needs them so that a permanent error (``422 Invalid``,
``403 Forbidden``, a foreign Job of the same name) fails that call with the API server's message;
a transient one (5xx, 429, no answer) is retried with bounded backoff inside the call and then,
instead of failing the workload, again from :meth:`poll` with exponential backoff (capped at
``retry_max_delay``) for up to ``retry_budget_seconds`` (creates) or for ever (stops: a stop must
never be lost).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from ..engine.model import ClusterConfig
from ..errors import Conflict, Forbidden, GpuQueueError, ValidationError
from .base import FAILED, SUCCEEDED, RunInfo, RunStatus
from .k8s_client import KubeApiError, KubeClient, path_for
from .k8s_informer import Informer
from .k8s_podsready import PodsReadyWatch
from .k8s_rbac import forbidden_what, missing_permissions
from .k8s_status import (
    EVICTED,
    STARTED,
    WAITING,
    JobRun as _Run,
    condition,
    exit_code,
    parse_time,
    failed_create,
    finished_status,
    pod_observations,
    user_error,
)
from .k8s_jobs import (
    SELECTOR,
    UID_LABEL,
    JobRequest,
    build_job,
    build_podgroup,
    scheduling_directives,
    set_scheduling_directives,
)

log = logging.getLogger(__name__)

JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
EVENTS = ("", "v1", "events")
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
NODES = ("", "v1", "nodes")
FAILED_CREATE = "involvedObject.kind=Job,reason=FailedCreate"

class KubernetesBackend:
    """See the module docstring. (Over 400 lines, and the module over 800: one state machine per
    run, create / resume / suspend / delete with their retries and refusals, and its observation,
    read as one; what it reads from the API server's objects is in ``k8s_status``, the manifests
    in ``k8s_jobs``, waitForPodsReady in ``k8s_podsready``, the access check in ``k8s_rbac``.)

    ``client``: a :class:`KubeClient` or a ``kubernetes.client.ApiClient`` (wrapped).
    ``config``: the queue configuration (ResourceFlavors, priority classes). ``image``: the
    container image of Jobs built from the submit form. ``namespaces``: team namespace (the
    LocalQueue's) → cluster namespace where its Jobs go (default: the same name).
    ``pod_template``: a partial PodSpec merged into form-built Jobs (``k8s_jobs.apply_pod_template``:
    volumes, the main container's volumeMounts, serviceAccountName...). ``volcano``:
    gang scheduling with Volcano (``schedulerName: volcano`` + a PodGroup with ``minMember``).
    ``pods_ready_timeout`` / ``pods_ready_recovery_timeout`` (seconds; None: the timeout):
    waitForPodsReady's (``k8s_podsready``; Kueue's ``waitForPodsReady.timeout`` defaults to 5
    minutes too). ``requeue_backoff_base`` / ``requeue_backoff_max`` (seconds) /
    ``requeue_backoff_limit`` (evictions; None: no limit): its requeuingStrategy, applied by the
    service. ``ttl_seconds_after_finished``: of created Jobs (None: none). ``forbidden_attempts``:
    403 refusals of a write before the workload says so. ``check_access``: the start-up
    SelfSubjectAccessReviews.
    ``start_concurrency``: with N > 0, :meth:`start` returns at once and the Job is created by one
    of N worker threads (the service's loop does not wait for the API server; N creates are in
    flight together); the outcome comes back from :meth:`poll`: ``Started`` (the service records
    the run only then, so that a restart before it creates the Job again, idempotently: a Job with
    our uid label is adopted), or ``Failed`` with the API server's message. 0: :meth:`start`
    creates the Job itself and raises its errors.
    ``start_informers``: False only in unit tests that drive :meth:`resync` themselves.
    """

    # What the service asks of a backend (service.py reads these with getattr and defaults).
    reports_running = True  # state Admitted until a Pod runs ("Running" from poll)
    runs_manifests = True  # a manifest submission runs as the manifest itself
    local_commands = False  # argv runs in a container image: not looked up on the server's PATH
    delegates_admission = False
    resume_on_adopt = True  # Kueue delegation: False (Kueue owns spec.suspend)

    def __init__(self, client, *, config: Optional[ClusterConfig] = None, image: str = "python:3.12-slim",
                 namespaces: Optional[dict[str, str]] = None, pod_template: Optional[dict] = None,
                 volcano: bool = False,
                 volcano_queue: Optional[str] = None, retry_budget_seconds: float = 600.0,
                 retry_max_delay: float = 60.0, sync_timeout: float = 10.0, start_informers: bool = True,
                 pods_ready_timeout: float = 300.0, start_concurrency: int = 0,
                 pods_ready_recovery_timeout: Optional[float] = None,
                 ttl_seconds_after_finished: Optional[int] = 86400, forbidden_attempts: int = 3,
                 check_access: bool = True, requeue_backoff_base: float = 60.0,
                 requeue_backoff_max: float = 3600.0, requeue_backoff_limit: Optional[int] = 5,
                 clock: Callable[[], float] = time.time):
        self.client = client if isinstance(client, KubeClient) else KubeClient(client)
        self.config = config or ClusterConfig()
        self.image = image
        self.namespaces = dict(namespaces or {})
        self.pod_template = dict(pod_template or {})
        self.volcano = volcano
        self.volcano_queue = volcano_queue
        self.retry_budget_seconds = retry_budget_seconds
        self.retry_max_delay = retry_max_delay
        self.sync_timeout = sync_timeout
        self.clock = clock
        self.pods_ready_timeout = pods_ready_timeout
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.forbidden_attempts = max(1, int(forbidden_attempts))
        self.requeue_backoff_base = float(requeue_backoff_base)
        self.requeue_backoff_max = float(requeue_backoff_max)
        self.requeue_backoff_limit = requeue_backoff_limit
        self.check_access = check_access
        # The start-up access check (k8s_rbac): None until it has answered.
        self.missing_permissions: Optional[list[str]] = None
        self.access_error: Optional[str] = None
        self.access_done = threading.Event()  # the check has answered, failed, or is off
        if not check_access:
            self.access_done.set()
        self._pool = (ThreadPoolExecutor(max_workers=int(start_concurrency), thread_name_prefix="k8s-start")
                      if start_concurrency and start_concurrency > 0 else None)
        self._started: "queue.SimpleQueue[tuple[_Run, Optional[BaseException]]]" = queue.SimpleQueue()
        self._runs: dict[str, _Run] = {}
        # Indexed by our workload-uid label: poll looks again only at the runs whose Job or Pods
        # moved (and at every run once per sweep_interval).
        self.jobs = Informer(self.client, path_for(*JOBS), SELECTOR, name="jobs", index_label=UID_LABEL)
        self.pods = Informer(self.client, path_for(*PODS), SELECTOR, name="pods", index_label=UID_LABEL)
        # The Job controller's FailedCreate events (events carry no labels of ours: field-selected).
        self.events = Informer(self.client, path_for(*EVENTS), None, field_selector=FAILED_CREATE, name="events")
        # Nodes: a Pod on a Node that is not Ready does not run (waitForPodsReady, eviction).
        self.nodes = Informer(self.client, path_for(*NODES), None, name="nodes")
        # PriorityClasses: a submission naming one the cluster lacks is refused (dry_run).
        self.priority_classes = Informer(self.client, path_for(*PRIORITY_CLASSES), None, name="priorityclasses")
        self._informers = [self.jobs, self.pods, self.events, self.nodes, self.priority_classes]
        self.pods_ready = PodsReadyWatch(self.nodes, pods_ready_timeout, pods_ready_recovery_timeout)
        self._node_map: Optional[dict] = None
        for inf in (self.jobs, self.pods):
            inf.on_change = self._changed
        self.events.on_change = self._events_changed
        self._last_sweep = -float("inf")  # when poll last looked at every run (clock seconds)
        self._sweep_due = True  # a Node or a FailedCreate event changed: look at every run soon
        self._touched: set[str] = set()  # runs to look at in the next poll (a write done, a start)
        self._seen_uids: set[str] = set()  # the runs the last poll knew
        self.nodes_version = 0  # counts the Node watch's changes (the service follows them)
        self.nodes.on_change = self._nodes_changed
        self._gating = [self.jobs, self.pods]  # poll reports nothing until these have listed
        self._wakeup: Optional[Callable[[], None]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._wake_pending = threading.Event()
        if start_informers:
            self.start_informers()

    # -- plumbing -----------------------------------------------------------------------------------
    def set_wakeup(self, callback: Optional[Callable[[], None]]) -> None:
        """Call ``callback()`` on the running asyncio loop's thread when a watched object changes
        (a Pod runs, a Job completes), so that the service polls at once rather than at its next
        periodic tick. Wake-ups are coalesced: at most one is queued on the loop at a time. Must
        be called on the loop's thread (the service does it in ``start``); None turns it off."""
        try:
            self._loop = asyncio.get_running_loop() if callback is not None else None
        except RuntimeError:
            self._loop = None
        self._wakeup = callback

    def _changed(self) -> None:
        """An informer's cache changed (called on its thread)."""
        loop, cb = self._loop, self._wakeup
        if loop is None or cb is None or self._wake_pending.is_set():
            return
        self._wake_pending.set()

        def fire() -> None:
            self._wake_pending.clear()
            cb()
        try:
            loop.call_soon_threadsafe(fire)
        except RuntimeError:  # the loop is closed
            self._wake_pending.clear()

    def _nodes_changed(self) -> None:
        self.nodes_version += 1
        self._sweep_due = True  # which Pods are lost depends on every Node
        self._changed()

    def _events_changed(self) -> None:
        self._sweep_due = True  # a FailedCreate event names its Job, not our label
        self._changed()

    def start_informers(self) -> None:
        for inf in self._informers:
            inf.start()
        if self.check_access and self.missing_permissions is None:
            threading.Thread(target=self._check_access, name="k8s-access-check", daemon=True).start()

    access_kinds: tuple = ("kubernetes",)

    def _check_access(self) -> None:
        """The start-up check (``k8s_rbac.missing_permissions``): what the service account may not
        do is logged (WARNING, naming each verb and resource) and kept for ``GET /info``."""
        kinds = self.access_kinds + (("volcano",) if self.volcano else ())
        try:
            missing = missing_permissions(self.client, kinds)
        except KubeApiError as err:
            self.access_error = f"cannot check the service account's permissions: {err.field_message()}"
            log.warning("kubernetes: %s", self.access_error)
            self.access_done.set()
            return
        self.missing_permissions = missing
        if missing:
            log.warning("kubernetes: the queue's service account lacks %d permission(s) of the documented "
                        "ClusterRole (docs/kubernetes.md, RBAC): %s", len(missing), ", ".join(missing))
        else:
            log.info("kubernetes: the service account has every permission of the documented ClusterRole")
        self.access_done.set()

    def access(self) -> dict:
        """The start-up access check's outcome, for ``GET /info`` (``clusterAccess``): ``checked``,
        ``missing`` (``"<verb> <group>/<resource>"``), ``error`` (the API server could not say)."""
        return {"checked": self.missing_permissions is not None, "missing": list(self.missing_permissions or []),
                "error": self.access_error}

    @property
    def starts_async(self) -> bool:
        """True when :meth:`start` hands the Job's creation to a worker (``start_concurrency``)."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the watch threads (they are daemons; this only makes them end sooner) and the
        start workers (starts in flight finish; their Jobs are adopted at the next start)."""
        for inf in self._informers:
            inf.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def namespace_for(self, team_namespace: str) -> str:
        return self.namespaces.get(team_namespace, team_namespace)

    def _job_path(self, ns: str, name: Optional[str] = None) -> str:
        return path_for(*JOBS, namespace=ns, name=name)

    def _run_info(self, run: _Run) -> RunInfo:
        """pid -1: no local process (pid 0 marks a notebook lease, backends/lease.py); ``exit_path``
        names the Job (``kubernetes:jobs/<namespace>/<name>``); the Job is found by label anyway."""
        return RunInfo(pid=-1, pgid=-1, start_ticks=0, log_path="",
                       exit_path=f"kubernetes:jobs/{run.namespace}/{run.name}", started_at=self.clock())

    def _request(self, launch) -> JobRequest:
        req = JobRequest.from_launch(launch)
        req.namespace = self.namespace_for(req.namespace)
        return req

    def _desired_job(self, req: JobRequest, suspend: bool = True) -> dict:
        return build_job(req, self.config, image=self.image, suspend=suspend, volcano=self.volcano,
                         pod_template=self.pod_template, ttl_seconds_after_finished=self.ttl_seconds_after_finished)

    def _job_to_create(self, req: JobRequest) -> dict:
        """The Job as created on admission: already running with the admission's directives (one
        request), except with Volcano, whose PodGroup must exist, owned by the Job, before the
        Job's Pods are created (so: created suspended, PodGroup, then resumed)."""
        return self._desired_job(req, suspend=self.volcano)

    # -- start --------------------------------------------------------------------------------------
    def start(self, spec) -> RunInfo:
        """Create (or adopt) the workload's Job and unsuspend it. Raises ValidationError (422, or a
        manifest we cannot run), Forbidden (403), Conflict (a Job of that name that is not this
        workload's), ValidationError naming ``metadata.namespace`` (no such namespace), each with
        the API server's message. Transient API errors do not raise: the start is retried from
        :meth:`poll`."""
        req = self._request(spec)
        job = self._job_to_create(req)  # ValidationError before anything is sent
        run = _Run(uid=req.uid, namespace=req.namespace, name=req.name, req=req, since=self.clock(),
                   floor=self.clock())
        self._runs[req.uid] = run
        if self._pool is not None:
            run.op, run.op_first, run.inflight = "start", self.clock(), True
            self._pool.submit(self._start_in_worker, run, job)
            return self._run_info(run)
        try:
            self._create_and_resume(run, job)
        except KubeApiError as err:
            if err.retryable:
                self._defer(run, "start", err)
            else:
                del self._runs[req.uid]
                raise self._start_error(err, run) from None
        except GpuQueueError:
            del self._runs[req.uid]
            raise
        return self._run_info(run)

    def _start_in_worker(self, run: _Run, job: dict) -> None:
        """A worker thread's start: create (or adopt) and resume; the outcome is queued for
        :meth:`poll` (which alone changes the run's state), and the service's loop woken."""
        err: Optional[BaseException] = None
        try:
            self._create_and_resume(run, job)
        except BaseException as exc:  # noqa: BLE001 - handed to poll, which reports it
            err = exc
        self._started.put((run, err))
        self._changed()

    def _started_outcomes(self, now: float) -> list[RunStatus]:
        """Outcomes of the starts done by workers since the last poll: ``Started`` (with the
        run, for the service to record), or ``Failed`` for a permanent error; a transient one is
        retried from poll like any deferred start. A stop or preemption asked for meanwhile is
        carried out now that the Job exists."""
        out: list[RunStatus] = []
        while True:
            try:
                run, err = self._started.get_nowait()
            except queue.Empty:
                return out
            run.inflight = False
            if self._runs.get(run.uid) is not run:
                continue
            self._touched.add(run.uid)
            if err is None:
                run.op = None
                out.append(RunStatus(run.uid, STARTED, None, now, "", details={"run": self._run_info(run).to_json()}))
                if run.mode == "deleting":
                    self._try(run, "delete")
                elif run.mode == "suspending":
                    self._try(run, "suspend")
            elif isinstance(err, KubeApiError) and err.retryable:
                self._defer(run, "start", err)
            else:
                del self._runs[run.uid]
                if isinstance(err, KubeApiError):
                    msg = str(self._start_error(err, run))
                elif isinstance(err, GpuQueueError):
                    msg = f"could not start: {err.message}"
                else:
                    log.exception("kubernetes: starting Job %s/%s failed", run.namespace, run.name, exc_info=err)
                    msg = f"could not start: {err}"
                out.append(RunStatus(run.uid, FAILED, None, now, run.reason if run.mode == "deleting" else msg))

    def dry_run(self, uid: str, workload: dict) -> None:
        """Validate the workload's Job with the API server before the submission is acknowledged
        (``POST ...?dryRun=All``: admission webhooks and validation run, nothing is stored).
        Raises ValidationError (422, with the field of the first cause), Forbidden (403), Conflict
        (a Job of that name exists), ValidationError naming ``metadata.namespace`` (no such
        namespace). An unreachable or failing API server does not block the submission (the Job is
        created on admission, with retries)."""
        from .base import LaunchSpec

        launch = LaunchSpec(uid=uid, key=f"{workload['namespace']}/{workload['name']}", argv=[], cwd="",
                            workload={**workload, "admission": None})
        req = self._request(launch)
        job = self._desired_job(req)
        self._check_priority_class(job)
        try:
            self.client.create(self._job_path(req.namespace), job, query=[("dryRun", "All")], attempts=1)
        except KubeApiError as err:
            if err.retryable:
                log.warning("kubernetes: dry run of Job %s/%s failed (%s); accepting the submission",
                            req.namespace, req.name, err)
                return
            if err.status == 409:
                raise Conflict(f"a Job named {req.name} already exists in namespace {req.namespace}",
                               "name") from None
            raise user_error(err, f"the API server rejects Job {req.namespace}/{req.name}") from None

    def _check_priority_class(self, job: dict) -> None:
        """A Job's dry run does not run Pod admission, so a ``priorityClassName`` missing from the
        cluster would only show when the Job controller fails to create its Pods. Look it up
        in the PriorityClass watch's cache (a class deleted is refused at once); while that watch has
        not listed (or the role lacks ``list/watch priorityclasses``) with ``GET
        priorityclasses/{name}``. Raises ValidationError(field="priorityClass") when the cluster
        has no such PriorityClass; an API server that cannot answer or forbids the read does not
        block the submission."""
        name = ((job.get("spec") or {}).get("template") or {}).get("spec", {}).get("priorityClassName")
        if not name:
            return
        if self.priority_classes.synced.is_set():
            if self.priority_classes.get("", name) is not None:
                return
            raise ValidationError(f"the cluster has no PriorityClass named {name!r} (the Job's Pods could "
                                  f"not be created); ask an admin to create it", "priorityClass")
        try:
            self.client.get(path_for(*PRIORITY_CLASSES, name=name), attempts=1)
        except KubeApiError as err:
            if err.status == 404:
                raise ValidationError(f"the cluster has no PriorityClass named {name!r} (the Job's Pods could "
                                      f"not be created); ask an admin to create it", "priorityClass") from None
            log.info("kubernetes: cannot look up PriorityClass %s (%s); accepting the submission", name, err)
            return

    def _start_error(self, err: KubeApiError, run: _Run) -> GpuQueueError:
        return user_error(err, f"creating Job {run.namespace}/{run.name}")

    def _create(self, run: _Run, job: dict) -> tuple[dict, bool]:
        """POST the Job; on 409 AlreadyExists read it and adopt it if it carries our uid.
        Returns the Job and whether this call created it."""
        try:
            return self.client.create(self._job_path(run.namespace), job), True
        except KubeApiError as err:
            if err.status != 409:
                raise
        existing = self.client.get(self._job_path(run.namespace, run.name))
        owner = ((existing.get("metadata") or {}).get("labels") or {}).get(UID_LABEL)
        if owner != run.uid:
            raise Conflict(f"a Job named {run.name} already exists in namespace {run.namespace} and is not this "
                           f"workload's ({UID_LABEL}={owner!r}); choose another name", "metadata.name")
        log.info("kubernetes: Job %s/%s already exists with our uid: adopting it", run.namespace, run.name)
        return existing, False

    def _create_and_resume(self, run: _Run, job: dict) -> None:
        current, created = self._create(run, job)
        if self.volcano:
            self._ensure_podgroup(run, job, current)
        if condition(current, "Complete") or condition(current, "Failed"):
            return  # finished already (adopted after a restart): poll reports it
        if created and not (current.get("spec") or {}).get("suspend"):
            run.resumed_at = self.clock()
            return
        self._resume_job(run, job, current)

    def _resume_job(self, run: _Run, desired: Optional[dict], current: Optional[dict] = None,
                    attempts: int = 5) -> None:
        """Unsuspend the run's Job with ``desired``'s scheduling directives (None: keep the Job's),
        starting from ``current`` (the Job as last read; None: GET it). A suspended Job whose
        ``status.startTime`` is still set (Kubernetes 1.28 keeps it on suspend) first has it
        cleared through the ``status`` subresource, as Kueue does, or the API server would refuse
        the new directives. ``409 Conflict`` re-reads and retries; a Job that is gone is left to
        :meth:`poll`."""
        path = self._job_path(run.namespace, run.name)
        for i in range(attempts):
            try:
                cur = current if current is not None and i == 0 else self.client.get(path)
                if (cur.get("spec") or {}).get("suspend") and (cur.get("status") or {}).get("startTime"):
                    try:
                        cleared = copy.deepcopy(cur)
                        del cleared["status"]["startTime"]
                        cur = self.client.replace(f"{path}/status", cleared)
                    except KubeApiError as err:
                        # Without `update jobs/status` a Job resumes with its scheduling directives
                        # as they are (the Job controller resets startTime itself on resume).
                        if err.status != 403 or err.retryable or desired is None or \
                                self._directives_change(cur, desired):
                            raise
                if not self._resume(cur, desired):
                    return
                self.client.replace(path, cur)
                run.resumed_at = self.clock()
                return
            except KubeApiError as err:
                if err.status == 404:
                    return
                if err.status == 409 and i < attempts - 1:
                    log.info("kubernetes: Job %s/%s changed under us (409 Conflict); re-reading", run.namespace,
                             run.name)
                    continue
                raise

    def _reset_start_time(self, run: _Run) -> None:
        """``status.startTime = nil`` on a suspended Job, through the ``status`` subresource (Kueue's
        ``ResetStatus``); nothing when the Job runs or has no start time."""
        def mutate(cur: dict) -> bool:
            if not (cur.get("spec") or {}).get("suspend") or not (cur.get("status") or {}).get("startTime"):
                return False
            del cur["status"]["startTime"]
            return True
        self._update_job(run, mutate, subresource="status")

    @staticmethod
    def _directives_change(cur: dict, desired: dict) -> bool:
        have, want = scheduling_directives(cur), scheduling_directives(desired)
        want["labels"] = {**have["labels"], **want["labels"]}
        want["annotations"] = {**have["annotations"], **want["annotations"]}
        return have != want

    @staticmethod
    def _resume(cur: dict, desired: Optional[dict]) -> bool:
        """Mutate ``cur`` to run with ``desired``'s scheduling directives; False if nothing to do.
        Template labels and annotations are merged into the Job's: the API server added
        ``controller-uid``, ``job-name`` and their ``batch.kubernetes.io/`` forms on create, and
        ``spec.selector`` must keep matching them (an update that drops them is refused, 422)."""
        spec = cur.setdefault("spec", {})
        if not spec.get("suspend"):
            return False
        if desired is not None and not (cur.get("status") or {}).get("startTime"):
            have = scheduling_directives(cur)
            want = scheduling_directives(desired)
            want["labels"] = {**have["labels"], **want["labels"]}
            want["annotations"] = {**have["annotations"], **want["annotations"]}
            if have != want:
                set_scheduling_directives(cur, want)
        spec["suspend"] = False
        return True

    def _update_job(self, run: _Run, mutate: Callable[[dict], bool], attempts: int = 5,
                    subresource: Optional[str] = None) -> Optional[dict]:
        """Read-modify-write with optimistic concurrency: GET, ``mutate`` (returns False when no
        change is needed), PUT with the read resourceVersion (to ``subresource``, e.g.
        ``status``, when given); ``409 Conflict`` re-reads and retries (at most ``attempts``
        times). 404 → None (the Job is gone)."""
        path = self._job_path(run.namespace, run.name)
        for i in range(attempts):
            try:
                cur = self.client.get(path)
            except KubeApiError as err:
                if err.status == 404:
                    return None
                raise
            if not mutate(cur):
                return cur
            try:
                return self.client.replace(f"{path}/{subresource}" if subresource else path, cur)
            except KubeApiError as err:
                if err.status == 409 and i < attempts - 1:
                    log.info("kubernetes: Job %s/%s changed under us (409 Conflict); re-reading", run.namespace, run.name)
                    continue
                if err.status == 404:
                    return None
                raise
        return None  # pragma: no cover

    def _ensure_podgroup(self, run: _Run, job: dict, current: dict) -> None:
        job_uid = (current.get("metadata") or {}).get("uid") or ""
        pg = build_podgroup(run.req, current if current.get("spec") else job, job_uid, self.volcano_queue)
        try:
            self.client.create(path_for(*PODGROUPS, namespace=run.namespace), pg)
        except KubeApiError as err:
            if err.status != 409:
                raise

    # -- stop / suspend -----------------------------------------------------------------------------
    def stop(self, uid: str, reason: str, grace_seconds: float = 10.0) -> None:
        """Delete the run's Job (propagationPolicy Background). Returns at once; the run is reported
        Failed with ``reason`` once the Job and its Pods are gone."""
        run = self._runs.get(uid)
        if run is None:
            return
        run.mode, run.reason = "deleting", reason or "stopped"
        if run.inflight:
            return  # deleted once its start is done (_started_outcomes)
        self._try(run, "delete")

    def suspend(self, uid: str, reason: str, grace_seconds: float = 10.0) -> None:
        """Preemption, as Kueue does it: ``spec.suspend=true``; the Job controller deletes the active
        Pods. The run is reported ended (Failed, ``reason``) once none of its Pods runs; the Job
        stays, suspended, for the next admission."""
        run = self._runs.get(uid)
        if run is None:
            return
        if run.mode == "deleting":
            return
        run.mode, run.reason = "suspending", reason or "preempted"
        if run.inflight:
            return  # suspended once its start is done (_started_outcomes)
        self._try(run, "suspend")

    def _try(self, run: _Run, op: str) -> None:
        self._touched.add(run.uid)
        try:
            self._do(run, op)
            run.op = None
        except KubeApiError as err:
            self._defer(run, op, err)

    def _do(self, run: _Run, op: str) -> None:
        if op == "delete":
            try:
                self.client.delete(self._job_path(run.namespace, run.name), propagation_policy="Background")
            except KubeApiError as err:
                if err.status != 404:
                    raise
        elif op == "suspend":
            def mutate(cur: dict) -> bool:
                if cur.get("spec", {}).get("suspend"):
                    return False
                cur["spec"]["suspend"] = True
                return True
            self._update_job(run, mutate)
            try:
                self._reset_start_time(run)  # Kueue's ResetStatus: the next admission may change flavor
            except KubeApiError as err:
                if err.status != 403 or err.retryable:
                    raise
                # The Job is suspended (its Pods go, the preemption goes on); only a re-admission
                # onto another flavor needs the start time cleared (it then fails, saying why).
                what = forbidden_what(err) or "update batch/jobs/status"
                msg = (f"{run.reason}; the queue's service account may not {what} (docs/kubernetes.md, RBAC), "
                       f"so Job {run.namespace}/{run.name} keeps status.startTime and cannot move to another "
                       f"flavor: {err.message}")
                log.warning("kubernetes: %s", msg)
                run.notices.append(msg)
        elif op == "start":
            self._create_and_resume(run, self._job_to_create(run.req))
        elif op == "resume":
            self._resume_job(run, None)

    def _defer(self, run: _Run, op: str, err: KubeApiError) -> None:
        now = self.clock()
        if run.op != op:
            run.op, run.op_attempts, run.op_first, run.forbidden = op, 0, now, 0
        run.op_attempts += 1
        run.forbidden = run.forbidden + 1 if err.status == 403 and not err.retryable else 0
        if run.forbidden == self.forbidden_attempts:
            # A refused write is not retried in silence: the workload says which verb on which
            # resource the role lacks. The write goes on being retried (a stop is never dropped;
            # the quota stays held while the Job may still run: the truth).
            what = forbidden_what(err) or f"{op} batch/jobs"
            msg = (f"the queue's service account may not {what} (docs/kubernetes.md, RBAC): the {op} of Job "
                   f"{run.namespace}/{run.name} was refused {run.forbidden} times and is retried every "
                   f"{self.retry_max_delay:.0f} s: {err.message}")
            log.error("kubernetes: %s", msg)
            run.notices.append(msg)
        run.last_error = err.field_message()
        delay = min(self.retry_max_delay, 1.0 * 2 ** (run.op_attempts - 1))
        run.op_next = now + delay
        log.warning("kubernetes: %s of Job %s/%s failed (%s); retrying in %.0f s", op, run.namespace, run.name,
                    err, delay)

    def _retry_due(self, now: float) -> list[RunStatus]:
        out = []
        for run in list(self._runs.values()):
            if run.op is None or run.inflight or now < run.op_next:
                continue
            op = run.op
            self._touched.add(run.uid)
            try:
                self._do(run, op)
                run.op = None
                if op == "start":  # the run goes on record now (start_concurrency: not before)
                    out.append(RunStatus(run.uid, STARTED, None, now, "",
                                         details={"run": self._run_info(run).to_json()}))
            except KubeApiError as err:
                if err.retryable and (op != "start" or now - run.op_first < self.retry_budget_seconds):
                    self._defer(run, op, err)
                    continue
                if op != "start":
                    self._defer(run, op, err)  # never drop a stop; keep trying (and logging)
                    continue
                del self._runs[run.uid]
                out.append(RunStatus(run.uid, FAILED, None, now, str(self._start_error(err, run))))
            except GpuQueueError as err:
                del self._runs[run.uid]
                out.append(RunStatus(run.uid, FAILED, None, now, f"could not start: {err.message}"))
        return out

    # -- observing ----------------------------------------------------------------------------------
    # Every run is looked at again at least this often (seconds): what depends on time (the
    # PodsReady timeout, a Job not seen 30 s after its start) and what no label of ours points to.
    sweep_interval = 1.0
    # Between sweeps, poll looks only at the runs whose Job or Pods changed (the Kueue backend,
    # whose runs also follow Kueue's Workloads and positions, looks at every run every time).
    incremental = True

    def _to_observe(self, now: float) -> list[str]:
        """The runs poll looks at now: all of them at a sweep (every ``sweep_interval``, after a
        list of Jobs or Pods, soon after a Node or FailedCreate event changed), else those whose
        Job or Pods were added, changed or deleted since the last poll, those it did not know
        (new or adopted), and those a write or a start was done for. Level-triggered either way:
        each run looked at is judged from the caches as they are."""
        changed_jobs, changed_pods = self.jobs.take_changed(), self.pods.take_changed()
        touched, self._touched = self._touched, set()
        runs = self._runs
        sweep = (not self.incremental or changed_jobs is None or changed_pods is None
                 or now - self._last_sweep >= self.sweep_interval
                 or (self._sweep_due and now - self._last_sweep >= self.sweep_interval / 4))
        if sweep:
            self._last_sweep, self._sweep_due = now, False
            uids = list(runs)
        else:
            new = runs.keys() - self._seen_uids
            uids = [u for u in (changed_jobs | changed_pods | touched | new) if u in runs]
        self._seen_uids = set(runs)
        return uids

    def _observe(self, run: _Run, job: Optional[dict], pods: list[dict], now: float) -> list[RunStatus]:
        """What to report about one run (base: Job and Pods; the Kueue backend adds Workloads)."""
        if run.mode == "deleting":
            if job is None and not self._holding(pods) and run.op is None:
                return [RunStatus(run.uid, FAILED, exit_code(pods), now, run.reason)]
            return []
        if job is None and run.mode == "suspending" and not self._holding(pods):
            return [RunStatus(run.uid, FAILED, None, now, run.reason)]  # nothing of it runs
        if run.mode == "evicting":
            return self._evicted(run, job, pods, now)
        if job is None:
            last = self.jobs.last_state(run.namespace, run.name)
            if last is not None and ((last.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) == run.uid:
                fin = self._finished(run, last, pods, now)  # finished, then deleted (ttlSecondsAfterFinished)
                if fin is not None:
                    return [fin]
            if run.seen or now - run.since > 30:
                if not run.seen and self._job_exists(run):
                    return []
                return [RunStatus(run.uid, FAILED, exit_code(pods), now,
                                  f"Job {run.namespace}/{run.name} was deleted outside jupyter-gpuqueue")]
            return []
        run.seen = True
        fin = self._finished(run, job, pods, now)
        if fin is not None:
            return [fin]
        if run.mode == "suspending":
            if job.get("spec", {}).get("suspend") and not self._holding(pods) and run.op is None:
                return [RunStatus(run.uid, FAILED, None, now, run.reason)]
            return []
        out = []
        if not pods and not (job.get("spec") or {}).get("suspend"):
            out = self._pod_creation_observations(run, job, now)
        else:
            out = self._pod_observations(run, pods, now)
        if not self.delegates_admission and not (job.get("spec") or {}).get("suspend"):
            self._wait_for_pods_ready(run, job, pods, now)
        return out

    def _holding(self, pods: list[dict]) -> list[dict]:
        return self.pods_ready.holding(pods)

    def _lost(self, pod: dict) -> bool:
        return self.pods_ready.lost(pod)

    def _wait_for_pods_ready(self, run: _Run, job: dict, pods: list[dict], now: float) -> None:
        """Kueue's ``waitForPodsReady`` (``k8s_podsready``): past its timeout the run is evicted:
        its Job suspended, or deleted when Pods of it are on a lost Node."""
        ev = failed_create(self.events.snapshot(), job) if not pods else None
        if self._node_map is None:  # once per poll
            self._node_map = self.pods_ready.node_map()
        op = self.pods_ready.check(run, job, pods, now, ev, self._node_map)
        if op is not None:
            log.warning("kubernetes: evicting %s/%s: %s", run.namespace, run.name, run.reason)
            self._try(run, op)

    def _evicted(self, run: _Run, job: Optional[dict], pods: list[dict], now: float) -> list[RunStatus]:
        return self.pods_ready.evicted(run, job, pods, now)

    def _finished(self, run: _Run, job: dict, pods: list[dict], now: float) -> Optional[RunStatus]:
        """The Job's outcome (``k8s_status.finished_status``). A Pod of it deleted by someone else
        (seen with a ``deletionTimestamp`` while the run was ours to run) makes a failure say so
        ("its Pod … was deleted"), ended at its container's ``finishedAt``; and no outcome is
        reported while a Pod of the run still exists terminating, so that its GPUs are given to
        no one before the Pod object is gone."""
        # Pods of it seen before and gone since: their last state (the informer's tombstone),
        # which the caches may have skipped between two polls (terminated, then deleted).
        names = {(p.get("metadata") or {}).get("name") for p in pods}
        gone = [t for t in (self.pods.last_state(run.namespace, n) for n in run.pod_names - names) if t is not None]
        run.pod_names |= names
        pods = pods + [t for t in gone if ((t.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) == run.uid]
        failed = condition(job, "Failed")
        failed_at = parse_time((failed or {}).get("lastTransitionTime"))
        if run.mode == "active" and (failed or {}).get("reason") != "DeadlineExceeded":
            for p in pods:
                md = p.get("metadata") or {}
                # asked for before the Job failed (the Job controller deletes the other Pods after)
                asked = (parse_time(md.get("deletionTimestamp")) or 0.0) - float(md.get("deletionGracePeriodSeconds") or 0)
                if md.get("deletionTimestamp") and md.get("name") not in run.deleted_pods and (
                        failed_at is None or asked <= failed_at):
                    run.deleted_pods.append(md.get("name"))
        for p in pods:
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                end = parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                if end is not None:
                    run.pod_finished_at = max(run.pod_finished_at or 0.0, end)
        code = exit_code(pods)
        run.pod_exit_code = code if code is not None else run.pod_exit_code
        fin = finished_status(run, job, pods, now)
        if fin is None or fin.state != FAILED or not run.deleted_pods:
            return fin
        if any((p.get("metadata") or {}).get("name") in run.deleted_pods for p in pods if p not in gone):
            return None  # the deleted Pod is still there: it may hold its GPUs
        if fin.exit_code is None:  # the Pod is gone: its exit code as last seen
            fin.exit_code = run.pod_exit_code
        fin.message = (f"its Pod {', '.join(run.deleted_pods)} was deleted"
                       + (f" (exit code {fin.exit_code})" if fin.exit_code is not None else "") + f"; {fin.message}")
        if run.pod_finished_at:
            fin.finished_at = max(run.floor, run.pod_finished_at)
        return fin

    def _pod_observations(self, run: _Run, pods: list[dict], now: float) -> list[RunStatus]:
        return pod_observations(run, pods, now)

    def _pod_creation_observations(self, run: _Run, job: dict, now: float) -> list[RunStatus]:
        """A resumed Job with no Pod: the Job controller's FailedCreate reason, shown once per
        message (``Waiting``); past ``pods_ready_timeout`` the workload is evicted
        (:meth:`_wait_for_pods_ready`), which gives its quota back."""
        ev = failed_create(self.events.snapshot(), job)
        out = []
        msg = f"the Job cannot create its Pods: FailedCreate: {ev.get('message') or ''}".rstrip(": ") if ev else ""
        if ev is not None and f"failedcreate:{msg}" not in run.reported:
            run.reported.add(f"failedcreate:{msg}")
            out.append(RunStatus(run.uid, WAITING, None, now, msg))
        return out

    def _job_exists(self, run: _Run) -> bool:
        try:
            self.client.get(self._job_path(run.namespace, run.name), attempts=1)
            return True
        except KubeApiError as err:
            return err.status != 404

    def poll(self) -> list[RunStatus]:
        """Reports since the last poll: ``Succeeded``/``Failed`` (final: the run is no longer
        tracked), and ``Running`` / ``Waiting`` (informational, state name in ``RunStatus.state``,
        the time in ``finished_at``). Nothing until the informers have listed once."""
        now = self.clock()
        out = self._started_outcomes(now)
        out += self._retry_due(now)
        if not all(inf.synced.is_set() for inf in self._gating):
            # (events only add messages, nodes and priority classes only refine: a role without
            # them must not stall the queue)
            return out
        self._node_map = None
        for run in list(self._runs.values()):
            while run.notices:
                out.append(RunStatus(run.uid, WAITING, None, now, run.notices.pop(0)))
        for uid in self._to_observe(now):
            run = self._runs.get(uid)
            if run is None or run.op == "start":
                continue
            job = self.jobs.get(run.namespace, run.name)
            if job is not None and ((job.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) != uid:
                job = None
            for st in self._observe(run, job, self.pods.by_label(uid), now):
                out.append(st)
                if st.state in (SUCCEEDED, FAILED, EVICTED):
                    self._runs.pop(uid, None)
        return out

    # -- restart ------------------------------------------------------------------------------------
    def _find_job(self, uid: str) -> Optional[dict]:
        if self.jobs.wait_synced(self.sync_timeout):
            for j in self.jobs.snapshot():
                if ((j.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) == uid:
                    return j
            return None
        items, _ = self.client.list(path_for(*JOBS), f"{SELECTOR},{UID_LABEL}={uid}")
        return items[0] if items else None

    def adopt(self, uid: str, info: RunInfo) -> bool:
        """After a restart: True (and tracked again) if a Job with our uid label exists, whatever
        its state (a finished one is reported by the next poll). Found by label, across namespaces."""
        try:
            job = self._find_job(uid)
        except KubeApiError as err:
            # The API server cannot be asked now: keep tracking the run (its quota stays held);
            # once the watches have listed, poll() finds its Job or reports it gone.
            where = (info.exit_path.split("jobs/", 1)[-1] if info and "jobs/" in info.exit_path else "").split("/")
            if len(where) != 2:
                raise
            log.warning("kubernetes: cannot look up the Job of %s (%s); adopting it as %s/%s", uid, err, *where)
            self._runs[uid] = _Run(uid=uid, namespace=where[0], name=where[1], since=self.clock())
            return True
        if job is None:
            return False
        meta = job["metadata"]
        run = _Run(uid=uid, namespace=meta["namespace"], name=meta["name"], seen=True, since=self.clock())
        self._runs[uid] = run
        if self.resume_on_adopt and (job.get("spec") or {}).get("suspend") \
                and not (condition(job, "Complete") or condition(job, "Failed")):
            # The ledger says admitted: a Job left suspended (the service stopped between creating
            # and resuming it, or while preempting it) is resumed; the engine holds its quota.
            self._try(run, "resume")
        return True

    def finished_status(self, uid: str, info: RunInfo) -> RunStatus:
        """The outcome of a run whose Job is gone (deleted while the service was down)."""
        where = info.exit_path.split(":", 1)[-1] if info and info.exit_path else "its Job"
        return RunStatus(uid, FAILED, None, self.clock(),
                         f"{where} no longer exists in the cluster (deleted while the queue service was down)")

    def running(self) -> list[str]:
        return list(self._runs)

    def requeuing_strategy(self) -> dict:
        """Kueue's ``waitForPodsReady.requeuingStrategy`` as the service applies it to a workload
        evicted for ``PodsReadyTimeout`` (``service/admission.py``: ``evicted_by_timeout``)."""
        return {"backoffBaseSeconds": self.requeue_backoff_base, "backoffMaxSeconds": self.requeue_backoff_max,
                "backoffLimitCount": self.requeue_backoff_limit}

    def discard(self, uid: str, namespace: str, name: str) -> None:
        """Delete the (suspended) Job of a workload that will not run again (its requeuing limit
        was exceeded); best effort: a Job left behind holds nothing."""
        if uid in self._runs:
            return
        ns = self.namespace_for(namespace)
        try:
            job = self.jobs.get(ns, name)
            if job is not None and ((job.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) == uid:
                self.client.delete(self._job_path(ns, name), propagation_policy="Background")
        except KubeApiError as err:
            log.warning("kubernetes: cannot delete Job %s/%s of %s: %s", ns, name, uid, err)

    # -- logs ---------------------------------------------------------------------------------------
    def read_log(self, uid: str, offset: int, limit: int) -> tuple[bytes, int, bool]:
        """Output of run ``uid`` from byte ``offset``, at most ``limit`` bytes, read from the API
        server (``GET …/pods/{name}/log?limitBytes=``; a Pod log has no byte offset, so the first
        ``offset + limit + 1`` bytes are read and cut). The Pod is the run's newest one (a Job
        that retried has one per attempt; of a gang's Pods, the one created last). Returns
        ``(data, size, more)``: ``size`` the bytes known so far, ``more`` whether the log goes on
        beyond them. No Pod yet (or gone), or its container not started: ``(b"", 0, False)``.
        Called off the event loop (a request to the API server). Raises GpuQueueError for any
        other API error."""
        pods = self.pods.by_label(uid)
        if not pods:  # the Pod watch may lag behind the Job's: ask the API server
            try:
                pods, _ = self.client.list(path_for(*PODS), f"{SELECTOR},{UID_LABEL}={uid}")
            except KubeApiError:
                pods = []
        if not pods:
            return b"", 0, False
        pod = max(pods, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                        (p.get("metadata") or {}).get("name") or ""))
        meta = pod.get("metadata") or {}
        path = path_for(*PODS, namespace=meta.get("namespace"), name=meta.get("name"), subresource="log")
        want = offset + limit + 1
        try:
            data = self.client.request("GET", path, query=[("limitBytes", str(want))], raw=True)
        except KubeApiError as err:
            if err.status in (400, 404):  # container waiting to start; Pod gone
                return b"", 0, False
            what = f"cannot read the log of Pod {meta.get('namespace')}/{meta.get('name')}: {err.field_message()}"
            if err.status == 403:  # the queue's role lacks `get pods/log` (docs/kubernetes.md, RBAC)
                raise Forbidden(what, None) from None
            raise GpuQueueError(what, None) from None
        more = len(data) >= want
        data = data[:offset + limit] if more else data
        return data[offset:], len(data), more
