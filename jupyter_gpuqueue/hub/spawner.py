"""JupyterHub side: notebook servers wait their turn for a GPU in the shared queue.

Each spawn of a server whose profile asks for a GPU or MIG slice is submitted to the gpuqueue hub
service as a Workload of kind ``NotebookLease`` (docs/rest-api.md) at priority class
``development`` (the service's ``lease_priority_class``), billed to the user's team. The spawn
waits until the lease is admitted, showing its queue position on the spawn-pending page; then the
server starts on the assigned devices, and the lease is released when the server stops, is culled,
or dies. A lease preempted by higher-priority work is warned first (``evictionDeadline``, shown in
JupyterLab), then released; the spawner stops the server at that moment (it watches the lease
of a running server, ``gpuqueue_lease_watch_interval``), and the hub's next ``poll`` finds it
stopped.

Two ways to use it (``jupyterhub_config/local/spawner.py``, ``jupyterhub_config/kubernetes/``):

- ``GpuQueueSpawnerMixin``: ``class QueuedSpawner(GpuQueueSpawnerMixin, LocalProcessSpawner)``.
  Waits before ``start()`` (in ``run_pre_spawn_hook``), so ``Spawner.start_timeout`` (60 s by
  default) is not spent in the queue and need not be raised; ``progress()`` yields
  ``{"progress": 10, "message": "position 3 in team-a's queue, waiting for 1 × A100"}``.
  ``gpuqueue_admission_timeout`` bounds the wait (0: until admitted or cancelled). JupyterHub
  cannot stop a pending spawn: deleting the pending lease in the queue fails the spawn instead.
- ``gpuqueue_pre_spawn_hook`` / ``gpuqueue_post_stop_hook`` for a Spawner you cannot subclass
  (same queueing and lease watch, no queue position in the progress stream).

**Identity.** The hub does not impersonate anyone: for every lease it creates an API token *of the
user* (``User.new_api_token``) with only ``gpuqueue_token_scopes``
(``access:services!service=gpuqueue`` and ``custom:gpuqueue:submit`` by default; JupyterHub refuses
scopes the user does not hold), uses it to submit, watch and release the lease, and deletes it when
the lease is released (it expires after 7 days in any case). No "on behalf of" privilege exists.
The queue therefore bills the user's own team, with the user's own permissions. ``gpuqueue_api_token``
replaces this with one fixed token (a queue that is not a hub service; tests).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from .config import GpuQueueSpawnError, GpuQueueSpawnerConfig, GpuQueueSpawnRefused, queue_url, setting
from .lease import (HubLease, QueueClient, _delete_user_token, _new_user_token, goes_on_without_lease,
                    keep_server_without_lease, lease_environment, watch_lease)
from .profiles import lease_request_for, profile_facts, profile_needs_gpu, profiles_form

NO_TEAM_NOTE = (
    "You are in no team of the GPU queue, so only servers without a GPU are offered. "
    "To use a GPU, ask a hub admin to add you to a group that is a team of the queue."
)
NO_SCOPES_NOTE = (
    "You may not use the GPU queue, so only servers without a GPU are offered. "
    "To use a GPU, ask a hub admin to grant you the GPU queue's role."
)


def _request_for(spawner: Any) -> Optional[dict]:
    """:func:`lease_request_for`, a malformed or unknown profile choice refused with status 400."""
    try:
        return lease_request_for(spawner)
    except ValueError as e:
        raise GpuQueueSpawnRefused(f"Cannot start this server: {e}", 400) from None


# --------------------------------------------------------------------------------------------------
# the plain hooks (any Spawner)


async def gpuqueue_pre_spawn_hook(spawner: Any) -> None:
    """``c.Spawner.pre_spawn_hook``: queue the server for its GPU and wait until admitted, then put
    the devices in ``spawner.environment``. The lease is kept as ``spawner.gpuqueue_lease``, and
    watched while the server runs (``gpuqueue_lease_watch_interval``, as the mixin does): when it
    ends — its preemption grace period or maximum lease time over, released by the queue (an
    idle reclaim under ``onIdle: "stop"``, an admin) — the hub stops the server (``User.stop``,
    which runs ``post_stop_hook``), so that no two users share its GPU. No GPU requested: nothing
    happens. Raises GpuQueueSpawnError (the spawn fails with its message)."""
    request = _request_for(spawner)
    if not request:
        return
    lease = HubLease(spawner, request)
    spawner.gpuqueue_lease = lease
    w = await lease.acquire()
    spawner.environment = {**(spawner.environment or {}), **lease_environment(w)}
    interval = float(setting(spawner, "gpuqueue_lease_watch_interval") or 0)
    if interval > 0:
        asyncio.ensure_future(_watch_plain(spawner, lease, interval))


async def _watch_plain(spawner: Any, lease: HubLease, interval: float) -> None:
    """The plain hooks' lease watch: once the server is up, stop it through the hub when its lease
    ends (:func:`~.lease.watch_lease`)."""
    try:
        while not lease.done and spawner.pending == "spawn":
            await asyncio.sleep(min(interval, 0.5))
        if lease.done or not spawner.ready:
            return  # the spawn failed (its stop released the lease), or the server stops already
        why = await watch_lease(lease, interval, lambda: spawner.pending == "stop", spawner.log, spawner._log_name)
        if why is None or spawner.pending == "stop":
            return
        spawner.log.info("gpuqueue: the GPU lease of %s ends (%s): stopping the server", spawner._log_name, why)
        lease.forget()  # the queue releases it; post_stop_hook has nothing left to release
        await spawner.user.stop(spawner.name)
    except Exception:  # logged: the lease's maximum time still ends it in the queue
        spawner.log.exception("gpuqueue: watching the lease of %s failed", spawner._log_name)


async def gpuqueue_post_stop_hook(spawner: Any) -> None:
    """``c.Spawner.post_stop_hook``: release the server's lease (if any)."""
    lease = getattr(spawner, "gpuqueue_lease", None)
    if lease is not None:
        await lease.release()
        spawner.gpuqueue_lease = None


# --------------------------------------------------------------------------------------------------
# the mixin


class GpuQueueSpawnerMixin(GpuQueueSpawnerConfig):
    """Queue a Spawner's servers for their GPU: ``class S(GpuQueueSpawnerMixin, LocalProcessSpawner)``.

    - ``run_pre_spawn_hook``: waits for admission first (outside ``start_timeout``), then runs the
      configured ``pre_spawn_hook``.
    - ``progress()``: the queue position while waiting, then the spawner's own events.
    - ``get_env()``: ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` of the assigned devices
      (a KubeSpawner pod does not keep them: ``gpuqueue_modify_pod_hook`` leaves the devices to the
      cluster's device plugin).
    - ``stop()`` / ``poll()``: release the lease when the server stops, is culled or dies.
    - While the server runs, its lease is watched (``gpuqueue_lease_watch_interval``): the server
      is stopped at the lease's end (the ``evictionDeadline`` of a preemption warning, its maximum
      lease time), when the queue gives the devices to other work, or once the queue says the
      lease ended; the hub's next ``poll`` then finds it stopped. ``poll`` does the same check.
    - A lease released as idle under a team policy ``onIdle: "release"`` (service/idle.py; only
      where ``gpuqueue_server_goes_on_without_gpus``) does not stop the server: it goes on without
      its GPUs (its server extension hides them from new kernels: server/lease_release.py).
    - Named servers (``c.JupyterHub.allow_named_servers``): each server's spawner has its own
      lease naming its server (``notebookServer.name``); stopping one releases only its lease.
    - ``get_state``/``load_state``: the lease survives a hub restart. A release the queue could
      not take (the queue down: at hub shutdown JupyterHub stops its services before the users'
      servers; at hub start it checks the servers before starting them) is retried in the
      background (``gpuqueue_release_retry_seconds``); the queue service itself ends, at its
      start, the leases whose own server is gone (hub/reconcile.py).
    """

    gpuqueue_lease: Optional[HubLease] = None

    @property
    def gpuqueue_workload(self) -> Optional[dict]:
        """The admitted lease's Workload view (None without a lease)."""
        lease = self.gpuqueue_lease
        return lease.workload if lease is not None and not lease.done else None

    _gpuqueue_decided: Optional[asyncio.Event] = None  # set once this spawn's lease (or none) exists

    def _decided_event(self) -> asyncio.Event:
        if self._gpuqueue_decided is None:
            self._gpuqueue_decided = asyncio.Event()
        return self._gpuqueue_decided

    async def run_pre_spawn_hook(self):
        previous, self.gpuqueue_lease = self.gpuqueue_lease, None
        decided = self._decided_event()
        try:
            await self._gpuqueue_release(previous, "new spawn")  # none normally: stop() released it
            request = _request_for(self)
            if request:
                self.gpuqueue_lease = HubLease(self, request)
        finally:
            decided.set()
        if self.gpuqueue_lease is not None:
            await self.gpuqueue_lease.acquire()
        if self.pre_spawn_hook:
            r = self.pre_spawn_hook(self)
            if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                await r

    async def gpuqueue_access(self) -> tuple[bool, str]:
        """Whether this spawner's user may queue for a GPU: ``(True, "")``, or ``(False, note)``
        with the reason in words for the spawn page (in no team of the queue: its ``info`` lists no
        LocalQueue; or without the queue's scopes). Asks the queue as the user, with a token of
        the user's made for this and deleted at once. A fixed ``gpuqueue_api_token`` (whose owner
        is not this user) or an unreachable queue: ``(True, "")`` (the spawn then says why)."""
        allowed, note, _, _ = await self._gpuqueue_facts()
        return allowed, note

    async def _gpuqueue_facts(self) -> tuple[bool, str, Optional[dict], Optional[dict]]:
        """:meth:`gpuqueue_access`, with the queue's ``info`` and ``inventory`` as the user sees
        them (None where not asked or not answered)."""
        if setting(self, "gpuqueue_api_token"):
            return True, "", None, None
        try:
            token = _new_user_token(self, f"gpuqueue options form of {self._log_name}", expires_in=300)
        except GpuQueueSpawnRefused:
            return False, NO_SCOPES_NOTE, None, None
        client = QueueClient(queue_url(self), token, request_timeout=10)
        try:
            info = await client.info()
            if not info.get("localQueues"):
                return False, NO_TEAM_NOTE, info, None
            try:
                inventory = await client.inventory()
            except GpuQueueSpawnError as e:
                self.log.warning("gpuqueue: cannot read the queue's free devices for %s: %s", self._log_name, e)
                inventory = None
            return True, "", info, inventory
        except GpuQueueSpawnError as e:
            self.log.warning("gpuqueue: cannot ask the queue whether %s is in a team: %s", self._log_name, e)
            return True, "", None, None
        finally:
            _delete_user_token(self, token)

    async def get_options_form(self):
        """The spawn form. When it is the form :func:`~.profiles.profiles_form` makes of
        ``gpuqueue_profiles`` (as ``jupyterhub_config/local/spawner.py`` configures it), a user
        who may not queue for a GPU (:meth:`gpuqueue_access`) is offered only the profiles without
        a GPU, under a note saying why and what to do. Any other form is shown as configured (a
        GPU spawn of such a user then fails with the queue's reason and a 4xx status)."""
        form = await super().get_options_form()
        profiles = list(self.gpuqueue_profiles or [])
        if not profiles or not isinstance(form, str) or form != profiles_form(profiles):
            return form
        try:
            gpu = [profile_needs_gpu(p) for p in profiles]
        except ValueError:
            return form  # a malformed profile: the spawn names it
        if not any(gpu):
            return form
        allowed, note, info, inventory = await self._gpuqueue_facts()
        if allowed:
            # Under each GPU profile: what is free now and how long its lease lasts (issue 34 item
            # 10), with the cap on a run of the team its lease goes to (its default LocalQueue's).
            default = (info or {}).get("defaultLocalQueue")
            cap = next((q.get("maxRuntimeSeconds") for q in (info or {}).get("localQueues") or []
                        if f"{q['namespace']}/{q['name']}" == default), None)
            facts = profile_facts(profiles, float(setting(self, "gpuqueue_max_runtime_seconds") or 0), inventory, cap)
            return profiles_form(profiles, facts=facts)
        return profiles_form([p for p, g in zip(profiles, gpu) if not g], note=note)

    async def progress(self):
        # The progress stream may open before run_pre_spawn_hook ran (JupyterHub marks the spawn
        # pending first): wait until this spawn's lease exists, or is known not to be needed.
        try:
            await asyncio.wait_for(self._decided_event().wait(), timeout=60)
        except asyncio.TimeoutError:
            pass
        lease = self.gpuqueue_lease
        if lease is not None:
            last = None
            while not lease.done and (lease.workload is None or lease.workload.get("state") != "Running"):
                if lease.progress != last:
                    last = dict(lease.progress)
                    yield last
                lease.changed.clear()
                try:
                    await asyncio.wait_for(lease.changed.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    pass
            if lease.done:
                return
            yield dict(lease.progress)
        async for event in super().progress():
            yield event

    def get_env(self):
        env = super().get_env()
        w = self.gpuqueue_workload
        if w is not None and w.get("state") == "Running":
            env.update(lease_environment(w))
        return env

    _gpuqueue_stopping = False
    _gpuqueue_watch_task: Optional[asyncio.Task] = None

    async def start(self):
        lease = self.gpuqueue_lease
        self._gpuqueue_stopping = False
        try:
            url = await super().start()
        except BaseException:
            await self._gpuqueue_release(lease, "start failed")
            raise
        if lease is not None:
            self._gpuqueue_start_watch(lease)
        return url

    async def stop(self, now: bool = False):
        # Spawners call poll() and clear_state() inside stop(): hold on to the lease here. A stop
        # that fails keeps the lease (the server may still use the devices); JupyterHub retries,
        # and a poll that finds the server gone releases it.
        lease = self.gpuqueue_lease
        self._gpuqueue_stopping = True
        watch, self._gpuqueue_watch_task = self._gpuqueue_watch_task, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
        await super().stop(now=now)
        await self._gpuqueue_release(lease, "server stopped")

    def _gpuqueue_start_watch(self, lease: HubLease) -> None:
        """Watch ``lease`` while the server runs (once; not with a watch interval of 0)."""
        if self._gpuqueue_watch_task is None and self.gpuqueue_lease_watch_interval > 0:
            self._gpuqueue_watch_task = asyncio.ensure_future(self._gpuqueue_watch(lease))

    async def _gpuqueue_watch(self, lease: HubLease) -> None:
        """While the server runs: stop it when its lease ends (see the class docstring)."""
        try:
            await self._gpuqueue_watch_lease(lease)
        except Exception:  # logged: the hub's poll still checks the lease
            self.log.exception("gpuqueue: watching the lease of %s failed", self._log_name)

    async def _gpuqueue_watch_lease(self, lease: HubLease) -> None:
        why = await watch_lease(lease, self.gpuqueue_lease_watch_interval, lambda: self._gpuqueue_stopping,
                                self.log, self._log_name)
        if why is None or self._gpuqueue_stopping:
            return
        self.log.info("gpuqueue: the GPU lease of %s ends (%s): stopping the server", self._log_name, why)
        lease.forget()  # the queue releases it; the hub's next poll finds the server stopped
        await super().stop(now=True)

    async def poll(self):
        lease = self.gpuqueue_lease
        status = await super().poll()
        if lease is None or lease.done or lease.key is None:
            return status
        if status is not None:
            await self._gpuqueue_release(lease, "server gone")
            return status
        if self._gpuqueue_stopping:
            return status
        try:
            w = await lease.refresh()
        except GpuQueueSpawnError as e:
            self.log.warning("gpuqueue: cannot check the lease of %s: %s", self._log_name, e)
            return status
        if goes_on_without_lease(w):
            keep_server_without_lease(lease, w, self.log, self._log_name)
            return status
        if w is None or w.get("state") != "Running":
            why = (w or {}).get("message") or (w or {}).get("state") or "unknown to the queue"
            self.log.info("gpuqueue: the GPU lease of %s ended (%s): stopping the server", self._log_name, why)
            lease.forget()
            await super().stop(now=True)
            return 0
        # A server restored after a hub restart (load_state) was not started here: its lease is
        # watched from its first poll on.
        self._gpuqueue_start_watch(lease)
        return status

    async def _gpuqueue_release(self, lease: Optional[HubLease], why: str) -> None:
        if lease is None or lease.done:
            return
        try:
            await lease.release()
        except GpuQueueSpawnError as e:
            self.log.error("gpuqueue: could not release the lease of %s (%s): %s", self._log_name, why, e)
            if e.status is None or e.status >= 500:  # the queue is down (a hub starting): retried
                self._gpuqueue_release_soon(lease, why)

    def _gpuqueue_release_soon(self, lease: HubLease, why: str) -> None:
        """Release ``lease`` in the background, retrying while the queue does not answer (for
        ``gpuqueue_release_retry_seconds``): at hub start the queue service starts after the
        spawners are checked. The queue service also ends, when it starts, the leases whose
        own server is gone (hub/reconcile.py); with ``gpuqueue_release_retry_seconds`` 0 only that
        does."""
        if float(self.gpuqueue_release_retry_seconds) <= 0:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if getattr(lease, "_retrying", False):
            return
        lease._retrying = True
        asyncio.ensure_future(self._gpuqueue_release_retrying(lease, why))

    async def _gpuqueue_release_retrying(self, lease: HubLease, why: str) -> None:
        deadline = time.monotonic() + float(self.gpuqueue_release_retry_seconds)
        delay = 1.0
        try:
            while not lease.done:
                await asyncio.sleep(delay)
                try:
                    await lease.release()
                    return
                except GpuQueueSpawnError as e:
                    if e.status is not None and e.status < 500:
                        self.log.error("gpuqueue: could not release the lease of %s (%s): %s", self._log_name, why, e)
                        return
                    if time.monotonic() + delay > deadline:
                        self.log.error("gpuqueue: gave up releasing the lease of %s (%s): %s", self._log_name, why, e)
                        return
                delay = min(10.0, delay * 1.5)
        except Exception:  # pragma: no cover - logged; the queue ends it at its start or its maximum time
            self.log.exception("gpuqueue: releasing the lease of %s failed", self._log_name)
        finally:
            lease._retrying = False

    def get_state(self):
        state = super().get_state()
        lease = self.gpuqueue_lease
        if lease is not None and not lease.done and lease.workload is not None:
            state["gpuqueue_lease"] = {"request": lease.request, "workload": lease.workload}
        return state

    def load_state(self, state):
        super().load_state(state)
        saved = state.get("gpuqueue_lease") if state else None
        if saved:
            lease = HubLease(self, saved.get("request") or {})
            lease.workload = saved.get("workload")
            self.gpuqueue_lease = lease
            orm = getattr(self, "orm_spawner", None)
            if orm is not None and orm.server is None:
                # Hub start: the server stopped while the queue could not be told (JupyterHub's
                # cleanup() stops its services before the users' servers): release it now.
                self._gpuqueue_release_soon(lease, "server stopped while the queue was down")

    def clear_state(self):
        # The lease is not spawner state to forget: stop()/poll() release it; a new spawn
        # replaces it in run_pre_spawn_hook. (JupyterHub clears the state before each spawn.)
        super().clear_state()
        if self._gpuqueue_decided is not None:
            self._gpuqueue_decided.clear()
