"""The event hub: subscribers of the event stream (``docs/rest-api.md``) and how events reach them.
A workload event carries its view; ``queues`` / ``inventory`` events only say "refetch" and are
coalesced (once per event-loop turn, at most every ``coalesce_seconds``); events of a ledger batch
are held until its transaction commits (``batch``), so no subscriber hears of a change before it is
durable."""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .live import LiveState
    from .views import Views


class EventHub:
    """The event stream's subscribers and the events sent to them.

    Collaborators: the ``ledger`` (a batch is one of its transactions), ``live`` (LiveState: the
    record a workload event shows), ``views`` (its JSON) and ``log`` (a failing subscriber)."""

    def __init__(self, ledger: "Ledger", live: "LiveState", views: "Views", log: logging.Logger):
        self.ledger = ledger
        self.live = live
        self.views = views
        self.log = log
        self._subscribers: list[Callable[[dict], None]] = []
        self._coalesced: dict[str, None] = {}
        self._last_coalesced_flush = float("-inf")
        self._batch_events: Optional[list[dict]] = None  # events held until a batch commits

    # "queues" / "inventory" events go out at most this often (seconds); panels refetch on them.
    coalesce_seconds = 0.1

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (docs/rest-api.md); returns an unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, event: dict) -> None:
        if self._batch_events is not None:  # inside _batch: sent once the transaction commits
            self._batch_events.append(event)
            return
        for cb in list(self._subscribers):
            try:
                cb(event)
            except Exception:  # pragma: no cover - a broken subscriber must not stop the queue
                self.log.exception("gpuqueue: event subscriber failed")

    def emit_workload(self, uid: str) -> None:
        if not self._subscribers:
            return
        self.emit({"type": "workload", "workload": self.views.view(self.live.records[uid])})

    def emit_coalesced(self, kind: str) -> None:
        """Send ``{"type": kind}`` ("queues" or "inventory": something changed, refetch) once for
        every change of the next moment: at the end of this event-loop turn, and at most every
        ``coalesce_seconds`` (a burst of submissions or completions makes one event, not one per
        change: with 100 panels open each event is 100 messages); at once without a running loop."""
        if not self._subscribers or kind in self._coalesced:
            return
        self._coalesced[kind] = None
        if len(self._coalesced) == 1:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush_coalesced()
                return
            delay = self._last_coalesced_flush + self.coalesce_seconds - loop.time()
            if delay > 0:
                loop.call_later(delay, self.flush_coalesced)
            else:
                loop.call_soon(self.flush_coalesced)

    def flush_coalesced(self) -> None:
        kinds, self._coalesced = list(self._coalesced), {}
        try:
            self._last_coalesced_flush = asyncio.get_running_loop().time()
        except RuntimeError:
            pass
        for kind in kinds:
            self.emit({"type": kind})

    @contextmanager
    def batch(self):
        """Many ledger changes in one transaction (one commit, one fsync), for the background
        loop's bursts (jobs that ended, admissions of a cycle, their starts). Their events are
        held and sent after the commit, so that no subscriber hears of a change before it is
        durable. Nested uses join the outer batch."""
        if self._batch_events is not None:
            yield
            return
        self._batch_events = []
        try:
            with self.ledger.transaction():
                yield
        finally:
            events, self._batch_events = self._batch_events, None
        for event in events:
            self.emit(event)
