"""Config of the ``gpuqueue`` hub-managed service (``jupyterhub-singleuser --config=<this file>``).

The service is a jupyter_server running only what the queue needs; JupyterHub gives it its URL,
prefix (``/services/gpuqueue/``) and API token through the environment.
"""

import os

from jupyter_gpuqueue.recipes import SERVICE_EXTENSIONS

c = get_config()  # noqa: F821
state = os.environ.get("GPUQUEUE_HUB_STATE") or os.path.abspath(os.path.join(".gpuqueue", "hub"))

# The queue API only: no JupyterLab UI, terminals or language servers in the service.
c.ServerApp.jpserver_extensions = dict(SERVICE_EXTENSIONS)  # jupyter_gpuqueue/recipes.py
c.ServerApp.default_url = "/gpuqueue/api/info"
if hasattr(os, "geteuid") and os.geteuid() == 0:
    c.ServerApp.allow_root = True  # the queue service itself (not a user's server) runs as root

c.GpuQueueApp.mode = "hub-service"
c.GpuQueueApp.state_dir = os.path.join(state, "gpuqueue")
# The demo's ledger follows the code's schema (a backup is kept next to it); a real deployment
# runs `jupyter gpuqueue upgrade-db` itself (README, "Upgrades and backups").
c.GpuQueueApp.upgrade_db = True
# Teams from hub groups: group -> LocalQueues ("namespace/name") of the cluster configuration
# (the bundled demo cluster unless c.GpuQueueApp.config_files or $GPUQUEUE_CONFIG names others).
c.GpuQueueApp.group_local_queues = {
    "team-a": ["team-a/team-a-queue"],
    "team-b": ["team-b/team-b-queue"],
}

# Jobs as their owners' OS accounts (docs/security.md): always, when the service runs as root
# (c.GpuQueueApp.run_jobs_as_owner is left at its default; False would be refused). The demo's users
# are not OS accounts: as root their jobs run as the demo account (as their servers do), unless
# GPUQUEUE_OS_ACCOUNT_TEMPLATE names real accounts ("{username}", "tljh", "systemd"). Without root
# every job runs as the service's account, and the service says so at start.
if os.environ.get("GPUQUEUE_OS_ACCOUNT_TEMPLATE"):
    c.GpuQueueApp.os_account_template = os.environ["GPUQUEUE_OS_ACCOUNT_TEMPLATE"]
elif os.environ.get("GPUQUEUE_DEMO_ACCOUNT"):
    c.GpuQueueApp.os_account_map = {
        user: os.environ["GPUQUEUE_DEMO_ACCOUNT"]
        for user in os.environ.get("GPUQUEUE_DEMO_USERS", "").split(",") if user
    }
