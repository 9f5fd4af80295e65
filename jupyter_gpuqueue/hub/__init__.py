"""JupyterHub integration: notebook servers admitted through the GPU queue.

- :mod:`.spawner`: :class:`GpuQueueSpawnerMixin` and the plain ``pre_spawn_hook`` /
  ``post_stop_hook`` helpers (any Spawner): a server that needs a GPU is queued as a
  ``NotebookLease`` Workload, waits with its queue position on the spawn page, starts on the
  assigned devices, and releases them when it stops.
- :mod:`.lease` (:class:`HubLease`, the REST client, the user's lease token),
  :mod:`.profiles` (profile → request, spawn-page messages), :mod:`.config` (the ``gpuqueue_*``
  settings).
- :mod:`.kubespawner`: ``modify_pod_hook`` for KubeSpawner (priority class, Kueue queue label,
  ResourceFlavor node selector and tolerations, GPU / MIG limits).

Imported on the hub side only (it needs ``jupyterhub``, ``tornado``); nothing here is imported
by the queue service.
"""

from .config import GpuQueueSpawnError, GpuQueueSpawnerConfig, GpuQueueSpawnRefused
from .lease import HubLease
from .profiles import describe_request, estimate_text, lease_request_for, profiles_form, progress_message
from .spawner import GpuQueueSpawnerMixin, gpuqueue_post_stop_hook, gpuqueue_pre_spawn_hook

__all__ = [
    "GpuQueueSpawnError",
    "GpuQueueSpawnRefused",
    "GpuQueueSpawnerConfig",
    "GpuQueueSpawnerMixin",
    "HubLease",
    "describe_request",
    "estimate_text",
    "gpuqueue_post_stop_hook",
    "gpuqueue_pre_spawn_hook",
    "lease_request_for",
    "profiles_form",
    "progress_message",
]
