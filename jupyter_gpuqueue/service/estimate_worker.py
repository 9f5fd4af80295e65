"""The estimates' worker process: a fresh interpreter, started once, that runs the forward runs of
``service/estimates.py`` (issue 32).

Why a process of its own, and why not a fork: a thread would share the GIL with the event loop
(every request would wait for the forward run: BENCHMARKS.md, "Estimated start times in the live
service"), and forking the server copies a multi-threaded process, which may deadlock in the child
(a lock another thread held at the fork stays held there; Python 3.12 warns: "This process is
multi-threaded, use of fork() may lead to deadlocks in the child"). So the worker is *spawned*
(``subprocess``: fork-and-exec of ``sys.executable -m jupyter_gpuqueue.service.estimate_worker_main``,
which runs no Python code of the server in between), preloaded (it imports the engine and the
estimator before its first job), and kept for the service's life.

Protocol (both ways, on the worker's stdin / stdout): frames of an 8-byte big-endian length and
that many bytes. Each request is one pickle of ``{"job", "observations", "settings"}``
(the Scheduler copy and the inputs :meth:`Estimates._job` gathers, the range's calibrated
quantiles among them; the run times of finished workloads since the last request; the
estimator's settings); each answer is :func:`estimates._encode_result`'s bytes, or an empty frame
when the forward run failed (the error is on the worker's stderr, the server's log). The worker
owns the run-time model (fed what each request brings). It ends at end of input (the server closed its
stdin or died) and runs at the niceness it is given (``argv[1]``: the server's threads win the
cores).

:class:`WorkerProcess` is the server's side: it starts the worker (at the first refresh), sends a
request and reads the answer on the estimates' thread, so that pickling, writing and waiting never
hold the event loop; the worker's compute shares no GIL with it. The worker's own loop is
``estimate_worker_main.py``.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Optional

_LEN = struct.Struct(">Q")

log = logging.getLogger(__name__)


def write_frame(f: IO[bytes], data: bytes) -> None:
    f.write(_LEN.pack(len(data)))
    f.write(data)
    f.flush()


def _read_exact(f: IO[bytes], n: int) -> Optional[bytes]:
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(f: IO[bytes]) -> Optional[bytes]:
    head = _read_exact(f, _LEN.size)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    return _read_exact(f, n) if n else b""


class WorkerError(RuntimeError):
    """The worker ended or answered with a failure (its stderr, in the server's log, says why)."""


class WorkerProcess:
    """The server's handle on the estimates' worker process (module docstring). ``nice``: added to
    the worker's niceness. Every method but :meth:`close` is called on one thread (the estimates'
    executor); :meth:`close` may be called from the event loop."""

    def __init__(self, nice: int = 10):
        self.nice = int(nice)
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self.starts = 0  # worker processes started (tests, metrics)

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> subprocess.Popen:
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                return proc
            # fork-and-exec of a fresh interpreter (no Python code runs in a forked copy of the
            # server); every descriptor of the server but the pipes is closed in it (close_fds).
            proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_gpuqueue.service.estimate_worker_main", str(self.nice)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True, bufsize=0,
            )
            self._proc = proc
            self.starts += 1
            return proc

    def start(self) -> None:
        """Start the worker (if it is not running) and wait until it has loaded the estimator."""
        proc = self._ensure()
        try:
            write_frame(proc.stdin, b"")  # a ping: answered once its imports are done
            if read_frame(proc.stdout) is None:
                self._reap(proc)
        except (BrokenPipeError, OSError, ValueError):
            self._reap(proc)

    def compute(self, request: dict) -> bytes:
        """Send ``request`` (pickled here, on the calling thread), wait for the worker's answer and
        return it (``_encode_result``'s bytes). Raises WorkerError when the worker failed or ended
        (the next call starts a new one)."""
        proc = self._ensure()
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            write_frame(proc.stdin, data)
            answer = read_frame(proc.stdout)
        except (BrokenPipeError, OSError, ValueError) as e:
            answer = None
            log.debug("estimates worker pipe: %s", e)
        if not answer:
            if answer is None:
                self._reap(proc)
                raise WorkerError(f"the estimates worker (pid {proc.pid}) ended with status {proc.returncode}")
            raise WorkerError("the estimates worker could not compute this refresh")
        return answer

    def _reap(self, proc: subprocess.Popen, timeout: float = 5.0) -> None:
        with self._lock:
            if self._proc is proc:
                self._proc = None
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """End the worker: its input closes and it exits; killed if it has not within 0.5 s (in
        the middle of a forward run: it holds nothing that must be saved)."""
        proc = self._proc
        if proc is not None:
            self._reap(proc, timeout=0.5)
