"""QueueService: the single owner of live state.

Every change goes through here, in this order (DESIGN.md, "One submission, end to end"):

1. A submission is validated, turned into an engine ``Workload``, **written to the ledger**, and only
   then acknowledged and queued.
2. A background loop polls the backend, enforces maximum run times, and runs scheduling cycles
   whenever something changed. An admission decision is **written to the ledger** (state, admission,
   usage intervals: one transaction) before the backend is told to start the job.
3. Finished, failed and cancelled jobs close their usage intervals and release quota and devices.
4. On start, state is rebuilt from the ledger: pending work is queued again, admitted work is adopted
   if its process still runs (and marked Failed if it died), so nothing acknowledged is lost and quota
   is never over-committed.

All public methods run on the event-loop thread of the Jupyter server (the loop itself, the REST
handlers and the event stream share it), so no locks are needed. They return JSON-ready dicts shaped
as in ``docs/rest-api.md`` and raise ``jupyter_gpuqueue.errors`` exceptions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shlex
import shutil
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Callable, Iterable, Optional

from .backends.base import Backend, LaunchSpec, RunInfo
from .engine import serialize
from .engine.errors import ManifestError
from .engine.flavors import flavor_eligible
from .engine.manifests import (
    dns1123_label_errors,
    load_text,
    parse_duration,
    parse_workload_document,
    parse_yaml_documents,
)
from .engine.model import (
    GPU,
    MIG_PREFIX,
    ClusterConfig,
    Inventory,
    PodSet,
    Workload,
)
from .engine.quantity import format_quantity
from .engine.preemption import HUMAN_REASONS
from .engine.scheduler import Scheduler, SchedulerOptions
from .errors import Forbidden, GpuQueueError, NotFound, ValidationError
from .ledger import Ledger, Prices

log = logging.getLogger("jupyter_gpuqueue")

PENDING, ADMITTED, RUNNING = "Pending", "Admitted", "Running"
SUCCEEDED, FAILED, CANCELLED = "Succeeded", "Failed", "Cancelled"
ACTIVE_STATES = (PENDING, ADMITTED, RUNNING)
FINISHED_STATES = (SUCCEEDED, FAILED, CANCELLED)

DEFAULT_MAX_RUNTIME = 3600  # seconds, when a submission gives none
DEMO_DIR = Path(__file__).parent / "demo"
_MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb$")


def _dns_label(value: str, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError("must be a string", field)
    errors = dns1123_label_errors(value)
    if errors:
        raise ValidationError(f"Invalid value: {value!r}: " + "; ".join(errors), field)
    return value


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-+", "-", s)[:40].strip("-")
    return s or "job"


class QueueService:
    """See the module docstring. Build it with ``create_service``."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        inventory: Inventory,
        ledger: Ledger,
        backend: Backend,
        prices: Prices,
        root_dir: str,
        data_dir: str,
        default_local_queue: Optional[str] = None,
        default_priority_class: Optional[str] = None,
        user_local_queues: Optional[dict[str, list[str]]] = None,
        cycle_interval: float = 0.5,
        stop_grace_seconds: float = 10.0,
        python_executable: str = sys.executable,
        options: Optional[SchedulerOptions] = None,
        clock: Callable[[], float] = time.time,
        logger: Optional[logging.Logger] = None,
    ):
        self.config = config
        self.inventory = inventory
        self.ledger = ledger
        self.backend = backend
        self.prices = prices
        self.root_dir = os.path.abspath(root_dir)
        self.data_dir = os.path.abspath(data_dir)
        self.log_dir = os.path.join(self.data_dir, "logs")
        self.default_local_queue = default_local_queue
        self.default_priority_class = default_priority_class
        self.user_local_queues = user_local_queues
        self.cycle_interval = cycle_interval
        self.stop_grace_seconds = stop_grace_seconds
        self.python_executable = python_executable
        self.clock = clock
        self.log = logger or log
        # The live service requeues parked workloads as soon as quota frees (no 1 s batching):
        # a researcher's job should start the moment it can.
        self.scheduler = Scheduler(config, inventory, options or SchedulerOptions(requeue_batch_seconds=0.0))
        self.records: dict[str, dict] = {}  # uid -> ledger row (active and recently finished)
        self.by_key: dict[str, str] = {}  # "namespace/name" -> uid
        self.engine_workloads: dict[str, Workload] = {}  # uid -> engine Workload (active only)
        self.stopping: dict[str, str] = {}  # uid -> why we stopped it (cancel / max runtime)
        self._subscribers: list[Callable[[dict], None]] = []
        self._dirty = True
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        self._started = False

    # ------------------------------------------------------------------------------------------
    # lifecycle

    async def start(self) -> None:
        """Restore from the ledger, adopt live jobs, and start the background loop."""
        if self._started:
            return
        self.restore()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="gpuqueue-loop")
        self._started = True

    async def stop(self) -> None:
        """Stop the loop. Running jobs keep running; the next start adopts them."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        self._started = False
        self.ledger.close()

    def restore(self) -> None:
        """Rebuild live state from the ledger (see the module docstring, point 4)."""
        now = self.clock()
        rows = self.ledger.list_workloads(states=ACTIVE_STATES)
        # Admitted work first, so that quota and devices are held before anything pending is placed.
        rows.sort(key=lambda r: (r["state"] == PENDING, r["created_at"]))
        for row in rows:
            uid = row["uid"]
            wl = self._engine_workload(row)
            if row["state"] == PENDING:
                self._track(row, wl)
                self.scheduler.add_workload(wl)
                continue
            wl.admission = serialize.admission_from_dict(row.get("admission"))
            run = row.get("run")
            if row["state"] == RUNNING and run:
                info = RunInfo.from_json(run)
                if self.backend.adopt(uid, info):
                    self._track(row, wl)
                    self.scheduler.add_workload(wl)
                    self.log.info("gpuqueue: adopted running job %s (pid %s)", row["name"], info.pid)
                else:
                    st = self.backend.finished_status(uid, info)
                    self._track(row, wl)
                    self._finish(uid, st.state, st.exit_code, st.finished_at or now, st.message, in_scheduler=False)
                continue
            # Admitted, but the process was never started (the server stopped in between): the decision
            # is on record, so apply it now.
            self._track(row, wl)
            self.scheduler.add_workload(wl)
            self._launch(uid)
        self._dirty = True

    async def _loop(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:  # pragma: no cover - logged, the loop must go on
                self.log.exception("gpuqueue: scheduling loop error")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.cycle_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    def wake(self) -> None:
        self._dirty = True
        if self._wake is not None:
            self._wake.set()

    def tick(self) -> None:
        """One pass of the loop: reap finished jobs, enforce run-time limits, schedule."""
        now = self.clock()
        for st in self.backend.poll():
            if st.uid in self.records:
                self._finish(st.uid, st.state, st.exit_code, st.finished_at or now, st.message)
        self._enforce_max_runtime(now)
        if self._dirty:
            self._dirty = False
            self._schedule(now)

    def _schedule(self, now: float) -> None:
        before = {uid: self._pending_signature(uid) for uid, r in self.records.items() if r["state"] == PENDING}
        admitted_any = False
        for _ in range(10_000):
            result = self.scheduler.schedule(now)
            if result.heads == 0 or not result.changed:
                break
            for p in result.preempted:
                self._preempt(p, now)
            for wl in result.admitted:
                admitted_any = True
                self._admit(self.by_key[wl.key], wl, now)
        changed_pending = False
        for uid, sig in before.items():
            rec = self.records.get(uid)
            if rec is None or rec["state"] != PENDING:
                continue
            new = self._pending_signature(uid)
            if new != sig:
                changed_pending = True
                reason, message = self.scheduler.reason(rec["namespace"] + "/" + rec["name"]) or ("Pending", "")
                if (rec.get("reason"), rec.get("message")) != (reason, message):
                    rec["reason"], rec["message"] = reason, message
                    self.ledger.update_workload(uid, reason=reason, message=message)
                self._emit_workload(uid)
        if admitted_any or changed_pending:
            self._emit({"type": "queues"})
            self._emit({"type": "inventory"})

    def _pending_signature(self, uid: str):
        rec = self.records[uid]
        key = f"{rec['namespace']}/{rec['name']}"
        return (self.scheduler.position(key), self.scheduler.reason(key))

    # ------------------------------------------------------------------------------------------
    # decisions applied

    def _admit(self, uid: str, wl: Workload, now: float) -> None:
        rec = self.records[uid]
        admission = serialize.admission_to_dict(wl.admission)
        with self.ledger.transaction():
            self.ledger.update_workload(
                uid, state=ADMITTED, admission=admission, admitted_at=now,
                cluster_queue=wl.admission.cluster_queue, reason=None, message=None,
            )
            for psa in wl.admission.pod_set_assignments:
                for resource, flavor in psa.flavors.items():
                    qty = psa.resource_usage.get(resource, 0)
                    gpu_eq = self.prices.gpu_equivalent(resource, qty)
                    if gpu_eq <= 0:
                        continue
                    self.ledger.open_interval(
                        uid, flavor, resource, qty, gpu_eq, self.prices.usd_per_hour(flavor, resource, qty), now
                    )
        rec.update(state=ADMITTED, admission=admission, admitted_at=now, cluster_queue=wl.admission.cluster_queue,
                   reason=None, message=None)
        self._launch(uid)

    def _launch(self, uid: str) -> None:
        rec = self.records[uid]
        wl = self.engine_workloads[uid]
        spec = rec["spec"]
        devices = [d for p in wl.admission.placements for d in p.devices]
        visible = ",".join(devices)
        env = dict(spec.get("env") or {})
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": visible,
                "NVIDIA_VISIBLE_DEVICES": visible if visible else "void",
                "GPUQUEUE_WORKLOAD_NAME": rec["name"],
                "GPUQUEUE_NAMESPACE": rec["namespace"],
                "GPUQUEUE_WORKLOAD_UID": uid,
                "GPUQUEUE_LOCAL_QUEUE": rec["local_queue"],
                "GPUQUEUE_CLUSTER_QUEUE": wl.admission.cluster_queue,
                "GPUQUEUE_FLAVOR": ",".join(sorted({f for p in wl.admission.pod_set_assignments for f in p.flavors.values()})),
                "GPUQUEUE_MAX_RUNTIME_SECONDS": str(spec.get("maxRuntimeSeconds") or ""),
            }
        )
        log_path = os.path.join(self.log_dir, rec["namespace"], f"{rec['name']}-{uid[:8]}.log")
        launch = LaunchSpec(uid=uid, key=f"{rec['namespace']}/{rec['name']}", argv=list(spec["command"]),
                            cwd=spec["workingDir"], env=env, log_path=log_path)
        now = self.clock()
        try:
            info = self.backend.start(launch)
        except GpuQueueError as exc:
            self._finish(uid, FAILED, None, now, f"could not start: {exc.message}")
            return
        except OSError as exc:
            self._finish(uid, FAILED, None, now, f"could not start: {exc}")
            return
        self.ledger.update_workload(uid, state=RUNNING, run=info.to_json(), started_at=info.started_at)
        rec.update(state=RUNNING, run=info.to_json(), started_at=info.started_at)
        self._emit_workload(uid)

    def _preempt(self, p, now: float) -> None:
        """A victim was chosen: stop its process; it goes back to the queue once it is gone
        (``_requeue_evicted``), and only then are its quota and devices released."""
        uid = self.by_key.get(p.victim)
        if uid is None:
            return
        rec = self.records[uid]
        preemptor = self.records.get(self.by_key.get(p.preemptor, ""), {})
        message = (f"Preempted to accommodate {p.preemptor} (UID: {preemptor.get('uid', '?')}) due to "
                   f"{HUMAN_REASONS.get(p.reason, p.reason)}")
        rec["message"] = message
        self.ledger.update_workload(uid, message=message)
        if rec["state"] == RUNNING and uid in self.backend.running():
            self.stopping[uid] = "Preempted:" + p.reason
            self.backend.stop(uid, message, self.stop_grace_seconds)
        else:
            self._requeue_evicted(uid, now, p.reason, message)
        self._emit_workload(uid)

    def _requeue_evicted(self, uid: str, when: float, reason: str, message: str) -> None:
        """A preempted workload has stopped: close its usage, release its quota, queue it again."""
        rec = self.records[uid]
        key = f"{rec['namespace']}/{rec['name']}"
        evictions = int(rec.get("evictions") or 0) + 1
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, when)
            self.ledger.update_workload(uid, state=PENDING, admission=None, run=None, admitted_at=None,
                                        started_at=None, evictions=evictions, reason="Preempted",
                                        message=message)
        rec.update(state=PENDING, admission=None, run=None, admitted_at=None, started_at=None,
                   evictions=evictions, reason="Preempted", message=message)
        if key in self.scheduler.admitted:
            self.scheduler.evict(key, when)
        self._dirty = True
        self._emit_workload(uid)
        self._emit({"type": "queues"})
        self._emit({"type": "inventory"})

    def _finish(self, uid: str, state: str, exit_code: Optional[int], when: float, message: str,
                *, in_scheduler: bool = True) -> None:
        rec = self.records.get(uid)
        if rec is None:
            return
        stop_reason = self.stopping.pop(uid, None)
        if stop_reason and stop_reason.startswith("Preempted:") and rec["state"] != CANCELLED:
            self._requeue_evicted(uid, when, stop_reason.split(":", 1)[1], rec.get("message") or message)
            return
        reason = None
        if rec["state"] == CANCELLED:
            # Cancelled by the user earlier: the row is final; only release what the process held.
            state = CANCELLED
        elif stop_reason == "MaximumExecutionTimeExceeded":
            state, reason = FAILED, stop_reason
            message = f"exceeded its maximum run time of {rec['spec'].get('maxRuntimeSeconds')} s"
        if rec["state"] != CANCELLED:
            with self.ledger.transaction():
                self.ledger.close_intervals(uid, when)
                self.ledger.update_workload(uid, state=state, exit_code=exit_code, finished_at=when,
                                            reason=reason, message=message or None)
            rec.update(state=state, exit_code=exit_code, finished_at=when, reason=reason, message=message or None)
        key = f"{rec['namespace']}/{rec['name']}"
        if in_scheduler:
            self.scheduler.remove_workload(key)
        self.engine_workloads.pop(uid, None)
        self._dirty = True
        self._emit_workload(uid)
        self._emit({"type": "queues"})
        self._emit({"type": "inventory"})
        # Finished work lives on in the ledger only.
        self.records.pop(uid, None)
        self.by_key.pop(key, None)

    def _enforce_max_runtime(self, now: float) -> None:
        for uid, rec in self.records.items():
            if rec["state"] != RUNNING or uid in self.stopping:
                continue
            limit = rec["spec"].get("maxRuntimeSeconds")
            started = rec.get("started_at")
            if limit and started and now - started > limit:
                self.stopping[uid] = "MaximumExecutionTimeExceeded"
                self.backend.stop(uid, "exceeded maximum run time", self.stop_grace_seconds)

    # ------------------------------------------------------------------------------------------
    # bookkeeping

    def _track(self, row: dict, wl: Workload) -> None:
        self.records[row["uid"]] = row
        self.by_key[f"{row['namespace']}/{row['name']}"] = row["uid"]
        self.engine_workloads[row["uid"]] = wl

    def _engine_workload(self, row: dict) -> Workload:
        spec = row["spec"]
        return Workload(
            namespace=row["namespace"],
            name=row["name"],
            queue_name=row["local_queue"],
            pod_sets=[serialize.pod_set_from_dict(p) for p in spec["podSets"]],
            priority=row["priority"],
            priority_class=row.get("priority_class"),
            creation_time=row["created_at"],
            uid=row["uid"],
            maximum_execution_time_seconds=spec.get("maxRuntimeSeconds"),
        )

    def _record(self, namespace: str, name: str) -> dict:
        uid = self.by_key.get(f"{namespace}/{name}")
        if uid is not None:
            return self.records[uid]
        row = self.ledger.find_workload(namespace, name)
        if row is None:
            raise NotFound(f"workload {namespace}/{name} not found", "name")
        return row

    # ------------------------------------------------------------------------------------------
    # events

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (docs/rest-api.md); returns an unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: dict) -> None:
        for cb in list(self._subscribers):
            try:
                cb(event)
            except Exception:  # pragma: no cover - a broken subscriber must not stop the queue
                self.log.exception("gpuqueue: event subscriber failed")

    def _emit_workload(self, uid: str) -> None:
        if not self._subscribers:
            return
        self._emit({"type": "workload", "workload": self._view(self.records[uid])})

    # ------------------------------------------------------------------------------------------
    # submissions

    def _allowed_local_queues(self, user: str) -> list[str]:
        if self.user_local_queues is None:
            return sorted(self.config.local_queues)
        return [lq for lq in self.user_local_queues.get(user, []) if lq in self.config.local_queues]

    def _default_local_queue(self, user: str) -> Optional[str]:
        allowed = self._allowed_local_queues(user)
        if self.default_local_queue in allowed:
            return self.default_local_queue
        return allowed[0] if allowed else None

    def _resolve_local_queue(self, value, user: str) -> tuple[str, str]:
        if value in (None, ""):
            value = self._default_local_queue(user)
            if value is None:
                raise Forbidden(f"user {user} is not a member of any team (no LocalQueue)", "localQueue")
        if not isinstance(value, str) or value.count("/") != 1:
            raise ValidationError("must be 'namespace/name' of a LocalQueue", "localQueue")
        if value not in self.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {value}", "localQueue")
        if value not in self._allowed_local_queues(user):
            raise Forbidden(f"user {user} may not submit to LocalQueue {value}", "localQueue")
        ns, name = value.split("/")
        return ns, name

    def _resolve_priority(self, name) -> tuple[int, Optional[str]]:
        if name in (None, ""):
            name = self.default_priority_class
        if name in (None, ""):
            pc = self.config.default_priority_class()
            return (pc.value, pc.name) if pc else (0, None)
        if not isinstance(name, str):
            raise ValidationError("must be a string", "priorityClass")
        pc = self.config.workload_priority_classes.get(name) or self.config.priority_classes.get(name)
        if pc is None:
            known = sorted(set(self.config.priority_classes) | set(self.config.workload_priority_classes))
            raise ValidationError(f"unknown priority class {name!r} (known: {', '.join(known)})", "priorityClass")
        return pc.value, pc.name

    def _max_runtime(self, request: dict) -> int:
        if request.get("maxRuntimeSeconds") is not None:
            v = request["maxRuntimeSeconds"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValidationError("must be a positive number of seconds", "maxRuntimeSeconds")
            return int(v)
        if request.get("maxRuntime") not in (None, ""):
            try:
                return parse_duration(request["maxRuntime"], "maxRuntime")
            except ManifestError as exc:
                raise ValidationError(exc.reason, "maxRuntime") from None
        return DEFAULT_MAX_RUNTIME

    def _pod_set_from_form(self, request: dict, cq_name: str) -> PodSet:
        mig = request.get("migProfile")
        if mig not in (None, ""):
            if not isinstance(mig, str) or not _MIG_PROFILE.match(mig):
                raise ValidationError(f"{mig!r} is not a MIG profile like 1g.10gb", "migProfile")
            resource = MIG_PREFIX + mig
            if resource not in self._known_resources():
                raise ValidationError(f"unknown MIG profile {mig} (no ClusterQueue offers {resource})", "migProfile")
            qty = 1
        else:
            gpus = request.get("gpus", 1)
            if isinstance(gpus, str) and gpus.strip().isdigit():
                gpus = int(gpus)
            if isinstance(gpus, bool) or not isinstance(gpus, int):
                raise ValidationError("must be a whole number of GPUs", "gpus")
            if gpus <= 0:
                raise ValidationError("must be at least 1", "gpus")
            resource, qty = GPU, gpus
        ps = PodSet(name="main", count=1, requests={resource: qty})
        flavor = request.get("flavor")
        if flavor not in (None, "", "any"):
            fl = self.config.resource_flavors.get(flavor)
            if fl is None:
                raise ValidationError(
                    f"unknown ResourceFlavor {flavor!r} (known: {', '.join(sorted(self.config.resource_flavors))})",
                    "flavor",
                )
            cq = self.config.cluster_queues.get(cq_name)
            rg = cq.group_for(resource) if cq else None
            if rg is None or flavor not in [f.name for f in rg.flavors]:
                raise ValidationError(f"ClusterQueue {cq_name} offers no {resource} in flavor {flavor}", "flavor")
            # Kueue users pin a flavor with a nodeSelector on its nodeLabels; so do we.
            ps.node_selector = dict(fl.node_labels)
        return ps

    def _known_resources(self) -> set[str]:
        return {r for cq in self.config.cluster_queues.values() for rg in cq.resource_groups for r in rg.covered_resources}

    def _check_max_quota(self, wl: Workload, cq_name: str, field: str) -> None:
        """Reject a workload that no ClusterQueue could ever admit (Kueue's ExceedsMaxQuota)."""
        cq = self.config.cluster_queues.get(cq_name)
        node = self.scheduler.tree.cluster_queues.get(cq_name)
        if cq is None or node is None:
            return
        for ps in wl.pod_sets:
            for r, q in ps.requests.items():
                if q <= 0:
                    continue
                rg = cq.group_for(r)
                if rg is None:
                    raise ValidationError(f"resource {r} unavailable in ClusterQueue {cq_name}", field)
                best = 0
                for fq in rg.flavors:
                    fl = self.config.resource_flavors.get(fq.name)
                    if fl is None or flavor_eligible(fl, ps) is not None:
                        continue
                    best = max(best, node.potential_available((fq.name, r)))
                need = q * ps.count
                if need > best:
                    raise ValidationError(
                        f"exceeds max quota: {format_quantity(r, need)} {r} requested, but ClusterQueue {cq_name} "
                        f"can never admit more than {format_quantity(r, best)} in the eligible flavors",
                        field,
                    )

    def _command(self, request: dict) -> tuple[list[str], str]:
        has_cmd = request.get("command") not in (None, "", [])
        has_script = request.get("script") not in (None, "")
        if has_cmd == has_script:
            raise ValidationError("give exactly one of 'command' or 'script'", "command")
        wd = request.get("workingDir")
        if has_script:
            script = request["script"]
            if not isinstance(script, str):
                raise ValidationError("must be a path", "script")
            path = Path(script) if os.path.isabs(script) else Path(self.root_dir) / script
            if not path.is_file():
                raise ValidationError(f"no such file: {script}", "script")
            args = request.get("args") or []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValidationError("must be a list of strings", "args")
            argv = [self.python_executable, str(path.resolve()), *args]
            default_wd = str(path.resolve().parent)
        else:
            cmd = request["command"]
            if isinstance(cmd, str):
                try:
                    cmd = shlex.split(cmd)
                except ValueError as exc:
                    raise ValidationError(f"cannot split the command: {exc}", "command") from None
            if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
                raise ValidationError("must be a non-empty list of strings (argv)", "command")
            argv = list(cmd)
            default_wd = self.root_dir
        if wd not in (None, ""):
            if not isinstance(wd, str):
                raise ValidationError("must be a path", "workingDir")
            wd_path = Path(wd) if os.path.isabs(wd) else Path(self.root_dir) / wd
            if not wd_path.is_dir():
                raise ValidationError(f"no such directory: {wd}", "workingDir")
            cwd = str(wd_path.resolve())
        else:
            cwd = default_wd
        exe = argv[0]
        if "/" in exe:
            p = Path(exe) if os.path.isabs(exe) else Path(cwd) / exe
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise ValidationError(f"command not found or not executable: {exe}", "command")
        elif shutil.which(exe) is None:
            raise ValidationError(f"command not found: {exe}", "command")
        return argv, cwd

    def _new_name(self, request: dict, argv: list[str], namespace: str) -> str:
        name = request.get("name")
        if name not in (None, ""):
            return _dns_label(name, "name")
        base = Path(argv[1]).stem if len(argv) > 1 and argv[0] == self.python_executable else Path(argv[0]).name
        for _ in range(100):
            cand = f"{_slug(base)}-{secrets.token_hex(3)}"
            if f"{namespace}/{cand}" not in self.by_key and self.ledger.find_workload(namespace, cand) is None:
                return cand
        raise GpuQueueError("could not generate a unique name", "name")  # pragma: no cover

    def _prepare(self, request: dict, user: str) -> tuple[dict, Workload]:
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self._resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.config.local_queues[f"{ns}/{lq}"].cluster_queue
        priority, pc_name = self._resolve_priority(request.get("priorityClass"))
        max_runtime = self._max_runtime(request)
        ps = self._pod_set_from_form(request, cq_name)
        argv, cwd = self._command(request)
        env = request.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValidationError("must be an object of string values", "env")
        name = self._new_name(request, argv, ns)
        wl = Workload(namespace=ns, name=name, queue_name=lq, pod_sets=[ps], priority=priority,
                      priority_class=pc_name, maximum_execution_time_seconds=max_runtime)
        self._check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps)],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": request.get("flavor") or "any",
            "source": "form",
        }
        return spec, wl

    def submit(self, request: dict, *, user: str) -> dict:
        """Validate a SubmitRequest, persist it, queue it; returns the Workload view (docs/rest-api.md).

        Raises ValidationError (400, naming the field), Forbidden (403), Conflict (409, name taken)."""
        spec, wl = self._prepare(request, user)
        return self._accept(spec, wl, user)

    def submit_manifest(self, text: str, *, user: str) -> list[dict]:
        """Submit the workloads of a Kubernetes manifest (batch/v1 Job, Kueue Workload, ...).

        The whole text is validated first; nothing is queued unless every document is valid."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("empty manifest", "manifest")
        try:
            docs = parse_yaml_documents(text, "manifest")
        except ManifestError as exc:
            raise ValidationError(str(exc), exc.field or "manifest") from None
        prepared = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict):
                raise ValidationError(f"document {i} is not a mapping", "manifest")
            try:
                wl = parse_workload_document(doc, self.config, "manifest", i)
            except ManifestError as exc:
                if "configuration kind" in exc.reason or "not a workload" in exc.reason:
                    raise Forbidden(f"{exc}: queue configuration is changed by admins only", "kind") from None
                raise ValidationError(str(exc), exc.field or "manifest") from None
            if wl is None:
                continue
            prepared.append(self._prepare_manifest_workload(doc, wl, user, i))
        if not prepared:
            raise ValidationError(
                "no workload in the manifest (a Job needs the label kueue.x-k8s.io/queue-name)", "manifest"
            )
        return [self._accept(spec, wl, user) for spec, wl in prepared]

    def _prepare_manifest_workload(self, doc: dict, wl: Workload, user: str, index: int) -> tuple[dict, Workload]:
        lq_key = f"{wl.namespace}/{wl.queue_name}"
        if lq_key not in self.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {lq_key}", "metadata.labels[kueue.x-k8s.io/queue-name]")
        if lq_key not in self._allowed_local_queues(user):
            raise Forbidden(f"user {user} may not submit to LocalQueue {lq_key}", "metadata.namespace")
        _dns_label(wl.name, "metadata.name")
        if f"{wl.namespace}/{wl.name}" in self.by_key or self.ledger.find_workload(wl.namespace, wl.name):
            from .errors import Conflict

            raise Conflict(f"workload {wl.namespace}/{wl.name} already exists", "metadata.name")
        pods = sum(ps.count for ps in wl.pod_sets)
        if pods != 1:
            raise ValidationError(
                f"the local backend runs one pod per workload; this one has {pods} (use the Kubernetes backend)",
                "spec",
            )
        template = _pod_template(doc)
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValidationError("no container", "spec.template.spec.containers")
        c0 = containers[0]
        argv = list(c0.get("command") or []) + list(c0.get("args") or [])
        if not argv:
            raise ValidationError("the local backend needs a command", "spec.template.spec.containers[0].command")
        req = {"command": argv, "workingDir": c0.get("workingDir")}
        try:
            argv, cwd = self._command(req)
        except ValidationError as exc:
            exc.field = "spec.template.spec.containers[0]." + (exc.field or "command")
            raise
        env = {e["name"]: str(e.get("value", "")) for e in c0.get("env") or [] if isinstance(e, dict) and "name" in e}
        cq_name = self.config.local_queues[lq_key].cluster_queue
        self._check_max_quota(wl, cq_name, "spec.template.spec.containers[0].resources")
        max_runtime = wl.maximum_execution_time_seconds or DEFAULT_MAX_RUNTIME
        wl.maximum_execution_time_seconds = max_runtime
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps) for ps in wl.pod_sets],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": "any",
            "source": "manifest",
            "manifest": doc,
        }
        return spec, wl

    def _accept(self, spec: dict, wl: Workload, user: str) -> dict:
        now = self.clock()
        uid = str(uuidlib.uuid4())
        wl.uid = uid
        wl.creation_time = now
        row = {
            "uid": uid,
            "namespace": wl.namespace,
            "name": wl.name,
            "owner": user,
            "local_queue": wl.queue_name,
            "cluster_queue": self.scheduler.cluster_queue_name(wl),
            "priority_class": wl.priority_class,
            "priority": wl.priority,
            "state": PENDING,
            "reason": "Pending",
            "message": None,
            "spec": spec,
            "admission": None,
            "run": None,
            "created_at": now,
            "admitted_at": None,
            "started_at": None,
            "finished_at": None,
            "exit_code": None,
            "evictions": 0,
        }
        self.ledger.add_workload(row)  # durable before it is acknowledged; Conflict if the name is taken
        self._track(dict(row), wl)
        self.scheduler.add_workload(wl)
        self.wake()
        self._emit_workload(uid)
        self._emit({"type": "queues"})
        return self._view(self.records[uid])

    # ------------------------------------------------------------------------------------------
    # reading

    def info(self, user: str) -> dict:
        lqs = []
        for key in self._allowed_local_queues(user):
            lq = self.config.local_queues[key]
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue})
        profiles = sorted(
            {r[len(MIG_PREFIX):] for r in self._known_resources() if r.startswith(MIG_PREFIX)},
            key=lambda p: (int(p.split("g.")[0]), p),
        )
        pcs = [
            {"name": pc.name, "value": pc.value, "kind": pc.kind, "description": pc.description}
            for pc in sorted(
                list(self.config.priority_classes.values()) + list(self.config.workload_priority_classes.values()),
                key=lambda p: p.value,
            )
        ]
        default_pc = self.default_priority_class
        if not default_pc:
            pc = self.config.default_priority_class()
            default_pc = pc.name if pc else None
        return {
            "user": user,
            "mode": "standalone",
            "version": _version(),
            "localQueues": lqs,
            "defaultLocalQueue": self._default_local_queue(user),
            "flavors": sorted(self.config.resource_flavors),
            "migProfiles": profiles,
            "priorityClasses": pcs,
            "defaultPriorityClass": default_pc,
            "defaultMaxRuntimeSeconds": DEFAULT_MAX_RUNTIME,
            "pythonExecutable": self.python_executable,
            "rootDir": self.root_dir,
        }

    def list_workloads(self, *, namespace: Optional[str] = None, owner: Optional[str] = None,
                       states: Optional[Iterable[str]] = None) -> list[dict]:
        """Workload views, newest first. Finished workloads come from the ledger."""
        states = list(states) if states else None
        rows = self.ledger.list_workloads(states=states)
        out_rows = []
        for row in rows:
            live = self.records.get(row["uid"])
            row = live if live is not None else row
            if namespace and row["namespace"] != namespace:
                continue
            if owner and row["owner"] != owner:
                continue
            out_rows.append(row)
        out_rows.sort(key=lambda r: r["created_at"], reverse=True)
        costs = self.ledger.costs_usd([r["uid"] for r in out_rows], self.clock()) if out_rows else {}
        return [self._view(r, cost=costs.get(r["uid"], 0.0)) for r in out_rows]

    def get_workload(self, namespace: str, name: str) -> dict:
        return self._view(self._record(namespace, name))

    def cancel(self, namespace: str, name: str, *, user: str) -> dict:
        """Cancel a workload of ``user``: pending ones leave the queue, running ones get SIGTERM (then
        SIGKILL after the grace period). Billing stops now; the devices are released once the process
        is gone. Finished workloads are returned unchanged. Raises NotFound, Forbidden."""
        rec = self._record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"workload {namespace}/{name} belongs to {rec['owner']}", "name")
        if rec["state"] in FINISHED_STATES:
            return self._view(rec)
        uid = rec["uid"]
        now = self.clock()
        prev = rec["state"]
        with self.ledger.transaction():
            self.ledger.close_intervals(uid, now)
            self.ledger.update_workload(uid, state=CANCELLED, finished_at=now, reason="Cancelled",
                                        message=f"cancelled by {user}")
        rec.update(state=CANCELLED, finished_at=now, reason="Cancelled", message=f"cancelled by {user}")
        if prev == RUNNING and uid in self.backend.running():
            self.stopping[uid] = "Cancelled"
            self.backend.stop(uid, f"cancelled by {user}", self.stop_grace_seconds)
        else:
            self.scheduler.remove_workload(f"{namespace}/{name}")
            self.engine_workloads.pop(uid, None)
            self._dirty = True
        self.wake()
        self._emit_workload(uid)
        self._emit({"type": "queues"})
        return self._view(rec)

    def read_log(self, namespace: str, name: str, *, user: str, offset: int = 0, limit: int = 1 << 20) -> dict:
        """The job's output from byte ``offset``, at most ``limit`` bytes. Only the owner may read it."""
        rec = self._record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"only the owner may read the logs of {namespace}/{name}", "name")
        if offset < 0:
            raise ValidationError("must be ≥ 0", "offset")
        if limit <= 0:
            raise ValidationError("must be > 0", "limit")
        limit = min(limit, 4 << 20)
        run = rec.get("run")
        path = RunInfo.from_json(run).log_path if run else None
        text, size, next_offset = "", 0, offset
        if path and os.path.exists(path):
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                f.seek(min(offset, size))
                data = f.read(limit)
            next_offset = min(offset, size) + len(data)
            text = data.decode("utf-8", errors="replace")
        eof = rec["state"] in FINISHED_STATES and next_offset >= size
        return {"text": text, "offset": offset, "nextOffset": next_offset, "eof": eof, "size": size}

    def estimate(self, request: dict, *, user: str) -> dict:
        """Cost estimate of a SubmitRequest before submitting: requested GPU-hours × price per hour of
        the chosen flavor (with ``any``, the dearest flavor it could land on). Validates like submit,
        except for the command."""
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self._resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.config.local_queues[f"{ns}/{lq}"].cluster_queue
        self._resolve_priority(request.get("priorityClass"))
        max_runtime = self._max_runtime(request)
        ps = self._pod_set_from_form(request, cq_name)
        wl = Workload(namespace=ns, name="estimate", queue_name=lq, pod_sets=[ps])
        self._check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        resource, qty = next(iter(ps.requests.items()))
        flavor = self._likely_flavor(cq_name, ps, resource)
        per_hour = self.prices.usd_per_hour(flavor, resource, qty) if flavor else 0.0
        gpu_eq = self.prices.gpu_equivalent(resource, qty)
        return {
            "gpuHours": round(gpu_eq * max_runtime / 3600.0, 6),
            "costUsd": round(per_hour * max_runtime / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            "flavor": flavor,
            "resource": resource,
            "quantity": qty,
            "maxRuntimeSeconds": max_runtime,
        }

    def _likely_flavor(self, cq_name: str, ps: PodSet, resource: str) -> Optional[str]:
        cq = self.config.cluster_queues.get(cq_name)
        rg = cq.group_for(resource) if cq else None
        if rg is None:
            return None
        node = self.scheduler.tree.cluster_queues[cq_name]
        eligible = []
        for fq in rg.flavors:
            fl = self.config.resource_flavors.get(fq.name)
            if fl is None or flavor_eligible(fl, ps) is not None:
                continue
            if node.potential_available((fq.name, resource)) < ps.requests[resource] * ps.count:
                continue
            eligible.append(fq.name)
        if not eligible:
            return None
        return max(eligible, key=lambda f: self.prices.price(f))

    def queues(self) -> dict:
        """ClusterQueues with usage per flavor and resource, and their pending workloads in order."""
        cqs = []
        for name in sorted(self.config.cluster_queues):
            cq = self.config.cluster_queues[name]
            node = self.scheduler.tree.cluster_queues[name]
            resources = []
            for rg in cq.resource_groups:
                for fq in rg.flavors:
                    for rq in fq.resources:
                        fr = (fq.name, rq.name)
                        resources.append({
                            "flavor": fq.name,
                            "resource": rq.name,
                            "nominalQuota": format_quantity(rq.name, rq.nominal_quota),
                            "borrowingLimit": None if rq.borrowing_limit is None else format_quantity(rq.name, rq.borrowing_limit),
                            "lendingLimit": None if rq.lending_limit is None else format_quantity(rq.name, rq.lending_limit),
                            "usage": format_quantity(rq.name, node.usage.get(fr, 0)),
                            "borrowed": format_quantity(rq.name, node.borrowed(fr)),
                        })
            pending = []
            for key in self.scheduler.pending_keys(name):
                uid = self.by_key.get(key)
                rec = self.records.get(uid) if uid else None
                if rec is None:
                    continue
                pos = self.scheduler.position(key) or (None, None)
                reason = self.scheduler.reason(key) or (None, None)
                pending.append({
                    "namespace": rec["namespace"], "name": rec["name"], "localQueue": rec["local_queue"],
                    "owner": rec["owner"], "priority": rec["priority"], "priorityClass": rec.get("priority_class"),
                    "positionInClusterQueue": pos[0], "positionInLocalQueue": pos[1],
                    "reason": reason[0], "message": reason[1], "createdAt": rec["created_at"],
                })
            admitted = sum(1 for w in self.scheduler.admitted.values() if w.admission.cluster_queue == name)
            cqs.append({
                "name": name, "cohort": cq.cohort, "queueingStrategy": cq.queueing_strategy,
                "active": name not in self.scheduler.inactive,
                "resources": resources, "pendingWorkloads": len(pending), "admittedWorkloads": admitted,
                "pending": pending,
            })
        lqs = []
        for key in sorted(self.config.local_queues):
            lq = self.config.local_queues[key]
            q = self.scheduler.queues.get(lq.cluster_queue)
            adm = sum(
                1 for w in self.scheduler.admitted.values()
                if w.namespace == lq.namespace and w.queue_name == lq.name
            )
            lqs.append({"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
                        "pendingWorkloads": q.count_local_queue(key) if q else 0, "admittedWorkloads": adm})
        return {"clusterQueues": cqs, "localQueues": lqs}

    def inventory_view(self) -> dict:
        """GPUs and MIG slices per flavor: free and total, and every device with its holder."""
        alloc = self.scheduler.allocator
        summary = []
        for fname in sorted(self.config.resource_flavors):
            fl = self.config.resource_flavors[fname]
            nodes = [n for n in self.inventory.nodes if all(n.labels.get(k) == v for k, v in fl.node_labels.items())]
            offered = {r for cq in self.config.cluster_queues.values() for rg in cq.resource_groups
                       for f in rg.flavors if f.name == fname for r in rg.covered_resources}
            for resource in sorted(r for r in offered if r == GPU or r.startswith(MIG_PREFIX)):
                free, total = alloc.totals(resource, nodes) if alloc else (0, 0)
                if total == 0:
                    continue
                summary.append({"flavor": fname, "resource": resource, "free": free, "total": total})
        nodes = []
        owner = alloc.owner if alloc else {}
        for n in self.inventory.nodes:
            gpus = []
            for g in n.gpus:
                gd = {"index": g.index, "uuid": g.uuid, "product": g.product, "memoryMiB": g.memory_mib,
                      "assignedTo": owner.get(f"{n.name}/{g.index}") if g.mig is None else None, "mig": None}
                if g.mig is not None:
                    gd["mig"] = [{"uuid": d.uuid, "profile": d.profile, "slices": d.slices,
                                  "assignedTo": owner.get(d.uuid)} for d in g.mig]
                gpus.append(gd)
            nodes.append({"name": n.name, "labels": dict(n.labels), "gpus": gpus})
        return {"source": self.inventory.source, "summary": summary, "nodes": nodes}

    def prices_view(self) -> dict:
        return self.prices.to_json()

    # ------------------------------------------------------------------------------------------
    # the Workload view

    def _price_per_hour(self, rec: dict) -> float:
        adm = rec.get("admission")
        if adm:
            total = 0.0
            for psa in adm["podSetAssignments"]:
                for r, f in psa["flavors"].items():
                    total += self.prices.usd_per_hour(f, r, int(psa["resourceUsage"].get(r, 0)))
            return total
        spec = rec["spec"]
        total = 0.0
        for p in spec["podSets"]:
            ps = serialize.pod_set_from_dict(p)
            for r, q in ps.requests.items():
                if r == GPU or r.startswith(MIG_PREFIX):
                    cq_name = rec.get("cluster_queue") or ""
                    f = self._likely_flavor(cq_name, ps, r) if cq_name in self.config.cluster_queues else None
                    if f:
                        total += self.prices.usd_per_hour(f, r, q * ps.count)
        return total

    def _view(self, rec: dict, cost: Optional[float] = None) -> dict:
        key = f"{rec['namespace']}/{rec['name']}"
        state = rec["state"]
        pos = self.scheduler.position(key) if state == PENDING else None
        reason, message = rec.get("reason"), rec.get("message")
        if state == PENDING:
            live = self.scheduler.reason(key)
            if live:
                reason, message = live
        adm = rec.get("admission")
        spec = rec["spec"]
        now = self.clock()
        if cost is None:
            cost = self.ledger.cost_usd(rec["uid"], now)
        per_hour = self._price_per_hour(rec)
        max_rt = spec.get("maxRuntimeSeconds") or 0
        placements = adm.get("placements", []) if adm else []
        devices = [d for p in placements for d in p["devices"]]
        pod_sets = []
        for p in spec["podSets"]:
            pod_sets.append({"name": p["name"], "count": p["count"],
                             "requests": {r: format_quantity(r, int(v)) for r, v in p["requests"].items()}})
        admission = None
        if adm:
            admission = {
                "clusterQueue": adm["clusterQueue"],
                "podSetAssignments": [
                    {"name": a["name"], "count": a["count"], "flavors": a["flavors"],
                     "resourceUsage": {r: format_quantity(r, int(v)) for r, v in a["resourceUsage"].items()}}
                    for a in adm["podSetAssignments"]
                ],
            }
        return {
            "uid": rec["uid"],
            "name": rec["name"],
            "namespace": rec["namespace"],
            "localQueue": rec["local_queue"],
            "clusterQueue": rec.get("cluster_queue"),
            "owner": rec["owner"],
            "state": state,
            "reason": reason,
            "message": message,
            "priorityClass": rec.get("priority_class"),
            "priority": rec["priority"],
            "positionInClusterQueue": pos[0] if pos else None,
            "positionInLocalQueue": pos[1] if pos else None,
            "podSets": pod_sets,
            "admission": admission,
            "placement": placements,
            "visibleDevices": ",".join(devices) if adm else None,
            "command": spec["command"],
            "workingDir": spec["workingDir"],
            "maxRuntimeSeconds": max_rt,
            "createdAt": rec["created_at"],
            "admittedAt": rec.get("admitted_at"),
            "startedAt": rec.get("started_at"),
            "finishedAt": rec.get("finished_at"),
            "exitCode": rec.get("exit_code"),
            "evictions": rec.get("evictions", 0),
            "costUsd": round(cost, 6),
            "estimatedCostUsd": round(per_hour * max_rt / 3600.0, 6),
            "pricePerHourUsd": round(per_hour, 6),
            "estimatedStartAt": None,
        }


def _pod_template(doc: dict) -> dict:
    spec = doc.get("spec") or {}
    if "template" in spec:
        return spec["template"] or {}
    if "podSets" in spec and spec["podSets"]:
        return spec["podSets"][0].get("template") or {}
    return {}


def _version() -> str:
    from . import __version__

    return __version__


def create_service(
    *,
    config_paths: Optional[list[str]],
    inventory_path: Optional[str],
    db_url: Optional[str],
    root_dir: str,
    data_dir: str,
    prices: Optional[dict[str, float]] = None,
    default_local_queue: Optional[str] = None,
    default_priority_class: Optional[str] = None,
    user_local_queues: Optional[dict[str, list[str]]] = None,
    cycle_interval: float = 0.5,
    stop_grace_seconds: float = 10.0,
    options: Optional[SchedulerOptions] = None,
    logger: Optional[logging.Logger] = None,
) -> QueueService:
    """Build a QueueService with the local backend.

    ``inventory_path`` None: NVML discovery where GPUs are present, else the demo inventory.
    ``config_paths`` None: with discovered GPUs, one team owning exactly them
    (``inventory.default_config``); else the demo cluster (``jupyter_gpuqueue/demo/cluster.yaml``). ``db_url`` None:
    ``sqlite:///{data_dir}/gpuqueue.sqlite``. Raises ValidationError for an invalid configuration."""
    from .backends.local import LocalBackend
    from .inventory import load_inventory
    from .inventory.default_config import config_for_inventory

    inventory = load_inventory(inventory_path)
    config = ClusterConfig()
    if config_paths:
        paths = list(config_paths)
    elif inventory.source == "nvml":
        # Real GPUs and no configuration: one team owning exactly the discovered hardware.
        paths = []
        config = config_for_inventory(inventory)
    else:
        paths = [str(DEMO_DIR / "cluster.yaml")]
    for p in paths:
        try:
            text = Path(p).read_text()
        except OSError as exc:
            raise ValidationError(f"cannot read {p}: {exc}", "config_files") from None
        try:
            m = load_text(text, p)
        except ManifestError as exc:
            raise ValidationError(str(exc), "config_files") from None
        config.merge(m.config)
    os.makedirs(data_dir, exist_ok=True)
    ledger = Ledger(db_url or f"sqlite:///{os.path.join(os.path.abspath(data_dir), 'gpuqueue.sqlite')}")
    price_obj = Prices(prices) if prices else Prices()
    if default_local_queue is None and "team-a/team-a-queue" in config.local_queues:
        default_local_queue = "team-a/team-a-queue"
    if default_priority_class is None and "experiment-normal" in config.priority_classes:
        default_priority_class = "experiment-normal"
    return QueueService(
        config=config,
        inventory=inventory,
        ledger=ledger,
        backend=LocalBackend(),
        prices=price_obj,
        root_dir=root_dir,
        data_dir=data_dir,
        default_local_queue=default_local_queue,
        default_priority_class=default_priority_class,
        user_local_queues=user_local_queues,
        cycle_interval=cycle_interval,
        stop_grace_seconds=stop_grace_seconds,
        options=options,
        logger=logger,
    )
