"""A Python client of the GPU-queue REST API and event stream (docs/rest-api.md).

Used by the CLI (``jupyter gpuqueue``), the ``%gpujob`` magics, and scripts::

    from jupyter_gpuqueue.client import GpuQueueClient
    q = GpuQueueClient()                     # finds the Jupyter server (see below)
    wl = q.submit({"command": ["python", "train.py"], "gpus": 1, "maxRuntime": "10m"})
    q.wait(wl["namespace"], wl["name"])      # -> the finished Workload

Server discovery when ``url`` is None:

1. the environment: ``GPUQUEUE_URL`` (the server's base URL, e.g. ``http://127.0.0.1:8888/``)
   and ``GPUQUEUE_TOKEN``;
2. the running Jupyter server whose process is an ancestor of this one (a kernel's server);
3. the only running Jupyter server (or, among several, the only one serving jupyter_gpuqueue);
4. else :class:`ServerNotFound`.

Errors: every non-2xx answer raises the :mod:`jupyter_gpuqueue.errors` class of its status
(400 ValidationError, 403 Forbidden, 404 NotFound, 409 Conflict, 413 PayloadTooLarge; others
GpuQueueError) with the server's ``message`` and ``field``; a server that cannot be reached raises
:class:`ServerUnavailable`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from typing import Any, Optional
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from .errors import Forbidden, GpuQueueError, NotFound, ValidationError, error_class_for_status

API_PATH = "gpuqueue/api/"
TERMINAL_STATES = ("Succeeded", "Failed", "Cancelled")

class ServerNotFound(GpuQueueError):
    """No running Jupyter server with jupyter_gpuqueue could be found."""

    status = 503
    reason = "ServerNotFound"


class ServerUnavailable(GpuQueueError):
    """The Jupyter server did not answer (connection refused, timeout, not our API)."""

    status = 503
    reason = "Unavailable"


def error_from_response(status: int, body: Any) -> GpuQueueError:
    """Rebuild the error the server raised from its status and JSON body."""
    message = None
    field = None
    if isinstance(body, dict):
        message = body.get("message")
        field = body.get("field")
    if not message:
        message = f"HTTP {status}"
    if status in (401, 403) and not field:
        # jupyter_server's own refusal, not the queue's: the token (or login) was not accepted
        message = (
            f"{message}: the Jupyter server did not accept the request; check the token "
            "(GPUQUEUE_TOKEN or --token)"
        )
    cls = error_class_for_status(status)
    if cls is None:
        if status == 401:
            cls = Forbidden
        else:
            err = GpuQueueError(str(message), field=field)
            err.status = status  # type: ignore[misc]
            if isinstance(body, dict) and body.get("reason"):
                err.reason = str(body["reason"])  # type: ignore[misc]
            return err
    err = cls(str(message), field=field)
    if isinstance(body, dict) and isinstance(body.get("retryAfter"), (int, float)):
        err.retry_after = float(body["retryAfter"])  # type: ignore[attr-defined]  # 429 TooManyRequests
    if status == 401:
        err.status = 401  # type: ignore[misc]
    return err


# -- discovery -----------------------------------------------------------------------------------


def _ancestor_pids() -> list[int]:
    """Process ids of this process's ancestors, nearest first."""
    pids: list[int] = []
    try:
        import psutil

        for parent in psutil.Process().parents():
            pids.append(parent.pid)
        return pids
    except Exception:
        pass
    pid = os.getpid()
    for _ in range(64):  # /proc/<pid>/stat: "pid (comm) state ppid ..."
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            break
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid <= 0:
            break
        pids.append(ppid)
        pid = ppid
    return pids


def _server_base(info: dict) -> str:
    url = info.get("url") or ""
    if not url:
        url = f"http://{info.get('hostname', '127.0.0.1')}:{info.get('port')}{info.get('base_url', '/')}"
    return url if url.endswith("/") else url + "/"


def discover_server() -> tuple[str, Optional[str]]:
    """``(base_url, token)`` of the Jupyter server to talk to; :class:`ServerNotFound` if none.

    See the module docstring for the order in which servers are tried.
    """
    env_url = os.environ.get("GPUQUEUE_URL")
    if env_url:
        return env_url, os.environ.get("GPUQUEUE_TOKEN")
    try:
        from jupyter_server.serverapp import list_running_servers

        servers = list(list_running_servers())
    except Exception:
        servers = []
    if servers:
        ancestors = _ancestor_pids()
        by_pid = {s.get("pid"): s for s in servers}
        for pid in ancestors:
            if pid in by_pid:
                s = by_pid[pid]
                return _server_base(s), s.get("token") or None
        if len(servers) == 1:
            return _server_base(servers[0]), servers[0].get("token") or None
        serving = []
        for s in servers:
            try:
                GpuQueueClient(_server_base(s), s.get("token") or None, timeout=3).info()
                serving.append(s)
            except GpuQueueError:
                continue
        if len(serving) == 1:
            return _server_base(serving[0]), serving[0].get("token") or None
        if serving:
            urls = ", ".join(_server_base(s) for s in serving)
            raise ServerNotFound(
                f"several Jupyter servers run jupyter_gpuqueue ({urls}); choose one with "
                "GPUQUEUE_URL and GPUQUEUE_TOKEN (or --url/--token)",
                field="url",
            )
    raise ServerNotFound(
        "no running Jupyter server with jupyter_gpuqueue found; start `jupyter lab` "
        "(or set GPUQUEUE_URL and GPUQUEUE_TOKEN)",
        field="url",
    )


# -- the client ----------------------------------------------------------------------------------


class EventStream:
    """An iterator of Event dicts from the websocket ``gpuqueue/api/events``.

    Iteration ends when the server closes the connection or :meth:`close` is called (from any
    thread). Use as a context manager to close it. ``timeout`` (seconds) bounds each wait for a
    message; the server pings every 30 s, so a timeout above that detects a dead connection and
    raises :class:`ServerUnavailable`.
    """

    def __init__(self, ws_url: str, headers: list[str], timeout: Optional[float] = 75.0):
        import websocket

        self._websocket = websocket
        self._closed = False
        try:
            self._ws = websocket.create_connection(ws_url, header=headers, timeout=timeout)
        except websocket.WebSocketBadStatusException as e:
            raise error_from_response(e.status_code, _json_or_none(e.resp_body)) from None
        except (OSError, websocket.WebSocketException) as e:
            raise ServerUnavailable(f"cannot open the event stream {ws_url}: {e}") from None

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> dict:
        websocket = self._websocket
        while True:
            if self._closed:
                raise StopIteration
            try:
                message = self._ws.recv()
            except websocket.WebSocketTimeoutException:
                self.close()
                raise ServerUnavailable("the event stream went silent (no ping)") from None
            except (websocket.WebSocketConnectionClosedException, OSError):
                self.close()
                raise StopIteration from None
            except Exception:
                if self._closed:  # closed by another thread under this recv() (its socket gone)
                    raise StopIteration from None
                raise
            if message is None or message == "":
                if not self._ws.connected:
                    self.close()
                    raise StopIteration
                continue
            try:
                event = json.loads(message)
            except ValueError:
                continue
            if isinstance(event, dict):
                return event

    def close(self) -> None:
        """Close the connection at once; a ``next()`` blocked in another thread then stops.

        The close frame is sent without waiting for the server's answer: reading it needs the
        websocket's read lock, which a ``next()`` blocked in another thread holds until a message
        comes (the next ping, up to 30 s) or its timeout; on a server sharing the caller's event
        loop, none comes while close() runs. Shutting the socket down wakes that ``next()``."""
        if self._closed:
            return
        self._closed = True
        ws = self._ws
        try:
            ws.send_close()
        except Exception:
            pass
        sock = ws.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            ws.shutdown()
        except Exception:
            pass

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _why(exc: Exception) -> str:
    """A short reason for a connection failure (requests nests the OS error in long text)."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if m:
        return m.group(0).strip()
    if isinstance(exc, requests.Timeout):
        return "timed out"
    return type(exc).__name__


def _json_or_none(data: Any) -> Any:
    try:
        if isinstance(data, bytes):
            data = data.decode("utf-8", "replace")
        return json.loads(data) if data else None
    except ValueError:
        return None


class GpuQueueClient:
    """Client of one Jupyter server's GPU-queue API.

    ``url``: the server's base URL (``http://host:port/base/``; a URL ending in
    ``gpuqueue/api/`` is accepted too). ``token``: its API token (``Authorization: token …``).
    Both None: discovered (module docstring). ``timeout``: seconds per HTTP request.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 30.0):
        if url is None:
            url, discovered_token = discover_server()
            token = token if token is not None else discovered_token
        url = url.strip()
        if not url.endswith("/"):
            url += "/"
        if url.endswith(API_PATH):
            url = url[: -len(API_PATH)]
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise ValidationError(f"must be an http(s) URL, got {url!r}", field="url")
        self.url = url
        self.api_url = url + API_PATH
        self.token = token or None
        self.timeout = timeout
        self._session = requests.Session()
        if self.token:
            self._session.headers["Authorization"] = f"token {self.token}"

    def __repr__(self) -> str:
        return f"GpuQueueClient({self.url!r})"

    # -- plumbing -------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[dict] = None,
        json_body: Any = None,
        data: Optional[bytes] = None,
        headers: Optional[dict] = None,
    ) -> Any:
        url = self.api_url + path
        try:
            resp = self._session.request(
                method,
                url,
                params=params,
                json=json_body,
                data=data,
                headers=headers,
                timeout=self.timeout,
            )
        except requests.RequestException as e:
            raise ServerUnavailable(f"cannot reach the Jupyter server at {self.url}: {_why(e)}") from None
        body = _json_or_none(resp.content)
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, body)
        if body is None and resp.content:
            raise ServerUnavailable(
                f"{method} {url} did not answer JSON (is jupyter_gpuqueue enabled on this server?)"
            )
        return body

    @staticmethod
    def _path(namespace: str, name: str, *rest: str) -> str:
        parts = [quote(str(namespace), safe=""), quote(str(name), safe=""), *rest]
        return "workloads/" + "/".join(parts)

    # -- the API --------------------------------------------------------------------------------

    def info(self) -> dict:
        """``Info``: user, LocalQueues, flavors, MIG profiles, priority classes, defaults."""
        return self._request("GET", "info")

    def submit(self, request: dict) -> dict:
        """Submit a SubmitRequest dict; returns the created Workload. ValidationError names the field."""
        return self._request("POST", "workloads", json_body=request)

    def submit_many(self, requests: list[dict]) -> list[dict]:
        """Submit SubmitRequests as one batch (all or nothing, at most 1,000); returns the created
        Workloads in order. ValidationError / Conflict name the item (``items[3].gpus``)."""
        return list(self._request("POST", "workloads", json_body={"items": list(requests)})["items"])

    def submit_manifest(self, text: str) -> list[dict]:
        """Submit Kubernetes YAML (batch/v1 Job, Kueue Workload, ...); returns the Workloads."""
        out = self._request(
            "POST",
            "workloads",
            data=text.encode("utf-8"),
            headers={"Content-Type": "application/yaml"},
        )
        if isinstance(out, dict) and "items" in out and "name" not in out:
            return list(out["items"])
        return [out]

    def estimate(self, request: dict) -> dict:
        """``Estimate`` (GPU-hours, USD) of a SubmitRequest; nothing is created."""
        return self._request("POST", "estimate", json_body=request)

    def list(
        self,
        *,
        namespace: Optional[str] = None,
        states: Optional[list[str]] = None,
        mine: bool = False,
    ) -> list[dict]:
        """Workloads, newest first; filtered by namespace, states and (``mine``) owner."""
        params: dict[str, str] = {}
        if namespace:
            params["namespace"] = namespace
        if states:
            params["state"] = ",".join(states)
        if mine:
            params["mine"] = "true"
        return list(self._request("GET", "workloads", params=params)["items"])

    def get(self, namespace: str, name: str) -> dict:
        """One Workload; NotFound."""
        return self._request("GET", self._path(namespace, name))

    def cancel(self, namespace: str, name: str) -> dict:
        """Cancel a workload you own (Forbidden otherwise); returns the Workload."""
        return self._request("DELETE", self._path(namespace, name))

    def logs(self, namespace: str, name: str, offset: int = 0, limit: Optional[int] = None) -> dict:
        """``{"text", "offset", "nextOffset", "eof", "size"}`` of a job's output from ``offset`` bytes."""
        params: dict[str, Any] = {"offset": int(offset)}
        if limit is not None:
            params["limit"] = int(limit)
        return self._request("GET", self._path(namespace, name, "logs"), params=params)

    def queues(self) -> dict:
        """``Queues``: ClusterQueues with quota, usage and pending workloads; LocalQueues."""
        return self._request("GET", "queues")

    def inventory(self) -> dict:
        """``InventoryView``: free/total per flavor and every node's GPUs and MIG devices."""
        return self._request("GET", "inventory")

    def prices(self) -> dict:
        """USD per GPU-hour per ResourceFlavor."""
        return self._request("GET", "prices")

    def openapi(self) -> dict:
        """The server's OpenAPI 3 document."""
        return self._request("GET", "openapi.json")

    # -- admin (JupyterHub scope custom:gpuqueue:admin; Forbidden otherwise) ------------------------

    def admin_config(self) -> dict:
        """``AdminConfig``: ClusterQueues with every quota, cohorts, priority classes, prices."""
        return self._request("GET", "admin/config")

    def export_kueue(self) -> str:
        """The whole configuration as Kueue YAML (``kubectl apply`` takes it; it imports back
        identically)."""
        url = self.api_url + "admin/config"
        try:
            resp = self._session.get(url, params={"format": "yaml"}, headers={"Accept": "application/yaml"},
                                     timeout=self.timeout)
        except requests.RequestException as e:
            raise ServerUnavailable(f"cannot reach the Jupyter server at {self.url}: {_why(e)}") from None
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, _json_or_none(resp.content))
        return resp.content.decode("utf-8")

    def import_kueue(self, text: str, *, dry_run: bool = False) -> dict:
        """Replace the configuration with Kueue YAML ``text`` (``dry_run``: validate only);
        returns ``ImportResult``. ValidationError names the Kueue field path."""
        return self._request("POST", "admin/import", params={"dryRun": "true"} if dry_run else None,
                             data=text.encode("utf-8"), headers={"Content-Type": "application/yaml"})

    def patch_cluster_queue(self, name: str, patch: dict) -> dict:
        """Change a ClusterQueue's ``cohort`` and ``resources`` quotas (``ClusterQueuePatch``)."""
        return self._request("PATCH", "admin/cluster-queues/" + quote(name, safe=""), json_body=patch)

    def patch_priority_class(self, name: str, patch: dict) -> dict:
        """Change a priority class's ``value`` / ``description``."""
        return self._request("PATCH", "admin/priority-classes/" + quote(name, safe=""), json_body=patch)

    def set_prices(self, prices: dict) -> dict:
        """Replace the price list: ``{"flavors": {flavor: USD per GPU-hour}, "default": USD}``."""
        return self._request("PUT", "admin/prices", json_body=prices)

    def audit_log(self, limit: int = 100, offset: int = 0) -> dict:
        """``{"items": [AuditEntry], "total"}``, newest first."""
        return self._request("GET", "admin/audit", params={"limit": int(limit), "offset": int(offset)})

    def events(self, timeout: Optional[float] = 75.0) -> EventStream:
        """The event stream: an iterator of Event dicts (``hello`` first); see :class:`EventStream`."""
        parts = urlsplit(self.api_url + "events")
        scheme = "wss" if parts.scheme == "https" else "ws"
        ws_url = urlunsplit((scheme, parts.netloc, parts.path, "", ""))
        headers = [f"Authorization: token {self.token}"] if self.token else []
        return EventStream(ws_url, headers, timeout=timeout)

    # -- conveniences ---------------------------------------------------------------------------

    def find(self, name: str, namespace: Optional[str] = None) -> dict:
        """The Workload called ``name`` ("ns/name" or a bare name looked up among yours).

        NotFound (field ``name``) if there is none; ValidationError (field ``namespace``) if a
        bare name matches workloads in several namespaces.
        """
        if namespace is None and "/" in name:
            namespace, name = name.split("/", 1)
        if namespace:
            return self.get(namespace, name)
        matches = [w for w in self.list(mine=True) if w.get("name") == name]
        if not matches:
            raise NotFound(f"you have no workload called {name!r}", field="name")
        namespaces = sorted({w["namespace"] for w in matches})
        if len(namespaces) > 1:
            raise ValidationError(
                f"{name!r} exists in several namespaces ({', '.join(namespaces)}); pass the namespace",
                field="namespace",
            )
        return matches[0]

    def wait(
        self,
        namespace: str,
        name: str,
        timeout: Optional[float] = None,
        poll_interval: float = 1.0,
    ) -> dict:
        """Poll until the workload is Succeeded, Failed or Cancelled; returns it.

        ``timeout`` in seconds (None: forever); on timeout returns the latest Workload as is.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wl = self.get(namespace, name)
            if wl.get("state") in TERMINAL_STATES:
                return wl
            if deadline is not None and time.monotonic() >= deadline:
                return wl
            delay = poll_interval
            if deadline is not None:
                delay = max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(delay)
