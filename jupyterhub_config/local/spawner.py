"""Notebook servers admitted through the GPU queue (loaded by jupyterhub_config.py when present).

Users pick a profile on the spawn page. "CPU only" starts at once; a GPU profile is submitted to
the ``gpuqueue`` service as a NotebookLease Workload of the user's team at priority class
``development``, and the spawn-pending page shows "position N in team-a's queue, waiting for
1 × A100" until it is admitted. The server then starts with CUDA_VISIBLE_DEVICES set to the
assigned GPU or MIG device, and the lease is released when the server stops or is culled.

The wait happens before ``Spawner.start()`` (in the pre-spawn step), so ``start_timeout`` is not
spent in the queue and keeps its default; ``gpuqueue_admission_timeout`` bounds the wait (0: until
admitted or the user cancels).

The hub creates, per lease, an API token of the user limited to
``access:services!service=gpuqueue`` and ``custom:gpuqueue:submit`` (the ``gpuqueue-users`` role
grants both) and deletes it when the lease ends: the queue bills the user's own team.
"""

import os

from jupyter_gpuqueue.hub import GpuQueueSpawnerMixin, profiles_form
from jupyter_gpuqueue.hub.demo_spawner import DemoAccountSpawner

c = get_config()  # noqa: F821


class QueuedLocalSpawner(GpuQueueSpawnerMixin, DemoAccountSpawner):
    """The demo's spawner (never root: hub/demo_spawner.py) whose GPU servers wait in the shared GPU queue."""


# The request of each profile is its "gpuqueue" entry (the queue picks the flavor unless one is
# named; MIG profiles name the slice).
profiles = [
    {"slug": "cpu", "display_name": "CPU only", "default": True, "gpuqueue": {},
     "description": "No GPU: starts at once."},
    {"slug": "mig-1g", "display_name": "1 × MIG 1g.10gb", "gpuqueue": {"migProfile": "1g.10gb"},
     "description": "One seventh of an A100: interactive work, small models."},
    {"slug": "a100", "display_name": "1 × A100", "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"},
     "description": "A whole A100-80GB."},
    {"slug": "any-gpu", "display_name": "1 × GPU (any type)", "gpuqueue": {"gpus": 1},
     "description": "Whichever GPU type your team's quota has free first."},
]

c.JupyterHub.spawner_class = QueuedLocalSpawner
c.QueuedLocalSpawner.gpuqueue_profiles = profiles
c.QueuedLocalSpawner.options_form = profiles_form(profiles)
# Talk to the service directly (jupyterhub_config.py puts it on this port).
c.QueuedLocalSpawner.gpuqueue_url = (
    f"http://127.0.0.1:{int(os.environ.get('GPUQUEUE_SERVICE_PORT', '10101'))}/services/gpuqueue/"
)
c.QueuedLocalSpawner.gpuqueue_max_runtime_seconds = 8 * 3600  # a notebook lease lasts a working day
c.QueuedLocalSpawner.gpuqueue_admission_timeout = 0  # wait until admitted or cancelled
# A running server's lease is looked at every 10 s; a preempted lease ends after its grace period
# and the server is stopped at that moment (its GPU goes to the preempting job then).
c.QueuedLocalSpawner.gpuqueue_lease_watch_interval = 10
# How often the hub checks that servers still run (and finds a stopped one gone).
c.QueuedLocalSpawner.poll_interval = 30
