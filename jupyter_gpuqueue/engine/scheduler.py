"""The scheduling cycle: Kueue's admission loop over our queues, quota tree and device placement.

One cycle (Kueue ``pkg/scheduler/scheduler.go: schedule``):

1. **Heads**: pop the head of every active ClusterQueue (Kueue pops exactly one per ClusterQueue
   per cycle; ``SchedulerOptions.heads_per_cluster_queue`` can raise that, off by default).
2. **Nominate**: a head whose namespace does not match its ClusterQueue's ``namespaceSelector`` is
   ``Misconfigured``; otherwise flavors are assigned (``flavors.assign_flavors``) against the usage at
   the start of the cycle.
3. **Order**: entries that do not borrow before those that do, then higher priority, then older
   (Kueue ``makeClassicalIterator``).
4. **Process** each entry against the usage as changed by the entries before it: re-check the fit
   (a workload that no longer fits is requeued at once, Kueue's ``FailedAfterNomination``), place
   its pods on devices (ours: see ``placement``), then admit: charge its usage to the ClusterQueue
   and, above nominal quota, to its cohort. When its quota fits but its pods cannot be placed,
   lower-priority workloads its ClusterQueue may preempt are preempted on the nodes, as
   kube-scheduler would (``_preempt_for_placement``); else it waits with ``PlacementFailed``.
   An entry that needs preemption (``preemption``) claims its usage for the rest of the cycle,
   marks its victims as being evicted (``CycleResult.preempted``) and waits: entries whose victims
   overlap an earlier entry's are skipped; one without victims whose ClusterQueue cannot always
   reclaim (``reclaimWithinCohort`` other than ``Any``) reserves what it could use, so that lower
   entries cannot take it (Kueue ``resourcesToReserve``).
5. **Requeue** the rest with their reason: ``StrictFIFO`` heads go back and keep blocking;
   ``BestEffortFIFO`` heads are parked until quota is freed somewhere in their cohort tree.

Victims keep their quota and devices until the caller reports them stopped with ``evict`` (the live
service when the process is gone; ``simulate`` and the simulator at once), as Kueue waits for the
evicted pods to terminate.

Nothing here reads a clock: ``now`` is passed in. Given the same calls, the same decisions.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .flavors import FIT, NO_CANDIDATES, NO_FIT, PREEMPT_MODE, RECLAIM, Assignment, assign_flavors
from .model import (
    ANY,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    NEVER,
    STRICT_FIFO,
    REASON_EXCEEDS_MAX_QUOTA,
    REASON_INACTIVE,
    REASON_MISCONFIGURED,
    REASON_NO_FIT,
    REASON_PENDING,
    REASON_PLACEMENT_FAILED,
    Admission,
    ClusterConfig,
    ClusterQueue,
    DevicePlacement,
    Inventory,
    PodSetAssignment,
    Workload,
)
from .fairsharing import FairSharing, fair_preemptions
from .placement import DeviceAllocator, device_flavors
from .preemption import IN_NODE_PLACEMENT, Preemptor, Target, add_usage, remove_usage, workload_usage
from .queues import ClusterQueueQueue
from .quota import FlavorResource, QuotaNode, QuotaTree


@dataclass
class SchedulerOptions:
    """Knobs whose defaults reproduce Kueue's decisions.

    ``heads_per_cluster_queue``: workloads popped per ClusterQueue per cycle. Kueue pops one
    (``Manager.Heads``), which throttles deep queues (Kueue issue #14477); more than one is our
    documented extension. ``requeue_batch_seconds``: see below.
    """

    heads_per_cluster_queue: int = 1
    # Kueue requeues parked (inadmissible) workloads of a cohort tree through a delaying workqueue,
    # at most once per ``requeueBatchPeriod`` (1 s, pkg/cache/queue/manager.go) after quota is
    # freed. 0 requeues at once (``simulate``, where no time passes, and the live service).
    requeue_batch_seconds: float = 1.0
    # Ours, off by default: in a cycle, a preemptor whose victims are gone and that now fits is
    # taken before every other entry (those whose victims are all gone before those still waiting
    # for some), so that no other workload takes the quota its preemptions freed; and a workload
    # being evicted for a preemptor that still waits is no candidate for another (each
    # preemptor's victims are its own: ``preemption.Preemptor.claimed_by_another``). Without it (Kueue v0.14), a workload ordered before the preemptor (older, or not
    # borrowing) can take that quota, and with ``reclaimWithinCohort: Any`` on one ClusterQueue the
    # victim may then reclaim it back and be preempted again, forever (a livelock of the kind of
    # Kueue issue #2821; docs/engine.md). The live service turns it on.
    preemptor_first: bool = False


@dataclass(slots=True)
class Preemption:
    """A victim the caller must stop, then report with ``Scheduler.evict``. ``reason``: Kueue's
    (InClusterQueue, InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing), or
    ours, InNodePlacement (the quota fit, lower-priority workloads held the devices)."""

    victim: str
    preemptor: str
    reason: str
    victim_cluster_queue: str
    request: dict = field(default_factory=dict)  # the preemptor's usage per (flavor, resource)


@dataclass
class CycleResult:
    """What one cycle decided. ``admitted``: workloads admitted (their ``admission`` set).
    ``preempted``: victims newly chosen (still admitted until ``evict``). ``requeued``: keys of
    heads that were considered and stay pending. ``changed``: whether anything observable changed
    (an admission, a preemption, a parking, a new reason)."""

    admitted: list[Workload] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    heads: int = 0
    changed: bool = False


_MISCONFIGURED_NAMESPACE = (REASON_MISCONFIGURED, "Workload namespace doesn't match ClusterQueue selector")


@dataclass(slots=True)
class _Entry:
    wl: Workload
    cq: ClusterQueue
    assignment: Optional[Assignment]
    reason: str = ""
    message: str = ""
    targets: list[Target] = field(default_factory=list)
    sort_key: Optional[tuple] = None


class Scheduler:
    """Live admission state: every known workload, pending or admitted.

    Build it from a ``ClusterConfig`` and optionally an ``Inventory`` (without one, admission is by
    quota alone, as in Kueue). Then ``add_workload`` / ``remove_workload`` as workloads come and go,
    and call ``schedule(now)`` for a cycle. Positions and pending reasons are read at any time.

    Over 600 lines: it is Kueue's queue manager and scheduler in one, because membership, the cycle,
    nomination (with its memo) and requeueing change the same indexes together (admitted workloads
    per ClusterQueue, usage per workload, cohort-tree versions, parked heads). What reads them only
    is apart: preemption and fair sharing (``preemption*.py``, ``fairsharing.py``, through
    ``AdmittedState``), flavor assignment (``flavors.py``), queues (``queues.py``).
    """

    def __init__(
        self,
        config: ClusterConfig,
        inventory: Optional[Inventory] = None,
        options: Optional[SchedulerOptions] = None,
    ):
        self.options = options or SchedulerOptions()
        self.inventory = inventory
        self.allocator = DeviceAllocator(inventory) if inventory is not None else None
        self.workloads: dict[str, Workload] = {}
        self.admitted: dict[str, Workload] = {}
        self.pending_reason: dict[str, tuple[str, str]] = {}
        self.orphans: dict[str, str] = {}  # key -> LocalQueue key it names
        self._placement_parked: dict[str, str] = {}  # key -> cluster queue
        # Admitted workloads, indexed for preemption.
        self.admitted_by_cq: dict[str, dict[str, None]] = {}
        self.admitted_cq: dict[str, str] = {}
        self.usage_of: dict[str, dict[FlavorResource, int]] = {}
        self.admit_time: dict[str, Optional[float]] = {}
        self.evicting: dict[str, str] = {}  # victim key -> preemptor key
        self._placement_victims: set[str] = set()  # victims chosen by _preempt_for_placement, until evicted
        # Admitted workloads the caller is stopping for reasons of its own (a cancel, the maximum run
        # time, idle reclaim): their devices are free soon, so a placement waits for them rather than
        # preempting (``_preempt_for_placement``). The caller keeps it current; keys no longer
        # admitted are ignored.
        self.terminating: set[str] = set()
        self._requeue_due: dict[str, float] = {}  # cohort-tree root -> when its parked come back
        # Nomination memo (see ``_nominate``): per cohort-tree root, the version of its admitted
        # state and the nominations computed at that version, by workload shape.
        self._version: dict[str, int] = {}
        self._memo: dict[str, tuple[int, dict]] = {}
        self._shapes: dict[str, int] = {}  # workload key -> shape id (``_shape``)
        self._shape_ids: dict[tuple, int] = {}
        self._unknown_admit_times = 0  # admitted workloads restored without an admission time
        self.preemptor = Preemptor(self)
        self.fair = FairSharing(self)
        self._configure(config)

    # -- configuration ------------------------------------------------------------------------------
    def _configure(self, config: ClusterConfig) -> None:
        self.config = config
        self.tree = QuotaTree(config)
        self._root_of = {name: node.root().name for name, node in self.tree.cluster_queues.items()}
        self._memo = {}
        self.queues: dict[str, ClusterQueueQueue] = {
            name: ClusterQueueQueue(name, cq.queueing_strategy) for name, cq in config.cluster_queues.items()
        }
        self.inactive: dict[str, str] = {}
        for name, cq in config.cluster_queues.items():
            missing = [f for f in cq.flavor_names() if f not in config.resource_flavors]
            if missing:
                self.inactive[name] = f"ClusterQueue {name} is inactive: flavor {missing[0]} not found"
            elif self.tree.in_cycle(name):
                self.inactive[name] = f"ClusterQueue {name} is inactive: its cohort tree has a cycle"
            elif cq.stop_policy in ("Hold", "HoldAndDrain"):
                self.inactive[name] = f"ClusterQueue {name} is inactive: stopPolicy {cq.stop_policy}"
        self._queue_order = [name for name in sorted(self.queues) if name not in self.inactive]

    def update_config(self, config: ClusterConfig) -> None:
        """Apply a new configuration live: quotas, queues and flavors are rebuilt, admitted usage is
        carried over (it may exceed the new quotas: nothing running is stopped), and every pending
        workload is requeued for the next cycle."""
        pending = [wl for k, wl in self.workloads.items() if k not in self.admitted]
        self._configure(config)
        self.orphans.clear()
        self._placement_parked.clear()
        if self.allocator is not None:
            self.allocator.clear_nomination()  # waiting preemptors nominate again in their next cycle
        for wl in self.admitted.values():
            self._charge_node(wl.admission.cluster_queue, self.usage_of[wl.key], +1)
        for wl in sorted(pending, key=lambda w: (w.order_time, w.key)):
            self._enqueue(wl)

    # -- membership ---------------------------------------------------------------------------------
    def cluster_queue_name(self, wl: Workload) -> Optional[str]:
        lq = self.config.local_queue(wl.namespace, wl.queue_name)
        return lq.cluster_queue if lq is not None else None

    def add_workload(self, wl: Workload) -> None:
        """Add a workload. One with ``admission`` set is taken as already admitted: its usage is
        charged (even above quota, as Kueue does for pre-admitted workloads) and its placement
        recorded."""
        if wl.key in self.workloads:
            raise ValueError(f"workload {wl.key} already exists")
        self.workloads[wl.key] = wl
        if wl.admission is not None:
            self._add_admitted(wl, None)
            if self.allocator is not None and wl.admission.placements:
                self.allocator.assign(wl.key, wl.admission.placements)
        else:
            self._enqueue(wl)

    def _enqueue(self, wl: Workload) -> None:
        lq_key = f"{wl.namespace}/{wl.queue_name}"
        lq = self.config.local_queues.get(lq_key)
        if lq is None:
            self.orphans[wl.key] = lq_key
            self.pending_reason[wl.key] = (REASON_MISCONFIGURED, f"LocalQueue {lq_key} doesn't exist")
            return
        q = self.queues.get(lq.cluster_queue)
        if q is None:
            self.orphans[wl.key] = lq_key
            self.pending_reason[wl.key] = (
                REASON_MISCONFIGURED,
                f"ClusterQueue {lq.cluster_queue} doesn't exist",
            )
            return
        q.push(wl, lq_key)
        if lq.cluster_queue in self.inactive:
            self.pending_reason[wl.key] = (REASON_INACTIVE, self.inactive[lq.cluster_queue])
        else:
            self.pending_reason.setdefault(wl.key, (REASON_PENDING, ""))

    def remove_workload(self, key: str, now: Optional[float] = None) -> Optional[Workload]:
        """Forget a workload (finished, cancelled, deleted). Frees its quota and devices and
        requeues the parked workloads that could now fit (after the requeue batch period counted
        from ``now``; at once without ``now``). Returns it, or None if unknown."""
        wl = self.workloads.pop(key, None)
        if wl is None:
            return None
        self.pending_reason.pop(key, None)
        self.orphans.pop(key, None)
        self._placement_parked.pop(key, None)
        self._placement_victims.discard(key)
        self._shapes.pop(key, None)
        unheld = False
        if self.allocator is not None:
            self.allocator.clear_nomination(key)
            unheld = self.allocator.drop_hold(key)
        if key in self.admitted:
            cq = self._remove_admitted(key)
            freed_devices = self.allocator.release(key) if self.allocator is not None else False
            self._requeue_after_release(cq, freed_devices, now)
        else:
            cq = self.cluster_queue_name(wl)
            if cq in self.queues:
                self.queues[cq].delete(key)
            if unheld:  # the devices held for it are free to others now
                self._requeue_after_release(cq, True, now)
        return wl

    def evict(self, key: str, now: float, *, reset_order: bool = False) -> Workload:
        """Take an admitted workload's quota and devices back and queue it again (preemption,
        eviction). ``evictions`` counts up. With ``reset_order`` its queue-order time becomes
        ``now`` (Kueue's requeuingStrategy ``timestamp: Eviction``); by default it keeps its place
        (Kueue orders preempted workloads by creation time)."""
        wl = self.admitted[key]
        cq = self._remove_admitted(key)
        devices = self.allocator.by_workload.get(key, ()) if self.allocator is not None else ()
        freed = self.allocator.release(key) if self.allocator is not None else False
        if key in self._placement_victims:
            # Devices freed by a placement preemption: the preemptor takes those nominated to it,
            # the rest wait for this workload, not for lower-priority work (DeviceAllocator.hold_for_victim).
            self._placement_victims.discard(key)
            self.allocator.hold_for_victim(key, wl.priority, devices)
        wl.admission = None
        wl.evictions += 1
        if reset_order:
            wl.queue_order_time = now
        self.pending_reason[key] = (REASON_PENDING, "evicted; waiting to be admitted again")
        self._enqueue(wl)
        self._requeue_after_release(cq, freed, now)
        return wl

    def _add_admitted(self, wl: Workload, now: Optional[float]) -> None:
        key = wl.key
        cq = wl.admission.cluster_queue
        usage = workload_usage(wl)
        self.admitted[key] = wl
        self.admitted_cq[key] = cq
        self.usage_of[key] = usage
        self.admit_time[key] = now
        if now is None:
            self._unknown_admit_times += 1
        self.admitted_by_cq.setdefault(cq, {})[key] = None
        self._charge_node(cq, usage, +1)

    def _remove_admitted(self, key: str) -> str:
        self.admitted.pop(key)
        cq = self.admitted_cq.pop(key)
        usage = self.usage_of.pop(key)
        if key in self.admit_time and self.admit_time.pop(key) is None:
            self._unknown_admit_times -= 1
        self.evicting.pop(key, None)
        self.terminating.discard(key)
        self.admitted_by_cq.get(cq, {}).pop(key, None)
        self._charge_node(cq, usage, -1)
        return cq

    def _charge_node(self, cq: str, usage: dict[FlavorResource, int], sign: int) -> None:
        node = self.tree.cluster_queues.get(cq)
        if node is None:
            return
        self._changed(cq)
        if sign > 0:
            add_usage(node, usage)
        else:
            remove_usage(node, usage)

    def _changed(self, cq_name: str) -> None:
        """The admitted state of ``cq_name``'s cohort tree changed (usage, admitted set, victims):
        nominations memoised for the tree are stale."""
        root = self._root_of.get(cq_name, cq_name)
        self._version[root] = self._version.get(root, 0) + 1

    def _shape(self, key: str, wl: Workload) -> int:
        """What a nomination reads of a workload besides its ClusterQueue and the cohort tree's
        state, as a small integer: namespace, priority, Kueue's resources-validation error and, per
        PodSet, name, count, minCount, requests and scheduling constraints (Kueue's scheduling-equivalence hash,
        ``pkg/workload/workload.go: computeSchedulingHash``)."""
        sid = self._shapes.get(key)
        if sid is None:
            shape = (wl.namespace, wl.priority, wl.invalid_resources) + tuple(
                (ps.name, ps.count, ps.min_count, tuple(sorted(ps.requests.items())),
                 tuple(sorted(ps.node_selector.items())), repr(ps.tolerations), repr(ps.required_affinity))
                for ps in wl.pod_sets
            )
            sid = self._shape_ids.setdefault(shape, len(self._shape_ids))
            self._shapes[key] = sid
        return sid

    def _requeue_after_release(self, cq_name: str, freed_devices: bool, now: Optional[float] = None) -> None:
        node = self.tree.cluster_queues.get(cq_name)
        root = node.root() if node is not None else None
        batch = self.options.requeue_batch_seconds
        if root is not None and now is not None and batch > 0:
            # Kueue's delaying workqueue: the first release schedules the requeue; later ones join it.
            self._requeue_due.setdefault(root.name, now + batch)
        else:
            self._requeue_tree(root, cq_name)
        if freed_devices and self._placement_parked:
            for name in set(self._placement_parked.values()):
                q = self.queues.get(name)
                if q is not None:
                    q.requeue_inadmissible()
            self._placement_parked.clear()

    def _requeue_tree(self, root: Optional[QuotaNode], cq_name: str) -> None:
        names = [n.name for n in root.subtree_cluster_queues()] if root is not None else [cq_name]
        for name in names:
            q = self.queues.get(name)
            if q is not None:
                q.requeue_inadmissible()

    def next_requeue_time(self) -> Optional[float]:
        """When the next batched requeue of parked workloads is due (None: none pending). A clocked
        driver (the simulator) runs a cycle then."""
        return min(self._requeue_due.values()) if self._requeue_due else None

    def requeue_all(self) -> None:
        """Put every parked workload back into its heap (configuration or inventory changed)."""
        for q in self.queues.values():
            q.requeue_inadmissible()
        self._placement_parked.clear()

    # -- the cycle -----------------------------------------------------------------------------------
    def schedule(self, now: float) -> CycleResult:
        """Run one scheduling cycle at time ``now`` (seconds). See the module docstring."""
        result = CycleResult()
        if self._requeue_due:
            for root_name, due in list(self._requeue_due.items()):
                if due <= now:
                    del self._requeue_due[root_name]
                    root = self.tree.cohorts.get(root_name) or self.tree.cluster_queues.get(root_name)
                    self._requeue_tree(root, root_name)
        entries: list[_Entry] = []
        heads = max(1, self.options.heads_per_cluster_queue)
        queues, cluster_queues, workloads = self.queues, self.config.cluster_queues, self.workloads
        pending_reason, requeued, nominate = self.pending_reason, result.requeued, self._nominate
        shapes, memo, version, root_of = self._shapes, self._memo, self._version, self._root_of
        for name in self._queue_order:
            q = queues[name]
            if not q._active:
                continue
            cq = cluster_queues[name]
            park_early = heads == 1 or cq.queueing_strategy != STRICT_FIFO
            # The memo probe of ``_nominate``, inlined for the common key (a queue's heads are
            # mostly workloads of a few shapes).
            nominations = None
            if not (self._unknown_admit_times
                    or cq.preemption.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY):
                root = root_of[name]
                cached = memo.get(root)
                if cached is not None and cached[0] == version.get(root, 0):
                    nominations = cached[1]
            for _ in range(heads):
                key = q.pop()
                if key is None:
                    break
                result.heads += 1
                wl = workloads[key]
                hit = nominations.get((name, shapes.get(key))) if nominations is not None else None
                assignment, targets, park = hit if hit is not None else nominate(key, wl, cq, now)
                if park is not None and park_early:
                    # Parked whatever the other entries of this cycle do (see ``_parks_whatever``):
                    # no need to take it through the iteration (``_requeue``, not immediate).
                    if pending_reason.get(key) != park:
                        pending_reason[key] = park
                        result.changed = True
                    if q.requeue(key, immediate=False):
                        result.changed = True
                    requeued.append(key)
                else:
                    e = _Entry(wl, cq, assignment, targets=list(targets))
                    if park is not None:
                        e.reason, e.message = park
                    entries.append(e)
        if not entries:
            return result

        preemptor_first = self.options.preemptor_first
        # Preemptors some of whose own victims still run: the quota free now is not theirs (it
        # was freed by another preemptor's victims, or by a job's end), so the ready preemptors
        # whose victims are all gone go first (each victim's quota to its own preemptor).
        still_waiting = set(self.evicting.values()) if preemptor_first else set()

        def ready_preemptor(e: _Entry) -> bool:
            return (e.assignment is not None and e.assignment.mode == FIT
                    and queues[e.cq.name].sticky == e.wl.key)

        def iteration_key(e: _Entry):
            if e.sort_key is None:
                borrows = e.assignment.borrowing_level if e.assignment is not None else 0
                e.sort_key = (borrows, -e.wl.priority, e.wl.order_time, e.wl.uid or e.wl.key)
                if preemptor_first:
                    e.sort_key = (not ready_preemptor(e), e.wl.key in still_waiting) + e.sort_key
            return e.sort_key

        # Entries of one ClusterQueue (several only with heads_per_cluster_queue > 1) are taken in
        # their queue order: at each step only each queue's first remaining entry is eligible, and a
        # StrictFIFO queue stops at its first entry that is not admitted. With one head per queue
        # this is exactly Kueue's iteration.
        by_cq: dict[str, list[_Entry]] = {}
        for e in entries:
            by_cq.setdefault(e.cq.name, []).append(e)
        # Usage held for the rest of this cycle only (preemptors, reservations): undone at the end.
        self._cycle_holds: list[tuple[QuotaNode, dict[FlavorResource, int]]] = []
        self._cycle_targets: set[str] = set()
        fair = self.config.fair_sharing.enable
        try:
            if fair:
                while by_cq:
                    # Kueue's fairSharingIterator: a DRS tournament, again after every entry, since
                    # each admission changes the shares.
                    eligible = sorted((lst[0] for lst in by_cq.values()), key=iteration_key)
                    if preemptor_first and ready_preemptor(eligible[0]):
                        self._process_next(eligible[0], by_cq, now, result)
                    else:
                        self._process_next(self.fair.pick(eligible), by_cq, now, result)
            else:
                heap = [(iteration_key(lst[0]), name) for name, lst in by_cq.items()]
                heapq.heapify(heap)
                while heap:
                    _, name = heapq.heappop(heap)
                    lst = by_cq.get(name)
                    if not lst:
                        continue
                    self._process_next(lst[0], by_cq, now, result)
                    if name in by_cq:
                        heapq.heappush(heap, (iteration_key(by_cq[name][0]), name))
        finally:
            for node, usage in reversed(self._cycle_holds):
                remove_usage(node, usage)
            self._cycle_holds = []
        return result

    def _process_next(self, e: _Entry, by_cq: dict, now: float, result: CycleResult) -> None:
        lst = by_cq[e.cq.name]
        lst.pop(0)
        admitted_before = len(result.admitted)
        self._process(e, now, result)
        if len(result.admitted) == admitted_before and e.cq.queueing_strategy == STRICT_FIFO:
            for rest in lst:  # StrictFIFO: nothing behind a waiting head
                self.queues[e.cq.name].requeue(rest.wl.key, immediate=True)
                result.requeued.append(rest.wl.key)
            lst.clear()
        if not lst:
            del by_cq[e.cq.name]

    def _can_preempt_while_borrowing(self, cq: ClusterQueue) -> bool:
        """Kueue ``canPreemptWhileBorrowing``."""
        bwc = cq.preemption.borrow_within_cohort
        if bwc is not None and bwc.policy != NEVER:
            return True
        return self.config.fair_sharing.enable and cq.preemption.reclaim_within_cohort != NEVER

    def _nominate(self, key: str, wl: Workload, cq: ClusterQueue, now: float) -> tuple:
        """Nominate a head: ``(assignment, targets, park)``. ``assignment``: the flavor assignment
        (None: Misconfigured); ``targets``: preemption victims (a tuple of Target); ``park``:
        ``(reason, message)`` when the head is parked whatever else happens in the cycle, else None.

        A nomination reads only the cohort tree's admitted state (usage, admitted workloads, victims
        being evicted), which ``_changed`` versions, and the workload's shape (``_shape``): while
        the version holds, a workload of the same shape in the same ClusterQueue gets the same
        nomination, so it is computed once. Kueue computes each; the decisions are the same.
        """
        root = self._root_of[cq.name]
        version = self._version.get(root, 0)
        cached = self._memo.get(root)
        if cached is None or cached[0] != version:
            cached = (version, {})
            self._memo[root] = cached
        mkey = (cq.name, self._shape(key, wl))
        if cq.preemption.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY:
            mkey += (wl.order_time,)  # newer workloads of equal priority are candidates
        if self._unknown_admit_times:
            mkey += (now,)  # candidates without an admission time are ordered as admitted now
        hit = cached[1].get(mkey)
        if hit is None:
            hit = self._nominate_uncached(wl, cq, now)
            cached[1][mkey] = hit
        return hit

    @staticmethod
    def _parks_whatever(cq: ClusterQueue, a: Assignment, targets: list) -> Optional[tuple[str, str]]:
        """(reason, message) when ``_process`` parks a head nominated ``a`` with ``targets``
        whatever the entries before it in the cycle do: it does not fit even after preemption, in
        a BestEffortFIFO queue, and changes and reserves nothing; None otherwise."""
        if cq.queueing_strategy == STRICT_FIFO:
            return None
        if a.mode == NO_FIT:
            return (REASON_EXCEEDS_MAX_QUOTA if a.exceeds_max else REASON_NO_FIT), a.message()
        if a.mode != FIT and not targets and cq.preemption.reclaim_within_cohort == ANY:
            return REASON_NO_FIT, a.message()
        return None

    def _nominate_uncached(self, wl: Workload, cq: ClusterQueue, now: float) -> tuple:
        selector = cq.namespace_selector
        if selector is None or not selector.matches(self.config.namespace_labels(wl.namespace)):
            return None, (), _MISCONFIGURED_NAMESPACE
        if wl.invalid_resources is not None:
            # Kueue's nominate: workload.ValidateResources (a request above its limit) fails before
            # flavor assignment; the workload stays pending with Kueue's message, never admitted.
            return None, (), (REASON_PENDING, wl.invalid_resources)
        node = self.tree.cluster_queues[cq.name]
        memo: dict = {}

        def get_targets(req: dict, frs: set) -> list[Target]:
            # The same search answers the oracle and the nomination when a workload asks for one
            # (flavor, resource): compute it once per nomination.
            k = (tuple(sorted(req.items())), tuple(sorted(frs)))
            if k not in memo:
                pre = self.preemptor
                if not self.config.fair_sharing.enable:
                    memo[k] = pre.classical_preemptions(wl, cq, req, frs, now)
                else:  # Kueue fairPreemptionStrategy over the same candidates, in the same order
                    candidates = pre.find_candidates(wl, cq, frs)
                    memo[k] = fair_preemptions(self, wl, cq, req, frs, pre.candidates_ordering(
                        candidates, cq.name, now)) if candidates else []
            return memo[k]

        def oracle(fr: FlavorResource, val: int) -> tuple[int, int]:
            # Kueue PreemptionOracle.SimulatePreemption: would preemption make room for val of fr?
            targets = get_targets({fr: val}, {fr})
            if not targets:
                return NO_CANDIDATES, 0
            removed = [(self.tree.cluster_queues[t.cluster_queue], self.usage_of[t.key]) for t in targets]
            for n, u in removed:
                remove_usage(n, u)
            borrow, _ = node.borrowing_level(fr, val)
            for n, u in removed:
                add_usage(n, u)
            own = any(t.cluster_queue == cq.name for t in targets)
            return (PREEMPT_MODE if own else RECLAIM), borrow

        cpwb = self._can_preempt_while_borrowing(cq)

        def attempt(counts):
            a = assign_flavors(wl.pod_sets, cq, node, self.config, counts=counts, oracle=oracle,
                               can_preempt_while_borrowing=cpwb)
            targets: list[Target] = []
            if a.mode in (NO_CANDIDATES, PREEMPT_MODE, RECLAIM):
                targets = get_targets(a.usage, a.preempt_frs)
            return a, targets

        assignment, targets = attempt(None)
        if assignment.mode != FIT and not targets and any(
            ps.min_count is not None and ps.min_count < ps.count for ps in wl.pod_sets
        ):
            partial = self._partial_admission(wl, attempt)
            if partial is not None:
                assignment, targets = partial
        return assignment, tuple(targets), self._parks_whatever(cq, assignment, targets)

    @staticmethod
    def _partial_admission(wl: Workload, attempt):
        """Kueue ``PodSetReducer.Search`` (``flavorassigner/podset_reducer.go``): binary search for the
        smallest reduction — counts between ``minCount`` and ``count``, each PodSet shrunk in
        proportion to its own range (rounded up) — that fits or fits after preemption."""
        full = [ps.count for ps in wl.pod_sets]
        deltas = [ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in wl.pod_sets]
        total = sum(deltas)
        if total == 0:
            return None

        def counts_for(i: int) -> list[int]:
            return [c - (d * i + total - 1) // total for c, d in zip(full, deltas)]

        best = None
        lo, hi = 0, total + 1
        while lo < hi:  # the first i (least reduction) that fits; fitting is monotone in i
            mid = (lo + hi) // 2
            a, targets = attempt(counts_for(mid))
            if a.mode == FIT or targets:
                best = (a, targets)
                hi = mid
            else:
                lo = mid + 1
        return best

    def _fits_without(self, node: QuotaNode, usage: dict[FlavorResource, int], gone: Iterable[str]) -> bool:
        """Would ``usage`` fit ``node`` if the admitted workloads ``gone`` released their quota?"""
        removed = []
        for key in gone:
            if key in self.admitted:
                n = self.tree.cluster_queues[self.admitted_cq[key]]
                remove_usage(n, self.usage_of[key])
                removed.append((n, self.usage_of[key]))
        try:
            return all(v <= node.available(fr) for fr, v in usage.items())
        finally:
            for n, u in removed:
                add_usage(n, u)

    def _hold(self, node: QuotaNode, usage: dict[FlavorResource, int]) -> None:
        add_usage(node, usage)
        self._cycle_holds.append((node, usage))

    def _reserve_for_unreclaimable(self, e: _Entry, node: QuotaNode) -> None:
        """Kueue ``resourcesToReserve``: a workload that needs preemption but found no victims, in
        a ClusterQueue that cannot always reclaim, keeps what it could use away from lower entries."""
        a = e.assignment
        reserved: dict[FlavorResource, int] = {}
        for fr, val in a.usage.items():
            used = node.usage.get(fr, 0)
            nominal = node.nominal.get(fr, 0)
            if a.borrows:
                bl = node.borrowing_limit.get(fr)
                reserved[fr] = val if bl is None else max(0, min(val, nominal + bl - used))
            else:
                reserved[fr] = max(0, min(val, nominal - used))
        reserved = {fr: v for fr, v in reserved.items() if v > 0}
        if reserved:
            self._hold(node, reserved)

    def _process(self, e: _Entry, now: float, result: CycleResult) -> None:
        wl, cq = e.wl, e.cq
        q = self.queues[cq.name]
        if e.assignment is None:
            self._requeue(e, q, result, immediate=False)
            return
        a = e.assignment
        mode = a.mode
        if mode == NO_FIT:
            e.reason = REASON_EXCEEDS_MAX_QUOTA if a.exceeds_max else REASON_NO_FIT
            e.message = a.message()
            self._requeue(e, q, result, immediate=False)
            return
        node = self.tree.cluster_queues[cq.name]
        if mode != FIT:
            if not e.targets:
                e.reason, e.message = REASON_NO_FIT, a.message()
                if cq.preemption.reclaim_within_cohort != ANY:
                    self._reserve_for_unreclaimable(e, node)
                self._requeue(e, q, result, immediate=False)
                return
            keys = [t.key for t in e.targets]
            if any(k in self._cycle_targets for k in keys):
                e.reason = REASON_NO_FIT
                e.message = "Workload has overlapping preemption targets with another workload"
                self._requeue(e, q, result, immediate=True)
                return
            if not self._fits_without(node, a.usage, list(self._cycle_targets) + keys):
                e.reason = REASON_NO_FIT
                e.message = "Workload no longer fits after processing another workload"
                self._requeue(e, q, result, immediate=True)
                return
            self._cycle_targets.update(keys)
            self._hold(node, a.usage)
            for t in e.targets:
                if t.key not in self.evicting:
                    self.evicting[t.key] = wl.key
                    self._changed(t.cluster_queue)  # candidates being evicted are ordered first
                    result.preempted.append(Preemption(t.key, wl.key, t.reason, t.cluster_queue, dict(a.usage)))
                    result.changed = True
            e.reason = REASON_PENDING
            e.message = f"Pending the preemption of {len(keys)} workload(s)"
            q.sticky = wl.key  # stays at the head until admitted (Kueue's sticky preemptor)
            self._requeue(e, q, result, immediate=True)
            return
        if not self._fits_without(node, a.usage, self._cycle_targets):
            e.reason = REASON_NO_FIT
            e.message = "Workload no longer fits after processing another workload"
            self._requeue(e, q, result, immediate=True)
            return
        placements: list[DevicePlacement] = []
        if self.allocator is not None:
            pod_sets = [(ps, pa.count, device_flavors(ps, pa.flavors, self.config.resource_transformations))
                        for ps, pa in zip(wl.pod_sets, a.pod_sets)]
            placed, why = self.allocator.place(wl.key, pod_sets, self.config.resource_flavors, wl.priority)
            if placed is None:
                if self._preempt_for_placement(e, pod_sets, node, now, result):
                    return
                self.allocator.clear_nomination(wl.key)
                e.reason = REASON_PLACEMENT_FAILED
                e.message = why
                self._placement_parked[wl.key] = cq.name
                self._requeue(e, q, result, immediate=False)
                return
            placements = placed
        wl.admission = Admission(
            cluster_queue=cq.name,
            pod_set_assignments=[
                PodSetAssignment(
                    name=pa.name,
                    flavors=dict(pa.flavors),
                    resource_usage=dict(pa.usage),
                    count=pa.count,
                )
                for ps, pa in zip(wl.pod_sets, a.pod_sets)
            ],
            placements=placements,
        )
        self._add_admitted(wl, now)
        q.delete(wl.key)
        self.pending_reason.pop(wl.key, None)
        self._placement_parked.pop(wl.key, None)
        result.admitted.append(wl)
        result.changed = True

    def _preempt_for_placement(self, e: _Entry, pod_sets: list, node: QuotaNode, now: float,
                               result: CycleResult) -> bool:
        """The quota fits but the pods cannot all be placed: preempt lower-priority workloads on the
        nodes as kube-scheduler would (``preemption.Preemptor.placement_candidates`` says which
        ones the ClusterQueue's rules allow; ``placement.DeviceAllocator.preemption_victims``
        picks the fewest and least important, node by node). True when the workload now waits for
        victims (new ones, or those already being evicted for it): as a quota preemptor, it stays
        its queue's sticky head, holds its quota for the rest of the cycle, and the devices it
        will take are nominated to it, kept from workloads of lower or equal priority. Where the
        devices of workloads already stopping (``terminating``, or its own victims) are enough, it
        waits for them and preempts nobody. False: preemption cannot help (the caller parks it
        with PlacementFailed)."""
        wl, cq = e.wl, e.cq
        alloc = self.allocator
        flavors = self.config.resource_flavors
        own = [k for k, p in self.evicting.items() if p == wl.key and k in self.admitted]
        # Waiting would do: devices of workloads already stopping (its own victims, and those the
        # caller stops for its own reasons: ``terminating``) count as free; nobody else is evicted
        # for what they will free (issue 34 item 8).
        ending = sorted(k for k in self.terminating if k in self.admitted and k not in self.evicting)
        soon = own + ending
        blocked = alloc.blocked_for(wl.key, wl.priority)
        devices = alloc.fits(pod_sets, flavors, soon, blocked) if soon else None
        new: list[str] = []
        if devices is None:
            candidates = {k: v for k, v in self.preemptor.placement_candidates(wl, cq, now).items()
                          if k not in self._cycle_targets or k in own}
            if not candidates:
                return False
            found = alloc.preemption_victims(pod_sets, flavors, candidates, soon, blocked)
            if found is None:
                return False
            new, devices = [k for k in found[0] if k not in own], found[1]
        self._cycle_targets.update(new)
        self._hold(node, e.assignment.usage)
        for key in new:
            self.evicting[key] = wl.key
            self._placement_victims.add(key)
            victim_cq = self.admitted_cq[key]
            self._changed(victim_cq)  # candidates being evicted are ordered first
            result.preempted.append(Preemption(key, wl.key, IN_NODE_PLACEMENT, victim_cq, dict(e.assignment.usage)))
            result.changed = True
        alloc.nominate(wl.key, wl.priority, devices)
        e.reason = REASON_PENDING
        if own or new:
            e.message = f"Pending the preemption of {len(own) + len(new)} workload(s)"
        else:
            taken = set(devices)
            n = sum(1 for k in ending if taken.intersection(alloc.by_workload.get(k, ())))
            e.message = f"Pending the end of {n} workload(s) being stopped, whose devices it will take"
        self.queues[cq.name].sticky = wl.key  # stays at the head until admitted, as a quota preemptor
        self._requeue(e, self.queues[cq.name], result, immediate=True)
        return True

    def _requeue(self, e: _Entry, q: ClusterQueueQueue, result: CycleResult, *, immediate: bool) -> None:
        key = e.wl.key
        before = self.pending_reason.get(key)
        now_reason = (e.reason, e.message)
        if before != now_reason:
            result.changed = True
        self.pending_reason[key] = now_reason
        if q.requeue(key, immediate=immediate):
            result.changed = True
        result.requeued.append(key)

    def run_until_stable(self, now: float, max_cycles: int = 1_000_000, *, evict_at_once: bool = True) -> int:
        """Run cycles until one changes nothing; returns the number of cycles that changed something.

        With ``evict_at_once`` every victim is evicted as soon as it is chosen (no time passes, as
        in ``simulate``)."""
        cycles = 0
        while cycles < max_cycles:
            r = self.schedule(now)
            if evict_at_once:
                for p in r.preempted:
                    if p.victim in self.admitted:
                        self.evict(p.victim, now)
            if r.heads == 0 or not r.changed:
                break
            cycles += 1
        return cycles

    # -- reading state -----------------------------------------------------------------------------
    def position(self, key: str) -> Optional[tuple[int, int]]:
        """(positionInClusterQueue, positionInLocalQueue), 0-based; None unless queued."""
        wl = self.workloads.get(key)
        if wl is None or key in self.admitted or key in self.orphans:
            return None
        cq = self.cluster_queue_name(wl)
        q = self.queues.get(cq)
        return q.position(key) if q is not None else None

    def reason(self, key: str) -> Optional[tuple[str, str]]:
        """(reason, message) of a pending workload; None if admitted or unknown."""
        if key in self.admitted:
            return None
        return self.pending_reason.get(key)

    def pending_keys(self, cq_name: str) -> Iterable[str]:
        q = self.queues.get(cq_name)
        return q.ordered_keys() if q is not None else iter(())

    def usage(self, cq_name: str) -> dict[tuple[str, str], int]:
        node = self.tree.cluster_queues.get(cq_name)
        return dict(node.usage) if node is not None else {}
