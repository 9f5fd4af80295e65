"""Config of the ``gpuqueue`` hub-managed service in the hub pod
(``jupyterhub-singleuser --config=<this file>``, started by jupyterhub_config.py)."""

import json
import os

c = get_config()  # noqa: F821

c.ServerApp.jpserver_extensions = {"jupyter_gpuqueue": True, "jupyterlab": False, "jupyter_lsp": False,
                                   "notebook_shim": False, "jupyter_server_terminals": False}
c.ServerApp.default_url = "/gpuqueue/api/info"

c.GpuQueueApp.mode = "hub-service"
c.GpuQueueApp.backend = "kubernetes"  # batch jobs: Kubernetes Jobs in the teams' namespaces
c.GpuQueueApp.config_files = [os.environ.get("GPUQUEUE_CONFIG", "/etc/gpuqueue/cluster.yaml")]
c.GpuQueueApp.state_dir = os.environ.get("GPUQUEUE_STATE", "/srv/jupyterhub/gpuqueue")
c.GpuQueueApp.group_local_queues = json.loads(os.environ.get("GPUQUEUE_TEAMS", "{}"))
# Notebook GPU leases: submitted at this class when they name none; warned this long before a
# preemption releases them.
c.GpuQueueApp.lease_priority_class = "development"
c.GpuQueueApp.lease_preemption_grace_seconds = 300
