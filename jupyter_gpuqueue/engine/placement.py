"""Placing an admitted workload's pods onto concrete GPUs and MIG devices.

Kueue admits by quota and leaves nodes to kube-scheduler; on a workstation we are the scheduler, so
admission also needs a placement: every pod's devices on one node whose labels match the assigned
ResourceFlavor's ``nodeLabels`` and whose taints the pod (plus the flavor's tolerations) tolerates —
the same node-matching rule Kueue injects into pods (``pkg/podset``: flavor nodeLabels become the
pod's nodeSelector). A workload whose quota fits but whose pods cannot all be placed is not admitted
and waits with reason ``PlacementFailed``; its pods are placed all or nothing (gang).

Best fit: a pod goes to the matching node with the *fewest* free devices of the kind it needs that
still has enough (packing, so large requests still find whole nodes), ties by node name; inside a
node the lowest GPU indices are taken. MIG slices of a profile are taken from the GPU that already
has the most slices in use (packing, so whole GPUs stay free).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Optional

from .model import (
    GPU,
    MIG_PREFIX,
    DevicePlacement,
    Inventory,
    Node,
    PodSet,
    ResourceFlavor,
    Toleration,
    is_device_resource,
)


def device_flavors(ps: PodSet, flavors: dict[str, str], transformations: dict) -> dict[str, str]:
    """Resource → assigned flavor for placing ``ps``'s devices: ``flavors`` (the assignment), plus,
    for a device resource that a ``Replace`` transformation took out of quota accounting (e.g. a
    MIG profile counted as GPU slices), the flavor assigned to its outputs."""
    out = dict(flavors)
    for r in ps.requests:
        t = transformations.get(r) if transformations else None
        if r in out or t is None:
            continue
        for o in sorted(t.outputs):
            if o in flavors:
                out[r] = flavors[o]
                break
    return out


def node_matches_flavor(node: Node, flavor: Optional[ResourceFlavor], tolerations: list[Toleration]) -> bool:
    """True if a pod with ``tolerations`` that was assigned ``flavor`` may run on ``node``."""
    if flavor is not None:
        for k, v in flavor.node_labels.items():
            if node.labels.get(k) != v:
                return False
        tolerations = list(tolerations) + list(flavor.tolerations)
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


_PLANNED = "\x00planned"  # owner of a device a dry run has given to a pod
_NOMINATED = "\x00nominated"  # owner of a device kept for a waiting preemptor


class DeviceAllocator:
    """Which devices of an Inventory are free, and who holds the others.

    Device ids: whole GPUs are ``"<node>/<index>"`` internally and ``"<index>"`` in placements
    (NVML's order; ``service/devices.py`` names them to CUDA); MIG devices are their ``MIG-…`` UUIDs.
    """

    def __init__(self, inventory: Inventory):
        self.inventory = inventory
        self.owner: dict[str, str] = {}  # device id -> workload key
        self.by_workload: dict[str, list[str]] = {}
        # Waiting preemptors' devices: key -> (priority, device ids). See ``blocked_for``.
        self.nominated: dict[str, tuple[int, frozenset[str]]] = {}
        # Devices freed by a placement preemption, kept for the evicted workload against lower
        # priorities until it is placed again: key -> (priority, device ids). See ``hold_for_victim``.
        self.held: dict[str, tuple[int, frozenset[str]]] = {}
        # Failed placements, remembered until a device is taken or freed (``_state`` counts those
        # changes). A failed ``place`` changes nothing, so the same request fails the same way
        # until then: when quota fits but the devices are fragmented, the BestEffortFIFO walk
        # after a release tries every queued head, most of them of a few shapes (1-8 GPUs), and
        # each try scanned every node (BENCHMARKS.md, "The live service"). Decisions unchanged.
        self._state = 0
        self._failed: dict[tuple, str] = {}
        self._failed_state = 0
        # Static structure, computed once.
        self._gpus: dict[str, list[tuple[int, str]]] = {}  # node -> [(index, id)] whole GPUs (MIG off)
        self._mig: dict[str, dict[str, list[tuple[int, str]]]] = {}  # node -> profile -> [(gpu index, uuid)]
        self._mig_slices: dict[str, tuple[str, int, int]] = {}  # uuid -> (node, gpu index, slices)
        for node in inventory.nodes:
            self._index(node)

    def _index(self, node: Node) -> None:
        whole = []
        mig: dict[str, list[tuple[int, str]]] = {}
        for gpu in node.gpus:
            if gpu.mig is None:
                whole.append((gpu.index, f"{node.name}/{gpu.index}"))
            else:
                for dev in gpu.mig:
                    mig.setdefault(dev.profile, []).append((gpu.index, dev.uuid))
                    self._mig_slices[dev.uuid] = (node.name, gpu.index, dev.slices)
        self._gpus[node.name] = sorted(whole)
        self._mig[node.name] = mig

    def add_node(self, node: Node) -> None:
        """A Node that joined the inventory (a cluster's new Node): appended to it, its devices
        free. Raises ValueError when the inventory has a Node of that name."""
        if any(n.name == node.name for n in self.inventory.nodes):
            raise ValueError(f"node {node.name} is already in the inventory")
        self.inventory.nodes.append(node)
        self._index(node)
        self.nodes_changed()

    def nodes_changed(self) -> None:
        """The inventory's Nodes changed in place (taints: a node cordoned, not Ready, back): the
        placements remembered as failed may fit now, and those that fitted may not."""
        self._state += 1

    # -- capacity views ---------------------------------------------------------------------------
    def devices_of(self, node: str, resource: str) -> list[tuple[int, str]]:
        if resource == GPU:
            return self._gpus.get(node, [])
        if resource.startswith(MIG_PREFIX):
            return self._mig.get(node, {}).get(resource[len(MIG_PREFIX):], [])
        return []

    def free_devices(self, node: str, resource: str) -> list[tuple[int, str]]:
        return [d for d in self.devices_of(node, resource) if d[1] not in self.owner]

    def totals(self, resource: str, nodes: list[Node]) -> tuple[int, int]:
        """(free, total) devices of ``resource`` over ``nodes``."""
        free = total = 0
        for node in nodes:
            devs = self.devices_of(node.name, resource)
            total += len(devs)
            free += sum(1 for d in devs if d[1] not in self.owner)
        return free, total

    def device_resources(self) -> set[str]:
        out: set[str] = set()
        for node in self.inventory.nodes:
            if self._gpus.get(node.name):
                out.add(GPU)
            for profile in self._mig.get(node.name, {}):
                out.add(MIG_PREFIX + profile)
        return out

    def _gpu_busy_slices(self, node: str, gpu_index: int) -> int:
        busy = 0
        for uuid, (n, idx, slices) in self._mig_slices.items():
            if n == node and idx == gpu_index and uuid in self.owner:
                busy += slices
        return busy

    # -- placement ----------------------------------------------------------------------------------
    def blocked_for(self, key: str, priority: Optional[int]) -> frozenset[str]:
        """Devices ``key`` may not take now: those nominated to another waiting preemptor of equal or
        higher ``priority``, and those held for a workload of equal or higher ``priority`` evicted
        by a placement preemption (:meth:`hold_for_victim`); all of them when ``priority`` is
        None. kube-scheduler keeps a preemptor's nominated node for it the same way: pods of lower
        or equal priority do not get the resources nominated to a pod of higher priority
        (``pkg/scheduler/framework/runtime``: ``addNominatedPods``, which adds only nominated pods
        with priority >= the pod's)."""
        if not self.nominated and not self.held:
            return frozenset()
        out: set[str] = set()
        for other, (prio, devs) in self.nominated.items():
            if other != key and (priority is None or prio >= priority):
                out.update(devs)
        for other, (prio, devs) in self.held.items():
            if other != key and (priority is None or prio >= priority):
                out.update(devs)
        return frozenset(out)

    def hold_for_victim(self, key: str, priority: int, devices: Iterable[str]) -> None:
        """Keep ``devices`` (internal ids), just freed by ``key``, a workload of ``priority``
        evicted by a placement preemption (``Scheduler.evict``), for ``key`` against workloads of
        equal or lower priority (as a nomination is kept) until it is placed again or removed. The preemptor (of higher
        priority) still takes what it was nominated; the rest of what the victim gave up waits for
        the victim, never for lower-priority work: without this, a development notebook took the
        GPUs freed from an experiment job for a 1-GPU experiment-high job, and the evicted job
        could not start again behind it (a priority inversion; issue 34 item 8). Workloads of
        higher priority than the victim are not held back. Kueue has no devices to keep (kube-scheduler
        places its pods); this is the engine's one rule for devices freed by preemption."""
        devs = frozenset(devices)
        if devs:
            self.held[key] = (priority, devs)

    def nominate(self, key: str, priority: int, devices: Iterable[str]) -> None:
        """Keep ``devices`` (internal ids) for ``key``, a preemptor waiting for its victims to stop,
        against workloads of lower or equal priority (:meth:`blocked_for`)."""
        self.nominated[key] = (priority, frozenset(devices))

    def clear_nomination(self, key: Optional[str] = None) -> None:
        """Drop ``key``'s nomination (every nomination when ``key`` is None: waiting preemptors
        nominate again in their next cycle). The holds of evicted workloads stay
        (:meth:`drop_hold`)."""
        if key is None:
            self.nominated.clear()
        else:
            self.nominated.pop(key, None)

    def drop_hold(self, key: str) -> bool:
        """Forget what is held for ``key`` (:meth:`hold_for_victim`): it left the queue. True if
        something was held (devices others may now take)."""
        return self.held.pop(key, None) is not None

    def place(
        self,
        key: str,
        pod_sets: list[tuple[PodSet, int, dict[str, str]]],
        flavors: dict[str, ResourceFlavor],
        priority: Optional[int] = None,
    ) -> tuple[Optional[list[DevicePlacement]], str]:
        """Place every pod of a workload, all or nothing.

        ``pod_sets``: (PodSet, admitted count, resource → assigned flavor name). ``priority``: the
        workload's; devices nominated to a waiting preemptor of equal or higher priority are not
        taken (:meth:`blocked_for`). Returns (placements, "") and records the devices as taken by
        ``key`` (its own nomination, if any, is dropped); or (None, why) and changes nothing."""
        if self._failed_state != self._state:
            self._failed.clear()
            self._failed_state = self._state
        blocked = self.blocked_for(key, priority)
        shape = tuple(
            (count, tuple(sorted(assigned.items())), tuple(sorted(ps.requests.items())),
             tuple(sorted(ps.node_selector.items())), repr(ps.tolerations), repr(ps.required_affinity))
            for ps, count, assigned in pod_sets
        ) + (blocked,)
        why = self._failed.get(shape)
        if why is not None:
            return None, why
        if blocked:
            with self._owners(blocked=blocked):
                plan, why = self._plan(pod_sets, flavors)
            if plan is None and self._plan(pod_sets, flavors)[0] is not None:
                # the devices are there, but kept: say so (the panel shows them free)
                why = (f"{why}: the free ones are kept for higher-priority work (a preemptor waiting "
                       "for its victims, or a workload evicted to make room for one)")
        else:
            plan, why = self._plan(pod_sets, flavors)
        if plan is None:
            self._failed[shape] = why
            return None, why
        placements: list[DevicePlacement] = []
        taken: list[str] = []
        for ps, pod_index, node_name, devices_by_res in plan:
            for r, devs in devices_by_res.items():
                taken.extend(dev_id for _, dev_id in devs)
                placements.append(
                    DevicePlacement(
                        pod_set=ps.name,
                        pod_index=pod_index,
                        node=node_name,
                        devices=[str(idx) if r == GPU else dev_id for idx, dev_id in devs],
                        resource=r,
                    )
                )
        if taken:
            for dev in taken:
                self.owner[dev] = key
            self.by_workload[key] = taken
            self._state += 1
        self.nominated.pop(key, None)
        self.held.pop(key, None)
        return placements, ""

    @contextmanager
    def _owners(self, freed: Iterable[str] = (), blocked: Iterable[str] = ()):
        """For the duration of the block, ``self.owner`` is a copy in which the devices of the
        workloads ``freed`` are free and the devices ``blocked`` are taken; the real one is
        restored afterwards, whatever the block did to the copy."""
        real = self.owner
        view = dict(real)
        for key in freed:
            for dev in self.by_workload.get(key, ()):
                if view.get(dev) == key:
                    del view[dev]
        for dev in blocked:
            view.setdefault(dev, _NOMINATED)
        self.owner = view
        try:
            yield view
        finally:
            self.owner = real

    @staticmethod
    def _device_needs(ps: PodSet) -> dict[str, int]:
        return {r: q for r, q in ps.requests.items() if q > 0 and is_device_resource(r)}

    @staticmethod
    def _pod_flavor(needs: dict[str, int], assigned: dict[str, str],
                    flavors: dict[str, ResourceFlavor]) -> Optional[ResourceFlavor]:
        flavor_names = {assigned.get(r) for r in needs}
        return flavors.get(next(iter(flavor_names))) if len(flavor_names) == 1 else None

    def _plan(self, pod_sets: list[tuple[PodSet, int, dict[str, str]]], flavors: dict[str, ResourceFlavor]):
        """Where every pod would go on ``self.owner`` as it is (best fit), taking nothing:
        ``([(PodSet, pod index, node, {resource: [(gpu index, device id)]})], "")`` or ``(None, why)``."""
        taken: list[str] = []
        plan = []
        try:
            for ps, count, assigned in pod_sets:
                needs = self._device_needs(ps)
                if not needs:
                    continue
                flavor = self._pod_flavor(needs, assigned, flavors)
                for pod_index in range(count):
                    placed = self._place_pod(ps, needs, flavor)
                    if placed is None:
                        what = ", ".join(f"{q} × {r}" for r, q in sorted(needs.items()))
                        fl = f" of flavor {flavor.name}" if flavor is not None else ""
                        return None, (
                            f"quota fits, but no node{fl} has {what} free for pod {pod_index + 1} of "
                            f"{count} in pod set {ps.name}"
                        )
                    node_name, devices_by_res = placed
                    for devs in devices_by_res.values():
                        for _, dev_id in devs:
                            taken.append(dev_id)
                            self.owner[dev_id] = _PLANNED
                    plan.append((ps, pod_index, node_name, devices_by_res))
            return plan, ""
        finally:
            for dev in taken:
                self.owner.pop(dev, None)

    def _node_allows(self, node: Node, ps: PodSet, flavor: Optional[ResourceFlavor]) -> bool:
        if not node_matches_flavor(node, flavor, ps.tolerations):
            return False
        if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
            return False
        if ps.required_affinity and not any(
            all(e.matches(node.labels) for e in term) for term in ps.required_affinity
        ):
            return False
        return True

    def _fit_on(self, node: Node, needs: dict[str, int]) -> Optional[tuple[int, dict]]:
        """(slack, {resource: [(gpu index, device id)]}) for one pod on ``node`` with the devices
        free in ``self.owner``; None if it does not fit there."""
        chosen: dict[str, list[tuple[int, str]]] = {}
        slack = 0
        for r, q in needs.items():
            free = self.free_devices(node.name, r)
            if len(free) < q:
                return None
            slack += len(free) - q
            if r == GPU:
                chosen[r] = free[:q]
            else:
                # Pack MIG slices onto the GPU with the most slices already in use.
                # (stable: equally busy GPUs keep the inventory's order of their devices)
                free.sort(key=lambda d: (-self._gpu_busy_slices(node.name, d[0]), d[0]))
                chosen[r] = free[:q]
        return slack, chosen

    def _place_pod(self, ps: PodSet, needs: dict[str, int], flavor):
        best = None
        for node in self.inventory.nodes:
            if not self._node_allows(node, ps, flavor):
                continue
            fit = self._fit_on(node, needs)
            if fit is None:
                continue
            cand = (fit[0], node.name)
            if best is None or cand < best[0]:
                best = (cand, node.name, fit[1])
        if best is None:
            return None
        return best[1], best[2]

    # -- preemption for placement (kube-scheduler's DefaultPreemption, on devices) ------------------
    def fits(self, pod_sets: list[tuple[PodSet, int, dict[str, str]]], flavors: dict[str, ResourceFlavor],
             freed: Iterable[str] = (), blocked: Iterable[str] = ()) -> Optional[list[str]]:
        """Would every pod be placed if the workloads ``freed`` had stopped and the devices
        ``blocked`` were taken? The device ids it would get (best fit), or None. Changes nothing."""
        with self._owners(freed, blocked):
            plan, _ = self._plan(pod_sets, flavors)
        if plan is None:
            return None
        return [dev_id for _, _, _, by_res in plan for devs in by_res.values() for _, dev_id in devs]

    def preemption_victims(
        self,
        pod_sets: list[tuple[PodSet, int, dict[str, str]]],
        flavors: dict[str, ResourceFlavor],
        candidates: dict[str, tuple[int, float]],
        freed: Iterable[str] = (),
        blocked: Iterable[str] = (),
    ) -> Optional[tuple[list[str], list[str]]]:
        """The workloads to preempt so that every pod of a workload is placed, as kube-scheduler's
        DefaultPreemption would choose them pod by pod (``pkg/scheduler/framework/plugins/
        defaultpreemption/default_preemption.go``: ``SelectVictimsOnNode``;
        ``pkg/scheduler/framework/preemption/preemption.go``: ``pickOneNodeForPreemption``), with
        whole workloads as victims and all of a gang's pods placed or none.

        ``candidates``: workload key → (priority, admission time in seconds) of the admitted
        workloads that may be preempted (the caller applies Kueue's ClusterQueue rules and the
        lower-priority rule). ``freed``: workloads whose devices count as free already (victims
        already being evicted for this one). ``blocked``: device ids it may not take.

        Pod by pod, in the order :meth:`place` places them: a pod that fits on the devices free
        (after the victims chosen so far) takes them; otherwise, on every node it may run on, all
        candidates holding devices there are removed; if the pod then fits, they are reprieved one
        by one, the most important first (higher priority, then — ours — more devices held, then
        earlier admission), keeping out only those without which it would not fit. Of the nodes
        where it fits, the one with (1) the lowest highest-priority victim, (2) the lowest sum of
        priorities (each offset by 2^31), (ours) the fewest devices freed, (3) the fewest victims,
        (4) the latest admission among its highest-priority victims, (5) first in the inventory is
        taken. Ours: of victims of equal priority the smaller is taken, so that a 1-GPU preemptor
        does not evict a 4-GPU job when a 1-GPU one would do (issue 34 item 8). Finally every victim, the most important first, is
        reprieved if the whole workload still fits without evicting it.

        Returns (victims, device ids the workload would then get), or None when it cannot be placed
        even with every candidate gone. Changes nothing."""
        freed = set(freed)
        blocked = frozenset(blocked)
        cands = {k: v for k, v in candidates.items() if k in self.by_workload and k not in freed}
        if not cands or self.fits(pod_sets, flavors, freed | set(cands), blocked) is None:
            return None

        def importance(k: str):
            # kube-scheduler MoreImportantPod: higher priority, then earlier start; ours between
            # them: of equal priority, the one holding more devices (more work lost, more devices
            # freed that the preemptor does not need), so a 1-GPU preemptor takes a 1-GPU victim
            # rather than a 4-GPU one (issue 34 item 8).
            prio, start = cands[k]
            return (-prio, -len(self.by_workload.get(k, ())), start, k)

        node_devices: dict[str, list[str]] = {
            node.name: [d for r in self.device_resources() for _, d in self.devices_of(node.name, r)]
            for node in self.inventory.nodes
        }
        victims: set[str] = set()
        with self._owners(freed, blocked) as owner:
            for ps, count, assigned in pod_sets:
                needs = self._device_needs(ps)
                if not needs:
                    continue
                flavor = self._pod_flavor(needs, assigned, flavors)
                for _ in range(count):
                    placed = self._place_pod(ps, needs, flavor)
                    if placed is None:
                        best = None
                        for order, node in enumerate(self.inventory.nodes):
                            if not self._node_allows(node, ps, flavor):
                                continue
                            on_node = sorted({owner[d] for d in node_devices[node.name]
                                              if owner.get(d) in cands and owner[d] not in victims},
                                             key=importance)
                            if not on_node:
                                continue
                            saved = {d: owner.pop(d) for k in on_node for d in self.by_workload[k]
                                     if owner.get(d) == k}
                            if self._fit_on(node, needs) is None:
                                owner.update(saved)
                                continue
                            chosen = []
                            for k in on_node:  # reprieve, the most important first
                                for d in self.by_workload[k]:
                                    if d in saved:
                                        owner[d] = k
                                if self._fit_on(node, needs) is None:
                                    for d in self.by_workload[k]:
                                        if owner.get(d) == k:
                                            del owner[d]
                                    chosen.append(k)
                            owner.update(saved)  # back as it was; the pick below removes the victims
                            top = cands[chosen[0]][0]
                            score = (
                                top,
                                sum(cands[k][0] + 2**31 for k in chosen),
                                sum(len(self.by_workload[k]) for k in chosen),  # ours: fewest devices freed
                                len(chosen),
                                -min(cands[k][1] for k in chosen if cands[k][0] == top),
                                order,
                            )
                            if best is None or score < best[0]:
                                best = (score, node, chosen)
                        if best is None:
                            return None
                        for k in best[2]:
                            victims.add(k)
                            for d in self.by_workload[k]:
                                if owner.get(d) == k:
                                    del owner[d]
                        fit = self._fit_on(best[1], needs)
                        placed = (best[1].name, fit[1])
                    for devs in placed[1].values():
                        for _, d in devs:
                            owner[d] = _PLANNED
        for k in sorted(victims, key=importance):  # reprieve over the whole gang
            if self.fits(pod_sets, flavors, freed | (victims - {k}), blocked) is not None:
                victims.discard(k)
        devices = self.fits(pod_sets, flavors, freed | victims, blocked)
        if devices is None:  # cannot happen: the greedy search placed every pod
            return None
        return sorted(victims, key=lambda k: (cands[k][0], k)), devices

    def assign(self, key: str, placements: list[DevicePlacement]) -> None:
        """Record an existing placement (restored from storage) as taken by ``key``."""
        ids = []
        for p in placements:
            for dev in p.devices:
                ids.append(f"{p.node}/{dev}" if p.resource == GPU else dev)
        for dev in ids:
            self.owner[dev] = key
        self.by_workload[key] = ids
        self._state += 1

    def release(self, key: str) -> bool:
        ids = self.by_workload.pop(key, None)
        if not ids:
            return False
        for dev in ids:
            if self.owner.get(dev) == key:
                del self.owner[dev]
        self._state += 1
        return True
