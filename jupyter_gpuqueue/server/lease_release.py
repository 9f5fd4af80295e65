"""A notebook server that goes on without its GPUs once its lease ends (hub-client mode, issue 16).

A JupyterHub single-user server started on a GPU lease (hub/spawner.py) has the lease's devices
in its environment (``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``) and the lease's
``namespace/name`` in ``GPUQUEUE_LEASE`` (hub/lease.py ``lease_environment``). Every kernel and
terminal it starts inherits them: jupyter_server starts kernels with a copy of ``os.environ``
taken at that moment (``SessionManager.get_kernel_env``; jupyter_client's local provisioner for
``POST api/kernels``).

When a team's idle policy says ``onIdle: "release"`` (service/idle.py), the queue ends such a
lease while the server goes on (the spawner keeps it running: a local process can give its GPUs
back, a Kubernetes pod cannot). :class:`ServerLeaseWatch`, started by the server extension in
hub-client mode when ``GPUQUEUE_LEASE`` is set, looks at the lease every ``interval`` seconds as
the server's owner (the server's ``$JUPYTERHUB_API_TOKEN``, through the extension's Forwarder)
and, once the queue says it ended (Succeeded, Failed or Cancelled; an unknown or unreachable
lease changes nothing):

1. hides the devices from everything the server starts from now on: ``CUDA_VISIBLE_DEVICES=""``
   (CUDA sees no device), ``NVIDIA_VISIBLE_DEVICES=void`` (the NVIDIA container runtime mounts
   none), ``GPUQUEUE_LEASE`` removed and ``GPUQUEUE_LEASE_RELEASED`` set to the lease, in the
   server's own ``os.environ``;
2. shuts down every kernel it runs (they were started with the devices: a restart would reuse
   their saved environment, so they are shut down, not restarted; the notebooks stay open and
   get a new kernel, without GPU, when the user picks one). At once where the lease ended as an
   idle release that keeps the server (``reason`` IdleReclaimed, ``idleAction`` release); after
   any other end the spawner stops the server, kernels included, and a shutdown of the same
   kernels from here while jupyter_server shuts them down for its stop made that stop fail
   (jupyter_client's ``shutdown_all`` raised InvalidStateError on a kernel whose shutdown was
   pending, and the server hung): so they are shut down only if the server still runs
   ``stop_grace`` seconds (30) later;
3. keeps the outcome in :attr:`ServerLeaseWatch.released` (``{"lease", "at", "kernels"}``).

JupyterLab tells the user (labextension/src/leaseWarning.ts): the page config's
``gpuqueueLease`` (this server's lease) lets it find the lease after a reload too.

Not covered: processes a user started from a terminal opened while the GPU was held keep the
environment they were started with (close the terminal); the server's own process keeps its
CUDA context if it made one (it makes none).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, MutableMapping, Optional
from urllib.parse import quote

from .background import BackgroundLoop

ENV_LEASE = "GPUQUEUE_LEASE"
ENV_LEASE_RELEASED = "GPUQUEUE_LEASE_RELEASED"
ENV_WATCH_INTERVAL = "GPUQUEUE_LEASE_WATCH_INTERVAL"
PAGE_CONFIG_KEY = "gpuqueueLease"
NO_DEVICES = {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
ENDED = ("Succeeded", "Failed", "Cancelled")


class ServerLeaseWatch(BackgroundLoop):
    """Watch this server's lease; once it ends, hide the devices and shut down the kernels.

    ``forwarder``: the hub-client Forwarder (service URL and the server's token); ``lease``:
    ``"namespace/name"``; ``kernel_manager``: the server's MappingKernelManager; ``interval``:
    seconds between looks; ``environ``: the environment new kernels copy (``os.environ``)."""

    def __init__(self, forwarder: Any, lease: str, kernel_manager: Any, *, interval: float = 10.0,
                 environ: Optional[MutableMapping[str, str]] = None, log: Optional[logging.Logger] = None,
                 stop_grace: float = 30.0):
        self.stop_grace = max(0.0, float(stop_grace))
        self.forwarder = forwarder
        self.lease = lease
        self.kernel_manager = kernel_manager
        self.interval = max(0.1, float(interval))
        self.environ = os.environ if environ is None else environ
        self.log = log or logging.getLogger("jupyter_gpuqueue")
        self.released: Optional[dict] = None
        self._task: Optional[asyncio.Task] = None

    async def lease_view(self) -> Optional[dict]:
        """The lease's Workload view from the service, None when it cannot be read (logged)."""
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        ns, _, name = self.lease.partition("/")
        try:
            resp = await AsyncHTTPClient().fetch(
                self.forwarder.url(f"workloads/{quote(ns, safe='')}/{quote(name, safe='')}"),
                headers={**self.forwarder.auth_headers(), "Accept": "application/json"},
                request_timeout=self.forwarder.timeout)
        except HTTPClientError as e:
            self.log.warning("jupyter_gpuqueue: cannot read this server's GPU lease %s: %s", self.lease, e)
            return None
        except OSError as e:
            self.log.warning("jupyter_gpuqueue: cannot reach the GPU queue for lease %s: %s", self.lease, e)
            return None
        try:
            view = json.loads(resp.body or b"{}")
        except ValueError:
            return None
        return view if isinstance(view, dict) else None

    async def run(self) -> None:
        while self.released is None:
            view = await self.lease_view()
            if view is not None and view.get("state") in ENDED:
                if not (view.get("reason") == "IdleReclaimed" and view.get("idleAction") == "release"):
                    self._hide_devices()  # the spawner stops this server: its kernels go with it
                    await asyncio.sleep(self.stop_grace)
                await self.lease_ended(view)
                return
            await asyncio.sleep(self.interval)

    async def lease_ended(self, view: dict) -> None:
        """Hide the devices from what starts from now on, then shut down the running kernels."""
        self._hide_devices()
        kernels = list(self.kernel_manager.list_kernel_ids()) if self.kernel_manager is not None else []
        self.log.info("jupyter_gpuqueue: the GPU lease %s ended (%s): new kernels start without GPUs; "
                      "shutting down %d kernel(s) that held them", self.lease,
                      view.get("message") or view.get("reason") or view.get("state"), len(kernels))
        for kid in kernels:
            try:
                await _maybe_await(self.kernel_manager.shutdown_kernel(kid))
            except Exception:  # a kernel that died meanwhile: nothing to shut down
                self.log.warning("jupyter_gpuqueue: could not shut down kernel %s", kid, exc_info=True)
        self.released = {"lease": self.lease, "at": time.time(), "kernels": kernels}

    def _hide_devices(self) -> None:
        self.environ.update(NO_DEVICES)
        self.environ.pop(ENV_LEASE, None)
        self.environ[ENV_LEASE_RELEASED] = self.lease

    failure_message = "jupyter_gpuqueue: watching this server's GPU lease failed"


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def start_lease_watch(serverapp: Any, forwarder: Any, log: Optional[logging.Logger] = None,
                      environ: Optional[MutableMapping[str, str]] = None) -> Optional[ServerLeaseWatch]:
    """In a single-user server on a GPU lease (``$GPUQUEUE_LEASE``): publish the lease in the page
    config (``gpuqueueLease``) and start a :class:`ServerLeaseWatch` (interval
    ``$GPUQUEUE_LEASE_WATCH_INTERVAL`` seconds, 10 by default). None without a lease."""
    environ = os.environ if environ is None else environ
    lease = environ.get(ENV_LEASE, "")
    if "/" not in lease or forwarder is None:
        return None
    try:
        interval = float(environ.get(ENV_WATCH_INTERVAL) or 10.0)
    except ValueError:
        interval = 10.0
    web_app = getattr(serverapp, "web_app", None)
    if web_app is not None:
        web_app.settings.setdefault("page_config_data", {})[PAGE_CONFIG_KEY] = lease
    watch = ServerLeaseWatch(forwarder, lease, getattr(serverapp, "kernel_manager", None), interval=interval,
                             environ=environ, log=log)
    watch.start()
    return watch
