"""JupyterHub on Kubernetes (zero-to-jupyterhub + KubeSpawner) with one shared GPU queue.

Loaded by the z2jh chart through ``hub.extraConfig`` (values.yaml next to this file, which also
mounts the queue's cluster configuration at /etc/gpuqueue/); see README.md. It needs the
``jupyter_gpuqueue`` package in the hub image.

- The queue runs once, as the hub-managed service ``gpuqueue`` inside the hub pod, on port 10101
  (exposed by the hub Service, ``hub.service.extraPorts``); its API is
  ``/services/gpuqueue/gpuqueue/api/``. Batch jobs run as Kubernetes Jobs
  (``c.GpuQueueApp.backend = "kubernetes"``).
- Notebook servers: a profile with a GPU or MIG slice is submitted to the queue as a
  NotebookLease Workload of the user's team at priority class ``development``; the spawn waits
  (before ``start()``, so KubeSpawner's 60 s ``start_timeout`` is not spent queueing) with
  "position N in team-a's queue, waiting for 1 × A100" on the spawn page. Once admitted,
  ``gpuqueue_modify_pod_hook`` gives the pod ``priorityClassName``, the
  ``kueue.x-k8s.io/queue-name`` label, the node selector and tolerations of the assigned
  ResourceFlavor and exactly the admitted GPU / MIG resource. Stopping or culling the server
  releases the lease.
- Teams are hub groups (``GPUQUEUE_TEAMS`` below); the scopes ``custom:gpuqueue:submit`` and
  ``custom:gpuqueue:admin`` come from the roles ``gpuqueue-users`` and ``gpuqueue-admins``.
"""

import json
import os
import sys

from kubespawner import KubeSpawner

from jupyter_gpuqueue.hub import GpuQueueSpawnerMixin
from jupyter_gpuqueue.hub.kubespawner import gpuqueue_modify_pod_hook
from jupyter_gpuqueue.recipes import CUSTOM_SCOPES, SERVER_TOKEN_SCOPES

c = get_config()  # noqa: F821

SERVICE_PORT = int(os.environ.get("GPUQUEUE_SERVICE_PORT", "10101"))
# The hub Service's DNS name: the proxy and users' pods reach the queue there.
SERVICE_HOST = os.environ.get("GPUQUEUE_SERVICE_HOST", "hub")
CLUSTER_CONFIG = os.environ.get("GPUQUEUE_CONFIG", "/etc/gpuqueue/cluster.yaml")
# group -> LocalQueues ("namespace/name"): who submits where.
TEAMS = json.loads(os.environ.get(
    "GPUQUEUE_TEAMS", '{"team-a": ["team-a/team-a-queue"], "team-b": ["team-b/team-b-queue"]}'))
ADMIN_GROUP = os.environ.get("GPUQUEUE_ADMIN_GROUP", "gpuqueue-admins")
service_url = f"http://{SERVICE_HOST}:{SERVICE_PORT}/services/gpuqueue/"

# -- scopes and roles --------------------------------------------------------------------------------
c.JupyterHub.custom_scopes = dict(CUSTOM_SCOPES)  # jupyter_gpuqueue/recipes.py
c.JupyterHub.load_roles.extend([
    {"name": "gpuqueue-users", "description": "Use the shared GPU queue", "groups": sorted(TEAMS),
     "scopes": ["access:services!service=gpuqueue", "custom:gpuqueue:submit"]},
    {"name": "gpuqueue-admins", "description": "Administer the shared GPU queue", "groups": [ADMIN_GROUP],
     "scopes": ["access:services!service=gpuqueue", "custom:gpuqueue:admin"]},
])

# -- the queue: a hub-managed service in the hub pod ----------------------------------------------
here = os.path.dirname(os.path.abspath(__file__))
# .append/.extend: added to whatever the chart configured (hub.services, hub.loadRoles), also
# when this file is loaded with load_subconfig
c.JupyterHub.services.append(
    {
        "name": "gpuqueue",
        # where the proxy and users' pods reach it: the hub Service (hub.service.extraPorts)
        "url": f"http://{SERVICE_HOST}:{SERVICE_PORT}",
        "command": [
            os.path.join(os.path.dirname(sys.executable), "jupyterhub-singleuser"),
            "--ip=0.0.0.0",  # the url's host name is the Service's, not an address of this pod
            f"--port={SERVICE_PORT}",
            f"--config={os.path.join(here, 'gpuqueue_service_config.py')}",
        ],
        "environment": {
            "GPUQUEUE_CONFIG": CLUSTER_CONFIG,
            "GPUQUEUE_TEAMS": json.dumps(TEAMS),
            "GPUQUEUE_STATE": os.environ.get("GPUQUEUE_STATE", "/srv/jupyterhub/gpuqueue"),
            **{v: os.environ[v] for v in ("GPUQUEUE_DB_URL", "GPUQUEUE_INVENTORY") if os.environ.get(v)},
        },
        "oauth_no_confirm": True,
        # browser (OAuth) tokens for the service carry these scopes where the user holds them
        "oauth_client_allowed_scopes": ["custom:gpuqueue:submit", "custom:gpuqueue:admin"],
    }
)

# -- users' servers: KubeSpawner, GPU profiles through the queue -------------------------------


class QueuedKubeSpawner(GpuQueueSpawnerMixin, KubeSpawner):
    """KubeSpawner whose GPU servers wait in the shared GPU queue."""


c.JupyterHub.spawner_class = QueuedKubeSpawner
c.KubeSpawner.modify_pod_hook = gpuqueue_modify_pod_hook
c.KubeSpawner.gpuqueue_url = service_url
c.KubeSpawner.gpuqueue_config_files = [CLUSTER_CONFIG]  # the ResourceFlavors' nodeLabels/tolerations
c.KubeSpawner.gpuqueue_max_runtime_seconds = 8 * 3600
c.KubeSpawner.gpuqueue_admission_timeout = 0  # wait until admitted, or until the user cancels
# start_timeout covers only the pod start now (image pull, scheduling on the admitted flavor):
# the queue wait happens before start(). Raise it for large images, not for queueing.
c.KubeSpawner.start_timeout = 300
# users' servers forward their panel / %%gpujob / CLI to the service as themselves
c.KubeSpawner.environment = {"GPUQUEUE_SERVICE_URL": service_url}
c.KubeSpawner.server_token_scopes = list(SERVER_TOKEN_SCOPES)
# Each profile's request: its "gpuqueue" key (or, without one, the nvidia.com/gpu or
# nvidia.com/mig-* entry of kubespawner_override.extra_resource_limits). The hook replaces the
# GPU / MIG limits with what the queue admitted.
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "No GPU: starts at once.",
        "default": True,
    },
    {
        "display_name": "1 × MIG 1g.10gb",
        "slug": "mig-1g",
        "description": "One seventh of an A100: interactive work, small models.",
        "gpuqueue": {"migProfile": "1g.10gb"},
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}},
    },
    {
        "display_name": "1 × A100",
        "slug": "a100",
        "description": "A whole A100-80GB.",
        "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"},
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "mem_limit": "64G"},
    },
    {
        "display_name": "1 × GPU (any type)",
        "slug": "any-gpu",
        "description": "Whichever GPU type your team's quota has free first.",
        "gpuqueue": {"gpus": 1},
    },
]
