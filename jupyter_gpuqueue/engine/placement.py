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

from typing import Optional

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


class DeviceAllocator:
    """Which devices of an Inventory are free, and who holds the others.

    Device ids: whole GPUs are ``"<node>/<index>"`` internally and ``"<index>"`` in placements
    (what CUDA_VISIBLE_DEVICES takes); MIG devices are their ``MIG-…`` UUIDs.
    """

    def __init__(self, inventory: Inventory):
        self.inventory = inventory
        self.owner: dict[str, str] = {}  # device id -> workload key
        self.by_workload: dict[str, list[str]] = {}
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
    def place(
        self,
        key: str,
        pod_sets: list[tuple[PodSet, int, dict[str, str]]],
        flavors: dict[str, ResourceFlavor],
    ) -> tuple[Optional[list[DevicePlacement]], str]:
        """Place every pod of a workload, all or nothing.

        ``pod_sets``: (PodSet, admitted count, resource → assigned flavor name). Returns
        (placements, "") and records the devices as taken by ``key``; or (None, why) and changes
        nothing."""
        if self._failed_state != self._state:
            self._failed.clear()
            self._failed_state = self._state
        shape = tuple(
            (count, tuple(sorted(assigned.items())), tuple(sorted(ps.requests.items())),
             tuple(sorted(ps.node_selector.items())), repr(ps.tolerations), repr(ps.required_affinity))
            for ps, count, assigned in pod_sets
        )
        why = self._failed.get(shape)
        if why is not None:
            return None, why
        placements, why = self._place(key, pod_sets, flavors)
        if placements is None:
            self._failed[shape] = why
        return placements, why

    def _place(self, key: str, pod_sets: list[tuple[PodSet, int, dict[str, str]]],
               flavors: dict[str, ResourceFlavor]) -> tuple[Optional[list[DevicePlacement]], str]:
        taken: list[str] = []
        placements: list[DevicePlacement] = []
        try:
            for ps, count, assigned in pod_sets:
                needs = {r: q for r, q in ps.requests.items() if q > 0 and is_device_resource(r)}
                if not needs:
                    continue
                flavor_names = {assigned.get(r) for r in needs}
                flavor = flavors.get(next(iter(flavor_names))) if len(flavor_names) == 1 else None
                for pod_index in range(count):
                    placed = self._place_pod(ps, needs, flavor, taken)
                    if placed is None:
                        what = ", ".join(f"{q} × {r}" for r, q in sorted(needs.items()))
                        fl = f" of flavor {flavor.name}" if flavor is not None else ""
                        return None, (
                            f"quota fits, but no node{fl} has {what} free for pod {pod_index + 1} of "
                            f"{count} in pod set {ps.name}"
                        )
                    node_name, devices_by_res = placed
                    for r, devs in devices_by_res.items():
                        for _, dev_id in devs:
                            taken.append(dev_id)
                            self.owner[dev_id] = key
                        placements.append(
                            DevicePlacement(
                                pod_set=ps.name,
                                pod_index=pod_index,
                                node=node_name,
                                devices=[str(idx) if r == GPU else dev_id for idx, dev_id in devs],
                                resource=r,
                            )
                        )
        except Exception:
            for dev in taken:
                self.owner.pop(dev, None)
            raise
        if placements is not None and taken:
            for dev in taken:
                self.owner[dev] = key
            self.by_workload[key] = taken
            self._state += 1
        return placements, ""

    def _place_pod(self, ps: PodSet, needs: dict[str, int], flavor, taken_now: list[str]):
        best = None
        for node in self.inventory.nodes:
            if not node_matches_flavor(node, flavor, ps.tolerations):
                continue
            if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
                continue
            if ps.required_affinity and not any(
                all(e.matches(node.labels) for e in term) for term in ps.required_affinity
            ):
                continue
            chosen: dict[str, list[tuple[int, str]]] = {}
            slack = 0
            ok = True
            for r, q in needs.items():
                free = self.free_devices(node.name, r)
                if len(free) < q:
                    ok = False
                    break
                slack += len(free) - q
                if r == GPU:
                    chosen[r] = free[:q]
                else:
                    # Pack MIG slices onto the GPU with the most slices already in use.
                    # (stable: equally busy GPUs keep the inventory's order of their devices)
                    free.sort(key=lambda d: (-self._gpu_busy_slices(node.name, d[0]), d[0]))
                    chosen[r] = free[:q]
            if not ok:
                continue
            cand = (slack, node.name)
            if best is None or cand < best[0]:
                best = (cand, node.name, chosen)
        if best is None:
            # Roll back devices taken by earlier pods of this workload in this call.
            for dev in taken_now:
                self.owner.pop(dev, None)
            taken_now.clear()
            return None
        return best[1], best[2]

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
