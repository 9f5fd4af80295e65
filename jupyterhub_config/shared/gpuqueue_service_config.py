"""The ``gpuqueue`` hub-managed service of a machine shared by real people (docs/shared-machine.md).

JupyterHub starts it as its own account, root: the queue runs every job as its owner's OS account
(``c.GpuQueueApp.run_jobs_as_owner`` at its default, which a root service never turns off), in the
owner's home unless the job names a folder. Its state (ledger, logs, exit records) is
``$GPUQUEUE_HUB_STATE/gpuqueue``, mode 0700, which no job can read or write.
"""

import os

import yaml

from jupyter_gpuqueue.recipes import SERVICE_EXTENSIONS

c = get_config()  # noqa: F821
here = os.path.dirname(os.path.abspath(__file__))
state = os.environ.get("GPUQUEUE_HUB_STATE", "/var/lib/jupyterhub")

# The queue API only: no JupyterLab UI, terminals or language servers in the service.
c.ServerApp.jpserver_extensions = dict(SERVICE_EXTENSIONS)
c.ServerApp.default_url = "/gpuqueue/api/info"
c.ServerApp.allow_root = True  # the queue service itself (it starts each job as its owner, never as root)

c.GpuQueueApp.mode = "hub-service"
c.GpuQueueApp.state_dir = os.path.join(state, "gpuqueue")
c.GpuQueueApp.config_files = [os.environ.get("GPUQUEUE_CONFIG") or os.path.join(here, "cluster.yaml")]
c.GpuQueueApp.os_account_template = "{username}"  # hub users are the machine's accounts (PAM)

with open(os.environ.get("GPUQUEUE_TEAMS") or os.path.join(here, "teams.yaml")) as f:
    teams = (yaml.safe_load(f) or {}).get("teams") or {}
c.GpuQueueApp.group_local_queues = {name: list(t.get("localQueues") or []) for name, t in teams.items()}
