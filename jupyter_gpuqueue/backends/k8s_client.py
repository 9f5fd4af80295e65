"""A thin, retrying JSON transport over the official ``kubernetes`` client's ``ApiClient``.

Why not the typed APIs (``BatchV1Api``...)? Our backends handle objects as plain dicts (the user's own
Job manifest, Kueue's CRDs, the visibility API's subresource, Volcano PodGroups) and must keep fields
the client's models do not know; the ``ApiClient`` still gives us kubeconfig / in-cluster auth, TLS,
token refresh and proxies. Both generations of the client are supported (``param_serialize`` +
``call_api`` from kubernetes 35+, the legacy ``call_api`` before).

Errors: every non-2xx answer becomes :class:`KubeApiError` carrying the API server's ``Status``
(``code``, ``reason``, ``message``, ``details.causes``; API conventions, "Response Status Kind").
:meth:`KubeClient.request` retries 429, 5xx and connection errors with bounded exponential backoff
(``base * 2**n`` seconds, at most ``attempts`` tries); 4xx other than 429 are never retried here,
except a ``403`` shortly after the API server could not be reached: a restarted kube-apiserver
answers 403 for a moment until its RBAC authorizer has loaded the roles (seen on v1.28.7, about one
restart in three), so within ``forbidden_grace`` seconds of the last connection error a 403 counts
as transient (:attr:`KubeApiError.retryable`).
"""

from __future__ import annotations

import collections
import json
import logging
import random
import threading
import time
from typing import Any, Iterator, Optional
from urllib.parse import quote

log = logging.getLogger(__name__)

RETRYABLE = (429, 500, 502, 503, 504)


class KubeApiError(Exception):
    """A failed API call. ``status`` is the HTTP code (0: no answer, e.g. connection refused);
    ``reason`` the Status reason (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``,
    ``Forbidden``, ``Expired``, ``InternalError``...); ``message`` the API server's own message;
    ``causes`` its ``details.causes`` (``[{"reason", "message", "field"}]``)."""

    def __init__(self, status: int, reason: str, message: str, causes: Optional[list] = None,
                 body: Optional[dict] = None, transient: bool = False):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes or []
        self.body = body or {}
        self.transient = transient  # e.g. a 403 right after the API server came back

    @property
    def retryable(self) -> bool:
        return self.transient or self.status == 0 or self.status in RETRYABLE

    def field_message(self) -> str:
        """The message with each cause's field, as kubectl prints it."""
        if not self.causes or all((c.get("message") or "") in self.message for c in self.causes):
            return self.message
        parts = [f"{c.get('field') or '?'}: {c.get('message') or c.get('reason')}" for c in self.causes]
        return f"{self.message} ({'; '.join(parts)})" if self.message else "; ".join(parts)


def _status_error(status: int, text: str) -> KubeApiError:
    try:
        body = json.loads(text) if text else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    if body.get("kind") == "Status":
        details = body.get("details") or {}
        return KubeApiError(int(body.get("code") or status), str(body.get("reason") or ""),
                            str(body.get("message") or text), list(details.get("causes") or []), body)
    return KubeApiError(status, "", (text or "").strip()[:500] or f"HTTP {status}", [], body)


def load_api_client(kubeconfig: Optional[str] = None, context: Optional[str] = None):
    """An ``ApiClient``: in-cluster service account when running in a pod and no kubeconfig is
    named, else the kubeconfig file (``KUBECONFIG`` / ``~/.kube/config``) and context.
    Raises ``kubernetes.config.ConfigException`` when neither is usable."""
    from kubernetes import client, config

    if not kubeconfig and not context:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    return config.new_client_from_config(config_file=kubeconfig, context=context)


def path_for(group: str, version: str, plural: str, namespace: Optional[str] = None,
             name: Optional[str] = None, subresource: Optional[str] = None) -> str:
    """The REST path of a collection or object: core group ``""`` → ``/api/v1``, else
    ``/apis/{group}/{version}``; ``namespaces/{ns}/`` for namespaced requests."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    if subresource:
        base += f"/{subresource}"
    return base


class KubeClient:
    """JSON requests with retries. ``api_client``: a ``kubernetes.client.ApiClient`` (injected in
    tests; see :func:`load_api_client`). ``attempts``/``backoff_base``/``backoff_max``: the retry
    budget of one :meth:`request` (defaults: 4 tries, 0.2 s doubling, at most 2 s per wait).
    ``request_timeout``: seconds for one non-watch request. ``forbidden_grace``: seconds after the
    last connection error during which a 403 is retried (RBAC still loading after a restart).
    ``counts``: requests sent, by verb (``GET``, ``POST``, ``PUT``, ``PATCH``, ``DELETE``,
    ``WATCH``), retries included, and failed ones by status (``"error 409"``; ``"error 0"``: no
    answer). Thread-safe (urllib3's pool is)."""

    def __init__(self, api_client, *, attempts: int = 4, backoff_base: float = 0.2, backoff_max: float = 2.0,
                 request_timeout: float = 30.0, forbidden_grace: float = 20.0, sleep=time.sleep,
                 monotonic=time.monotonic):
        self.api_client = api_client
        self.attempts = max(1, int(attempts))
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self.forbidden_grace = forbidden_grace
        self._sleep = sleep
        self._monotonic = monotonic
        self.last_unreachable: Optional[float] = None  # monotonic time of the last connection error
        self.counts: collections.Counter = collections.Counter()
        self._count_lock = threading.Lock()

    def _count(self, verb: str) -> None:
        with self._count_lock:
            self.counts[verb] += 1

    def _unreachable(self, exc) -> KubeApiError:
        self.last_unreachable = self._monotonic()
        self._count("error 0")
        return KubeApiError(0, "ConnectionError", f"cannot reach the API server: {exc}")

    def _classify(self, err: KubeApiError) -> KubeApiError:
        """Mark a 403 that follows a connection error closely as transient (see the module doc);
        count the error (``counts["error <status>"]``)."""
        self._count(f"error {err.status}")
        if err.status == 403 and self.last_unreachable is not None \
                and self._monotonic() - self.last_unreachable < self.forbidden_grace:
            err.transient = True
        return err

    # -- low level ---------------------------------------------------------------------------------
    def _send(self, method: str, path: str, query: Optional[list], body: Any, content_type: Optional[str],
              timeout: Any):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        ac = self.api_client
        if hasattr(ac, "param_serialize"):  # kubernetes >= 35 (openapi-generator "python")
            params = ac.param_serialize(method=method, resource_path=path, query_params=query or [],
                                        header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = ac.call_api(*params, _request_timeout=timeout)
            return resp.response  # urllib3 response, body not read yet
        return ac.call_api(path, method, query_params=query or [], header_params=headers, body=body,  # pragma: no cover
                           auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                           _request_timeout=timeout)

    def _once(self, method: str, path: str, query, body, content_type, raw: bool = False) -> Any:
        self._count(method)
        try:
            resp = self._send(method, path, query, body, content_type, self.request_timeout)
        except KubeApiError:
            raise
        except Exception as exc:  # urllib3 errors, legacy ApiException for non-2xx
            status = getattr(exc, "status", None)
            if isinstance(status, int) and status:
                raise self._classify(_status_error(status, getattr(exc, "body", "") or "")) from None
            raise self._unreachable(exc) from None
        try:
            data = resp.data if hasattr(resp, "data") else resp.read()
        finally:
            try:
                resp.release_conn()
            except Exception:
                pass
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
        if not 200 <= resp.status <= 299:
            raise self._classify(_status_error(resp.status, text))
        if raw:
            return data if isinstance(data, bytes) else text.encode("utf-8")
        return json.loads(text) if text.strip() else {}

    def request(self, method: str, path: str, *, query: Optional[list] = None, body: Any = None,
                content_type: Optional[str] = None, attempts: Optional[int] = None, raw: bool = False) -> Any:
        """One API call, retried on 429 / 5xx / no answer with exponential backoff and jitter.
        Returns the decoded JSON body (``raw``: the body's bytes, e.g. a Pod's log). Raises
        KubeApiError (the last one when retries run out)."""
        n = self.attempts if attempts is None else max(1, attempts)
        for i in range(n):
            try:
                return self._once(method, path, query, body, content_type, raw)
            except KubeApiError as err:
                if not err.retryable or i == n - 1:
                    raise
                wait = min(self.backoff_max, self.backoff_base * (2 ** i)) * (0.5 + random.random() / 2)
                log.info("kubernetes: %s %s failed (%s); retry %d/%d in %.2f s", method, path, err, i + 1, n - 1, wait)
                self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- conveniences ------------------------------------------------------------------------------
    def get(self, path: str, **kw) -> dict:
        return self.request("GET", path, **kw)

    def create(self, path: str, body: dict, **kw) -> dict:
        return self.request("POST", path, body=body, **kw)

    def replace(self, path: str, body: dict, **kw) -> dict:
        return self.request("PUT", path, body=body, **kw)

    def merge_patch(self, path: str, patch: dict, **kw) -> dict:
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json", **kw)

    def delete(self, path: str, propagation_policy: str = "Background", **kw) -> dict:
        """DELETE with ``DeleteOptions.propagationPolicy`` (Background: dependents, e.g. a Job's
        Pods, are garbage-collected after the owner is gone)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation_policy}
        return self.request("DELETE", path, body=body, **kw)

    def list(self, path: str, label_selector: Optional[str] = None,
             field_selector: Optional[str] = None) -> tuple[list[dict], str]:
        """All items of a collection (following ``continue`` tokens) and the list's
        resourceVersion, from which a watch resumes."""
        items: list[dict] = []
        cont = None
        while True:
            q = [("limit", "500")]
            if label_selector:
                q.append(("labelSelector", label_selector))
            if field_selector:
                q.append(("fieldSelector", field_selector))
            if cont:
                q.append(("continue", cont))
            data = self.get(path, query=q)
            items.extend(data.get("items") or [])
            meta = data.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    def watch(self, path: str, resource_version: str, label_selector: Optional[str] = None,
              timeout_seconds: int = 300, field_selector: Optional[str] = None) -> Iterator[dict]:
        """Watch events (``{"type", "object"}``) after ``resource_version``, ending when the server
        closes the stream (after ``timeout_seconds``). An ``ERROR`` event is raised as KubeApiError
        (``status`` 410 ``Expired``/``Gone``: the version is too old; re-list). API conventions:
        "Efficient detection of changes"."""
        q = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(int(timeout_seconds)))]
        if resource_version:
            q.append(("resourceVersion", resource_version))
        if label_selector:
            q.append(("labelSelector", label_selector))
        if field_selector:
            q.append(("fieldSelector", field_selector))
        self._count("WATCH")
        try:
            resp = self._send("GET", path, q, None, None, (10, timeout_seconds + 30))
        except Exception as exc:
            status = getattr(exc, "status", None)
            if isinstance(status, int) and status:
                raise self._classify(_status_error(status, getattr(exc, "body", "") or "")) from None
            raise self._unreachable(exc) from None
        try:
            if not 200 <= resp.status <= 299:
                raise self._classify(_status_error(resp.status, resp.read().decode("utf-8", "replace")))
            buf = b""
            for chunk in resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        obj = ev.get("object") or {}
                        raise KubeApiError(int(obj.get("code") or 500), str(obj.get("reason") or "Error"),
                                           str(obj.get("message") or ""), [], obj)
                    yield ev
        finally:
            try:
                resp.release_conn()
            except Exception:
                pass
