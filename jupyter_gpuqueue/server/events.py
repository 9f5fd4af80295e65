"""The event stream: websocket ``{base_url}gpuqueue/api/events``.

Server → client JSON text messages (docs/rest-api.md, "Event"):

- ``{"type": "hello", "user": "alice"}`` once, on connect;
- ``{"type": "workload", "workload": Workload}`` on every state, position, reason or admission change;
- ``{"type": "queues"}`` / ``{"type": "inventory"}``: something changed, refetch;
- ``{"type": "ping"}`` every ``ping_interval`` seconds (30 by default).

Clients send nothing (anything they send is ignored). Writing never blocks the event loop: tornado
buffers each message; a client whose write fails (it went away without a close handshake) is
unsubscribed and closed.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import ioloop, web, websocket

from ..errors import GpuQueueError
from .handlers import API_PREFIX, AUTH_RESOURCE, SERVICE_KEY, resolve_user, service_or_error
from .scopes import SUBMIT_SCOPE, require_scope

PING_INTERVAL_KEY = "gpuqueue_event_ping_interval"
DEFAULT_PING_INTERVAL = 30.0  # seconds


class EventsHandler(WebSocketMixin, websocket.WebSocketHandler, JupyterHandler):
    """Streams the QueueService's events to one client."""

    auth_resource = AUTH_RESOURCE

    _unsubscribe: Optional[Callable[[], Any]] = None
    _ping: Optional[ioloop.PeriodicCallback] = None
    _closed = False

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        """Upgrade to a websocket (403 unless authenticated, authorized and, on the hub
        service, holding ``custom:gpuqueue:submit``: events carry workloads)."""
        try:
            service_or_error(self.settings)
            require_scope(self, SUBMIT_SCOPE)
        except GpuQueueError as e:
            raise web.HTTPError(e.status, str(e)) from None
        res = super().get(*args, **kwargs)
        if res is not None:
            await res

    def open(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().open(*args, **kwargs)
        self.gpuqueue_user = resolve_user(self)
        self._send({"type": "hello", "user": self.gpuqueue_user})
        if self._closed:
            return
        self._unsubscribe = self.settings[SERVICE_KEY].subscribe(self._on_event)
        interval = float(self.settings.get(PING_INTERVAL_KEY, DEFAULT_PING_INTERVAL))
        if interval > 0:
            self._ping = ioloop.PeriodicCallback(
                lambda: self._send({"type": "ping"}), interval * 1000
            )
            self._ping.start()

    def on_message(self, message: Any) -> None:
        """Clients have nothing to say; messages are ignored."""

    def on_close(self) -> None:
        self._drop()
        super().on_close()

    # -- internals ------------------------------------------------------------------------------

    def _on_event(self, event: dict) -> None:
        """Service callback (on the loop thread): forward one Event. Never raises."""
        self._send(event)

    def _send(self, event: dict) -> None:
        if self._closed:
            return
        try:
            text = _encoded(event)
        except (TypeError, ValueError):
            self.log.exception("gpuqueue: dropping an event that is not JSON: %r", event)
            return
        try:
            future = self.write_message(text)
        except websocket.WebSocketClosedError:
            self._drop()
            return
        except Exception:  # a broken stream: drop this client, keep the service going
            self.log.warning("gpuqueue: event write failed; dropping the client", exc_info=True)
            self._drop(close=True)
            return
        future.add_done_callback(self._write_done)

    def _write_done(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            self._drop(close=True)

    def _drop(self, close: bool = False) -> None:
        """Unsubscribe and stop pinging (idempotent); optionally close the connection."""
        first = not self._closed
        self._closed = True
        if self._ping is not None:
            self._ping.stop()
            self._ping = None
        if self.ping_callback is not None:  # WebSocketMixin's protocol-level ping
            self.ping_callback.stop()
        if self._unsubscribe is not None:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            try:
                unsubscribe()
            except Exception:
                self.log.warning("gpuqueue: unsubscribe failed", exc_info=True)
        if close and first:
            try:
                self.close()
            except Exception:  # already gone
                pass


_last_encoded: list = [None, ""]


def _encoded(event: dict) -> str:
    """``json.dumps(event)``, once per event however many clients get it: the service hands the
    same dict to every subscriber in turn, so the last encoding is kept (by identity) and reused
    (with 100 panels open, encoding was the event stream's main cost)."""
    if _last_encoded[0] is not event:
        _last_encoded[0], _last_encoded[1] = None, json.dumps(event)
        _last_encoded[0] = event
    return _last_encoded[1]


events_handler = (rf"{API_PREFIX}/events", EventsHandler)
