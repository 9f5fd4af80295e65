"""Webhooks: a team's job notifications forwarded to a URL its admins chose (issue 15, "also build").

An admin stores one URL per team (``PUT admin/webhooks/{namespace}``, ``{"url": "https://…"}``;
``{"url": null}`` removes it) in the ledger's settings (key ``webhook:{namespace}``), audited.
When a workload of that team starts, finishes, fails or is preempted, the service POSTs

    {"event": "started" | "finished" | "failed" | "preempted", "workload": {Workload view}}

as JSON to the URL. The POSTs are made by one daemon thread from a bounded queue, each with a
short timeout (``timeout_seconds``): the event loop never waits for a receiver, a slow or failing
one is logged and dropped (no retries), and a full queue drops the newest notification (logged).

The transitions come from the service's event stream (``EventHub.subscribe``), which this
subscribes to only while some team has a webhook: a Running workload not seen Running before is
``started``; Succeeded is ``finished``; Failed is ``failed`` (a notebook lease ended by preemption:
``preempted``); a preemption count that grew is ``preempted`` (the job is queued again).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import urllib.error
import urllib.request
from typing import Any, Callable, Optional
from urllib.parse import urlparse

from ..errors import NotFound, ValidationError

SETTING_PREFIX = "webhook:"
MAX_URL_LENGTH = 2048
EVENTS = ("started", "finished", "failed", "preempted")
#: The URLs accepted (the same pattern as ``WebhookRequest.url`` in server/openapi.yaml): http(s), a
#: host name or IPv4 address, an optional port, a path and query without spaces or fragments.
URL_PATTERN = re.compile(r"^https?://[A-Za-z0-9._~-]+(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?(/[A-Za-z0-9._~/?=&%+,:@-]*)?$")


def parse_url(data: Any) -> Optional[str]:
    """The ``url`` of a request body: an http(s) URL, or None (remove). ValidationError names the
    field."""
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object {\"url\": \"https://…\"}", "url")
    extra = sorted(set(data) - {"url"})
    if extra:
        raise ValidationError("unknown field; send {\"url\": \"https://…\"} (or null to remove it)", extra[0])
    if "url" not in data:
        raise ValidationError("required: the URL to POST the team's job notifications to (null removes it)", "url")
    url = data["url"]
    if url is None:
        return None
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
        raise ValidationError(f"must be an http:// or https:// URL of at most {MAX_URL_LENGTH} characters, "
                              "or null to remove it", "url")
    if not URL_PATTERN.match(url) or not urlparse(url).hostname:
        raise ValidationError(f"must be an http:// or https:// URL with a host name (no spaces, user or "
                              f"fragment), got {url!r}", "url")
    return url


def transition(before: Optional[tuple[str, int]], view: dict) -> Optional[str]:
    """The webhook event of a workload going from ``before`` ((state, preemption count), None
    when not seen) to ``view``; None when there is none."""
    state = view.get("state")
    count = int((view.get("preemptions") or {}).get("count") or 0)
    if before is not None and count > before[1]:
        return "preempted"
    if before is not None and before[0] == state:
        return None
    if state == "Running":
        return "started"
    if state == "Succeeded":
        return "finished"
    if state == "Failed":
        return "preempted" if view.get("reason") == "Preempted" else "failed"
    return None


class Webhooks:
    """See the module docstring. ``service``: the QueueService (its ledger, events, live records,
    clock and teams)."""

    timeout_seconds = 5.0
    max_queued = 1000

    def __init__(self, service: Any, log: Optional[logging.Logger] = None):
        self.service = service
        self.log = log or logging.getLogger("jupyter_gpuqueue")
        self._urls: Optional[dict[str, dict]] = None  # namespace -> {"url", "updatedBy", "updatedAt"}
        self._seen: dict[str, tuple[str, int]] = {}  # uid -> (state, preemption count)
        self._unsubscribe: Optional[Callable[[], None]] = None
        self._queue: "queue.Queue[tuple[str, dict]]" = queue.Queue(self.max_queued)
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.sent = 0  # POSTs answered 2xx (tests, metrics)

    # -- the stored URLs -----------------------------------------------------------------------------

    def urls(self) -> dict[str, dict]:
        if self._urls is None:
            rows = self.service.ledger.settings_with_prefix(SETTING_PREFIX)
            self._urls = {k[len(SETTING_PREFIX):]: {**r["value"], "updatedAt": r["updatedAt"]}
                          for k, r in rows.items() if isinstance(r["value"], dict) and r["value"].get("url")}
        return self._urls

    def _teams(self) -> list[str]:
        return sorted({lq.namespace for lq in self.service.config.local_queues.values()})

    def view(self, namespace: str) -> dict:
        stored = self.urls().get(namespace)
        return {"namespace": namespace, "url": stored.get("url") if stored else None,
                "updatedAt": stored.get("updatedAt") if stored else None,
                "updatedBy": stored.get("updatedBy") if stored else None}

    def set_url(self, namespace: str, data: Any, *, actor: str) -> dict:
        """Admin: store (or, with ``null``, remove) ``namespace``'s webhook URL, audited. NotFound
        naming ``namespace`` for a namespace that is no team; ValidationError naming the field."""
        if namespace not in self._teams():
            raise NotFound(f"no team (LocalQueue namespace) {namespace!r}; teams: {', '.join(self._teams())}",
                           "namespace")
        url = parse_url(data)
        before = self.view(namespace)["url"]
        ledger = self.service.ledger
        now = self.service.conf.clock()
        with ledger.transaction():
            if url is None:
                ledger.delete_setting(SETTING_PREFIX + namespace)
            else:
                ledger.put_setting(SETTING_PREFIX + namespace, {"url": url, "updatedBy": actor}, at=now)
            ledger.add_audit(actor=actor, operation="set-webhook" if url else "delete-webhook",
                             target=f"namespace/{namespace}", before={"url": before}, after={"url": url}, at=now)
        self._urls = None
        self.start()
        return self.view(namespace)

    # -- the event stream ----------------------------------------------------------------------------

    def start(self) -> None:
        """Listen to the event stream while some team has a webhook (at the service's start, and
        after every change of the URLs)."""
        if self.urls() and self._unsubscribe is None:
            live = self.service.live
            self._seen = {uid: (r["state"], len((r.get("spec") or {}).get("preemptions") or []))
                          for uid, r in live.records.items() if r.get("state") not in ("Succeeded", "Failed", "Cancelled")}
            self._unsubscribe = self.service.events.subscribe(self._on_event)
        elif not self.urls() and self._unsubscribe is not None:
            self.stop()

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._seen.clear()

    def _on_event(self, event: dict) -> None:
        if event.get("type") != "workload":
            return
        view = event.get("workload") or {}
        uid = view.get("uid") or f"{view.get('namespace')}/{view.get('name')}"
        state = view.get("state")
        count = int((view.get("preemptions") or {}).get("count") or 0)
        kind = transition(self._seen.get(uid), view)
        if state in ("Succeeded", "Failed", "Cancelled"):
            self._seen.pop(uid, None)
        else:
            self._seen[uid] = (state, count)
        if kind is None:
            return
        stored = self.urls().get(view.get("namespace") or "")
        if not stored:
            return
        self._post(stored["url"], {"event": kind, "workload": view})

    # -- sending (one daemon thread) -----------------------------------------------------------------

    def _post(self, url: str, body: dict) -> None:
        try:
            self._queue.put_nowait((url, body))
        except queue.Full:
            self.log.warning("gpuqueue: webhook queue full, dropped a %s notification of %s/%s", body["event"],
                             body["workload"].get("namespace"), body["workload"].get("name"))
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._send_loop, name="gpuqueue-webhooks", daemon=True)
                self._thread.start()

    def _send_loop(self) -> None:
        while True:
            url, body = self._queue.get()
            try:
                self._send(url, body)
            except Exception:  # pragma: no cover - a receiver must never stop the sender
                self.log.exception("gpuqueue: webhook POST to %s failed", url)
            finally:
                self._queue.task_done()

    def _send(self, url: str, body: dict) -> None:
        data = json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "jupyter-gpuqueue-webhook"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as resp:  # noqa: S310 - http(s) only
                resp.read(65536)
            self.sent += 1
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.log.warning("gpuqueue: webhook POST of %s (%s/%s) to %s failed: %s", body["event"],
                             body["workload"].get("namespace"), body["workload"].get("name"), url, e)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued notification was sent or dropped (tests); False on timeout."""
        import time

        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True
