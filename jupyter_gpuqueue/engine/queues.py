"""Pending workloads per ClusterQueue: ordering, heads, parking, positions.

Follows Kueue's queue manager (``pkg/cache/queue/cluster_queue.go``, ``manager.go``):

- One ordered queue per ClusterQueue; LocalQueues are views of it. Order: higher priority first,
  then older queue-order timestamp (creation, or the last eviction), then UID
  (``queueOrderingFunc``).
- ``StrictFIFO``: a head that does not fit goes straight back and keeps blocking the queue.
- ``BestEffortFIFO``: a head that does not fit is *parked* (``inadmissible``) until something in its
  cohort tree changes (quota freed, configuration changed), unless such a change happened since it
  was popped (``queueInadmissibleCycle >= popCycle``), in which case it goes straight back.
- A head that issued preemptions is *sticky*: it is popped first until it is admitted, so that
  the quota its victims free is not taken by workloads ahead of it in the order (otherwise an
  older workload, or the victim itself, could take it and the preemption would repeat forever).
- Positions (Kueue visibility API, ``pkg/visibility``) count every pending workload of the
  ClusterQueue, parked ones included, in queue order; 0-based. They are answered from ordered
  indexes in O(log n), never by sorting per query.
"""

from __future__ import annotations

import heapq
from typing import Iterator, Optional

from sortedcontainers import SortedList

from .model import BEST_EFFORT_FIFO, STRICT_FIFO, Workload

OrderKey = tuple  # (-priority, order_time, uid/key)


def order_key(wl: Workload) -> OrderKey:
    return (-wl.priority, wl.order_time, wl.uid or wl.key)


class ClusterQueueQueue:
    """The pending workloads of one ClusterQueue."""

    __slots__ = (
        "name",
        "strategy",
        "_heap",
        "_active",
        "all_pending",
        "by_local_queue",
        "parked",
        "keys",
        "pop_cycle",
        "requeue_cycle",
        "popped_at",
        "sticky",
    )

    def __init__(self, name: str, strategy: str = BEST_EFFORT_FIFO):
        self.name = name
        self.strategy = strategy
        # Kueue's heap, with lazy deletion: items are the order key's fields followed by the
        # workload key, flat (``(-priority, order_time, uid, key)``: cheaper to compare than
        # nested tuples); ``_active`` maps each key really in the heap to its item (any other item
        # of that key is stale).
        self._heap: list[tuple] = []
        self._active: dict[str, tuple] = {}
        self.all_pending = SortedList()  # active + parked + in flight: for positions
        self.by_local_queue: dict[str, SortedList] = {}
        self.parked: dict[str, OrderKey] = {}
        self.keys: dict[str, tuple[OrderKey, str]] = {}  # key -> (order key, local queue key)
        self.pop_cycle = 0
        self.requeue_cycle = 0
        self.popped_at: dict[str, int] = {}
        self.sticky: Optional[str] = None

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    # -- membership -------------------------------------------------------------------------------
    def push(self, wl: Workload, local_queue_key: str) -> None:
        """Add a pending workload (or re-add it with a new order key)."""
        if wl.key in self.keys:
            self.delete(wl.key)
        ok = order_key(wl)
        item = (ok, wl.key)
        self.keys[wl.key] = (ok, local_queue_key)
        self._activate(wl.key, ok)
        self.all_pending.add(item)
        lql = self.by_local_queue.get(local_queue_key)
        if lql is None:
            lql = self.by_local_queue[local_queue_key] = SortedList()
        lql.add(item)

    def delete(self, key: str) -> None:
        entry = self.keys.pop(key, None)
        if entry is None:
            return
        ok, lq = entry
        item = (ok, key)
        if key in self.parked:
            del self.parked[key]
        else:
            self._active.pop(key, None)
        self.all_pending.discard(item)
        lql = self.by_local_queue.get(lq)
        if lql is not None:
            lql.discard(item)
        self.popped_at.pop(key, None)
        if self.sticky == key:
            self.sticky = None

    # -- the heap ----------------------------------------------------------------------------------
    @property
    def active(self) -> int:
        """How many workloads are in the heap (pending, neither parked nor popped)."""
        return len(self._active)

    def _activate(self, key: str, ok: OrderKey) -> None:
        if key not in self._active:
            item = self._active[key] = ok + (key,)
            heapq.heappush(self._heap, item)
            if len(self._heap) > 2 * len(self._active) + 64:  # drop stale items now and then
                self._heap = list(self._active.values())
                heapq.heapify(self._heap)

    def _first(self) -> Optional[str]:
        """The key of the first live heap item (stale items on top are dropped)."""
        heap, active = self._heap, self._active
        while heap:
            item = heap[0]
            if active.get(item[-1]) is item:
                return item[-1]
            heapq.heappop(heap)  # stale
        return None

    # -- scheduling --------------------------------------------------------------------------------
    def _sticky_key(self) -> Optional[str]:
        if self.sticky is None or self.sticky not in self._active:
            return None
        return self.sticky

    def head(self) -> Optional[str]:
        """The key of the first active (not parked) workload, without removing it."""
        key = self._sticky_key()
        if key is not None:
            return key
        return self._first()

    def pop(self) -> Optional[str]:
        """Take the head out of the active heap for a cycle (it stays pending for positions)."""
        active = self._active
        key = self.sticky
        if key is None or key not in active:
            heap = self._heap
            while True:
                if not heap:
                    return None
                item = heapq.heappop(heap)
                key = item[-1]
                if active.get(key) is item:
                    break  # else a stale item
        del active[key]
        self.pop_cycle += 1
        self.popped_at[key] = self.pop_cycle
        return key

    def requeue(self, key: str, *, immediate: bool) -> bool:
        """Put back a popped workload that was not admitted; True if it was parked.

        ``immediate`` (Kueue: StrictFIFO always; BestEffortFIFO for FailedAfterNomination and the
        like) puts it back into the heap; otherwise BestEffortFIFO parks it unless an
        inadmissible-requeue happened since it was popped."""
        entry = self.keys.get(key)
        if entry is None:
            return False
        popped = self.popped_at.pop(key, 0)
        if self.strategy == STRICT_FIFO or immediate or self.requeue_cycle >= popped:
            self._activate(key, entry[0])
            return False
        self.parked[key] = entry[0]
        return True

    def requeue_inadmissible(self) -> int:
        """Move every parked workload back into the heap; returns how many moved."""
        self.requeue_cycle = self.pop_cycle
        n = len(self.parked)
        if n:
            # One heapify instead of a push per workload: a requeue moves the whole parked set.
            active, heap = self._active, self._heap
            for key, ok in self.parked.items():
                if key not in active:
                    item = active[key] = ok + (key,)
                    heap.append(item)
            if len(heap) > 2 * len(active) + 64:  # drop stale items now and then
                heap[:] = active.values()
            heapq.heapify(heap)
            self.parked.clear()
        return n

    # -- positions ---------------------------------------------------------------------------------
    def position(self, key: str) -> Optional[tuple[int, int]]:
        """(positionInClusterQueue, positionInLocalQueue), 0-based, or None if not pending here."""
        entry = self.keys.get(key)
        if entry is None:
            return None
        ok, lq = entry
        item = (ok, key)
        pos_cq, pos_lq = self.all_pending.index(item), self.by_local_queue[lq].index(item)
        sticky = self.keys.get(self.sticky) if self.sticky is not None else None
        if sticky is not None and self.sticky != key:
            s_item = (sticky[0], self.sticky)
            # The sticky head goes first: everything it passes moves one place back.
            if self.all_pending.index(s_item) > pos_cq:
                pos_cq += 1
                if sticky[1] == lq:
                    pos_lq += 1
        elif sticky is not None:
            pos_cq, pos_lq = 0, 0
        return pos_cq, pos_lq

    def ordered_keys(self) -> Iterator[str]:
        sticky = self.sticky if self.sticky in self.keys else None
        if sticky is not None:
            yield sticky
        for _, key in self.all_pending:
            if key != sticky:
                yield key

    def local_queue_keys(self, lq: str) -> Iterator[str]:
        for _, key in self.by_local_queue.get(lq, ()):
            yield key

    def count_local_queue(self, lq: str) -> int:
        return len(self.by_local_queue.get(lq, ()))
