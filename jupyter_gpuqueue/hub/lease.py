"""One notebook server's GPU lease as the hub sees it: the REST client, the user's lease token,
and :class:`HubLease` (submit, wait for admission, refresh, release)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, Callable, Optional
from urllib.parse import quote

from .config import (API_PATH, LEASE_KIND, REQUEST_KEYS, GpuQueueSpawnError, GpuQueueSpawnRefused, goes_on_without_gpus,
                     queue_url, setting)
from .profiles import describe_request, progress_message


class QueueClient:
    """Minimal async client of the gpuqueue REST API (tornado's AsyncHTTPClient, so the hub's
    event loop never blocks). ``base_url``: the service root, e.g.
    ``http://127.0.0.1:9999/services/gpuqueue/``; ``token``: sent as ``Authorization: token``.

    An error answer raises :class:`GpuQueueSpawnError` (``status``: the HTTP status), a 4xx one
    its subclass :class:`GpuQueueSpawnRefused` whose message is the queue's own (naming the
    field), so that a spawn refused by the queue fails with that status and message."""

    def __init__(self, base_url: str, token: str, *, request_timeout: float = 30.0):
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.request_timeout = request_timeout

    async def _call(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        url = self.base_url + API_PATH + path
        headers = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        kw: dict = {"method": method, "headers": headers, "request_timeout": self.request_timeout}
        if body is not None:
            headers["Content-Type"] = "application/json"
            kw["body"] = json.dumps(body)
        try:
            resp = await AsyncHTTPClient().fetch(url, **kw)
        except HTTPClientError as e:
            detail, field = "", None
            if e.response is not None and e.response.body:
                try:
                    data = json.loads(e.response.body)
                    detail = data.get("message") or ""
                    field = data.get("field")
                except (ValueError, AttributeError):
                    detail = ""  # not the queue's JSON (a proxy's or the hub's HTML page)
            named = f"{detail} (field {field})" if field and field not in detail else detail
            if 400 <= e.code < 500 and e.code not in (401, 408):
                refused = GpuQueueSpawnRefused(f"the GPU queue refused it: {named or e.message}", e.code)
                refused.detail = detail or str(e.message)  # the queue's words, for the spawn page
                raise refused from None
            raise GpuQueueSpawnError(f"GPU queue: {method} {path} → {e.code}: {named or e.message}", e.code) from None
        except OSError as e:
            raise GpuQueueSpawnError(f"GPU queue unreachable at {self.base_url}: {e}") from None
        return json.loads(resp.body) if resp.body else {}

    async def info(self) -> dict:
        """``GET info``: the token's user, their ``localQueues`` (``[]``: in no team), flavors, …"""
        return await self._call("GET", "info")

    async def inventory(self) -> dict:
        """``GET inventory``: free and total devices per flavor and resource (``summary``)."""
        return await self._call("GET", "inventory")

    async def submit(self, request: dict) -> dict:
        return await self._call("POST", "workloads", request)

    async def get(self, namespace: str, name: str) -> dict:
        return await self._call("GET", f"workloads/{quote(namespace)}/{quote(name)}")

    async def release(self, namespace: str, name: str) -> Optional[dict]:
        """Release (DELETE) a lease; None if the queue no longer knows it."""
        try:
            return await self._call("DELETE", f"workloads/{quote(namespace)}/{quote(name)}")
        except GpuQueueSpawnError as e:
            if e.status == 404:
                return None
            raise


TOKEN_LIFETIME_SECONDS = 7 * 24 * 3600


def _new_user_token(spawner: Any, note: str, expires_in: int = TOKEN_LIFETIME_SECONDS) -> str:
    """A new API token of ``spawner.user`` with only ``gpuqueue_token_scopes``, valid for
    ``expires_in`` seconds. Raises GpuQueueSpawnRefused (403) naming the scopes when the user does
    not hold them."""
    user = spawner.user
    scopes = list(setting(spawner, "gpuqueue_token_scopes"))
    try:
        token = user.new_api_token(note=note, scopes=scopes, expires_in=expires_in)
    except (ValueError, KeyError) as e:
        raise GpuQueueSpawnRefused(
            f"{user.name} may not use the GPU queue: that needs the scopes {', '.join(scopes)}; ask a "
            f"hub admin to grant them (a role in c.JupyterHub.load_roles). ({e})", 403
        ) from None
    user.db.commit()
    return token


def _delete_user_token(spawner: Any, token: str) -> None:
    from jupyterhub import orm

    db = spawner.user.db
    orm_token = orm.APIToken.find(db, token)
    if orm_token is not None:
        db.delete(orm_token)
        db.commit()


class HubLease:
    """One notebook server's lease: submit, wait for admission, release.

    ``workload`` is the latest Workload view from the queue (docs/rest-api.md), ``progress`` the
    latest progress event for the spawn page. Each lease names its server
    (``notebookServer.name``: the spawner's ``name``, "" for the user's default server), so that
    each of a user's named servers has its own lease, billed, watched and released with that
    server alone, and says whether its spawner can keep the server running without its GPUs
    (``notebookServer.goesOnWithoutGpus``, :func:`~.config.goes_on_without_gpus`)."""

    def __init__(self, spawner: Any, request: dict):
        self.spawner = spawner
        self.request = dict(request)
        self.workload: Optional[dict] = None
        self.progress: dict = {"progress": 5, "message": f"asking the GPU queue for {describe_request(request)}"}
        self.changed = asyncio.Event()
        self.done = False
        self._token: Optional[str] = None  # a user token created for this lease (deleted on release)

    def _client(self) -> QueueClient:
        fixed = setting(self.spawner, "gpuqueue_api_token")
        if fixed:
            return QueueClient(queue_url(self.spawner), fixed)
        if self._token is None:
            self._token = _new_user_token(self.spawner, f"gpuqueue lease of {self.spawner._log_name}")
        return QueueClient(queue_url(self.spawner), self._token)

    def _drop_token(self) -> None:
        if self._token is not None:
            token, self._token = self._token, None
            _delete_user_token(self.spawner, token)

    @property
    def key(self) -> Optional[tuple[str, str]]:
        return (self.workload["namespace"], self.workload["name"]) if self.workload else None

    def _body(self) -> dict:
        body = {k: v for k, v in self.request.items() if k in REQUEST_KEYS and v not in (None, "")}
        body["kind"] = LEASE_KIND
        body["notebookServer"] = {"name": getattr(self.spawner, "name", "") or "",
                                  "goesOnWithoutGpus": goes_on_without_gpus(self.spawner)}
        if "localQueue" not in body and setting(self.spawner, "gpuqueue_local_queue"):
            body["localQueue"] = setting(self.spawner, "gpuqueue_local_queue")
        if "maxRuntimeSeconds" not in body and "maxRuntime" not in body:
            body["maxRuntimeSeconds"] = int(setting(self.spawner, "gpuqueue_max_runtime_seconds"))
        return body

    def _set(self, workload: dict, progress: int) -> None:
        self.workload = workload
        message = progress_message(workload, self.request)
        name = getattr(self.spawner, "name", "") or ""
        if name:
            message = f"notebook server '{name}': {message}"
        self.progress = {"progress": progress, "message": message}
        self.changed.set()

    async def acquire(self) -> dict:
        """Submit and wait until the lease is Running; returns its Workload view.

        Raises GpuQueueSpawnError when the queue refuses it (its message names the field), when
        it ends without being admitted (its lease was deleted in the queue), or after
        ``gpuqueue_admission_timeout``. While waiting, an unreachable queue (or a 5xx answer) is
        retried: the lease is durable in the queue's ledger."""
        log = self.spawner.log
        timeout = float(setting(self.spawner, "gpuqueue_admission_timeout") or 0)
        interval = max(0.05, float(setting(self.spawner, "gpuqueue_poll_interval")))
        try:
            client = self._client()
            self._set(await client.submit(self._body()), 10)
        except GpuQueueSpawnRefused as e:
            self._drop_token()
            self.done = True
            self.changed.set()
            raise GpuQueueSpawnRefused(
                f"Cannot start this server with {describe_request(self.request)}: {getattr(e, 'detail', None) or e}",
                e.status) from None
        except BaseException:
            self._drop_token()
            self.done = True
            self.changed.set()
            raise
        ns, name = self.key
        log.info("gpuqueue: %s queued as %s/%s", self.spawner._log_name, ns, name)
        start = time.monotonic()
        try:
            while True:
                w = self.workload
                if w["state"] == "Running":
                    self._set(w, 30)
                    return w
                if w["state"] in ("Succeeded", "Failed", "Cancelled"):
                    # withdrawn in the queue (by the user, an admin): a spawn failure to show, not a crash
                    raise GpuQueueSpawnRefused(
                        f"the GPU lease ended before admission: {w.get('message') or w['state']}", 409)
                if timeout and time.monotonic() - start > timeout:
                    raise GpuQueueSpawnError(
                        f"no {describe_request(self.request)} within {timeout:g} s "
                        f"(last: {progress_message(w, self.request)})")
                await asyncio.sleep(interval)
                try:
                    self._set(await client.get(ns, name), 10)
                except GpuQueueSpawnError as e:
                    if e.status is not None and e.status < 500:
                        raise
                    log.warning("gpuqueue: waiting for %s/%s: %s (retrying)", ns, name, e)
                    self.progress = {"progress": 10, "message": f"GPU queue not reachable, retrying ({e})"}
                    self.changed.set()
                    await asyncio.sleep(min(10.0, 5 * interval))
        except BaseException:
            # Failed or cancelled while waiting: the queue must not keep (or later admit) it.
            try:
                await client.release(ns, name)
            except Exception as e:  # pragma: no cover - logged; the spawn already failed
                log.warning("gpuqueue: could not release %s/%s: %s", ns, name, e)
            self._drop_token()
            self.done = True
            self.changed.set()
            raise

    async def refresh(self) -> Optional[dict]:
        """The lease's current view from the queue (None if it has none or is unknown)."""
        if self.key is None:
            return None
        try:
            self.workload = await self._client().get(*self.key)
        except GpuQueueSpawnError as e:
            if e.status == 404:
                return None
            raise
        return self.workload

    def forget(self) -> None:
        """The queue ended the lease itself (or let its server go on without it): nothing is left
        to release; mark it done and delete its token."""
        self.done = True
        self._drop_token()

    async def release(self) -> None:
        """Release the lease (idempotent; a lease the queue no longer has is fine)."""
        if self.key is None or self.done:
            self.done = True
            return
        await self._client().release(*self.key)
        self.spawner.log.info("gpuqueue: released %s/%s of %s", *self.key, self.spawner._log_name)
        self.done = True
        self._drop_token()
        self.changed.set()


async def watch_lease(lease: HubLease, interval: float, stopping: Callable[[], bool], log: Any,
                      name: str) -> Optional[str]:
    """Look at the lease of a running server every ``interval`` seconds until it ends; returns why
    the server must stop now: the lease's end has come (the ``evictionDeadline`` of a preemption
    warning, or its maximum lease time: :func:`lease_end`, slept to exactly), or the queue ended
    it (its message or state; "unknown to the queue"). Returns None when the server is not to be
    stopped here: the lease was released (``lease.done``), the server is being stopped
    (``stopping()``), or the lease ended as an idle release that keeps the server
    (:func:`goes_on_without_lease`; the lease is then forgotten, :func:`keep_server_without_lease`).
    An unreachable queue is logged and looked at again. ``name``: the server, for the log."""
    while not lease.done and not stopping():
        try:
            w = await lease.refresh()
        except GpuQueueSpawnError as e:
            log.warning("gpuqueue: cannot check the lease of %s: %s", name, e)
            await asyncio.sleep(interval)
            continue
        if lease.done or stopping():
            return None
        if w is None or w.get("state") != "Running":
            if goes_on_without_lease(w):
                keep_server_without_lease(lease, w, log, name)
                return None
            return (w or {}).get("message") or (w or {}).get("state") or "unknown to the queue"
        end = lease_end(w)
        left = end - time.time() if end is not None else math.inf
        if left <= 0:
            return lease_end_reason(w)
        await asyncio.sleep(min(interval, left))
    return None


def keep_server_without_lease(lease: HubLease, w: dict, log: Any, name: str) -> None:
    """The lease ended as an idle release that keeps the server: forget it, keep the server."""
    log.info("gpuqueue: the GPU lease %s/%s of %s was released as idle (%s): the server goes on "
             "without its GPUs", w.get("namespace"), w.get("name"), name, w.get("message") or "")
    lease.forget()
    lease.changed.set()


def goes_on_without_lease(workload: Optional[dict]) -> bool:
    """Whether a lease that is no longer Running ended so that its server goes on without its GPUs
    (an idle release under ``onIdle: "release"``, service/idle.py) instead of stopping."""
    return bool(workload) and workload.get("reason") == "IdleReclaimed" and workload.get("idleAction") == "release"


def lease_end(workload: dict) -> Optional[float]:
    """When a running lease ends, in seconds since the epoch: the ``evictionDeadline`` of a
    preemption warning or ``startedAt`` + ``maxRuntimeSeconds``, whichever comes first (the
    queue releases the lease then: service.py, backends/lease.py); None when neither is set."""
    ends = []
    if workload.get("evictionDeadline"):
        ends.append(float(workload["evictionDeadline"]))
    if workload.get("startedAt") and workload.get("maxRuntimeSeconds"):
        ends.append(float(workload["startedAt"]) + float(workload["maxRuntimeSeconds"]))
    return min(ends) if ends else None


def lease_end_reason(workload: dict) -> str:
    """Why a running lease ends at :func:`lease_end`, in words: "its preemption grace period is
    over" when its ``evictionDeadline`` comes first, "it reached its maximum time" when
    ``startedAt`` + ``maxRuntimeSeconds`` does (the queue caps a preemption's deadline at the
    lease's maximum time: service/admission.py)."""
    deadline = workload.get("evictionDeadline")
    if workload.get("startedAt") and workload.get("maxRuntimeSeconds"):
        maximum = float(workload["startedAt"]) + float(workload["maxRuntimeSeconds"])
        if not deadline or maximum <= float(deadline) + 1e-6:
            return "it reached its maximum time"
    return "its preemption grace period is over" if deadline else "it reached its maximum time"


def lease_environment(workload: dict) -> dict[str, str]:
    """Environment of a local notebook server on a lease: the assigned devices (``visibleDevices``:
    GPU / MIG UUIDs where the queue discovered the GPUs through NVML, else indices, counted in PCI
    bus order as NVML does: ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; service/devices.py) and the lease."""
    devices = workload.get("visibleDevices") or ""
    return {
        "CUDA_VISIBLE_DEVICES": devices,
        "NVIDIA_VISIBLE_DEVICES": devices or "void",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPUQUEUE_LEASE": f"{workload['namespace']}/{workload['name']}",
    }
