"""Quota accounting over the ClusterQueue / Cohort tree.

A faithful port of Kueue's resource nodes (``pkg/cache/scheduler/resource_node.go``): ClusterQueues
are leaves, Cohorts inner nodes. For every (flavor, resource) pair — a *FlavorResource* ``fr`` — a
node has its own ``quotas`` (nominal, borrowingLimit, lendingLimit), a ``subtree_quota`` and a
``usage``:

- ``local_quota(fr) = max(0, subtree_quota − lendingLimit)`` when a lendingLimit is set, else 0:
  capacity that is never lent to the parent.
- ClusterQueue: ``subtree_quota = nominal``. Cohort: own nominal + Σ children
  (child.subtree_quota − child.local_quota); cohort usage = Σ children max(0, child.usage −
  child.local_quota).
- ``available`` / ``potential_available``: what a node may still use (now / with no usage at all),
  through its ancestors, bounded by borrowingLimits.
- ``add_usage`` pushes only the part above the node's local quota to its parent; ``remove_usage``
  is its inverse.

Quantities are integers in canonical units (see ``model``). Implicit cohorts (named only by a
ClusterQueue's ``spec.cohort``) are nodes without quota.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

from .model import ClusterConfig, ResourceGroup

FlavorResource = tuple[str, str]  # (flavor, resource)


class QuotaNode:
    """One ClusterQueue or Cohort in the quota tree."""

    __slots__ = (
        "name",
        "is_cluster_queue",
        "parent",
        "children",
        "nominal",
        "borrowing_limit",
        "lending_limit",
        "subtree_quota",
        "usage",
        "_members",
    )

    def __init__(self, name: str, is_cluster_queue: bool):
        self.name = name
        self.is_cluster_queue = is_cluster_queue
        self.parent: Optional[QuotaNode] = None
        self.children: list[QuotaNode] = []
        self.nominal: dict[FlavorResource, int] = {}
        self.borrowing_limit: dict[FlavorResource, int] = {}  # absent: unlimited
        self.lending_limit: dict[FlavorResource, int] = {}  # absent: lend everything
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self._members: Optional[list[QuotaNode]] = None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        kind = "ClusterQueue" if self.is_cluster_queue else "Cohort"
        return f"<{kind} {self.name}>"

    # -- Kueue resource_node.go ---------------------------------------------------------------
    def local_quota(self, fr: FlavorResource) -> int:
        ll = self.lending_limit.get(fr)
        if ll is None:
            return 0
        return max(0, self.subtree_quota.get(fr, 0) - ll)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local_quota(fr) - self.usage.get(fr, 0))

    def available(self, fr: FlavorResource) -> int:
        """Capacity still usable by this node now (may be negative after over-admission)."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0) - self.usage.get(fr, 0)
        parent_available = self.parent.available(fr)
        bl = self.borrowing_limit.get(fr)
        if bl is not None:
            lq = self.local_quota(fr)
            stored_in_parent = self.subtree_quota.get(fr, 0) - lq
            used_in_parent = max(0, self.usage.get(fr, 0) - lq)
            parent_available = min(stored_in_parent - used_in_parent + bl, parent_available)
        return self.local_available(fr) + parent_available

    def potential_available(self, fr: FlavorResource) -> int:
        """The most this node could ever use of ``fr``, with no usage anywhere."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0)
        avail = self.local_quota(fr) + self.parent.potential_available(fr)
        bl = self.borrowing_limit.get(fr)
        if bl is not None:
            avail = min(self.subtree_quota.get(fr, 0) + bl, avail)
        return avail

    def add_usage(self, fr: FlavorResource, val: int) -> None:
        local_available = self.local_available(fr)
        self.usage[fr] = self.usage.get(fr, 0) + val
        if self.parent is not None and val > local_available:
            self.parent.add_usage(fr, val - local_available)

    def remove_usage(self, fr: FlavorResource, val: int) -> None:
        stored_in_parent = self.usage.get(fr, 0) - self.local_quota(fr)
        self.usage[fr] = self.usage.get(fr, 0) - val
        if stored_in_parent <= 0 or self.parent is None:
            return
        self.parent.remove_usage(fr, min(val, stored_in_parent))

    def borrowing_with(self, fr: FlavorResource, val: int) -> bool:
        """True if using ``val`` more of ``fr`` would take this node above its subtree quota."""
        return self.usage.get(fr, 0) + val > self.subtree_quota.get(fr, 0)

    def borrowed(self, fr: FlavorResource) -> int:
        return max(0, self.usage.get(fr, 0) - self.subtree_quota.get(fr, 0))

    def path_to_root(self) -> Iterator["QuotaNode"]:
        node: Optional[QuotaNode] = self
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> "QuotaNode":
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def subtree_cluster_queues(self) -> list["QuotaNode"]:
        """Every ClusterQueue at or below this node (cached: the tree's shape is fixed)."""
        cached = getattr(self, "_members", None)
        if cached is None:
            if self.is_cluster_queue:
                cached = [self]
            else:
                cached = [cq for child in self.children for cq in child.subtree_cluster_queues()]
            self._members = cached
        return cached

    def height(self) -> int:
        """Kueue ``getNodeHeight``: distance to the furthest leaf (a cohort of ClusterQueues: 1)."""
        h = min(len(self.children), 1)
        for child in self.children:
            if not child.is_cluster_queue:
                h = max(h, child.height() + 1)
        return h

    def borrowing_level(self, fr: FlavorResource, val: int) -> tuple[int, bool]:
        """Kueue ``FindHeightOfLowestSubtreeThatFits``: the height of the lowest subtree that can hold
        ``val`` more of ``fr`` (0 = this ClusterQueue's own quota: not borrowing), and whether that
        subtree is smaller than the whole cohort tree (reclaiming within it may be possible)."""
        if not self.borrowing_with(fr, val) or self.parent is None:
            return 0, self.parent is not None
        remaining = val - self.local_available(fr)
        node = self.parent
        while node is not None:
            if not node.borrowing_with(fr, remaining):
                return node.height(), node.parent is not None
            remaining -= node.local_available(fr)
            node = node.parent
        return self.parent.root().height(), False


def _set_quotas(node: QuotaNode, groups: Iterable[ResourceGroup]) -> None:
    for rg in groups:
        for fq in rg.flavors:
            for rq in fq.resources:
                fr = (fq.name, rq.name)
                node.nominal[fr] = rq.nominal_quota
                if rq.borrowing_limit is not None:
                    node.borrowing_limit[fr] = rq.borrowing_limit
                if rq.lending_limit is not None:
                    node.lending_limit[fr] = rq.lending_limit


class QuotaTree:
    """All ClusterQueues and Cohorts of a ClusterConfig as resource nodes.

    ``cluster_queues[name]`` and ``cohorts[name]`` give the nodes. Cohort cycles (Kueue disables the
    whole tree) are reported in ``cycles``: the ClusterQueues under them are inactive.
    """

    def __init__(self, config: ClusterConfig):
        self.cluster_queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self.cycles: set[str] = set()
        for name, co in config.cohorts.items():
            node = QuotaNode(name, False)
            _set_quotas(node, co.resource_groups)
            self.cohorts[name] = node
        for name, cq in config.cluster_queues.items():
            node = QuotaNode(name, True)
            _set_quotas(node, cq.resource_groups)
            self.cluster_queues[name] = node
            if cq.cohort:
                parent = self.cohorts.get(cq.cohort)
                if parent is None:
                    parent = self.cohorts[cq.cohort] = QuotaNode(cq.cohort, False)
                node.parent = parent
                parent.children.append(node)
        for name, co in config.cohorts.items():
            if co.parent:
                parent = self.cohorts.get(co.parent)
                if parent is None:
                    parent = self.cohorts[co.parent] = QuotaNode(co.parent, False)
                node = self.cohorts[name]
                node.parent = parent
                parent.children.append(node)
        self._detect_cycles()
        self.recompute()

    def _detect_cycles(self) -> None:
        for name, node in self.cohorts.items():
            seen = set()
            cur: Optional[QuotaNode] = node
            while cur is not None:
                if cur.name in seen:
                    self.cycles.update(seen)
                    break
                seen.add(cur.name)
                cur = cur.parent
        for name in self.cycles:
            # Break the cycle so that tree walks terminate; these nodes are reported inactive.
            self.cohorts[name].parent = None

    def roots(self) -> list[QuotaNode]:
        roots = [n for n in self.cohorts.values() if n.parent is None]
        roots += [n for n in self.cluster_queues.values() if n.parent is None]
        return roots

    def recompute(self) -> None:
        """Rebuild subtree quotas and cohort usage from the ClusterQueues' usage."""
        for root in self.roots():
            self._update(root)

    def _update(self, node: QuotaNode) -> None:
        node.subtree_quota = dict(node.nominal)
        if node.is_cluster_queue:
            return
        node.usage = {}
        for child in node.children:
            self._update(child)
            for fr, q in child.subtree_quota.items():
                node.subtree_quota[fr] = node.subtree_quota.get(fr, 0) + q - child.local_quota(fr)
            for fr, u in child.usage.items():
                node.usage[fr] = node.usage.get(fr, 0) + max(0, u - child.local_quota(fr))

    def in_cycle(self, cq_name: str) -> bool:
        node = self.cluster_queues.get(cq_name)
        if node is None or node.parent is None:
            return False
        return any(n.name in self.cycles for n in node.path_to_root() if not n.is_cluster_queue)
