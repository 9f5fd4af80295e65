"""The event stream's batching (server/events.py): one subscription per service, events of one
moment flushed together, as one ``batch`` message to clients that connect with ``?batch=1`` and
one by one to the others; failing, closed and stuck clients are dropped without hurting the rest.

The synthetic events are emitted with ``EventHub.emit`` (``QueueService.events``) from the test, on the server's loop:
events emitted in one go (no await between them) are always flushed together."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from jupyter_gpuqueue.server.events import BROADCASTER_KEY, text_frame
from test_rest import API, check_schema, command_job, ok, openapi_doc  # noqa: F401 (fixtures)

TIMEOUT = 30


async def connect(jp_ws_fetch, batch: bool = True):
    """An event stream past its hello."""
    ws = await jp_ws_fetch(*API, "events", params={"batch": "1"} if batch else None)
    hello = json.loads(await asyncio.wait_for(ws.read_message(), TIMEOUT))
    assert hello["type"] == "hello"
    return ws


async def read(ws):
    """The next message other than a ping, parsed; None once the server closed the stream."""
    while True:
        msg = await asyncio.wait_for(ws.read_message(), TIMEOUT)
        if msg is None:
            return None
        event = json.loads(msg)
        if event != {"type": "ping"}:
            return event


def unpack(message: dict) -> list[dict]:
    if message["type"] == "batch":
        assert len(message["events"]) >= 2, "a batch holds several events"
        return message["events"]
    return [message]


def broadcaster(app):
    return app.web_app.settings[BROADCASTER_KEY]


async def test_a_burst_arrives_complete_and_in_order(jp_fetch, jp_ws_fetch, started, gpuqueue_service):
    """Everything the service emitted reaches the stream, in order: batches unpacked, nothing
    dropped, merged or reordered."""
    emitted: list[dict] = []
    unsubscribe = gpuqueue_service.subscribe(emitted.append)
    ws = await connect(jp_ws_fetch)
    try:
        del emitted[:]  # from here on the stream gets what the recorder gets
        jobs = await asyncio.gather(*(
            ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job("print(1)", name=f"burst-{i}"))
            for i in range(8)
        ))
        uids = {wl["uid"] for wl in jobs}
        received: list[dict] = []
        done: set[str] = set()
        deadline = time.monotonic() + 120
        while done != uids or len(received) < len(emitted):
            assert time.monotonic() < deadline, (len(received), len(emitted), done)
            message = await read(ws)
            assert message is not None, "the server closed the event stream"
            for event in unpack(message):
                received.append(event)
                if event["type"] == "workload" and event["workload"]["state"] == "Succeeded":
                    done.add(event["workload"]["uid"])
        assert received == json.loads(json.dumps(emitted))
        states = [e["workload"]["state"] for e in received if e["type"] == "workload"]
        assert states.count("Succeeded") == len(uids) and states.count("Pending") >= len(uids)
    finally:
        unsubscribe()
        ws.close()


async def test_events_of_one_moment_are_one_batch(jp_ws_fetch, gpuqueue_service, check_schema):
    batched = await connect(jp_ws_fetch)
    plain = await connect(jp_ws_fetch, batch=False)
    try:
        events = [{"type": "queues"}, {"type": "inventory"}, {"type": "queues"}]
        for event in events:
            gpuqueue_service.events.emit(event)
        message = await read(batched)
        assert message == {"type": "batch", "events": events}
        # clients that did not ask for batches get the same events one by one
        assert [await read(plain) for _ in events] == events
        # a lone event goes out as it is
        gpuqueue_service.events.emit({"type": "inventory"})
        assert await read(batched) == {"type": "inventory"}
        assert await read(plain) == {"type": "inventory"}
    finally:
        batched.close()
        plain.close()


async def test_an_event_that_is_not_json_is_dropped_alone(jp_ws_fetch, gpuqueue_service):
    ws = await connect(jp_ws_fetch)
    try:
        gpuqueue_service.events.emit({"type": "queues"})
        gpuqueue_service.events.emit({"type": "bad", "value": object()})
        gpuqueue_service.events.emit({"type": "inventory"})
        assert await read(ws) == {"type": "batch", "events": [{"type": "queues"}, {"type": "inventory"}]}
        gpuqueue_service.events.emit({"type": "bad", "value": object()})
        gpuqueue_service.events.emit({"type": "queues"})
        assert await read(ws) == {"type": "queues"}  # one left: not a batch
    finally:
        ws.close()


async def test_one_subscription_for_every_connection(jp_ws_fetch, gpuqueue_service, started):
    before = len(gpuqueue_service.events._subscribers)
    streams = [await connect(jp_ws_fetch) for _ in range(3)]
    assert len(gpuqueue_service.events._subscribers) == before + 1
    assert len(broadcaster(started).clients) == 3
    for ws in streams:
        ws.close()
    deadline = time.monotonic() + TIMEOUT
    while len(gpuqueue_service.events._subscribers) != before or broadcaster(started).clients:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_closed_and_failing_clients_do_not_hurt_the_others(jp_ws_fetch, gpuqueue_service, started):
    gone = await connect(jp_ws_fetch)
    failing = await connect(jp_ws_fetch)
    healthy = await connect(jp_ws_fetch)
    handlers = list(broadcaster(started).clients)
    assert len(handlers) == 3
    broken = handlers[1]  # connections are kept in order

    def write_fails(*args, **kwargs):
        raise RuntimeError("broken stream")

    broken.ws_connection.stream.write = write_fails  # every write to this client's socket fails
    try:
        gone.close()  # the server may not have heard of it yet
        gpuqueue_service.events.emit({"type": "queues"})
        gpuqueue_service.events.emit({"type": "inventory"})
        assert await read(healthy) == {"type": "batch", "events": [{"type": "queues"}, {"type": "inventory"}]}
        assert broken not in broadcaster(started).clients
        assert await read(failing) is None  # the failing client was disconnected
        gpuqueue_service.events.emit({"type": "queues"})
        assert await read(healthy) == {"type": "queues"}
    finally:
        for ws in (failing, healthy):
            ws.close()


class TestStuckClient:
    """A client that does not read is disconnected once ``gpuqueue_event_max_buffer`` bytes wait
    for it; the others keep getting everything."""

    @pytest.fixture
    def gpuqueue_server_config(self):
        # flush interval 0: a flush per event-loop turn, so that the test sends fast
        return {"tornado_settings": {"gpuqueue_event_max_buffer": 256 * 1024, "gpuqueue_event_flush_interval": 0}}

    async def test_a_client_that_does_not_read_is_dropped(self, jp_ws_fetch, gpuqueue_service, started):
        stuck = await connect(jp_ws_fetch)
        healthy = await connect(jp_ws_fetch)
        stuck_handler = list(broadcaster(started).clients)[0]
        padding = "x" * (64 * 1024)
        sent = 0
        # The kernel's socket buffers take a few MB before tornado has to keep anything.
        while stuck_handler in broadcaster(started).clients:
            assert sent < 1000, "the stuck client was never dropped"
            sent += 1
            gpuqueue_service.events.emit({"type": "queues", "n": sent, "padding": padding})
            assert (await read(healthy))["n"] == sent
        gpuqueue_service.events.emit({"type": "inventory"})
        assert await read(healthy) == {"type": "inventory"}
        # the stuck client finds its stream closed once it reads again
        deadline = time.monotonic() + TIMEOUT
        while await asyncio.wait_for(stuck.read_message(), TIMEOUT) is not None:
            assert time.monotonic() < deadline
        healthy.close()


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 200_000])
def test_a_shared_frame_is_the_frame_tornado_writes(size):
    """A flush frames each message once for every client (text_frame): byte for byte what
    tornado's own frame writer sends on an uncompressed server connection, at every length
    encoding of RFC 6455 (7 bits, 16 bits, 64 bits)."""
    from tornado.websocket import WebSocketProtocol13

    text = "é" * (size // 2) + "x" * (size % 2)  # non-ASCII: the length is in bytes
    written = []

    class Stream:
        def write(self, data):
            written.append(data)

    proto = WebSocketProtocol13.__new__(WebSocketProtocol13)
    proto.stream, proto.mask_outgoing, proto._compressor = Stream(), False, None
    proto._wire_bytes_out = 0
    proto._write_frame(True, 0x1, text.encode("utf-8"))  # what write_message does once encoded
    assert text_frame(text) == written[0]



async def test_admins_hear_the_names_other_teams_do_not(jp_fetch, jp_ws_fetch, started, gpuqueue_service):
    """A workload event that hides another team's names (here: who preempted it) goes out
    anonymised to members and revealed to admins, as GET answers each of them (Views.reveal)."""
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                  body=command_job("import time; time.sleep(30)"))
    member, admin = await connect(jp_ws_fetch), await connect(jp_ws_fetch)
    clients = list(broadcaster(started).clients)
    assert len(clients) == 2 and all(c.gpuqueue_admin for c in clients)  # the server's owner holds every scope
    clients[0].gpuqueue_admin = False  # the first connected stands for a team member without the admin scope
    try:
        rec = gpuqueue_service.record(wl["namespace"], wl["name"])
        rec["spec"] = {**rec["spec"], "preemptions": [
            {"at": time.time(), "by": "other-team/urgent", "reason": "InCohortReclamation", "lostCostUsd": 0.5}]}
        gpuqueue_service.events.emit_workload(rec["uid"])
        for ws, expect in ((member, None), (admin, "other-team/urgent")):
            event = None
            while event is None:
                event = next((e for e in unpack(await read(ws)) if e["type"] == "workload"
                              and e["workload"]["name"] == wl["name"] and e["workload"].get("preemptions")), None)
            last = event["workload"]["preemptions"]["last"]
            assert last["by"] == expect and last["byNamespace"] == "other-team"
    finally:
        member.close()
        admin.close()
        await ok(jp_fetch, "workloads", wl["namespace"], wl["name"], method="DELETE")
