"""Group commit of submissions: many concurrent submissions, one SQLite transaction, one fsync.

The invariant (DESIGN.md, "A submission is persisted before it is acknowledged"):

    **acknowledged ⇒ durable.** A submission is answered (201) only after the COMMIT of the
    transaction holding its row has returned; with SQLite in WAL mode and ``synchronous=FULL``
    that commit has fsynced the WAL, so the row survives a crash (kill -9) or a power loss. A
    submission whose commit failed is answered with an error and is not queued. A submission that
    was committed but not yet answered when the server died is in the ledger and is queued again
    at restart (the client saw no answer and may retry: with its own ``name`` a retry gets 409).

Why: one commit costs one fsync (≈ 3 ms on this project's benchmark machine), so committing each
submission alone caps the rate near 300/s however fast everything else is. Here a single writer
thread takes *every* submission queued since its last commit and writes them in one transaction
(:meth:`Ledger.add_workload_groups`): while it waits for one fsync (the GIL is released), the
event loop parses and validates the next requests, which form the next batch. Under light load a
batch is one submission and the latency is one commit; under heavy load batches grow by
themselves and the rate is bounded by CPU, not by the disk.

Each item is a *group* of rows that is committed all-or-nothing (a manifest with several
documents); a group that fails alone (its name is taken) gets its own error, the others of the
batch commit.

Failpoints (crash tests, tests/test_crash.py): the environment variable ``GPUQUEUE_FAILPOINT``
set to ``group-commit:before`` or ``group-commit:after``, optionally ``:N`` (the Nth commit of the
process, default 1), makes the process SIGKILL itself at that commit: ``before``, with the batch
taken from the queue and nothing of it written (the requests are outstanding, nothing is durable);
``after``, once the transaction has committed and fsynced but before any of its submissions is
answered (durable, unacknowledged: restart must queue them). Read once, at construction; unset,
it costs nothing.

Threads: :meth:`GroupCommitter.submit` may be called from any thread (the service calls it on the
event-loop thread); the writer thread is the only one that uses the ledger through this object.
Other writes of the service still go to the ledger directly from the loop thread; SQLite
serialises the two writers (``busy_timeout``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import threading
from typing import Optional

from .store import Ledger

log = logging.getLogger(__name__)

FAILPOINT_ENV = "GPUQUEUE_FAILPOINT"
FAILPOINTS = ("before", "after")


def parse_failpoint(text: Optional[str]) -> Optional[tuple[str, int]]:
    """``"group-commit:after:3"`` → ``("after", 3)``; None when unset or naming another component.
    ValueError for a malformed value naming this component (a test's typo must not pass silently)."""
    if not text or not text.startswith("group-commit:"):
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[1] not in FAILPOINTS:
        raise ValueError(f"{FAILPOINT_ENV}={text!r}: expected group-commit:before|after[:N]")
    nth = int(parts[2]) if len(parts) == 3 else 1
    if nth < 1:
        raise ValueError(f"{FAILPOINT_ENV}={text!r}: N must be >= 1")
    return parts[1], nth


class GroupCommitter:
    """One writer thread committing queued groups of workload rows in batches.

    ``ledger``: where rows go (:meth:`Ledger.add_workload_groups`). ``max_batch``: the most groups
    per transaction (bounds the latency of one commit). Start it with :meth:`start` (or lazily at
    the first :meth:`submit`), stop it with :meth:`close`, which commits what is queued first.

    Counters (for benchmarks and metrics): ``commits`` (transactions), ``groups`` (groups
    committed or failed), ``largest_batch`` (most groups in one transaction).
    """

    def __init__(self, ledger: Ledger, *, max_batch: int = 1024):
        self.ledger = ledger
        self.max_batch = max(1, int(max_batch))
        self._cv = threading.Condition()
        self._queue: list[tuple[list[dict], concurrent.futures.Future]] = []
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.commits = 0
        self.groups = 0
        self.largest_batch = 0
        self._failpoint = parse_failpoint(os.environ.get(FAILPOINT_ENV))
        self._attempts = 0

    def _maybe_die(self, point: str) -> None:
        """The failpoint (module docstring): SIGKILL this process at ``point`` of the armed commit."""
        if self._failpoint is not None and self._failpoint == (point, self._attempts):
            log.warning("gpuqueue: failpoint group-commit:%s:%d: killing the process", point, self._attempts)
            os.kill(os.getpid(), signal.SIGKILL)

    def start(self) -> None:
        with self._cv:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="gpuqueue-group-commit", daemon=True)
                self._thread.start()

    def submit(self, rows: list[dict]) -> concurrent.futures.Future:
        """Queue one group of workload records (column dicts, as for ``Ledger.add_workload``);
        returns a Future whose result is None once the group is committed (durable), or whose
        exception is the group's error (ValidationError, Conflict) or the commit's. RuntimeError
        (in the Future) once closed."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if self._closed:
                fut.set_exception(RuntimeError("the ledger's group commit is closed"))
                return fut
            self._queue.append((list(rows), fut))
            self._cv.notify()
        if self._thread is None:
            self.start()
        return fut

    async def add(self, rows: list[dict]) -> None:
        """Await the durable commit of one group (see :meth:`submit`); raises its error."""
        await asyncio.wrap_future(self.submit(rows))

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued, then stop the writer thread (idempotent)."""
        with self._cv:
            self._closed = True
            self._cv.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
                batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            self._commit(batch)

    def _commit(self, batch: list[tuple[list[dict], concurrent.futures.Future]]) -> None:
        self._attempts += 1
        self._maybe_die("before")
        try:
            results = self.ledger.add_workload_groups([rows for rows, _ in batch])
        except BaseException as exc:  # the commit failed: nothing of this batch is durable
            log.error("gpuqueue: group commit of %d submissions failed: %s", len(batch), exc)
            for _, fut in batch:
                if not fut.cancelled():
                    fut.set_exception(exc)
            return
        self._maybe_die("after")
        self.commits += 1
        self.groups += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        for (_, fut), err in zip(batch, results):
            if fut.cancelled():
                continue
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(err)
