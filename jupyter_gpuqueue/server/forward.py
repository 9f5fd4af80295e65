"""Client mode: a user's single-user server forwards its GPU-queue API to the hub-managed service.

Under JupyterHub the queue runs once, as the managed service ``gpuqueue`` (hub-service mode). In
each user's server the extension runs in *hub-client* mode: the panel, ``%%gpujob`` and the CLI
keep talking to their own server at ``{base_url}gpuqueue/api/...``, and these handlers forward
every request to ``{service_url}gpuqueue/api/...`` as the server's owner, with
``Authorization: token $JUPYTERHUB_API_TOKEN`` (the server's Hub token; its scopes come from
``c.Spawner.server_token_scopes``, which must include ``access:services!service=gpuqueue`` and
``custom:gpuqueue:submit``). Everything the service answers is passed back: status, JSON body
(errors included), ``Content-Type``, and ``Location`` (rewritten to the local path). The
``events`` websocket is relayed message by message.

Paths: with ``root_dir`` set (``c.GpuQueueApp.forward_local_paths``, default on), a JSON
SubmitRequest to ``workloads`` or ``estimate`` has a relative ``script`` / ``workingDir`` made
absolute against this server's root directory, and a ``command`` without ``workingDir`` gets the
root directory, so that the panel's "Submit as GPU job" on a file of this server finds it when the
service runs jobs on the same machine (local backend).

Whoever may use this server (its owner, or someone it is shared with) acts as the owner in the
queue, exactly as they would in a terminal on it. Nothing else is forwarded: no cookies, no XSRF
token, no incoming ``Authorization``. When the service cannot be reached the answer is 502
``{"reason": "BadGateway"}`` (504 ``GatewayTimeout`` after ``forward_timeout`` seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Optional
from urllib.parse import urlparse, urlunparse

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from tornado import httpclient, web, websocket

from ..errors import GpuQueueError, ValidationError
from .handlers import (
    API_PREFIX,
    AUTH_RESOURCE,
    STARTUP_ERROR_KEY,
    YAML_CONTENT_TYPES,
    ServiceUnavailable,
)

FORWARDER_KEY = "gpuqueue_forwarder"
"""Web-app setting: the :class:`Forwarder` of a server in hub-client mode."""

# Request headers passed to the service (everything else, cookies and XSRF included, stays here).
_FORWARDED_REQUEST_HEADERS = ("Content-Type", "Accept")
_BODY_METHODS = ("POST", "PUT", "PATCH")


class BadGateway(GpuQueueError):
    """502: the hub-managed GPU queue service could not be reached or answered nonsense."""

    status = 502
    reason = "BadGateway"


class GatewayTimeout(GpuQueueError):
    """504: the hub-managed GPU queue service did not answer within ``forward_timeout``."""

    status = 504
    reason = "GatewayTimeout"


class Forwarder:
    """Where the hub-managed service is and how to call it as this server's owner.

    ``service_url``: the service's base URL including its prefix, e.g.
    ``"http://127.0.0.1:10101/services/gpuqueue/"`` (the service itself) or
    ``"http://hub.example.org/services/gpuqueue/"`` (through the hub's proxy). ``token``: the
    server's ``$JUPYTERHUB_API_TOKEN``. ``timeout``: seconds per forwarded request (connect and
    answer). ``root_dir``: this server's root directory, against which relative paths of
    submissions are resolved (None: sent as they are). Raises ValidationError (field
    ``service_url`` / ``token``) for unusable values."""

    def __init__(self, service_url: str, token: str, *, timeout: float = 30.0,
                 root_dir: Optional[str] = None):
        parsed = urlparse(service_url or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValidationError(
                f"must be an http(s) URL of the gpuqueue service such as "
                f"http://127.0.0.1:10101/services/gpuqueue/, got {service_url!r}",
                field="service_url",
            )
        if not token:
            raise ValidationError(
                "no Hub API token: hub-client mode runs in a JupyterHub single-user server, "
                "which has $JUPYTERHUB_API_TOKEN",
                field="token",
            )
        self.service_url = service_url if service_url.endswith("/") else service_url + "/"
        self.api_url = url_path_join(self.service_url, API_PREFIX)
        ws_scheme = "wss" if parsed.scheme == "https" else "ws"
        self.ws_api_url = urlunparse(urlparse(self.api_url)._replace(scheme=ws_scheme))
        self.token = token
        self.timeout = float(timeout)
        self.root_dir = os.path.abspath(root_dir) if root_dir else None

    def localize_submission(self, body: bytes) -> bytes:
        """A JSON SubmitRequest body with its paths made absolute against ``root_dir`` (see the
        module docstring); any other body (YAML, a manifest, invalid JSON) unchanged."""
        if self.root_dir is None or not body:
            return body
        try:
            request = json.loads(body)
        except ValueError:
            return body  # the service names the error
        if not isinstance(request, dict) or "manifest" in request:
            return body
        changed = False
        for key in ("script", "workingDir"):
            value = request.get(key)
            if isinstance(value, str) and value and not os.path.isabs(value):
                request[key] = os.path.normpath(os.path.join(self.root_dir, value))
                changed = True
        if request.get("command") and not request.get("script") and not request.get("workingDir"):
            request["workingDir"] = self.root_dir
            changed = True
        return json.dumps(request).encode() if changed else body

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def url(self, path: str, query: str = "", *, ws: bool = False) -> str:
        """The service URL of ``gpuqueue/api/{path}`` with the raw ``query`` string."""
        base = self.ws_api_url if ws else self.api_url
        url = f"{base}/{path}" if path else base
        return f"{url}?{query}" if query else url

    def upstream_path(self) -> str:
        """The path of the service's API root (``/services/gpuqueue/gpuqueue/api``)."""
        return urlparse(self.api_url).path

    async def fetch(
        self, method: str, path: str, query: str, body: Optional[bytes], headers: dict[str, str]
    ) -> httpclient.HTTPResponse:
        """One request to the service; its response whatever the status. Raises BadGateway
        (unreachable) or GatewayTimeout."""
        request = httpclient.HTTPRequest(
            self.url(path, query),
            method=method,
            headers={**headers, **self.auth_headers()},
            body=body,
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )
        try:
            response = await httpclient.AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, asyncio.TimeoutError) as e:  # refused, reset, DNS
            raise self._unreachable(e) from None
        if response.code == 599:  # tornado's "no HTTP response": timeout or connection error
            raise self._unreachable(response.error)
        return response

    async def connect_events(self, query: str) -> websocket.WebSocketClientConnection:
        """Open the service's event stream as this server's owner. Raises the service's own
        refusal as a GpuQueueError with its status (e.g. 403), BadGateway, or GatewayTimeout."""
        request = httpclient.HTTPRequest(
            self.url("events", query, ws=True),
            headers=self.auth_headers(),
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
        )
        try:
            return await websocket.websocket_connect(request)
        except httpclient.HTTPClientError as e:
            if e.code == 599:
                raise self._unreachable(e) from None
            raise upstream_error(e.code, e.response.body if e.response else b"", e.message)
        except (OSError, asyncio.TimeoutError, websocket.StreamClosedError) as e:
            raise self._unreachable(e) from None

    def _unreachable(self, error: Any) -> GpuQueueError:
        text = str(error) if error else "no response"
        if "timeout" in text.lower() or isinstance(error, asyncio.TimeoutError):
            return GatewayTimeout(
                f"the GPU queue service at {self.service_url} did not answer within "
                f"{self.timeout:g} s",
                field="service_url",
            )
        return BadGateway(
            f"the GPU queue service at {self.service_url} cannot be reached: {text}",
            field="service_url",
        )


def upstream_error(status: int, body: bytes, fallback: Optional[str] = None) -> GpuQueueError:
    """A GpuQueueError carrying the service's status and its JSON error (message, reason, field)
    or, for a non-JSON answer (e.g. the proxy's own page), a message saying what came back."""
    err = GpuQueueError("")
    err.status = status
    try:
        data = json.loads(body or b"")
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("message"):
        err.message = str(data["message"])
        err.reason = str(data.get("reason") or "Error")
        err.field = data.get("field")
    else:
        snippet = (body or b"").decode("utf-8", "replace").strip()[:200]
        err.message = (
            f"the GPU queue service answered {status}"
            + (f" {fallback}" if fallback else "")
            + (f": {snippet}" if snippet else "")
        )
        err.reason = "UpstreamError"
    err.args = (err.message,)
    return err


def _is_yaml(request: Any) -> bool:
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    return ctype in YAML_CONTENT_TYPES


def forwarder_or_error(settings: dict) -> Forwarder:
    """The Forwarder in ``settings``; ServiceUnavailable (503, with the startup error) if none."""
    forwarder = settings.get(FORWARDER_KEY)
    if forwarder is None:
        error = settings.get(STARTUP_ERROR_KEY) or "the extension did not initialise it"
        raise ServiceUnavailable(f"the GPU queue client cannot forward: {error}")
    return forwarder


class ForwardHandler(APIHandler):
    """Every method on ``gpuqueue/api/<path>``: forwarded to the service, answer passed back."""

    auth_resource = AUTH_RESOURCE

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        exc = exc_info[1] if exc_info else None
        if isinstance(exc, GpuQueueError):
            self.set_status(exc.status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(exc.to_json()))
            return
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, GpuQueueError):
            self.log.warning("%s %s -> %s %s", self.request.method, self.request.path, value.status, value)
            return
        super().log_exception(typ, value, tb)

    async def _forward(self, path: str) -> None:
        forwarder = forwarder_or_error(self.settings)
        # forward the path as the client sent it (tornado's ``path`` argument is percent-decoded)
        local_root = url_path_join(self.base_url, API_PREFIX) + "/"
        if self.request.path.startswith(local_root):
            path = self.request.path[len(local_root):]
        method = self.request.method or "GET"
        body = self.request.body if method in _BODY_METHODS or self.request.body else None
        if method == "POST" and path in ("workloads", "estimate") and body and not _is_yaml(self.request):
            body = forwarder.localize_submission(body)
        headers = {
            h: self.request.headers[h] for h in _FORWARDED_REQUEST_HEADERS if h in self.request.headers
        }
        response = await forwarder.fetch(method, path, self.request.query, body, headers)
        content_type = response.headers.get("Content-Type", "")
        if response.code >= 400 and not content_type.startswith("application/json"):
            raise upstream_error(response.code, response.body, response.reason)
        self.set_status(response.code, reason=response.reason)
        if content_type:
            self.set_header("Content-Type", content_type)
        location = response.headers.get("Location")
        if location:
            self.set_header("Location", self._local_location(forwarder, location))
        if response.headers.get("Retry-After"):  # the service's 429 TooManyRequests
            self.set_header("Retry-After", response.headers["Retry-After"])
        self.finish(response.body or b"")

    def _local_location(self, forwarder: Forwarder, location: str) -> str:
        upstream = forwarder.upstream_path()
        path = urlparse(location).path
        if path.startswith(upstream):
            return url_path_join(self.base_url, API_PREFIX) + path[len(upstream):]
        return location

    @web.authenticated
    @authorized
    async def get(self, path: str) -> None:
        """Forward a GET (info, workloads, logs, queues, inventory, prices, openapi, admin)."""
        await self._forward(path)

    @web.authenticated
    @authorized
    async def post(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized
    async def put(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized
    async def patch(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized
    async def delete(self, path: str) -> None:
        await self._forward(path)


class ForwardEventsHandler(WebSocketMixin, websocket.WebSocketHandler, JupyterHandler):
    """``gpuqueue/api/events``: relays the service's event stream to one client.

    The service's stream is opened *before* the upgrade, so its refusal (403 without
    ``custom:gpuqueue:submit``, 502 when unreachable) is this handshake's answer. When either end
    closes, so does the other."""

    auth_resource = AUTH_RESOURCE

    upstream: Optional[websocket.WebSocketClientConnection] = None
    _relay: Optional[asyncio.Future] = None
    _closing = False

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        """Upgrade to a websocket once the service's event stream is open."""
        try:
            forwarder = forwarder_or_error(self.settings)
            self.upstream = await forwarder.connect_events(self.request.query)
        except GpuQueueError as e:
            raise web.HTTPError(e.status, str(e)) from None
        try:
            res = super().get(*args, **kwargs)
            if res is not None:
                await res
        finally:
            if self.ws_connection is None:  # the upgrade was refused here: drop the upstream
                self._close_upstream()

    def open(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().open(*args, **kwargs)
        self._relay = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        upstream = self.upstream
        try:
            while upstream is not None:
                message = await upstream.read_message()
                if message is None:  # the service closed the stream
                    break
                try:
                    await self.write_message(message, binary=isinstance(message, bytes))
                except websocket.WebSocketClosedError:
                    return
        except asyncio.CancelledError:
            return
        except Exception:
            self.log.warning("gpuqueue: relaying the event stream failed", exc_info=True)
        if not self._closing:
            self._closing = True
            self.close(1011, "the GPU queue service closed the event stream")

    def on_message(self, message: Any) -> None:
        """Clients have nothing to say; messages are ignored."""

    def on_close(self) -> None:
        self._closing = True
        self._close_upstream()
        if self._relay is not None and not self._relay.done():
            self._relay.cancel()
        super().on_close()

    def _close_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.close()


forward_handlers = [
    (rf"{API_PREFIX}/events", ForwardEventsHandler),
    (rf"{API_PREFIX}/(?P<path>.*)", ForwardHandler),
]
"""The handlers of hub-client mode (relative to base_url): the event relay and a catch-all."""
