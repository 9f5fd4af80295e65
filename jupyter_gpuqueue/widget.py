"""The kernel-side job handle (:class:`GpuJob`) and its live ipywidgets view (:class:`GpuJobWidget`).

``%%gpujob`` returns a :class:`GpuJob`; displayed in a notebook it shows a :class:`GpuJobWidget`
under the cell: state, 1-based queue position, pending reason, flavor and devices, cost so far,
estimated cost, a Cancel button and the tail of the job's output. It updates live from the
server's event stream (a daemon thread reading :meth:`GpuQueueClient.events`), and falls back to
polling every second if the websocket cannot be used. Cost so far and the output are polled
while the job runs (they change continuously and are not events).

The Cancel button is handled by the kernel, so it acts while the kernel is idle; during a
blocking ``job.wait()`` interrupt the kernel (the job keeps running) or call ``job.cancel()``.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any, Callable, Optional

from .errors import GpuQueueError

TERMINAL_STATES = ("Succeeded", "Failed", "Cancelled")
_STATE_COLOURS = {
    "Pending": "#b58900",
    "Admitted": "#268bd2",
    "Running": "#2aa198",
    "Succeeded": "#3a8f3a",
    "Failed": "#c0392b",
    "Cancelled": "#7f7f7f",
}


def _money(value: Any) -> str:
    from .cli import money

    return money(value)


def _flavors(workload: dict) -> str:
    admission = workload.get("admission") or {}
    out: list[str] = []
    for psa in admission.get("podSetAssignments") or []:
        for f in (psa.get("flavors") or {}).values():
            if f not in out:
                out.append(f)
    return ", ".join(out)


def _requests(workload: dict) -> str:
    parts = []
    for ps in workload.get("podSets") or []:
        for res, q in (ps.get("requests") or {}).items():
            if res == "nvidia.com/gpu" or res.startswith("nvidia.com/mig-"):
                parts.append(f"{q} × {res}")
    return ", ".join(parts)


class GpuJobWidget:
    """An ipywidgets view of one workload. Build with a Workload dict; call :meth:`update`,
    :meth:`set_log` and :meth:`show_error` (from any thread) to refresh it.

    ``.box`` is the ipywidgets ``VBox``; ``.cancel_button`` calls ``on_cancel()`` when clicked.
    """

    def __init__(self, workload: dict, on_cancel: Optional[Callable[[], Any]] = None):
        import ipywidgets as w

        self._on_cancel = on_cancel
        self.header = w.HTML()
        self.details = w.HTML()
        self.error = w.HTML()
        self.cancel_button = w.Button(
            description="Cancel", icon="stop", button_style="danger", tooltip="Cancel this job"
        )
        self.cancel_button.on_click(self._clicked)
        self.log = w.HTML()
        self.box = w.VBox(
            [w.HBox([self.header, self.cancel_button]), self.details, self.error, self.log],
            layout=w.Layout(border="1px solid #ccc", padding="4px 8px", max_width="900px"),
        )
        self.update(workload)

    def _clicked(self, _button: Any) -> None:
        if self._on_cancel is None:
            return
        self.cancel_button.disabled = True
        try:
            self._on_cancel()
        except GpuQueueError as e:
            self.show_error(f"cancel failed: {e}")
            self.cancel_button.disabled = False

    def update(self, wl: dict) -> None:
        """Show the Workload dict ``wl`` (docs/rest-api.md)."""
        state = wl.get("state") or "?"
        colour = _STATE_COLOURS.get(state, "#555")
        self.header.value = (
            f"<b>{html.escape(wl.get('namespace', ''))}/{html.escape(wl.get('name', ''))}</b> "
            f"<span style='background:{colour};color:white;border-radius:3px;padding:1px 6px'>"
            f"{html.escape(state)}</span>"
        )
        rows: list[tuple[str, str]] = []
        if state == "Pending":
            pos_cq = wl.get("positionInClusterQueue")
            pos_lq = wl.get("positionInLocalQueue")
            if pos_cq is not None:
                text = f"{int(pos_cq) + 1} in ClusterQueue {wl.get('clusterQueue') or ''}"
                if pos_lq is not None:
                    text += f" ({int(pos_lq) + 1} in LocalQueue {wl.get('localQueue') or ''})"
                rows.append(("Position", text))
            if wl.get("reason") and (wl["reason"] != "Pending" or wl.get("message")):
                reason = wl["reason"] + (f": {wl['message']}" if wl.get("message") else "")
                rows.append(("Reason", reason))
        elif state == "Failed" and wl.get("message"):
            rows.append(("Reason", f"{wl.get('reason') or ''}: {wl['message']}"))
        rows.append(("Requests", _requests(wl) or "–"))
        flavors = _flavors(wl)
        if flavors:
            devices = wl.get("visibleDevices")
            rows.append(("Flavor", flavors + (f" · CUDA_VISIBLE_DEVICES={devices}" if devices else "")))
        rows.append(("Cost so far", _money(wl.get("costUsd"))))
        est = _money(wl.get("estimatedCostUsd"))
        if wl.get("pricePerHourUsd"):
            est += f" (max runtime at {_money(wl.get('pricePerHourUsd'))}/h)"
        rows.append(("Estimated cost", est))
        if wl.get("budgetWarning"):  # the team's soft budget limit (jupyter_gpuqueue/budgets.py)
            rows.append(("Budget", "⚠ " + wl["budgetWarning"]))
        if wl.get("exitCode") is not None:
            rows.append(("Exit code", str(wl["exitCode"])))
        self.details.value = "<table style='font-size:90%'>" + "".join(
            f"<tr><td style='padding-right:1em;color:#666'>{html.escape(k)}</td>"
            f"<td>{html.escape(str(v))}</td></tr>"
            for k, v in rows
        ) + "</table>"
        self.cancel_button.disabled = state in TERMINAL_STATES
        self.cancel_button.layout.visibility = "hidden" if state in TERMINAL_STATES else "visible"

    def set_log(self, tail: str) -> None:
        """Show ``tail`` (the last lines of the job's output)."""
        if not tail:
            self.log.value = ""
            return
        self.log.value = (
            "<pre style='max-height:16em;overflow:auto;background:#f7f7f7;margin:4px 0;"
            f"padding:4px;font-size:85%'>{html.escape(tail)}</pre>"
        )

    def show_error(self, message: str) -> None:
        self.error.value = (
            f"<span style='color:#c0392b'>{html.escape(message)}</span>" if message else ""
        )


class GpuJob:
    """A handle on one submitted workload, from ``%%gpujob`` / ``%gpujob submit``.

    Attributes: ``name``, ``namespace``, ``info`` (the latest Workload dict), ``state``,
    ``cost_usd`` (USD so far), ``widget`` (a :class:`GpuJobWidget` or None).
    Methods: :meth:`wait`, :meth:`refresh`, :meth:`logs`, :meth:`cancel`, :meth:`close`.

    ``watch``: keep ``info`` (and the widget) current from a background thread.
    ``widget``: build the ipywidgets view (needs ipywidgets). ``log_lines``: lines of output the
    widget shows.
    """

    def __init__(
        self,
        client: Any,
        workload: dict,
        *,
        watch: bool = True,
        widget: bool = True,
        log_lines: int = 20,
        poll_interval: float = 1.0,
    ):
        self.client = client
        self._info = dict(workload)
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._stop = threading.Event()
        self._ws_ok = False
        self._stream: Any = None
        self._log_offset = 0
        self._log_tail = ""
        self._log_lines = log_lines
        self._poll_interval = poll_interval
        self._queues_changed = False  # a "queues" event came: positions may have moved
        self._threads: list[threading.Thread] = []
        self.widget: Optional[GpuJobWidget] = None
        if widget:
            try:
                self.widget = GpuJobWidget(self._info, on_cancel=self.cancel)
            except ImportError:
                self.widget = None
        if self._info.get("state") in TERMINAL_STATES:
            self._done.set()
        if watch and not self._done.is_set():
            self._start_watching()

    # -- public ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._info["name"]

    @property
    def namespace(self) -> str:
        return self._info["namespace"]

    @property
    def info(self) -> dict:
        """The latest Workload dict (a copy)."""
        with self._lock:
            return dict(self._info)

    @property
    def state(self) -> str:
        """Pending | Admitted | Running | Succeeded | Failed | Cancelled."""
        return self._info.get("state", "")

    @property
    def cost_usd(self) -> float:
        """Cost so far in USD (final once the job has finished)."""
        return float(self._info.get("costUsd") or 0.0)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def refresh(self) -> dict:
        """Fetch the Workload now; returns it. Raises GpuQueueError (e.g. NotFound)."""
        wl = self.client.get(self.namespace, self.name)
        self._apply(wl)
        return self.info

    def wait(self, timeout: Optional[float] = None) -> str:
        """Block until the job is Succeeded, Failed or Cancelled, or ``timeout`` seconds pass;
        returns the state then. Interrupting (Ctrl-C / kernel interrupt) leaves the job running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            step = self._poll_interval if remaining is None else min(self._poll_interval, remaining)
            if self._done.wait(step):
                break
            if not any(t.is_alive() for t in self._threads):
                try:  # nobody is watching: poll ourselves
                    self.refresh()
                except GpuQueueError:
                    pass
        if self._done.is_set():
            try:
                self.refresh()  # final cost and exit code
            except GpuQueueError:
                pass
        return self.state

    def logs(self) -> str:
        """The job's whole output so far (stdout and stderr), as text. Owner only (Forbidden)."""
        chunks = []
        offset = 0
        while True:
            part = self.client.logs(self.namespace, self.name, offset=offset)
            chunks.append(part.get("text") or "")
            nxt = int(part.get("nextOffset", offset))
            if nxt <= offset or nxt >= int(part.get("size", nxt)):
                break
            offset = nxt
        return "".join(chunks)

    def cancel(self) -> dict:
        """Cancel the job (a pending job leaves the queue; a running one is stopped); returns the
        Workload. Raises Forbidden if it is not yours."""
        wl = self.client.cancel(self.namespace, self.name)
        self._apply(wl)
        return self.info

    def close(self) -> None:
        """Stop watching (the job itself is not affected)."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    def __repr__(self) -> str:
        wl = self._info
        state = wl.get("state")
        text = f"GpuJob({wl.get('namespace')}/{wl.get('name')}: {state}"
        if state == "Pending" and wl.get("positionInClusterQueue") is not None:
            text += f", position {int(wl['positionInClusterQueue']) + 1}"
            if wl.get("reason") and wl["reason"] != "Pending":
                text += f" ({wl['reason']})"
        flavors = _flavors(wl)
        if flavors:
            text += f", {flavors}"
            if wl.get("visibleDevices"):
                text += f" [{wl['visibleDevices']}]"
        if wl.get("exitCode") is not None:
            text += f", exit code {wl['exitCode']}"
        text += f", cost {_money(wl.get('costUsd'))} of est. {_money(wl.get('estimatedCostUsd'))})"
        return text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        bundle: dict = {}
        if self.widget is not None:
            try:
                bundle = dict(self.widget.box._repr_mimebundle_(include=include, exclude=exclude) or {})
            except Exception:
                bundle = {}
        bundle["text/plain"] = repr(self)
        return bundle

    # -- watching ---------------------------------------------------------------------------------

    def _apply(self, wl: dict) -> None:
        if wl.get("namespace") != self.namespace or wl.get("name") != self.name:
            return
        with self._lock:
            if wl.get("uid") and self._info.get("uid") and wl["uid"] != self._info["uid"]:
                return
            self._info = dict(wl)
        if self.widget is not None:
            try:
                self.widget.update(wl)
            except Exception:  # a view problem must not break the handle
                pass
        if wl.get("state") in TERMINAL_STATES:
            self._done.set()

    def _start_watching(self) -> None:
        for target, label in ((self._watch_events, "events"), (self._watch_poll, "poll")):
            t = threading.Thread(target=target, name=f"gpujob-{self.name}-{label}", daemon=True)
            self._threads.append(t)
            t.start()

    def _watch_events(self) -> None:
        try:
            with self.client.events() as stream:
                self._stream = stream
                self._ws_ok = True
                if self._stop.is_set():
                    return
                for event in stream:
                    if self._stop.is_set() or self._done.is_set():
                        break
                    if event.get("type") == "workload" and isinstance(event.get("workload"), dict):
                        self._apply(event["workload"])
                    elif event.get("type") == "queues":
                        # positions moved (no workload event carries a new position alone)
                        self._queues_changed = True
        except Exception:
            pass  # the poller takes over
        finally:
            self._ws_ok = False
            self._stream = None

    def _watch_poll(self) -> None:
        last_refresh = 0.0
        try:
            self._poll_once(force=True)
        except GpuQueueError:
            pass
        while not self._stop.is_set():
            if self._done.is_set():
                try:
                    self._poll_once(force=True)  # final state, cost and output
                except GpuQueueError:
                    pass
                break
            self._stop.wait(self._poll_interval)
            now = time.monotonic()
            state = self.state
            # without events: poll every second; with events: refresh what events do not carry
            # (cost so far while running) every few seconds, and everything every 15 s.
            force = (not self._ws_ok) or (state in ("Admitted", "Running") and now - last_refresh >= 2)
            force = force or now - last_refresh >= 15
            # while pending: the position, once a second at most when the queues changed
            force = force or (state == "Pending" and self._queues_changed and now - last_refresh >= 1)
            try:
                self._poll_once(force=force)
            except GpuQueueError as e:
                if self.widget is not None:
                    self.widget.show_error(str(e))
                continue
            if force:
                last_refresh = now
                self._queues_changed = False
        stream = self._stream
        if stream is not None and self._done.is_set():
            stream.close()

    def _poll_once(self, force: bool) -> None:
        if force:
            self.refresh()
        if self.widget is not None and self.state in ("Running", *TERMINAL_STATES):
            self._fetch_log_tail()

    def _fetch_log_tail(self) -> None:
        part = self.client.logs(self.namespace, self.name, offset=self._log_offset)
        text = part.get("text") or ""
        self._log_offset = int(part.get("nextOffset", self._log_offset))
        if not text:
            return
        lines = (self._log_tail + text).splitlines(keepends=True)
        self._log_tail = "".join(lines[-self._log_lines :])
        if self.widget is not None:
            self.widget.set_log(self._log_tail)
