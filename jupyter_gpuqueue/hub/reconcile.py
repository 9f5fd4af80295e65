"""At the queue service's start (hub-service mode): end the notebook leases whose server is gone.

JupyterHub's ``cleanup()`` stops its managed services *before* the users' servers, so a server
stopped at hub shutdown cannot release its lease: the queue is already down. A lease left Running
so would hold its GPUs (and bill its team) until its maximum lease time. When the service starts
again it asks the hub (``GET {api_url}users/{owner}``, the service's own token, scope
``read:servers``; its ``servers`` are keyed by server name, "" the default server) about the
owners of its Running ``NotebookLease`` workloads, and releases, as at their end, exactly the
leases whose own server is gone: a lease names its server (``notebookServer.name``, set by the
hub's spawner), and is released when that server is not among the owner's live ones (running,
starting or stopping), or the hub no longer has the owner. A lease that names no server (submitted
before leases named them) is released only when its owner has no live server at all. A hub that
does not answer, or a token that may not read servers, changes nothing (logged). The spawner does its part where it can
(``GpuQueueSpawnerMixin``): a lease whose server it finds gone (``poll`` at hub start after a
crash, or a restored state without a server) is released, retried until the queue answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import quote

RELEASE_MESSAGE = "its notebook server is no longer running (found when the queue service started)"

#: ``owner -> {names of the owner's live servers}`` (empty: none, or unknown to the hub), or None
#: (cannot tell: the hub did not answer, or does not show servers).
ServersSource = Callable[[str], Awaitable[Optional[set]]]


class HubServers:
    """The names of a hub user's live servers: ``GET {api_url}users/{name}`` with ``token``."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 10.0,
                 log: Optional[logging.Logger] = None):
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.log = log or logging.getLogger("jupyter_gpuqueue")

    async def __call__(self, user: str) -> Optional[set]:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        try:
            resp = await AsyncHTTPClient().fetch(
                f"{self.api_url}users/{quote(user, safe='')}",
                headers={"Authorization": f"token {self.token}", "Accept": "application/json"},
                request_timeout=self.timeout)
        except HTTPClientError as e:
            if e.code == 404:
                return set()  # the hub no longer has this user
            self.log.warning("gpuqueue: cannot read %s's servers from the hub: %s", user, e)
            return None
        except OSError as e:
            self.log.warning("gpuqueue: cannot reach the hub API at %s: %s", self.api_url, e)
            return None
        try:
            model = json.loads(resp.body or b"{}")
        except ValueError:
            return None
        servers = model.get("servers") if isinstance(model, dict) else None
        if not isinstance(servers, dict):
            self.log.warning("gpuqueue: the hub does not show users' servers to the queue service; give its "
                             "role the scope read:servers (leases of stopped servers are kept until their end)")
            return None
        return {name for name, s in servers.items() if isinstance(s, dict) and not s.get("stopped")}


def running_leases(service: Any) -> list[dict]:
    """The service's Running notebook leases (their live records)."""
    return list(service.idle.running_leases())


def release_lease(service: Any, rec: dict, message: str = RELEASE_MESSAGE) -> None:
    """End a running lease now, as at its end (Succeeded, ``lease released: …``); its GPUs go to
    the next workload in the next tick."""
    uid = rec["uid"]
    service.backend.stop(uid, message, 0.0)
    service.log.info("gpuqueue: notebook lease %s/%s of %s released: %s",
                     rec["namespace"], rec["name"], rec["owner"], message)
    service.wake()


async def reconcile_leases(service: Any, servers: ServersSource, *, wait_for_hub: float = 60.0,
                           retry_interval: float = 1.0) -> list[str]:
    """Release the Running notebook leases whose own server is gone (module docstring).
    Waits up to ``wait_for_hub`` seconds for the hub to answer (it may still be starting).
    Returns the ``namespace/name`` of the leases released."""
    leases = running_leases(service)
    owners = sorted({r["owner"] for r in leases})
    if not owners:
        return []
    deadline = time.monotonic() + wait_for_hub
    live: dict[str, Optional[set]] = {}
    while True:
        for owner in owners:
            if live.get(owner) is None:
                live[owner] = await servers(owner)
        if all(v is not None for v in live.values()) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(retry_interval)
    released = []
    for rec in running_leases(service):  # again: some may have ended meanwhile
        servers = live.get(rec["owner"])
        if servers is None:
            continue
        named = rec["spec"].get("notebookServer")
        gone = (named["name"] not in servers) if isinstance(named, dict) else not servers
        if gone:
            release_lease(service, rec)
            released.append(f"{rec['namespace']}/{rec['name']}")
    return released


def start_reconcile(service: Any, api_url: str, token: str) -> "asyncio.Task":
    """:func:`reconcile_leases` against the hub at ``api_url`` in the background (errors logged)."""

    async def run() -> None:
        try:
            done = await reconcile_leases(service, HubServers(api_url, token, log=service.log))
            if done:
                service.log.info("gpuqueue: released %d notebook lease(s) of stopped servers: %s",
                                 len(done), ", ".join(done))
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - logged; the leases end at their maximum time
            service.log.exception("gpuqueue: reconciling notebook leases with the hub failed")

    return asyncio.ensure_future(run())
