"""Adversarial clients of the event stream (websocket ``{base_url}gpuqueue/api/events``, issue 18):
malformed client frames, clients that never read while events flood, reconnect storms.

Each test keeps an *observer* (a well-behaved ``?batch=1`` client) connected throughout and
asserts that the server stays healthy: the observer receives every emitted event, in order;
REST answers; the broadcaster's client set and the service's subscriptions return to what they
were (no leaked handler), and so does the process's count of open file descriptors.

The adversaries speak raw websocket over a TCP socket (``RawClient``), so that they can send
what no websocket library would: unmasked frames, invalid UTF-8, reserved opcodes, a frame
bigger than the server takes, and so that a stuck client really never reads its socket.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time

import pytest

from jupyter_gpuqueue.server.events import BROADCASTER_KEY
from test_rest import API, ok  # noqa: F401

TIMEOUT = 30


def broadcaster(app):
    return app.web_app.settings.get(BROADCASTER_KEY)


def n_clients(app) -> int:
    b = broadcaster(app)
    return 0 if b is None else len(b.clients)


def server_connections(port: int) -> list[str]:
    """The server's open TCP connections (its end: local port ``port``, neither listening nor in
    TIME_WAIT), from /proc/net/tcp: a handler that never closes its socket stays here."""
    out = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if int(local.split(":")[1], 16) == port and state not in ("0A", "06"):
            out.append(f"{fields[2]} state {state}")
    return out


async def eventually(predicate, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


class Observer:
    """A well-behaved batch client that checks it gets every emitted ``{"n": i}`` in order."""

    def __init__(self, ws):
        self.ws = ws
        self.seen = 0  # the last n received

    async def expect_upto(self, n: int) -> None:
        while self.seen < n:
            msg = await asyncio.wait_for(self.ws.read_message(), TIMEOUT)
            assert msg is not None, "the server closed the observer's stream"
            event = json.loads(msg)
            for e in event["events"] if event["type"] == "batch" else [event]:
                if e.get("type") == "ping":
                    continue
                assert (e.get("type"), e.get("n")) == ("queues", self.seen + 1), (str(e)[:200], self.seen)
                self.seen += 1


@pytest.fixture
def observer(jp_ws_fetch, started, jp_asyncio_loop):
    async def connect():
        ws = await jp_ws_fetch(*API, "events", params={"batch": "1"})
        hello = json.loads(await asyncio.wait_for(ws.read_message(), TIMEOUT))
        assert hello["type"] == "hello"
        return ws
    ws = jp_asyncio_loop.run_until_complete(connect())
    yield Observer(ws)
    ws.close()


class Emitter:
    def __init__(self, service):
        self.service = service
        self.n = 0

    def emit(self, k: int = 1, **extra) -> int:
        for _ in range(k):
            self.n += 1
            self.service.events.emit({"type": "queues", "n": self.n, **extra})
        return self.n


@pytest.fixture
def emitter(gpuqueue_service):
    return Emitter(gpuqueue_service)


def frame(opcode: int, payload: bytes, fin: bool = True, masked: bool = True, rsv: int = 0) -> bytes:
    """One client frame (RFC 6455, 5.2)."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    mbit = 0x80 if masked else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n <= 0xFFFF:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    masked_payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if n < 4096 else _mask_fast(payload, key)
    return head + key + masked_payload


def _mask_fast(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    k = int.from_bytes(key * ((n + 3) // 4), "big") >> (8 * ((4 - n % 4) % 4))
    return (int.from_bytes(payload, "big") ^ k).to_bytes(n, "big")


class RawClient:
    """A websocket client on a bare TCP socket: it sends whatever bytes it is told to and reads
    only when asked (a stuck client never does)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, path: str, auth: dict, rcvbuf: int | None = None) -> "RawClient":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # a small receive window: the server's buffer fills sooner
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        key = base64.b64encode(os.urandom(16)).decode()
        headers = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
        writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"{headers}\r\n").encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        assert response.startswith(b"HTTP/1.1 101"), response
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, OSError):  # the server already cut us off
            pass

    async def read_frame(self):
        """(opcode, payload) of the next server frame; None at end of stream."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(2), TIMEOUT)
            n = head[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            assert not head[1] & 0x80, "a server never masks"
            return head[0] & 0x0F, await self.reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except asyncio.TimeoutError:
            raise AssertionError(f"no frame and no end of stream in {TIMEOUT} s") from None

    async def read_until_closed(self) -> list[tuple[int, bytes]]:
        """Every frame up to the end of the stream (the server must end it)."""
        frames = []
        while (f := await self.read_frame()) is not None:
            frames.append(f)
        return frames

    def abort(self) -> None:
        """Cut the connection with a TCP reset (no close handshake, no FIN)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def raw(jp_http_port, jp_base_url, jp_auth_header):
    path = f"{jp_base_url.rstrip('/')}/{'/'.join(API)}/events"

    async def connect(batch: bool = False, rcvbuf: int | None = None) -> RawClient:
        return await RawClient.connect(jp_http_port, path + ("?batch=1" if batch else ""), jp_auth_header, rcvbuf)
    return connect


async def healthy(jp_fetch, observer: Observer, emitter: Emitter, app, clients: int):
    """``clients`` handlers remain (before any event, whose flush would drop a closed one), the
    observer gets the next events in order, REST answers."""
    await eventually(lambda: n_clients(app) == clients,
                     f"the broadcaster keeps {n_clients(app)} clients, not {clients}")
    await observer.expect_upto(emitter.emit(3))
    info = await ok(jp_fetch, "info")
    assert info["user"]


# -- malformed client frames --------------------------------------------------------------------

MALFORMED = {
    # what the client sends -> the server must close the connection (True) or ignore it (False)
    "binary": (lambda: frame(0x2, os.urandom(1000)), False),
    "empty text": (lambda: frame(0x1, b""), False),
    "ping": (lambda: frame(0x9, b"are you there"), False),
    "unsolicited pong": (lambda: frame(0xA, b"x"), False),
    "invalid utf-8": (lambda: frame(0x1, b"\xff\xfe\xc3\x28 not utf-8"), True),
    "truncated utf-8": (lambda: frame(0x1, "é".encode()[:1]), True),
    # RFC 6455 5.1 says a server MUST close on an unmasked client frame; tornado takes it as a
    # message, which the stream ignores like any other: harmless.
    "unmasked": (lambda: frame(0x1, b"hello", masked=False), False),
    "reserved opcode": (lambda: frame(0x3, b"x"), True),
    "reserved control opcode": (lambda: frame(0xB, b"x"), True),
    "rsv bits without an extension": (lambda: frame(0x1, b"x", rsv=0b100), True),
    "fragmented control frame": (lambda: frame(0x9, b"x", fin=False), True),
    "control frame over 125 bytes": (lambda: frame(0x9, b"x" * 200), True),
    "continuation without a start": (lambda: frame(0x0, b"x"), True),
    "garbage": (lambda: b"\x00\xff" * 50, True),
}


async def test_malformed_frames_close_only_their_sender(jp_fetch, jp_http_port, observer, emitter, raw, started):
    await healthy(jp_fetch, observer, emitter, started, 1)
    fds = len(server_connections(jp_http_port))
    for name, (make, closes) in MALFORMED.items():
        t0 = time.monotonic()
        client = await raw()
        await healthy(jp_fetch, observer, emitter, started, 2)
        await client.send(make())
        n = emitter.emit(2)
        await observer.expect_upto(n)
        if closes:
            frames = await client.read_until_closed()  # hello, perhaps events, perhaps a close frame
            assert frames and json.loads(frames[0][1])["type"] == "hello", name
            client.close()
            await healthy(jp_fetch, observer, emitter, started, 1)
        else:  # ignored: the sender keeps its stream and its events
            events = []
            while not events or events[-1] != n:
                f = await client.read_frame()
                assert f is not None, f"the server closed the stream after a harmless {name} frame"
                if f[0] == 0x1:
                    e = json.loads(f[1])
                    if e.get("type") == "queues":
                        events.append(e["n"])
            assert events == list(range(events[0], n + 1)) and n - 1 in events, (name, events)
            client.close()
            await healthy(jp_fetch, observer, emitter, started, 1)
        assert time.monotonic() - t0 < 10, f"{name}: the sender was not closed at once"
    await eventually(lambda: len(server_connections(jp_http_port)) <= fds,
                     f"connections left open: {server_connections(jp_http_port)}")


async def test_a_frame_over_the_size_limit_closes_its_sender(jp_fetch, observer, emitter, raw, started):
    """tornado's websocket_max_message_size (10 MiB by default): the sender is closed with 1009."""
    client = await raw()
    await client.send(frame(0x1, b"a" * (11 << 20)))
    frames = await client.read_until_closed()
    closes = [p for op, p in frames if op == 0x8]
    assert not closes or struct.unpack("!H", closes[0][:2])[0] == 1009, closes
    await healthy(jp_fetch, observer, emitter, started, 1)


async def test_a_huge_fragmented_message_is_refused(jp_fetch, observer, emitter, raw, started):
    """Fragments that add up past the limit: the server does not keep collecting them."""
    client = await raw()
    chunk = b"b" * (1 << 20)
    await client.send(frame(0x1, chunk, fin=False))
    for _ in range(11):
        await client.send(frame(0x0, chunk, fin=False))
    await client.read_until_closed()
    await healthy(jp_fetch, observer, emitter, started, 1)


async def test_many_tiny_messages_are_ignored(jp_fetch, observer, emitter, raw, started):
    """20,000 one-byte messages (and empty ones) sent as fast as possible, interleaved with the
    flood of events: the sender keeps its stream, the observer misses nothing."""
    client = await raw()
    tiny = frame(0x1, b"x") * 500 + frame(0x2, b"") * 500
    for _ in range(20):
        await client.send(tiny)
        emitter.emit(5)
    n = emitter.emit(1)
    await observer.expect_upto(n)
    seen = []
    while not seen or seen[-1] != n:
        f = await client.read_frame()
        assert f is not None, "the server closed a client for sending small messages"
        e = json.loads(f[1]) if f[0] == 0x1 else {}
        if e.get("type") == "queues":
            seen.append(e["n"])
    assert seen == list(range(1, n + 1))
    client.close()
    await healthy(jp_fetch, observer, emitter, started, 1)


# -- slow readers -------------------------------------------------------------------------------

class TestSlowReaders:
    """Clients that never read while events flood are dropped once ``gpuqueue_event_max_buffer``
    bytes wait for them; the observer and a second reader get every event, in order."""

    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"tornado_settings": {"gpuqueue_event_max_buffer": 128 * 1024,
                                     "gpuqueue_event_flush_interval": 0}}

    async def test_stuck_clients_are_dropped_and_the_others_keep_everything(
            self, jp_fetch, jp_ws_fetch, jp_http_port, observer, emitter, raw, started, gpuqueue_service):
        subscribers = len(gpuqueue_service.events._subscribers)
        fds = len(server_connections(jp_http_port))
        stuck = [await raw(batch=i % 2 == 0, rcvbuf=4096) for i in range(4)]
        reader = await raw(batch=True)
        await eventually(lambda: n_clients(started) == 6, "six clients")
        stuck_handlers = list(broadcaster(started).clients)[1:5]
        padding = "p" * (16 * 1024)
        got: list[int] = []

        async def read_all():
            while True:
                f = await reader.read_frame()
                assert f is not None
                e = json.loads(f[1])
                for ev in e["events"] if e["type"] == "batch" else [e]:
                    if ev.get("type") == "queues":
                        got.append(ev["n"])
                        if ev["n"] == emitter.n and done.is_set():
                            return

        done = asyncio.Event()
        reading = asyncio.create_task(read_all())
        rounds = 0
        while any(h in broadcaster(started).clients for h in stuck_handlers):
            rounds += 1
            assert rounds < 2000, "a stuck client was never dropped"
            emitter.emit(2, padding=padding)
            await observer.expect_upto(emitter.n)
        done.set()
        emitter.emit(1)
        await observer.expect_upto(emitter.n)
        await asyncio.wait_for(reading, TIMEOUT)
        assert got == list(range(1, emitter.n + 1))
        await healthy(jp_fetch, observer, emitter, started, 2)
        assert len(gpuqueue_service.events._subscribers) == subscribers
        for s in stuck:  # the stuck clients find their streams ended once they read
            await s.read_until_closed()
            s.close()
        reader.close()
        await healthy(jp_fetch, observer, emitter, started, 1)
        await eventually(lambda: len(server_connections(jp_http_port)) <= fds,
                     f"connections left open: {server_connections(jp_http_port)}")


# -- reconnect storms ---------------------------------------------------------------------------

async def test_reconnect_storm(jp_fetch, jp_http_port, jp_ws_fetch, observer, emitter, raw, started, gpuqueue_service):
    """400 connect/close cycles, 20 at a time, in four manners (a websocket close before or after
    the hello, a TCP FIN without a close handshake, a TCP reset), while events flow: the observer
    misses nothing, and afterwards the handlers, subscriptions and sockets are what they were."""
    subscribers = len(gpuqueue_service.events._subscribers)
    fds = len(server_connections(jp_http_port))

    async def cycle(i: int):
        manner = i % 5
        if manner == 0:  # the library client, closed at once (often before its hello)
            ws = await jp_ws_fetch(*API, "events", params={"batch": "1"} if i % 2 else None)
            ws.close()
            return
        c = await raw(batch=bool(i % 2))
        if manner == 1:  # close handshake after the hello
            await c.read_frame()
            await c.send(frame(0x8, struct.pack("!H", 1000)))
            await c.read_until_closed()
            c.close()
        elif manner == 2:  # close handshake at once
            await c.send(frame(0x8, struct.pack("!H", 1001)))
            c.close()
        elif manner == 3:  # FIN, no close frame
            c.close()
        else:  # RST
            c.abort()

    for wave in range(20):
        n = emitter.emit(2)  # flushed while the wave connects and closes
        await asyncio.gather(*(cycle(wave * 20 + i) for i in range(20)))
        await observer.expect_upto(n)
    await healthy(jp_fetch, observer, emitter, started, 1)
    assert len(gpuqueue_service.events._subscribers) == subscribers
    await eventually(lambda: len(server_connections(jp_http_port)) <= fds,
                     f"connections left open: {server_connections(jp_http_port)}")
