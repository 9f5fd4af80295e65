"""The kernel-side job handle (:class:`GpuJob`) and its live ipywidgets view (:class:`GpuJobWidget`).

``%%gpujob`` returns a :class:`GpuJob`; displayed in a notebook it shows a :class:`GpuJobWidget`
under the cell: state, 1-based queue position, pending reason, the estimated start ("starts in
~12 min (5–30 min)", what it waits for, faster options), flavor and devices, cost so far,
estimated cost, a Cancel button and the tail of the job's output. It updates live from the
server's event stream (a daemon thread reading :meth:`GpuQueueClient.events`), and falls back to
polling every second if the websocket cannot be used. Cost so far and the output are polled
while the job runs (they change continuously and are not events).

The Cancel button is handled by the kernel, so it acts while the kernel is idle; during a
blocking ``job.wait()`` interrupt the kernel (the job keeps running) or call ``job.cancel()``.
"""

from __future__ import annotations

import decimal
import html
import re
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from .errors import GpuQueueError

TERMINAL_STATES = ("Succeeded", "Failed", "Cancelled")
#: The state badges' backgrounds, under white text: each at least 4.5:1 (WCAG AA; issue 34 item 5,
#: tests/test_widget_badges.py), in any theme (the badge brings its own background).
_STATE_COLOURS = {
    "Pending": "#8a6800",
    "Admitted": "#1d6fa5",
    "Running": "#17776f",
    "Succeeded": "#2e7d32",
    "Failed": "#c0392b",
    "Cancelled": "#666666",
}


def _money(value: Any) -> str:
    """USD to the cent, as the panel shows it: ``$0.00``, ``< $0.01`` (above zero, below half a
    cent), ``$1,234.50``; ``-`` for None."""
    if value is None:
        return "-"
    v = float(value)
    if 0 < v < 0.005:
        return "< $0.01"
    # rounded as the panel's Intl.NumberFormat does: half away from zero on the float's shortest
    # decimal form ($0.625 → $0.63, $1.005 → $1.01; Python's format rounds the binary value half
    # to even: $0.62, issue 34 item 10)
    cents = decimal.Decimal(repr(v)).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
    return f"${cents:,.2f}"


# -- estimated start times, in the words of the panel (labextension/src/estimate.ts) -------------

ESTIMATE_CAVEAT = (
    "An estimate assumes nothing else happens: it cannot foresee higher-priority work that "
    "arrives later, the preemptions such work causes, run times far from the prediction, or "
    "quota and configuration edits."
)
DUE_GRACE_SECONDS = 120.0
_REASON_WORDS = {
    "NotYetEstimated": "start time not estimated yet",
    "BudgetExceeded": "held: the team's budget is spent, no start before it resets",
    "ExceedsMaxQuota": "cannot start: it asks for more than its queue can ever give",
    "Inactive": "cannot start: its ClusterQueue is inactive",
    "Misconfigured": "cannot start: its queue is misconfigured",
    "NotWithinHorizon": "no start in sight within the time the estimator looks ahead",
    "PreemptionLivelock": "no estimate: the queue would preempt back and forth",
}


def rough_duration(seconds: float) -> str:
    """45 → ``< 1 min``, 720 → ``12 min``, 7800 → ``2 h 10 min``, 100000 → ``1 d 4 h``."""
    s = max(0.0, float(seconds))
    if s < 60:
        return "< 1 min"
    if s < 3600 - 30:
        return f"{max(1, round(s / 60))} min"
    if s < 86400 - 150:
        fives = round(s / 300)
        h, m = divmod(fives, 12)
        return f"{h} h {m * 5} min" if m else f"{h} h"
    hours = round(s / 3600)
    d, h = divmod(hours, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def approx_duration(seconds: float) -> str:
    """``~12 min``, ``~2 h 10 min``, ``< 1 min``."""
    text = rough_duration(seconds)
    return text if text.startswith("<") else "~" + text


def _hour_minute(at: datetime, seconds: bool = False) -> str:
    """``2:05 PM`` (``2:05:09 PM``): the form the panel shows in a browser of the default (en-US)
    locale (labextension/src/format.ts ``formatTime``), so that the widget and the panel beside it
    write one time the same way (issue 34 item 10: "02:00" next to "2:00 AM")."""
    hour = at.hour % 12 or 12
    text = f"{hour}:{at.minute:02d}" + (f":{at.second:02d}" if seconds else "")
    return f"{text} {'AM' if at.hour < 12 else 'PM'}"


def clock_time(epoch: float, now: Optional[float] = None) -> str:
    """``10:42 AM`` in the kernel's local time (:func:`_hour_minute`); another day adds the weekday
    (``Tue 10:42 AM``), a week or more away the date (``3 Dec 10:42 AM``)."""
    at = datetime.fromtimestamp(epoch).astimezone()
    today = datetime.fromtimestamp(time.time() if now is None else now).astimezone()
    text = _hour_minute(at)
    if at.date() == today.date():
        return text
    if abs((at - today).total_seconds()) < 6 * 86400:
        return f"{at.strftime('%a')} {text}"
    return f"{at.day} {at.strftime('%b')} {text}"


def range_text(early: float, late: Optional[float], now: float) -> Optional[str]:
    """``5–30 min``, ``45 min – 2 h 10 min``, ``up to 30 min``, ``5 min or later`` (no upper
    bound); None when the bounds read alike."""
    a = max(0.0, early - now)
    if late is None:
        return None if a < 60 else f"{rough_duration(a)} or later"
    b = max(0.0, late - now)
    if b < 60:
        return None
    lo, hi = rough_duration(a), rough_duration(b)
    if lo == hi:
        return None
    if a < 60:
        return f"up to {hi}"
    if lo.endswith(" min") and hi.endswith(" min") and "h" not in lo + hi:
        return f"{lo[:-4]}–{hi}"
    return f"{lo} – {hi}"


def start_words(wl: dict, now: Optional[float] = None) -> Optional[str]:
    """``starts in ~12 min (5–30 min)``, ``starts any moment now``, ``start overdue (expected
    ~10:42)``; None without an estimate (or when not pending)."""
    at = wl.get("estimatedStartAt")
    if at is None or wl.get("state") != "Pending":
        return None
    now = time.time() if now is None else now
    rng = wl.get("estimatedStartRange") or None
    if at > now:
        text = f"starts in {approx_duration(at - now)}"
        if rng:
            late = rng.get("late")
            r = range_text(min(rng["early"], at), None if late is None else max(late, at), now)
            if r:
                text += f" ({r})"
        return text
    late = (rng or {}).get("late")
    if now <= max(at if late is None else late, at + DUE_GRACE_SECONDS):
        return "starts any moment now"
    return f"start overdue (expected ~{clock_time(at, now)})"


def no_estimate_words(wl: dict) -> Optional[str]:
    """Why a pending workload has no estimate, in words; None when it has one."""
    if wl.get("state") != "Pending" or wl.get("estimatedStartAt") is not None:
        return None
    reason = wl.get("estimateReason")
    if not reason:
        return None
    return _REASON_WORDS.get(reason) or wl.get("estimateMessage") or reason


def waiting_for_text(wf: dict, user: Optional[str] = None, now: Optional[float] = None) -> str:
    """``2 × nvidia-a100 from team-b/train-x (ends ~10:42)``; ``a team-b workload`` for a hidden
    name."""
    now = time.time() if now is None else now
    if wf.get("name"):
        who = f"{wf.get('namespace')}/{wf['name']}"
        if user and wf.get("owner") == user:
            who = "your " + who
    else:
        who = f"a {wf.get('namespace')} workload"
    end = wf.get("expectedEndAt")
    when = f"ends ~{clock_time(end, now)}" if end is not None and end > now else "ends any moment"
    queued = "queued, " if wf.get("kind") == "pending" else ""
    what = f"{wf['summary']} from " if wf.get("summary") else ""
    return f"{what}{who} ({queued}{when})"


def faster_option_text(o: dict, now: Optional[float] = None) -> str:
    """The server's summary (``nvidia-l4 is free now: start at once, $0.81/h``), else one built
    from the option's fields."""
    if o.get("summary"):
        return o["summary"]
    now = time.time() if now is None else now
    if o.get("migProfile"):
        what = f"{o.get('gpus', 1)} × MIG {o['migProfile']}" + (f" on {o['flavor']}" if o.get("flavor") else "")
    else:
        what = f"{o.get('gpus', 1)} × {o.get('flavor') or 'GPU'}"
    when = ("is free now: start at once" if o.get("startsNow")
            else f"would start in {approx_duration(float(o.get('estimatedStartAt') or now) - now)}")
    return f"{what} {when}, {_money(o.get('pricePerHourUsd'))}/h"


def _epoch_to_datetime(value: Any) -> Optional[datetime]:
    if value is None:
        return None
    return datetime.fromtimestamp(float(value), tz=timezone.utc).astimezone()


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


def preemption_summary(wl: dict) -> Optional[str]:
    """``preempted 1× by team-a/high-wait (priority) · $0.32 of runs lost`` when the workload was
    ever preempted (the server's ``preemptions.summary``), else None."""
    p = wl.get("preemptions") or None
    if not p or not p.get("count"):
        return None
    return p.get("summary") or f"preempted {p['count']}×"


def _preemption_tooltip(wl: dict) -> str:
    last = (wl.get("preemptions") or {}).get("last") or {}
    text = "The runs it lost are billed; it was put back in the queue."
    at = _epoch_to_datetime(last.get("at"))
    if at is not None:
        text = f"Last preempted at {_hour_minute(at.astimezone(), seconds=True)}" + (
            f" (Kueue: {last['reason']})" if last.get("reason") else "") + ". " + text
    return text


# --------------------------------------------------------------------------------------------------
# Kueue's pending reasons in plain words (the same mapping as labextension/src/reasons.ts)

_INSUFFICIENT = re.compile(r"insufficient unused quota for (\S+) in flavor ([^\s,;]+), (\d+) more needed")
_NO_NODE = re.compile(r"quota fits, but no node(?: of flavor ([^\s,;]+))? has (.+?) free")
_PREEMPTED_FOR = re.compile(r"Preempted to accommodate (\S+?)(?: \(|$|\s)")


def resource_words(resource: str, count: int) -> str:
    """``nvidia.com/gpu`` → ``GPU``/``GPUs``; ``nvidia.com/mig-1g.10gb`` → ``MIG 1g.10gb slice(s)``."""
    plural = count != 1
    if resource in ("nvidia.com/gpu", "gpu"):
        return "GPUs" if plural else "GPU"
    if resource.startswith("nvidia.com/mig-"):
        return f"MIG {resource[len('nvidia.com/mig-'):]} slice" + ("s" if plural else "")
    return resource


def plain_reason(reason: Optional[str], message: Optional[str]) -> Optional[str]:
    """A plain sentence leading Kueue's pending ``reason`` / ``message`` (which are kept and shown
    after it), e.g. "Waiting for 2 more GPUs of nvidia-a100 (the quota is in use)"; None when
    there is nothing to add (no reason yet, or one this mapping does not know)."""
    reason = reason or ""
    message = message or ""
    if reason == "BudgetExceeded":
        return "Held: the team's budget for this period is spent (a hub admin can raise it or lift the hold)"
    if reason == "Preempted" or message.startswith("Preempted to accommodate"):
        m = _PREEMPTED_FOR.search(message)
        who = f" for {m.group(1)}" if m else ""
        return f"Preempted to make room{who}; waiting in the queue again"
    wants = _INSUFFICIENT.findall(message)
    if wants:
        parts = [f"{n} more {resource_words(r, int(n))} of {flavor}" for r, flavor, n in wants]
        return f"Waiting for {' or '.join(parts)} (the quota is in use)"
    m = _NO_NODE.search(message)
    if m or reason == "PlacementFailed":
        where = f" of {m.group(1)}" if m and m.group(1) else ""
        what = f" has {m.group(2)} free" if m else " has the devices free"
        return f"Waiting for devices: the quota allows it, but no single node{where}{what} yet"
    if reason == "ExceedsMaxQuota" or "request > maximum capacity" in message or "exceeds max quota" in message:
        return "It asks for more than the queue can ever give: it cannot start as it is (ask for fewer GPUs or another flavor)"
    if reason == "Inactive" or " is inactive" in message:
        return "The team's queue is stopped or misconfigured: ask a hub admin"
    if reason == "Misconfigured" or "doesn't exist" in message or "doesn't match ClusterQueue selector" in message:
        return "The team's queue is misconfigured: ask a hub admin"
    if "doesn't match node affinity" in message or "untolerated taint" in message:
        return "No flavor of the queue matches what it asks for (its node selection or tolerations)"
    if reason == "PreemptionLivelock":
        return "Waiting: preempting others for it would only go round in circles"
    return None


#: CSS of the widget's log: a flex column in reverse makes the scroll box start at its end, follow
#: new output while it is there, and stay where the user scrolled to otherwise (scroll anchoring).
LOG_CLASS = "jp-gpuqueue-widget-log"
#: Its one child (JupyterLab's output area, itself ``overflow:auto``) must not shrink to the box: it
#: would become the scroll box, starting at its top ("step 0-9" shown while the job printed "step
#: 30", issue 34 item 5; tests/browser/test_widget_log.py).
LOG_STYLE = (f"<style>.{LOG_CLASS}{{display:flex;flex-direction:column-reverse;overflow:auto;"
             f"max-height:16em;background:var(--jp-layout-color2,#f7f7f7);font-size:85%}}"
             f".{LOG_CLASS}>*{{flex:0 0 auto;overflow:visible}}</style>")
LOG_RESET_CHARS = 200_000  # output appended beyond this: the view restarts from the tail


class _LogText:
    """What the log shows, as text (``.value``)."""

    def __init__(self) -> None:
        self.value = ""


class GpuJobWidget:
    """An ipywidgets view of one workload. Build with a Workload dict; call :meth:`update`,
    :meth:`set_log` and :meth:`show_error` (from any thread) to refresh it.

    ``.box`` is the ipywidgets ``VBox``; ``.cancel_button`` calls ``on_cancel()`` when clicked.
    """

    def __init__(
        self, workload: dict, on_cancel: Optional[Callable[[], Any]] = None, user: Optional[str] = None
    ):
        import ipywidgets as w

        self._on_cancel = on_cancel
        self.user = user  # "your team-a/x" in what a pending job waits for
        self.header = w.HTML()
        self.details = w.HTML()
        self.error = w.HTML()
        self.cancel_button = w.Button(
            description="Cancel", icon="stop", button_style="danger", tooltip="Cancel this job"
        )
        self.cancel_button.on_click(self._clicked)
        # The log: an Output that new output is appended to (never replaced, so the scroll box keeps
        # the user's position), following its end unless the user scrolled up (LOG_STYLE).
        self.log = _LogText()
        self.log_view = w.Output(layout=w.Layout(max_height="16em", overflow="auto"))
        self.log_view.add_class(LOG_CLASS)
        self._log_style = w.HTML(LOG_STYLE)
        self._log_chars = 0
        self.box = w.VBox(
            [w.HBox([self.header, self.cancel_button]), self.details, self.error, self._log_style,
             self.log_view],
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
                plain = plain_reason(wl.get("reason"), wl.get("message"))
                if plain:
                    rows.append(("Why", plain))
                reason = wl["reason"] + (f": {wl['message']}" if wl.get("message") else "")
                rows.append(("Reason", reason))
            rows.extend(self._estimate_rows(wl))
        elif state == "Failed" and wl.get("message"):
            rows.append(("Reason", f"{wl.get('reason') or ''}: {wl['message']}"))
        preempted = preemption_summary(wl)
        if preempted:  # issue 15 item 7: a preemption is never silent
            rows.append(("Preempted", preempted, _preemption_tooltip(wl)))
        rows.append(("Requests", _requests(wl) or "–"))
        flavors = _flavors(wl)
        if flavors:
            devices = wl.get("visibleDevices")
            rows.append(("Flavor", flavors + (f" · CUDA_VISIBLE_DEVICES={devices}" if devices else "")))
        rows.append(("Cost" if state in TERMINAL_STATES else "Cost so far", _money(wl.get("costUsd"))))
        est = _money(wl.get("estimatedCostUsd"))
        if wl.get("pricePerHourUsd"):
            est += f" (max runtime at {_money(wl.get('pricePerHourUsd'))}/h)"
        rows.append(("Estimated cost", est))
        if wl.get("budgetWarning"):  # the team's soft budget limit (jupyter_gpuqueue/budgets.py)
            rows.append(("Budget", "⚠ " + wl["budgetWarning"]))
        if wl.get("exitCode") is not None:
            rows.append(("Exit code", str(wl["exitCode"])))
        self.details.value = "<table style='font-size:90%'>" + "".join(
            f"<tr><td style='padding-right:1em;opacity:0.75'>{html.escape(row[0])}</td>"
            + (f"<td title='{html.escape(row[2], quote=True)}' style='cursor:help'>" if len(row) > 2 else "<td>")
            + f"{html.escape(str(row[1]))}</td></tr>"
            for row in rows
        ) + "</table>"
        self.cancel_button.disabled = state in TERMINAL_STATES
        self.cancel_button.layout.visibility = "hidden" if state in TERMINAL_STATES else "visible"

    def _estimate_rows(self, wl: dict) -> list[tuple]:
        """The estimated start of a pending workload, as the panel's job card shows it:
        ``Starts``: ``starts in ~12 min (5–30 min)`` (its tooltip: the clock times and what an
        estimate cannot foresee) or why there is none; ``Waiting for``; ``Faster``."""
        now = time.time()
        rows: list[tuple] = []
        words = start_words(wl, now)
        tip = [ESTIMATE_CAVEAT]
        if wl.get("estimatedStartAt") is not None:
            rng = wl.get("estimatedStartRange") or None
            first = f"Estimated start ~{clock_time(wl['estimatedStartAt'], now)}"
            if rng and rng.get("late") is not None:
                first += f" (between {clock_time(rng['early'], now)} and {clock_time(rng['late'], now)})"
            elif rng:
                first += f" (not before {clock_time(rng['early'], now)})"
            tip.insert(0, first + (" — approximate: from the mirrored Kueue queue" if wl.get("estimateApproximate") else ""))
        message = wl.get("estimateMessage") or ""
        if "cannot foresee" in message:
            tip[-1] = message  # the server's own caveat
        elif message:
            tip.insert(len(tip) - 1, message)
        if words:
            rows.append(("Starts", words + (" · approximate" if wl.get("estimateApproximate") else ""), "\n".join(tip)))
            for i, wf in enumerate(wl.get("waitingFor") or []):
                rows.append(("Waiting for" if i == 0 else "", waiting_for_text(wf, self.user, now)))
        else:
            none = no_estimate_words(wl)
            if none:
                rows.append(("Starts", none, "\n".join(tip)))
        for i, o in enumerate(wl.get("fasterOptions") or []):
            rows.append(("Faster" if i == 0 else "", faster_option_text(o, now)))
        return rows

    def set_log(self, tail: str, new: Optional[str] = None) -> None:
        """Show the job's output: ``new`` (what came since the last call) is appended to what is
        shown; without it, or past ``LOG_RESET_CHARS``, the view restarts from ``tail`` (its last
        lines). ``.log.value`` is what is shown."""
        if new is not None and self.log.value and self._log_chars + len(new) <= LOG_RESET_CHARS:
            if new:
                self.log_view.append_stdout(new)
                self._log_chars += len(new)
                self.log.value += new
            return
        self.log_view.outputs = ()
        self._log_chars = len(tail or "")
        self.log.value = tail or ""
        if tail:
            self.log_view.append_stdout(tail)

    def show_error(self, message: str) -> None:
        self.error.value = (
            f"<span style='color:#c0392b'>{html.escape(message)}</span>" if message else ""
        )


class GpuJob:
    """A handle on one submitted workload, from ``%%gpujob`` / ``%gpujob submit``.

    Attributes: ``name``, ``namespace``, ``info`` (the latest Workload dict), ``state``,
    ``cost_usd`` (USD so far), ``widget`` (a :class:`GpuJobWidget` or None); while pending,
    ``estimated_start`` (a timezone-aware datetime or None), ``estimated_start_range``,
    ``waiting_for``, ``faster_options`` and ``estimate_reason``.
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
                self.widget = GpuJobWidget(self._info, on_cancel=self.cancel, user=self._info.get("owner"))
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
    def estimated_start(self) -> Optional[datetime]:
        """When the pending job is expected to start: a timezone-aware datetime (local time), or
        None (not pending, or no estimate: :attr:`estimate_reason` says why). An estimate, not a
        promise: it cannot foresee higher-priority work that arrives later, the preemptions that
        causes, run times far from the predicted ones, or quota edits."""
        if self.state != "Pending":
            return None
        return _epoch_to_datetime(self._info.get("estimatedStartAt"))

    @property
    def estimated_start_range(self) -> Optional[tuple[datetime, Optional[datetime]]]:
        """``(early, late)``: the range of the estimate as timezone-aware datetimes (``late`` None
        when it has no upper bound), or None."""
        rng = self._info.get("estimatedStartRange") if self.state == "Pending" else None
        if not rng:
            return None
        return (_epoch_to_datetime(rng["early"]), _epoch_to_datetime(rng.get("late")))

    @property
    def waiting_for(self) -> list[dict]:
        """What the pending job waits for (at most three workloads): dicts with ``namespace``,
        ``name`` (None for another team's workload), ``owner``, ``kind`` (``running`` /
        ``pending``), ``summary`` (``2 × nvidia-a100``), ``expectedEndAt`` (epoch seconds) and
        ``expected_end`` (a timezone-aware datetime)."""
        if self.state != "Pending":
            return []
        out = []
        for wf in self._info.get("waitingFor") or []:
            item = dict(wf)
            item["expected_end"] = _epoch_to_datetime(wf.get("expectedEndAt"))
            out.append(item)
        return out

    @property
    def faster_options(self) -> list[dict]:
        """Requests that would start sooner (another flavor, MIG profile, fewer GPUs): dicts with
        ``flavor``, ``migProfile``, ``gpus``, ``estimatedStartAt``, ``startsNow``,
        ``pricePerHourUsd`` and ``summary``."""
        if self.state != "Pending":
            return []
        return [dict(o) for o in self._info.get("fasterOptions") or []]

    @property
    def estimate_reason(self) -> Optional[str]:
        """Why a pending job has no estimate (``NotYetEstimated``, ``BudgetExceeded``,
        ``ExceedsMaxQuota``, ``Inactive``, ``Misconfigured``, ``NotWithinHorizon``), else None."""
        if self.state != "Pending":
            return None
        return self._info.get("estimateReason")

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
        if state == "Pending":
            words = start_words(wl) or no_estimate_words(wl)
            if words:
                text += f", {words}"
        flavors = _flavors(wl)
        if flavors:
            text += f", {flavors}"
            if wl.get("visibleDevices"):
                text += f" [{wl['visibleDevices']}]"
        if wl.get("exitCode") is not None:
            text += f", exit code {wl['exitCode']}"
        preempted = preemption_summary(wl)
        if preempted:
            text += f", {preempted}"
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
        self._poll_safely(force=True, show=False)
        while not self._stop.is_set():
            if self._done.is_set():
                for _ in range(3):  # final state, cost and output (a failed try is tried again)
                    if self._poll_safely(force=True, show=False) or self._stop.wait(self._poll_interval):
                        break
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
            if not self._poll_safely(force=force, show=True):
                continue
            if force:
                last_refresh = now
                self._queues_changed = False
        stream = self._stream
        if stream is not None and self._done.is_set():
            stream.close()

    def _poll_safely(self, force: bool, show: bool) -> bool:
        """One poll; False when it failed. The watcher thread outlives any error of one poll (a
        server that restarts, a proxy's hiccup, anything unforeseen): the error is shown in the
        widget (``show``) and the next tick tries again."""
        try:
            self._poll_once(force=force)
            return True
        except Exception as e:
            if show and self.widget is not None:
                self.widget.show_error(str(e) if isinstance(e, GpuQueueError) else f"{type(e).__name__}: {e}")
            return False

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
            self.widget.set_log(self._log_tail, text)
