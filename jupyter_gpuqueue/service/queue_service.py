"""QueueService: the single owner of live state, and the loop that drives it.

Every change goes through here, in this order (DESIGN.md, "One submission, end to end"):

1. A submission is validated (``submissions``), turned into an engine ``Workload``, **written to
   the ledger** (``intake``), and only then acknowledged and queued.
2. A background loop polls the backend, enforces maximum run times, and runs scheduling cycles
   whenever something changed. An admission decision is **written to the ledger** (state,
   admission, usage intervals: one transaction) before the backend is told to start the job
   (``admission``).
3. Finished, failed and cancelled jobs close their usage intervals and release quota and devices.
4. On start, state is rebuilt from the ledger (``recovery``), so nothing acknowledged is lost and
   quota is never over-committed.

QueueService owns the live state (``live.py``: the configuration in force, ``conf``, and the
tracked workloads, ``live``), the ledger, the backend and the clock, runs the loop (``tick``), and
wires the collaborators, each given only what it works with (its docstring lists them):
``checks``, ``submissions``, ``intake``, ``admission``, ``recovery``, ``views``, ``logs``,
``configuration``, ``costs``, ``billing``, ``teams``, ``events`` and ``estimates`` (estimated start
times, computed on a worker thread). Its public methods are the API
the server, the hub and the tests use; each hands the call to the collaborator that does it. Its
attributes ``config``, ``prices``, ``scheduler``, ``clock``, ``budgets`` and the loop's flags read
and write ``conf`` / ``live``, so that a collaborator sees a change made through the service (a
test replacing the clock, say) at once.

All public methods run on the event-loop thread of the Jupyter server (the loop itself, the REST
handlers and the event stream share it), so no locks are needed. They return JSON-ready dicts shaped
as in ``docs/rest-api.md`` and raise ``jupyter_gpuqueue.errors`` exceptions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Callable, Iterable, Optional

from ..backends.base import Backend
from ..engine.model import ClusterConfig, Inventory, Workload
from ..engine.scheduler import Scheduler, SchedulerOptions
from ..ledger import Ledger, Prices
from .admission import Admission
from .billing import Billing
from .checks import RequestChecks
from .configuration import Configuration
from .costs import Costs
from .estimates import Estimates
from .events import EventHub
from .idle import IdleReclaim
from .intake import Intake
from .live import LiveConfig, LiveState, engine_workload
from .logs import Logs
from .moves import Moves
from .recovery import Recovery
from .states import FAILED, SUCCEEDED
from .submissions import Submissions
from .teams import Teams
from .lease_extension import LeaseExtensions
from .views import Views
from .runtime_caps import RuntimeCaps
from .webhooks import Webhooks

log = logging.getLogger("jupyter_gpuqueue")


def _kept_in(holder: str, name: str, doc: str) -> property:
    """A QueueService attribute kept in one of the objects it shares with its collaborators
    (``conf``, ``live``, or a collaborator): reading or assigning it through the service reads or
    assigns it there, so every collaborator sees the change."""
    return property(lambda self: getattr(getattr(self, holder), name),
                    lambda self, value: setattr(getattr(self, holder), name, value), doc=doc)


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
        lease_preemption_grace_seconds: float = 300.0,
        lease_priority_class: Optional[str] = None,
        python_executable: str = sys.executable,
        options: Optional[SchedulerOptions] = None,
        clock: Callable[[], float] = time.time,
        logger: Optional[logging.Logger] = None,
    ):
        self.inventory = inventory
        self.ledger = ledger
        self.backend = backend
        # Kueue delegation (backends/kueue.py): an installed Kueue admits; the engine only mirrors.
        self.delegated = bool(getattr(backend, "delegates_admission", False))
        self.root_dir = os.path.abspath(root_dir)
        self.data_dir = os.path.abspath(data_dir)
        self.log_dir = os.path.join(self.data_dir, "logs")
        self.cycle_interval = cycle_interval
        self.stop_grace_seconds = stop_grace_seconds
        # Notebook GPU leases (backends/lease.py): warned this many seconds before a preemption
        # releases them; submitted at this priority class when they name none.
        self.lease_preemption_grace_seconds = max(0.0, float(lease_preemption_grace_seconds))
        self.lease_priority_class = lease_priority_class
        self.python_executable = python_executable
        self.log = logger or log
        self._nodes_seen = 0  # the Kubernetes backend's Node watch version last followed
        # The live service requeues parked workloads as soon as quota frees (no 1 s batching): a
        # researcher's job should start the moment it can. And a preemptor gets the quota its
        # victims freed before anyone else, so that real jobs are never preempted in a loop
        # (SchedulerOptions.preemptor_first, docs/engine.md).
        scheduler = Scheduler(config, inventory, options or SchedulerOptions(
            requeue_batch_seconds=0.0, preemptor_first=True))
        prices.bind_flavors(config.resource_flavors)  # an admin-named flavor priced by its GPU family
        self.conf = LiveConfig(config=config, prices=prices, scheduler=scheduler, clock=clock)
        self.live = LiveState(ledger)
        live = self.live
        # The live records (live.py), the very objects the collaborators change.
        self.records, self.by_key, self.engine_workloads = live.records, live.by_key, live.engine_workloads
        self.stopping, self.inflight, self.kueue_positions = live.stopping, live.inflight, live.kueue_positions
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        # Performance (BENCHMARKS.md, "The live service"): submissions through the REST API are
        # committed in groups (ledger/group_commit.py, set up by start(): ``live.committer``);
        # names of submissions whose commit is under way are reserved (``inflight``). Events of a
        # kind that only say "refetch" (queues, inventory) are sent once per event-loop turn
        # (EventHub.emit_coalesced).
        self.tick_settle_seconds = 0.002  # see _loop
        # The collaborators, each one responsibility (this package's docstring), each given what
        # it works with; wired in the order they depend on one another.
        conf, wake = self.conf, self.wake
        self.billing = Billing(conf, ledger)
        self.teams = Teams(conf, self.log, user_local_queues=user_local_queues,
                           default_local_queue=default_local_queue)
        self.checks = RequestChecks(conf, self.billing, backend, root_dir=self.root_dir,
                                    python_executable=python_executable, default_priority_class=default_priority_class)
        # Each team's cap on maxRuntimeSeconds (service/runtime_caps.py): none until configured or set.
        self.runtime_caps = RuntimeCaps(
            ledger, lambda: {lq.namespace for lq in self.conf.config.local_queues.values()}, lambda: self.conf.clock())
        self.checks.runtime_caps = self.runtime_caps
        self.views = Views(conf, live, ledger, inventory, self.teams, self.billing, self.checks,
                           delegated=self.delegated, python_executable=python_executable, root_dir=self.root_dir)
        self.events = EventHub(ledger, live, self.views, self.log)
        self.costs = Costs(conf, live, ledger, backend, inventory, self.billing, self.teams, self.events, self.views,
                           wake, self.log, data_dir=self.data_dir, stop_grace_seconds=stop_grace_seconds)
        self.intake = Intake(conf, live, ledger, backend, self.costs, self.events, self.views, wake)
        self.submissions = Submissions(conf, live, ledger, backend, self.teams, self.checks, self.costs, self.intake,
                                       delegated=self.delegated, lease_priority_class=lease_priority_class,
                                       python_executable=python_executable, root_dir=self.root_dir)
        self.logs = Logs(live, backend, log_dir=self.log_dir)
        self.admission = Admission(conf, live, ledger, backend, self.billing, self.costs, self.events, self.views,
                                   self.logs, wake, delegated=self.delegated, stop_grace_seconds=stop_grace_seconds,
                                   lease_preemption_grace_seconds=self.lease_preemption_grace_seconds)
        self.recovery = Recovery(conf, live, ledger, backend, self.costs, self.admission, self.logs, self.log,
                                 stop_grace_seconds=stop_grace_seconds)
        self.configuration = Configuration(conf, live, ledger, self.events, wake, self.log)
        self.estimates = Estimates(conf, live, ledger, self.checks, self.costs, self.events, self.log,
                                   delegated=self.delegated)
        self.views.estimates = self.estimates
        # Idle notebook GPU reclaim (service/idle.py): off until a team's policy turns it on.
        self.idle = IdleReclaim(conf, live, ledger, backend, self.billing, self.costs, self.events, wake, self.log)
        self.views.idle = self.idle
        self.lease_extensions = LeaseExtensions(live, ledger, self.events)  # off until configured
        self.lease_extensions.runtime_caps = self.runtime_caps
        self.views.lease_extensions = self.lease_extensions
        self.moves = Moves(conf, live, ledger, self.checks, self.estimates, self.events, wake, delegated=self.delegated)
        self.admission.on_finished = self.estimates.observe_finished
        self.webhooks = Webhooks(self, self.log)  # teams' notifications POSTed to their URL (service/webhooks.py)

    # -- attributes kept where the collaborators share them (``_kept_in``) --------------------------------
    config = _kept_in("conf", "config", "The queue configuration in force (``apply_config`` replaces it).")
    prices = _kept_in("conf", "prices", "USD per GPU-hour (``ledger.Prices``) in force.")
    scheduler = _kept_in("conf", "scheduler", "The engine (``load_stored_config`` rebuilds it).")
    clock = _kept_in("conf", "clock", "The time source, seconds; assigning it changes what every collaborator reads.")
    budgets = _kept_in("conf", "budgets", "The teams' budgets (``budgets.Budgets``), None when none is set (``costs``).")
    dirty = _kept_in("live", "dirty", "A scheduling cycle is due.")
    slicing = _kept_in("live", "slicing", "In the loop's tick: scheduling yields after a slice (``admission``).")
    started = _kept_in("live", "started", "The loop runs.")
    committer = _kept_in("live", "committer", "The ledger's group commit while the loop runs, else None.")
    budget_holds = _kept_in("costs", "budget_holds", "uid → creation time of the workloads a hard budget holds.")
    # Settings, kept by the collaborator that uses them (the server sets the first two after building).
    mode = _kept_in("views", "mode", '"standalone" or "hub-service" (shown by ``info``).')
    max_pending_per_user = _kept_in("submissions", "max_pending_per_user",
                                    "Most Pending workloads per user (GpuQueueApp.max_pending_per_user); 0: no limit.")
    pending_cap_retry_after = _kept_in("submissions", "pending_cap_retry_after", "Retry-After (s) past the cap.")
    default_local_queue = _kept_in("teams", "default_local_queue_name", "The default LocalQueue, if allowed.")
    user_local_queues = _kept_in("teams", "user_local_queues", "user -> LocalQueues; None: all for everyone.")
    default_priority_class = _kept_in("checks", "default_priority_class", "None: the globalDefault PriorityClass.")

    async def start(self) -> None:
        """Restore from the ledger, adopt live jobs, and start the background loop."""
        if self.live.started:
            return
        self.recovery.restore()
        self.warn_unpriced()
        try:
            self.estimates.seed_history()
        except Exception:  # pragma: no cover - estimates fall back to declared run times
            self.log.warning("gpuqueue: could not read past run times for the estimates", exc_info=True)
        self.estimates.enabled = self.estimates.wanted
        self.estimates.prestart()  # the estimates' worker process, preloaded off the loop
        from ..ledger.group_commit import GroupCommitter

        self.live.committer = GroupCommitter(self.ledger)
        self.live.committer.start()
        self._wake = asyncio.Event()
        if hasattr(self.backend, "set_wakeup"):
            self.backend.set_wakeup(self.wake)  # local backend: reap a job the moment it ends
        self._task = asyncio.create_task(self._loop(), name="gpuqueue-loop")
        self.live.started = True
        self.webhooks.start()
        if self.mode == "hub-service" and os.environ.get("JUPYTERHUB_API_URL") and os.environ.get("JUPYTERHUB_API_TOKEN"):
            from ..hub.reconcile import start_reconcile  # leases of servers stopped while the queue was down

            self._reconcile_task = start_reconcile(self, os.environ["JUPYTERHUB_API_URL"],
                                                   os.environ["JUPYTERHUB_API_TOKEN"])

    def warn_unpriced(self) -> list[str]:
        """Name to the admin (a warning in the server's log) the ResourceFlavors no price lists,
        which are billed at the default price (``Prices.unpriced``); returns them. Admin → Prices
        shows the same (``source: "default"``)."""
        unpriced = self.prices.unpriced(self.config.resource_flavors)
        if unpriced:
            self.log.warning(
                "gpuqueue: no price for ResourceFlavor %s: billed at the default %.2f USD per GPU-hour "
                "(set c.GpuQueueApp.prices or Admin → Prices)", ", ".join(unpriced), self.prices.default)
        return unpriced

    async def stop(self) -> None:
        """Stop the loop. Running jobs keep running; the next start adopts them."""
        self.estimates.close()
        self.webhooks.stop()
        reconcile, self._reconcile_task = getattr(self, "_reconcile_task", None), None
        if reconcile is not None:
            reconcile.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        self.live.started = False
        if self.live.committer is not None:
            self.live.committer.close()  # commits what is queued (those rows are restored at the next start)
            self.live.committer = None
        if self.admission._reasons_to_write:
            try:
                self.admission.write_reasons(self.conf.clock())
            except Exception:  # pragma: no cover - derived state; recomputed at the next start
                self.log.warning("gpuqueue: could not write pending reasons at stop", exc_info=True)
        if hasattr(self.backend, "set_wakeup"):
            self.backend.set_wakeup(None)
        if hasattr(self.backend, "close"):
            self.backend.close()  # cluster backends: end their watch threads
        self.costs.close_sampler()  # NVML: shut down (initialised once, at the first sample)
        self.ledger.close()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        live = self.live
        while True:
            live.slicing = True
            try:
                self.tick()
            except Exception:  # pragma: no cover - logged, the loop must go on
                self.log.exception("gpuqueue: scheduling loop error")
            finally:
                live.slicing = False
            # Sleep until woken (wake()) or cycle_interval has passed. Not asyncio.wait_for: on
            # Python 3.11 a cancel (stop()) racing with its timeout could leave this task
            # cancelling forever, and the server hung at shutdown.
            timer = loop.call_later(self.cycle_interval, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            # Let the changes of the next moment arrive too, so that a burst (submissions, jobs
            # that ended) costs one tick, not one each (BENCHMARKS.md, "The live service").
            await asyncio.sleep(self.tick_settle_seconds)
            self._wake.clear()

    def wake(self) -> None:
        self.live.dirty = True
        if self._wake is not None:
            self._wake.set()

    def tick(self) -> None:
        """One pass of the loop: reap finished jobs, enforce run-time limits, schedule."""
        # Idle notebook leases (service/idle.py): warnings and releases, before the poll so that a
        # lease released now is reaped, and its GPUs given to the next workload, in this pass.
        self.idle.idle_tick(self.conf.clock())
        statuses = self.backend.poll()
        # After the poll: a job that ended meanwhile has a finish time before this tick's
        # decisions (its devices are not given to another job "before" it ended).
        now = self.conf.clock()
        records = self.live.records
        if statuses:
            # Every job that ended since the last tick in one transaction: one fsync, not one each.
            with self.events.batch():
                for st in statuses:
                    if st.uid in records and st.state not in (SUCCEEDED, FAILED):
                        self.admission.observe(st, now)  # cluster backends: Running / Waiting / Kueue's admissions
                    elif st.uid in records:
                        self.admission.finish(st.uid, st.state, st.exit_code, st.finished_at or now, st.message)
        self.admission.enforce_max_runtime(now)
        if self.live.requeue_at:
            self.admission.requeue_due(now)  # requeuingStrategy backoff over
        self._follow_nodes()
        if self.admission._reasons_to_write and now - self.admission._reasons_written_at >= self.admission.reason_write_interval:
            self.admission.write_reasons(now)
        self.costs.costs_tick(now)  # budget holds, spot notices, utilization samples (service/costs.py)
        if self.live.dirty:
            self.live.dirty = False
            # Running workloads being stopped (a cancel, the maximum run time, idle reclaim): a
            # placement waits for their devices rather than preempting others (engine/scheduler.py).
            stopping, records = self.live.stopping, self.live.records
            self.conf.scheduler.terminating = {f"{records[u]['namespace']}/{records[u]['name']}"
                                               for u in stopping if u in records} if stopping else set()
            self.admission.schedule(now)
            self.estimates.changed()  # debounced; computed on a worker thread (service/estimates.py)
        else:
            self.estimates.tick()

    def _follow_nodes(self) -> None:
        """With the Kubernetes backend and an inventory read from the cluster: the Nodes' taints
        follow the backend's Node watch (``inventory.kubernetes.follow_nodes``: cordoned, NotReady,
        deleted), so that nothing is admitted onto a Node that cannot run it; parked workloads
        are tried again when a Node changes."""
        inner = getattr(self.backend, "inner", self.backend)
        version = getattr(inner, "nodes_version", None)
        if version is None or self.inventory.source != "kubernetes" or version == self._nodes_seen:
            return
        if not inner.nodes.synced.is_set():
            return
        self._nodes_seen = version
        from ..inventory.kubernetes import follow_nodes

        changed, added = follow_nodes(self.inventory, inner.nodes.snapshot())
        if not changed and not added:
            return
        scheduler = self.conf.scheduler
        if scheduler.allocator is None:
            return
        for node in added:
            scheduler.allocator.add_node(node)
        self.log.info("gpuqueue: Nodes changed: %s", ", ".join(
            [f"{n.name} {[t.key for t in n.taints] or 'schedulable'}" for n in self.inventory.nodes if n.name in changed]
            + [f"{n.name} added ({len(n.gpus)} GPUs)" for n in added]))
        scheduler.allocator.nodes_changed()
        scheduler.requeue_all()
        self.live.dirty = True
        self.events.emit_coalesced("inventory")

    def track(self, row: dict, wl: Workload) -> None:
        """:meth:`LiveState.track`."""
        self.live.track(row, wl)

    @staticmethod
    def engine_workload(row: dict) -> Workload:
        """:func:`live.engine_workload`."""
        return engine_workload(row)

    def record(self, namespace: str, name: str) -> dict:
        """:meth:`LiveState.record`."""
        return self.live.record(namespace, name)

    # -- recovery ------------------------------------------------------------------------------------
    def restore(self) -> None:
        """:meth:`Recovery.restore`."""
        return self.recovery.restore()

    # -- events --------------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        """:meth:`EventHub.subscribe`."""
        return self.events.subscribe(callback)

    # -- teams ---------------------------------------------------------------------------------------
    def use_group_teams(
        self,
        group_local_queues: dict[str, list[str]],
        groups_of: Callable[[str], Iterable[str]],
        *,
        hint: Optional[str] = None,
    ) -> None:
        """:meth:`Teams.use_group_teams`."""
        return self.teams.use_group_teams(group_local_queues, groups_of, hint=hint)

    # -- submissions ---------------------------------------------------------------------------------
    def submit(self, request: dict, *, user: str) -> dict:
        """:meth:`Submissions.submit`."""
        return self.submissions.submit(request, user=user)

    def submit_manifest(self, text: str, *, user: str) -> list[dict]:
        """:meth:`Submissions.submit_manifest`."""
        return self.submissions.submit_manifest(text, user=user)

    async def submit_async(self, request: dict, *, user: str) -> dict:
        """:meth:`Submissions.submit_async`."""
        return await self.submissions.submit_async(request, user=user)

    async def submit_many_async(self, requests: list, *, user: str) -> list[dict]:
        """:meth:`Submissions.submit_many_async`."""
        return await self.submissions.submit_many_async(requests, user=user)

    async def submit_manifest_async(self, text: str, *, user: str) -> list[dict]:
        """:meth:`Submissions.submit_manifest_async`."""
        return await self.submissions.submit_manifest_async(text, user=user)

    # -- admission -----------------------------------------------------------------------------------
    def cancel(self, namespace: str, name: str, *, user: str, admin: bool = False) -> dict:
        """:meth:`Admission.cancel`."""
        return self.admission.cancel(namespace, name, user=user, admin=admin)

    # -- views ---------------------------------------------------------------------------------------
    def info(self, user: str) -> dict:
        """:meth:`Views.info`; with a cluster backend also ``clusterAccess`` (its start-up check of
        the service account's permissions: ``checked``, ``missing``, ``error``)."""
        out = self.views.info(user)
        access = getattr(getattr(self.backend, "inner", self.backend), "access", None)
        if callable(access):
            out["clusterAccess"] = access()
        return out

    def list_workloads(self, *, namespace: Optional[str] = None, owner: Optional[str] = None,
                       states: Optional[Iterable[str]] = None) -> list[dict]:
        """:meth:`Views.list_workloads`."""
        return self.views.list_workloads(namespace=namespace, owner=owner, states=states)

    def get_workload(self, namespace: str, name: str) -> dict:
        """:meth:`Views.get_workload`."""
        return self.views.get_workload(namespace, name)

    def timeline(self, namespace: str, name: str, *, reveal: bool = False) -> dict:
        """:meth:`Views.timeline`."""
        return self.views.timeline(namespace, name, reveal=reveal)

    def estimate(self, request: dict, *, user: str) -> dict:
        """:meth:`Views.estimate`."""
        return self.views.estimate(request, user=user)

    def queues(self) -> dict:
        """:meth:`Views.queues`."""
        return self.views.queues()

    def inventory_view(self) -> dict:
        """:meth:`Views.inventory_view`."""
        return self.views.inventory_view()

    def prices_view(self) -> dict:
        """:meth:`Views.prices_view`."""
        return self.views.prices_view()

    def keep_gpu(self, namespace: str, name: str, *, user: str) -> dict:
        """:meth:`IdleReclaim.keep`, answering the lease's view."""
        self.idle.keep(namespace, name, user=user)
        return self.views.view(self.live.record(namespace, name))

    def report_lease_activity(self, namespace: str, name: str, *, user: str, data) -> dict:
        """:meth:`IdleReclaim.report`: a notebook server's own activity, for its lease."""
        return self.idle.report(namespace, name, user=user, data=data)

    def extend_lease(self, namespace: str, name: str, *, user: str) -> dict:
        """:meth:`LeaseExtensions.extend`, answering the lease's view."""
        return self.views.view(self.lease_extensions.extend(namespace, name, user=user))

    def move_workload(self, namespace: str, name: str, *, user: str, data) -> dict:
        """:meth:`Moves.move` (issue 34 item 6: a faster option taken in one click), answering the
        workload's view."""
        return self.views.view(self.moves.move(namespace, name, user=user, data=data))

    # -- logs ----------------------------------------------------------------------------------------
    def read_log(self, namespace: str, name: str, *, user: str, offset: int = 0, limit: int = 1 << 20) -> dict:
        """:meth:`Logs.read_log`."""
        return self.logs.read_log(namespace, name, user=user, offset=offset, limit=limit)

    async def read_log_async(self, namespace: str, name: str, *, user: str, offset: int = 0,
                             limit: int = 1 << 20) -> dict:
        """:meth:`Logs.read_log_async`."""
        return await self.logs.read_log_async(namespace, name, user=user, offset=offset, limit=limit)

    # -- configuration -------------------------------------------------------------------------------
    def apply_config(self, config: ClusterConfig, *, actor: str, operation: str, target: str = "",
                     before=None, after=None, prices: Optional[Prices] = None) -> dict:
        """:meth:`Configuration.apply_config`."""
        return self.configuration.apply_config(config, actor=actor, operation=operation, target=target, before=before, after=after, prices=prices)

    def load_stored_config(self) -> bool:
        """:meth:`Configuration.load_stored_config`."""
        return self.configuration.load_stored_config()

    def discard_stored_config(self, *, actor: str) -> int:
        """:meth:`Configuration.discard_stored_config`."""
        return self.configuration.discard_stored_config(actor=actor)

    # -- costs ---------------------------------------------------------------------------------------
    def configure_costs(self, *, budgets: Optional[dict] = None, spot_flavors=(), spot_signal: str = "SIGUSR1",
                        spot_grace_seconds: float = 30.0, utilization_interval: float = 30.0,
                        utilization_sampler="auto") -> None:
        """:meth:`Costs.configure_costs`."""
        return self.costs.configure_costs(budgets=budgets, spot_flavors=spot_flavors, spot_signal=spot_signal, spot_grace_seconds=spot_grace_seconds, utilization_interval=utilization_interval, utilization_sampler=utilization_sampler)

    def release_budget_holds(self, now: Optional[float] = None) -> list[str]:
        """:meth:`Costs.release_budget_holds`."""
        return self.costs.release_budget_holds(now)

    def lift_budget_hold(self, namespace: str, name: str, *, actor: str) -> dict:
        """:meth:`Costs.lift_budget_hold`."""
        return self.costs.lift_budget_hold(namespace, name, actor=actor)

    def budgets_view(self, user: str) -> dict:
        """:meth:`Costs.budgets_view`."""
        return self.costs.budgets_view(user)

    def set_budget(self, namespace: str, data, *, actor: str) -> dict:
        """:meth:`Costs.set_budget`."""
        return self.costs.set_budget(namespace, data, actor=actor)

    def delete_budget(self, namespace: str, *, actor: str) -> dict:
        """:meth:`Costs.delete_budget`."""
        return self.costs.delete_budget(namespace, actor=actor)

    def capacity_by_flavor(self) -> dict[str, float]:
        """:meth:`Costs.capacity_by_flavor`."""
        return self.costs.capacity_by_flavor()

    def report(self, kind: str, *, month: Optional[str] = None, date_from: Optional[str] = None,
               date_to: Optional[str] = None, namespace: Optional[str] = None, owner: Optional[str] = None) -> dict:
        """:meth:`Costs.report`."""
        return self.costs.report(kind, month=month, date_from=date_from, date_to=date_to, namespace=namespace, owner=owner)
