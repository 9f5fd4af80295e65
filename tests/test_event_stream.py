"""The client's event stream (jupyter_gpuqueue/client.py ``EventStream``) closes at once, even while
another thread waits in it for the next message, as GpuJob's watcher does: ``GpuJob.close()``
("stop watching") must not wait for the server's next event or ping (up to 30 s), nor, where the
server runs on the caller's own event loop, for the stream's whole timeout (it did: 75 s, seen as a
77 s tests/test_widget_preemption.py in full runs)."""

from __future__ import annotations

import asyncio
import threading
import time

from jupyter_gpuqueue.client import GpuQueueClient


async def test_close_wakes_a_reader_blocked_in_another_thread(gpuqueue_env):
    client = GpuQueueClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    stream = await asyncio.to_thread(client.events, 600.0)
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.extend(stream), name="event-reader", daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not got:
        assert time.monotonic() < deadline, "no hello on the event stream"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # nothing happens on the queue: the reader now waits in recv()
    # On the event loop's thread, which also serves the server: it cannot answer the close frame
    # until close() returns, so close() must not wait for an answer the reader's lock holds up.
    started = time.monotonic()
    stream.close()
    took = time.monotonic() - started
    # not a speed target: a close() that waits for the reader's lock returns only when its recv()
    # times out (600 s here) or a signal breaks it (the test's timeout, swallowed by close())
    assert took < 20, f"close() waited {took:.0f} s for the reader blocked in recv()"
    await asyncio.to_thread(reader.join, 60)
    assert not reader.is_alive(), "the reader still waits on the stream after close()"
    assert got[0]["type"] == "hello", got[0]
