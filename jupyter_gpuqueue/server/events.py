"""The event stream: websocket ``{base_url}gpuqueue/api/events``.

Server → client JSON text messages (docs/rest-api.md, "Event"):

- ``{"type": "hello", "user": "alice"}`` once, on connect;
- ``{"type": "workload", "workload": Workload}`` on every state, position, reason or admission change
  (of the workloads the client sees: its teams' and its own, unless it sees all;
  ``service/visibility.py``);
- ``{"type": "queues"}`` / ``{"type": "inventory"}``: something changed, refetch;
- ``{"type": "batch", "events": [Event, ...]}``: several of the above, in the order they happened
  (only to clients that connect with ``?batch=1``);
- ``{"type": "ping"}`` every ``ping_interval`` seconds (30 by default).

Clients send nothing (anything they send is ignored).

One :class:`EventBroadcaster` per service serves every connection: it subscribes to the service
once, collects its events and flushes them at most every ``flush_interval`` seconds (0.05 by
default; the first event after a quiet moment goes out at the next event-loop turn). A flush of
one event sends that event as it is; a flush of several sends one ``batch`` message to clients
that asked for batches (``?batch=1``: the JupyterLab panel) and the events one by one to the
others (clients older than batches). Every event is encoded once, however many clients get it
(with 100 panels open, one message per event and panel saturated the server).

Every flush is also framed once: the connections are not compressed (``get_compression_options``
is None) and a server never masks, so every client gets the same websocket frame (RFC 6455,
section 5.2), written to its stream as is. tornado's ``write_message`` would encode and frame the
message again for each client and start a task per write: with 100 panels that was two thirds of a
flush's time (BENCHMARKS.md, "The live service").

Writing never blocks the event loop: tornado buffers each message; a client whose write fails (it
went away without a close handshake) or for which more than ``max_buffer`` bytes wait (it does not
read) is unsubscribed and disconnected. An event that is not JSON is logged and dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from typing import Any, Optional

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import ioloop, iostream, web, websocket

from ..errors import GpuQueueError
from .handlers import API_PREFIX, AUTH_RESOURCE, SERVICE_KEY, resolve_user, service_or_error
from .scopes import ADMIN_SCOPE, SUBMIT_SCOPE, has_scope, require_scope

PING_INTERVAL_KEY = "gpuqueue_event_ping_interval"
DEFAULT_PING_INTERVAL = 30.0  # seconds
FLUSH_INTERVAL_KEY = "gpuqueue_event_flush_interval"
DEFAULT_FLUSH_INTERVAL = 0.05  # seconds
MAX_BUFFER_KEY = "gpuqueue_event_max_buffer"
DEFAULT_MAX_BUFFER = 64 << 20  # bytes not yet sent to one client (a batch must fit); 0: unlimited
BROADCASTER_KEY = "gpuqueue_event_broadcaster"


class EventBroadcaster:
    """Fans one service's events out to every open event stream (see the module docstring).

    ``flush_interval``: seconds between flushes (0: once per event-loop turn). Used on the
    event-loop thread only.
    """

    def __init__(self, service: Any, flush_interval: float = DEFAULT_FLUSH_INTERVAL,
                 log: Optional[logging.Logger] = None):
        self.service = service
        self.flush_interval = flush_interval
        self.log = log or logging.getLogger(__name__)
        self.clients: dict[EventsHandler, None] = {}  # insertion-ordered set
        self._events: list[dict] = []
        self._timer: Optional[asyncio.Handle] = None
        self._last_flush = float("-inf")  # loop.time()
        self._unsubscribe: Optional[Any] = None

    def add(self, client: "EventsHandler") -> None:
        """Send ``client`` every event from now on (the first client subscribes to the service)."""
        if self._unsubscribe is None:
            self._unsubscribe = self.service.subscribe(self._on_event)
        self.clients[client] = None

    def remove(self, client: "EventsHandler") -> None:
        """Stop sending to ``client`` (idempotent; the last one unsubscribes from the service)."""
        self.clients.pop(client, None)
        if not self.clients and self._unsubscribe is not None:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            self._events.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                unsubscribe()
            except Exception:
                self.log.warning("gpuqueue: unsubscribe failed", exc_info=True)

    def _on_event(self, event: dict) -> None:
        """Service callback (on the loop thread): queue one Event for the next flush. Never raises."""
        self._events.append(event)
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (not in a server): at once
            self.flush()
            return
        delay = self._last_flush + self.flush_interval - loop.time()
        self._timer = loop.call_later(delay, self.flush) if delay > 0 else loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send the queued events to every client now: one event as is, several as one batch."""
        self._timer = None
        try:
            self._last_flush = asyncio.get_running_loop().time()
        except RuntimeError:
            pass
        events, self._events = self._events, []
        parts, admin_parts = [], []
        wheres: list[Optional[tuple[str, Optional[str]]]] = []  # per part: a workload's (namespace, owner)
        admins = any(getattr(c, "gpuqueue_admin", False) for c in self.clients)
        for event in events:
            try:
                text = json.dumps(event)
                parts.append(text)
                if admins:  # admins see the names other teams' clients do not (Views.reveal)
                    revealed = _revealed(self.service, event)
                    admin_parts.append(text if revealed is None else json.dumps(revealed))
            except (TypeError, ValueError):
                self.log.exception("gpuqueue: dropping an event that is not JSON: %r", event)
                continue
            wl = event.get("workload") if event.get("type") == "workload" else None
            wheres.append((wl.get("namespace", ""), wl.get("owner")) if isinstance(wl, dict) else None)
        if not parts:
            return

        def batch_of(ps: list[str]) -> str:
            return ps[0] if len(ps) == 1 else '{"type": "batch", "events": [' + ", ".join(ps) + "]}"

        batch = batch_of(parts)
        admin_batch = batch_of(admin_parts) if admins and admin_parts != parts else batch
        if admin_batch is batch:
            admin_parts = parts
        # Who sees what (service/visibility.py): a client that does not see every team gets the
        # events of its teams and its own workloads; one selection per (teams, user), made once.
        viewers: dict[str, Any] = {}
        selections: dict[Any, tuple[list[str], str]] = {}
        teams = getattr(self.service, "teams", None)
        by_owner: dict[Optional[str], list[str]] = {}  # owner -> the namespaces of its workloads' events
        for w in wheres:
            if w is not None:
                by_owner.setdefault(w[1], []).append(w[0])
        frames: dict[str, bytes] = {}  # text -> its frame, made for the first client that needs it
        for client in list(self.clients):
            admin = admins and getattr(client, "gpuqueue_admin", False)
            ps, b = (admin_parts, admin_batch) if admin else (parts, batch)
            if not admin and by_owner and teams is not None:
                user = getattr(client, "gpuqueue_user", "")
                viewer = viewers.get(user)
                if viewer is None:
                    viewer = viewers[user] = teams.viewer(user)
                if viewer.namespaces is not None:
                    ps, b = _selection(viewer, parts, wheres, by_owner, selections, batch_of)
                    if not ps:
                        continue
            for text in ((b,) if client.batches else ps):
                frame = frames.get(text)
                if frame is None:
                    frame = frames[text] = text_frame(text)
                client._write_frame(frame)


def _selection(viewer: Any, parts: list[str], wheres: list, by_owner: dict, selections: dict,
               batch_of: Any) -> tuple[list[str], str]:
    """The parts (and their batch) ``viewer`` sees, cached in ``selections`` by its teams, and by
    its user as well where it owns a workload of another team (it sees its own)."""
    ns = viewer.namespaces
    own = any(n not in ns for n in by_owner.get(viewer.user, ()))
    key = (ns, viewer.user) if own else ns
    hit = selections.get(key)
    if hit is None:
        ps = [p for p, w in zip(parts, wheres) if w is None or viewer.sees(*w)]
        hit = selections[key] = (ps, batch_of(ps) if ps else "")
    return hit


def _revealed(service: Any, event: dict) -> Optional[dict]:
    """``event`` as an admin sees it, or None when it hides nothing: a workload event whose
    waitingFor or preemptions hide another team's names (service/views.py, ``reveal``)."""
    if event.get("type") != "workload":
        return None
    wl = event.get("workload") or {}
    hidden = any(w.get("name") is None for w in wl.get("waitingFor") or ()) or any(
        p.get("by") is None and p.get("byNamespace") for p in (wl.get("preemptions") or {}).get("history") or ())
    if not hidden:
        return None
    try:
        return {**event, "workload": service.views.reveal(wl)}
    except Exception:  # pragma: no cover - the anonymised view is still right
        return None


def text_frame(text: str) -> bytes:
    """One unmasked, uncompressed, final websocket text frame holding ``text`` (RFC 6455, 5.2)."""
    data = text.encode("utf-8")
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x81, n)
    elif n <= 0xFFFF:
        head = struct.pack("!BBH", 0x81, 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 127, n)
    return head + data


def broadcaster(settings: dict, service: Any, log: Optional[logging.Logger] = None) -> EventBroadcaster:
    """The :class:`EventBroadcaster` of ``service`` kept in the tornado ``settings`` (made on
    first use, with ``settings[FLUSH_INTERVAL_KEY]`` seconds between flushes)."""
    b = settings.get(BROADCASTER_KEY)
    if b is None or b.service is not service:
        interval = float(settings.get(FLUSH_INTERVAL_KEY, DEFAULT_FLUSH_INTERVAL))
        b = settings[BROADCASTER_KEY] = EventBroadcaster(service, interval, log)
    return b


class EventsHandler(WebSocketMixin, websocket.WebSocketHandler, JupyterHandler):
    """Streams the QueueService's events to one client."""

    auth_resource = AUTH_RESOURCE

    batches = False  # whether the client takes batch messages (?batch=1)
    _broadcaster: Optional[EventBroadcaster] = None
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
        max_buffer = int(self.settings.get(MAX_BUFFER_KEY, DEFAULT_MAX_BUFFER))
        if max_buffer > 0 and self.ws_connection is not None:
            self.ws_connection.stream.max_write_buffer_size = max_buffer  # write() raises beyond
        self.gpuqueue_user = resolve_user(self)
        self.gpuqueue_admin = has_scope(self, ADMIN_SCOPE)  # sees other teams' names (Views.reveal)
        self.batches = self.get_argument("batch", "0").lower() in ("1", "true", "yes")
        self._send({"type": "hello", "user": self.gpuqueue_user})
        service = self.settings.get(SERVICE_KEY)
        if self._closed or service is None:  # the server is stopping
            self._drop(close=True)
            return
        self._broadcaster = broadcaster(self.settings, service, self.log)
        self._broadcaster.add(self)
        interval = float(self.settings.get(PING_INTERVAL_KEY, DEFAULT_PING_INTERVAL))
        if interval > 0:
            self._ping = ioloop.PeriodicCallback(
                lambda: self._send({"type": "ping"}), interval * 1000
            )
            self._ping.start()

    def on_message(self, message: Any) -> None:
        """Clients have nothing to say; messages are ignored."""

    def get_compression_options(self) -> None:
        """No per-message compression: every client gets the same frame (see the module docstring)."""
        return None

    def on_close(self) -> None:
        self._drop()
        super().on_close()

    # -- internals ------------------------------------------------------------------------------

    def _send(self, event: dict) -> None:
        """Send one message of this connection only (hello, ping)."""
        self._write(json.dumps(event))

    def _write(self, text: str) -> None:
        """Queue one JSON text message; never blocks or raises (a failing client is dropped)."""
        if self._closed:
            return
        try:
            future = self.write_message(text)
        except websocket.WebSocketClosedError:
            self._drop()
            return
        except iostream.StreamBufferFullError:
            self.log.warning("gpuqueue: dropping an event-stream client that does not read (%s)",
                             self.request.remote_ip)
            self._drop(close=True)
            return
        except Exception:  # a broken stream
            self.log.warning("gpuqueue: event write failed; dropping the client", exc_info=True)
            self._drop(close=True)
            return
        future.add_done_callback(self._write_done)

    def _write_frame(self, frame: bytes) -> None:
        """Queue one frame made by :func:`text_frame`; never blocks or raises (a failing client is
        dropped). A write that fails later closes the stream, and tornado calls :meth:`on_close`."""
        conn = self.ws_connection
        if self._closed:
            return
        if conn is None or conn.is_closing() or conn.stream is None or conn.stream.closed():
            self._drop()
            return
        try:
            conn.stream.write(frame)
        except iostream.StreamClosedError:
            self._drop()
        except iostream.StreamBufferFullError:
            self.log.warning("gpuqueue: dropping an event-stream client that does not read (%s)",
                             self.request.remote_ip)
            self._drop(close=True)
        except Exception:  # a broken stream
            self.log.warning("gpuqueue: event write failed; dropping the client", exc_info=True)
            self._drop(close=True)

    def _write_done(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            self._drop(close=True)

    def _drop(self, close: bool = False) -> None:
        """Unsubscribe and stop pinging (idempotent); optionally disconnect the client."""
        first = not self._closed
        self._closed = True
        if self._ping is not None:
            self._ping.stop()
            self._ping = None
        if self.ping_callback is not None:  # WebSocketMixin's protocol-level ping
            self.ping_callback.stop()
        if self._broadcaster is not None:
            self._broadcaster.remove(self)
            self._broadcaster = None
        if close and first:
            conn = self.ws_connection
            try:
                self.close()
            except Exception:  # no room left for the close frame: cut the connection
                if conn is not None and conn.stream is not None:
                    conn.stream.close()


events_handler = (rf"{API_PREFIX}/events", EventsHandler)
