"""A notebook server's own activity, reported to the queue for idle GPU reclaim (issue 31).

The queue's idle reclaim (service/idle.py) needs to know whether a notebook server on a GPU lease
is being used. The Hub's ``last_activity`` cannot say: jupyterhub-singleuser moves it on *every*
authenticated API request, and an open JupyterLab tab polls ``/api/kernels``, ``/api/sessions``,
``/api/contents`` and the queue panel's own API every few seconds; a tab forgotten overnight keeps
its GPU, while a kernel busy in a loop with no tab open looks idle. So the server says itself what
it does, from its own kernel manager and terminals:

- **A kernel executing.** :class:`KernelWatch` subscribes to each kernel's IOPub channel (as
  jupyter_server's own activity tracking does, ``MappingKernelManager.start_watching_activity``)
  and follows its ``status`` messages: an execution is a ``busy`` whose parent is an
  ``execute_request`` until the ``idle`` of that same request (parent ``msg_id``). Busy periods of
  anything else — ``kernel_info_request`` and ``comm_info_request`` that a tab sends when it
  connects, completions, inspections, widget ``comm_msg``, debugger and control requests — are not
  activity. A kernel busy with an execution counts as active *now*; otherwise the time an
  execution last ended is the activity. A kernel first seen while jupyter_server says it is busy
  (it started executing before the watch attached; jupyter_server counts only tracked requests
  as busy) counts as executing until jupyter_server says otherwise. A kernel that restarts
  (``starting``) or goes away ends its executions at that moment.
- **Terminal input.** jupyter_server_terminals' ``last_activity`` of a terminal moves on input
  *and* output (``TermSocket.on_message`` and ``write_message``, and terminado's pty read hook),
  and its ``on_message`` also takes window resizes: it cannot tell typing from a program's output.
  So :class:`TerminalWatch` wraps each terminal's ``ptyproc.write``, which terminado calls only
  with what the user typed (``stdin`` messages): terminal input is the time of the last write.

:class:`ActivityReporter` sends ``POST workloads/{ns}/{name}/activity`` ``{"busy",
"idleSeconds"}`` for the server's lease (``$GPUQUEUE_LEASE``) as its owner, through the
extension's Forwarder: every ``$GPUQUEUE_ACTIVITY_INTERVAL`` seconds (30 by default; keep it well
under the service's stale limit, 90 s by default) and at once when a kernel starts executing. It
stops once the queue says the lease is no running lease (409), not the owner's (403) or gone
(404). GPU utilisation is not the server's to report: the service samples it with NVML.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, Callable, Optional
from urllib.parse import quote

from .background import BackgroundLoop

ENV_ACTIVITY_INTERVAL = "GPUQUEUE_ACTIVITY_INTERVAL"
EXECUTE_REQUEST = "execute_request"
_STOP_STATUSES = (403, 404, 409)


class ExecutionTracker:
    """The pure part: which kernels execute code now and when an execution last ended.

    Times are ``clock()`` seconds (monotonic by default). Feed it :meth:`status` for each IOPub
    ``status`` message of a kernel; :meth:`snapshot` answers ``(busy, last_end)``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._running: dict[str, set[str]] = {}  # kernel id -> msg_ids of executions running
        self._assumed: set[str] = set()  # kernels first seen busy (jupyter_server's execution_state)
        self.last_end: Optional[float] = None

    def _ended(self) -> None:
        self.last_end = self.clock()

    def status(self, kernel_id: str, state: str, parent_type: Optional[str], parent_id: Optional[str]) -> bool:
        """One ``status`` message of ``kernel_id``: ``state`` (busy, idle, starting, ...) and its
        parent request's ``msg_type`` and ``msg_id``. True when with it the server goes from no
        kernel executing to one executing."""
        running = self._running.setdefault(kernel_id, set())
        if state == "starting" or state == "restarting" or state == "dead":
            if running or kernel_id in self._assumed:
                self._ended()
            running.clear()
            self._assumed.discard(kernel_id)
            return False
        if parent_type != EXECUTE_REQUEST or not parent_id:
            return False  # a tab's kernel_info / comm_info, completions, widgets, the debugger
        if state == "busy":
            was = self.busy()
            running.add(parent_id)
            return not was
        if state == "idle" and parent_id in running:
            running.discard(parent_id)
            self._assumed.discard(kernel_id)
            if not running:
                self._ended()
        elif state == "idle" and kernel_id in self._assumed:
            self._assumed.discard(kernel_id)  # the execution that was running when the watch attached
            self._ended()
        return False

    def assume_busy(self, kernel_id: str) -> None:
        """``kernel_id`` was executing before its watch attached."""
        self._running.setdefault(kernel_id, set())
        self._assumed.add(kernel_id)

    def not_busy(self, kernel_id: str) -> None:
        """jupyter_server says ``kernel_id`` is not busy: an assumed execution is over."""
        if kernel_id in self._assumed and not self._running.get(kernel_id):
            self._assumed.discard(kernel_id)
            self._ended()

    def forget(self, kernel_id: str) -> None:
        """``kernel_id`` is gone (shut down, culled, died): its executions end now."""
        running = self._running.pop(kernel_id, None)
        if running or kernel_id in self._assumed:
            self._ended()
        self._assumed.discard(kernel_id)

    def busy(self) -> bool:
        return any(self._running.values()) or bool(self._assumed)

    def snapshot(self) -> tuple[bool, Optional[float]]:
        """``(a kernel executes now, when an execution last ended or None)``."""
        return self.busy(), self.last_end


class KernelWatch:
    """Follows the IOPub ``status`` messages of every kernel of ``kernel_manager`` (jupyter_server's
    MappingKernelManager) into an :class:`ExecutionTracker`. :meth:`scan` attaches to new kernels
    (and again to a kernel whose IOPub port changed on restart) and forgets those gone;
    ``on_execution`` is called when a kernel starts executing while none did."""

    def __init__(self, kernel_manager: Any, tracker: ExecutionTracker,
                 on_execution: Optional[Callable[[], None]] = None, log: Optional[logging.Logger] = None):
        self.kernel_manager = kernel_manager
        self.tracker = tracker
        self.on_execution = on_execution
        self.log = log or logging.getLogger("jupyter_gpuqueue")
        self._streams: dict[str, tuple[Any, Any]] = {}  # kernel id -> (IOPub stream, iopub port)

    def scan(self) -> None:
        ids = set(self.kernel_manager.list_kernel_ids()) if self.kernel_manager is not None else set()
        for kid in [k for k in self._streams if k not in ids]:
            self._detach(kid)
            self.tracker.forget(kid)
        for kid in ids:
            try:
                kernel = self.kernel_manager.get_kernel(kid)
            except KeyError:
                continue
            port = getattr(kernel, "iopub_port", None)
            known = self._streams.get(kid)
            if known is not None and known[1] == port:
                if getattr(kernel, "execution_state", None) != "busy":
                    self.tracker.not_busy(kid)
                continue
            if known is not None:
                self._detach(kid)
            self._attach(kid, kernel, port)

    def _attach(self, kid: str, kernel: Any, port: Any) -> None:
        from jupyter_client.session import Session

        try:
            stream = kernel.connect_iopub()
        except Exception:  # a kernel still starting or already dying: the next scan tries again
            self.log.debug("jupyter_gpuqueue: cannot watch kernel %s yet", kid, exc_info=True)
            return
        session = Session(config=kernel.session.config, key=kernel.session.key)
        if getattr(kernel, "execution_state", None) == "busy":
            self.tracker.assume_busy(kid)

        def on_recv(msg_list: list) -> None:
            try:
                _idents, fed = session.feed_identities(msg_list)
                msg = session.deserialize(fed, content=False)
                if msg["header"].get("msg_type") != "status":
                    return
                msg = session.deserialize(fed)
            except Exception:  # not a message of this session: ignored
                return
            parent = msg.get("parent_header") or {}
            started = self.tracker.status(kid, str(msg["content"].get("execution_state")),
                                          parent.get("msg_type"), parent.get("msg_id"))
            if started and self.on_execution is not None:
                self.on_execution()

        stream.on_recv(on_recv)
        self._streams[kid] = (stream, port)

    def _detach(self, kid: str) -> None:
        stream, _port = self._streams.pop(kid)
        try:
            if not stream.closed():
                stream.close()
        except Exception:  # pragma: no cover - a socket closed under us
            pass

    def close(self) -> None:
        for kid in list(self._streams):
            self._detach(kid)


class TerminalWatch:
    """The time of the last input to any terminal of ``terminal_manager`` (jupyter_server_terminals'
    TerminalManager; None: no terminals). :meth:`scan` wraps each new terminal's
    ``ptyproc.write`` (terminado writes only what the user typed there)."""

    def __init__(self, terminal_manager: Any, clock: Callable[[], float] = time.monotonic):
        self.terminal_manager = terminal_manager
        self.clock = clock
        self.last_input: Optional[float] = None

    def scan(self) -> None:
        terminals = getattr(self.terminal_manager, "terminals", None) or {}
        for term in list(terminals.values()):
            proc = getattr(term, "ptyproc", None)
            if proc is None or getattr(proc, "_gpuqueue_input_watch", None) is self:
                continue
            self._wrap(proc)

    def _wrap(self, proc: Any) -> None:
        write = proc.write
        watch = self

        def write_input(data: Any) -> Any:
            watch.last_input = watch.clock()
            return write(data)

        proc.write = write_input
        proc._gpuqueue_input_watch = self


class ServerActivity:
    """What a notebook server does: its kernels (:class:`KernelWatch`) and terminals
    (:class:`TerminalWatch`). :meth:`report` answers the body of an activity report."""

    def __init__(self, kernel_manager: Any, terminal_manager: Any = None,
                 on_execution: Optional[Callable[[], None]] = None, clock: Callable[[], float] = time.monotonic,
                 log: Optional[logging.Logger] = None):
        self.clock = clock
        self.tracker = ExecutionTracker(clock)
        self.kernels = KernelWatch(kernel_manager, self.tracker, on_execution, log)
        self.terminals = TerminalWatch(terminal_manager, clock)

    def scan(self) -> None:
        self.kernels.scan()
        self.terminals.scan()

    def report(self) -> dict:
        """``{"busy": a kernel executes now, "idleSeconds": seconds since the last execution ended
        or terminal input, null when neither happened}`` (service/idle.py ``parse_activity_report``)."""
        busy, last_end = self.tracker.snapshot()
        times = [t for t in (last_end, self.terminals.last_input) if t is not None]
        idle = None if busy or not times else max(0.0, self.clock() - max(times))
        return {"busy": busy, "idleSeconds": 0.0 if busy else idle}

    def close(self) -> None:
        self.kernels.close()


class ActivityReporter(BackgroundLoop):
    """Reports :class:`ServerActivity` for ``lease`` (``"namespace/name"``) through ``forwarder``
    (the hub-client Forwarder: service URL and the server's token) every ``interval`` seconds and
    when a kernel starts executing; looks for new kernels and terminals every ``scan_interval``."""

    def __init__(self, forwarder: Any, lease: str, kernel_manager: Any, terminal_manager: Any = None, *,
                 interval: float = 30.0, scan_interval: float = 1.0, log: Optional[logging.Logger] = None):
        self.forwarder = forwarder
        self.lease = lease
        self.interval = max(0.1, float(interval))
        self.scan_interval = max(0.05, min(float(scan_interval), self.interval))
        self.log = log or logging.getLogger("jupyter_gpuqueue")
        self._wake = asyncio.Event()
        self.activity = ServerActivity(kernel_manager, terminal_manager, on_execution=self._wake.set, log=self.log)
        self.sent: Optional[dict] = None  # the last report the queue took
        self.stopped_by: Optional[int] = None  # the status that ended the reports
        self._task: Optional[asyncio.Task] = None

    async def send(self) -> Optional[int]:
        """Send one report; the HTTP status (None: the queue could not be reached; logged)."""
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        ns, _, name = self.lease.partition("/")
        body = self.activity.report()
        try:
            await AsyncHTTPClient().fetch(
                self.forwarder.url(f"workloads/{quote(ns, safe='')}/{quote(name, safe='')}/activity"),
                method="POST", body=json.dumps(body),
                headers={**self.forwarder.auth_headers(), "Content-Type": "application/json",
                         "Accept": "application/json"},
                request_timeout=self.forwarder.timeout)
        except HTTPClientError as e:
            if e.code not in _STOP_STATUSES:
                self.log.warning("jupyter_gpuqueue: cannot report this server's activity for lease %s: %s",
                                 self.lease, e)
            return e.code
        except OSError as e:
            self.log.warning("jupyter_gpuqueue: cannot reach the GPU queue to report activity: %s", e)
            return None
        self.sent = body
        return 200

    async def run(self) -> None:
        next_report = 0.0
        while True:
            self.activity.scan()
            now = time.monotonic()
            if self._wake.is_set() or now >= next_report:
                self._wake.clear()
                status = await self.send()
                if status in _STOP_STATUSES:
                    self.stopped_by = status
                    self.log.info("jupyter_gpuqueue: lease %s is no running lease of this server's owner "
                                  "(HTTP %s): activity reports stop", self.lease, status)
                    return
                next_report = time.monotonic() + self.interval
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(self.scan_interval,
                                                                       max(0.0, next_report - time.monotonic())))
            except asyncio.TimeoutError:
                pass

    # a failure is logged; the queue then finds the reports stale, and reclaims nothing
    failure_message = "jupyter_gpuqueue: reporting this server's activity failed"

    def _ended(self) -> None:
        self.activity.close()


def start_activity_reports(serverapp: Any, forwarder: Any, log: Optional[logging.Logger] = None,
                           environ: Optional[dict] = None) -> Optional[ActivityReporter]:
    """In a single-user server on a GPU lease (``$GPUQUEUE_LEASE``, hub-client mode): start an
    :class:`ActivityReporter` (interval ``$GPUQUEUE_ACTIVITY_INTERVAL`` seconds, 30 by default).
    None without a lease or Forwarder."""
    from .lease_release import ENV_LEASE

    environ = os.environ if environ is None else environ
    lease = environ.get(ENV_LEASE, "")
    if "/" not in lease or forwarder is None:
        return None
    try:
        interval = float(environ.get(ENV_ACTIVITY_INTERVAL) or 30.0)
    except ValueError:
        interval = 30.0
    web_app = getattr(serverapp, "web_app", None)
    terminals = web_app.settings.get("terminal_manager") if web_app is not None else None
    reporter = ActivityReporter(forwarder, lease, getattr(serverapp, "kernel_manager", None), terminals,
                                interval=interval, log=log)
    reporter.start()
    return reporter
