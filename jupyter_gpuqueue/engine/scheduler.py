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
   and, above nominal quota, to its cohort.
5. **Requeue** the rest with their reason: ``StrictFIFO`` heads go back and keep blocking;
   ``BestEffortFIFO`` heads are parked until quota is freed somewhere in their cohort tree.

Nothing here reads a clock: ``now`` is passed in. Given the same calls, the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from .flavors import FIT, NO_FIT, Assignment, assign_flavors
from .model import (
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
from .placement import DeviceAllocator
from .queues import ClusterQueueQueue
from .quota import QuotaTree


@dataclass
class SchedulerOptions:
    """Knobs whose defaults reproduce Kueue's decisions.

    ``heads_per_cluster_queue``: workloads popped per ClusterQueue per cycle. Kueue pops one
    (``Manager.Heads``), which throttles deep queues (Kueue issue #14477); more than one is our
    documented extension.
    """

    heads_per_cluster_queue: int = 1


@dataclass
class CycleResult:
    """What one cycle decided. ``admitted``: workloads admitted (their ``admission`` set).
    ``requeued``: keys of heads that were considered and stay pending. ``changed``: whether
    anything observable changed (an admission, a parking, a new reason)."""

    admitted: list[Workload] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    heads: int = 0
    changed: bool = False


@dataclass(slots=True)
class _Entry:
    wl: Workload
    cq: ClusterQueue
    assignment: Optional[Assignment]
    reason: str = ""
    message: str = ""


class Scheduler:
    """Live admission state: every known workload, pending or admitted.

    Build it from a ``ClusterConfig`` and optionally an ``Inventory`` (without one, admission is by
    quota alone, as in Kueue). Then ``add_workload`` / ``remove_workload`` as workloads come and go,
    and call ``schedule(now)`` for a cycle. Positions and pending reasons are read at any time.
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
        self._configure(config)

    # -- configuration ------------------------------------------------------------------------------
    def _configure(self, config: ClusterConfig) -> None:
        self.config = config
        self.tree = QuotaTree(config)
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

    def update_config(self, config: ClusterConfig) -> None:
        """Apply a new configuration live: quotas, queues and flavors are rebuilt, admitted usage is
        carried over (it may exceed the new quotas: nothing running is stopped), and every pending
        workload is requeued for the next cycle."""
        pending = [wl for k, wl in self.workloads.items() if k not in self.admitted]
        self._configure(config)
        self.orphans.clear()
        self._placement_parked.clear()
        for wl in self.admitted.values():
            self._charge(wl, +1)
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
            self.admitted[wl.key] = wl
            self._charge(wl, +1)
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

    def remove_workload(self, key: str) -> Optional[Workload]:
        """Forget a workload (finished, cancelled, deleted). Frees its quota and devices and
        requeues the parked workloads that could now fit. Returns it, or None if unknown."""
        wl = self.workloads.pop(key, None)
        if wl is None:
            return None
        self.pending_reason.pop(key, None)
        self.orphans.pop(key, None)
        self._placement_parked.pop(key, None)
        if key in self.admitted:
            del self.admitted[key]
            self._charge(wl, -1)
            freed_devices = self.allocator.release(key) if self.allocator is not None else False
            self._requeue_after_release(wl.admission.cluster_queue, freed_devices)
        else:
            cq = self.cluster_queue_name(wl)
            if cq in self.queues:
                self.queues[cq].delete(key)
        return wl

    def evict(self, key: str, now: float, *, reset_order: bool = False) -> Workload:
        """Take an admitted workload's quota and devices back and queue it again (preemption,
        eviction). ``evictions`` counts up. With ``reset_order`` its queue-order time becomes
        ``now`` (Kueue's requeuingStrategy ``timestamp: Eviction``); by default it keeps its place
        (Kueue orders preempted workloads by creation time)."""
        wl = self.admitted.pop(key)
        self._charge(wl, -1)
        freed = self.allocator.release(key) if self.allocator is not None else False
        cq = wl.admission.cluster_queue
        wl.admission = None
        wl.evictions += 1
        if reset_order:
            wl.queue_order_time = now
        self.pending_reason[key] = (REASON_PENDING, "evicted; waiting to be admitted again")
        self._enqueue(wl)
        self._requeue_after_release(cq, freed)
        return wl

    def _charge(self, wl: Workload, sign: int) -> None:
        adm = wl.admission
        node = self.tree.cluster_queues.get(adm.cluster_queue)
        if node is None:
            return
        for psa in adm.pod_set_assignments:
            for r, flavor in psa.flavors.items():
                q = psa.resource_usage.get(r, 0)
                if q <= 0:
                    continue
                if sign > 0:
                    node.add_usage((flavor, r), q)
                else:
                    node.remove_usage((flavor, r), q)

    def _requeue_after_release(self, cq_name: str, freed_devices: bool) -> None:
        node = self.tree.cluster_queues.get(cq_name)
        names = [n.name for n in node.root().subtree_cluster_queues()] if node is not None else [cq_name]
        for name in names:
            q = self.queues.get(name)
            if q is not None:
                q.requeue_inadmissible()
        if freed_devices and self._placement_parked:
            for name in set(self._placement_parked.values()):
                q = self.queues.get(name)
                if q is not None:
                    q.requeue_inadmissible()
            self._placement_parked.clear()

    def requeue_all(self) -> None:
        """Put every parked workload back into its heap (configuration or inventory changed)."""
        for q in self.queues.values():
            q.requeue_inadmissible()
        self._placement_parked.clear()

    # -- the cycle -----------------------------------------------------------------------------------
    def schedule(self, now: float) -> CycleResult:
        """Run one scheduling cycle at time ``now`` (seconds). See the module docstring."""
        result = CycleResult()
        entries: list[_Entry] = []
        for name in sorted(self.queues):
            if name in self.inactive:
                continue
            q = self.queues[name]
            cq = self.config.cluster_queues[name]
            for _ in range(max(1, self.options.heads_per_cluster_queue)):
                key = q.pop()
                if key is None:
                    break
                entries.append(self._nominate(self.workloads[key], cq))
        result.heads = len(entries)
        if not entries:
            return result

        def iteration_key(e: _Entry):
            borrows = e.assignment.borrowing_level if e.assignment is not None else 0
            return (borrows > 0, -e.wl.priority, e.wl.order_time, e.wl.uid or e.wl.key)

        entries.sort(key=iteration_key)
        for e in entries:
            self._process(e, now, result)
        return result

    def _nominate(self, wl: Workload, cq: ClusterQueue) -> _Entry:
        selector = cq.namespace_selector
        if selector is None or not selector.matches(self.config.namespace_labels(wl.namespace)):
            return _Entry(wl, cq, None, REASON_MISCONFIGURED,
                          "Workload namespace doesn't match ClusterQueue selector")
        node = self.tree.cluster_queues[cq.name]
        assignment = assign_flavors(wl.pod_sets, cq, node, self.config)
        return _Entry(wl, cq, assignment)

    def _process(self, e: _Entry, now: float, result: CycleResult) -> None:
        wl, cq = e.wl, e.cq
        q = self.queues[cq.name]
        if e.assignment is None:
            self._requeue(e, q, result, immediate=False)
            return
        a = e.assignment
        if a.mode != FIT:
            e.reason = REASON_EXCEEDS_MAX_QUOTA if (a.mode == NO_FIT and a.exceeds_max) else REASON_NO_FIT
            e.message = a.message()
            self._requeue(e, q, result, immediate=False)
            return
        node = self.tree.cluster_queues[cq.name]
        for fr, val in a.usage.items():
            if val > node.available(fr):
                e.reason = REASON_NO_FIT
                e.message = "Workload no longer fits after processing another workload"
                self._requeue(e, q, result, immediate=True)
                return
        placements: list[DevicePlacement] = []
        if self.allocator is not None:
            pod_sets = [(ps, pa.count, pa.flavors) for ps, pa in zip(wl.pod_sets, a.pod_sets)]
            placed, why = self.allocator.place(wl.key, pod_sets, self.config.resource_flavors)
            if placed is None:
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
                    resource_usage={r: q_ * pa.count for r, q_ in ps.requests.items() if r in pa.flavors},
                    count=pa.count,
                )
                for ps, pa in zip(wl.pod_sets, a.pod_sets)
            ],
            placements=placements,
        )
        self._charge(wl, +1)
        q.delete(wl.key)
        self.admitted[wl.key] = wl
        self.pending_reason.pop(wl.key, None)
        self._placement_parked.pop(wl.key, None)
        result.admitted.append(wl)
        result.changed = True

    def _requeue(self, e: _Entry, q: ClusterQueueQueue, result: CycleResult, *, immediate: bool) -> None:
        key = e.wl.key
        before = self.pending_reason.get(key)
        now_reason = (e.reason, e.message)
        if before != now_reason:
            result.changed = True
        self.pending_reason[key] = now_reason
        parked_before = len(q.parked)
        q.requeue(key, immediate=immediate)
        if len(q.parked) != parked_before:
            result.changed = True
        result.requeued.append(key)

    def run_until_stable(self, now: float, max_cycles: int = 1_000_000) -> int:
        """Run cycles until one changes nothing; returns the number of cycles that changed something."""
        cycles = 0
        while cycles < max_cycles:
            r = self.schedule(now)
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
