"""What the shipped JupyterHub recipes share: the queue's custom scopes, the roles that grant them,
the server token's scopes and the service's extensions (jupyterhub_config/local/ (the demo),
jupyterhub_config/shared/ (docs/shared-machine.md), jupyterhub_config/kubernetes/, and the TLJH
plugin, tljh_plugin.py). Plain data, importable from any config file without JupyterHub.

The scopes' meaning and enforcement: server/scopes.py, docs/rest-api.md.
"""

from __future__ import annotations

from typing import Iterable

SERVICE_NAME = "gpuqueue"
SUBMIT_SCOPE = "custom:gpuqueue:submit"
ADMIN_SCOPE = "custom:gpuqueue:admin"
ACCESS_SCOPE = f"access:services!service={SERVICE_NAME}"

#: ``c.JupyterHub.custom_scopes``: admin implies submit.
CUSTOM_SCOPES = {
    SUBMIT_SCOPE: {
        "description": "Submit GPU workloads to the team queues; list, cancel and read the logs of one's own.",
    },
    ADMIN_SCOPE: {
        "description": "Change GPU quotas, cohorts, priority classes and prices; read the audit log.",
        "subscopes": [SUBMIT_SCOPE],
    },
}

#: The service itself: idle notebook GPU reclaim reads the servers' activity.
SERVICE_SCOPES = ["read:users:activity", "read:servers"]

#: ``c.Spawner.server_token_scopes``: a user's server token gets those of these its user holds
#: (hub-client mode forwards the user's queue requests with it).
SERVER_TOKEN_SCOPES = ["users:activity!user", "access:servers!server", ACCESS_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE]

#: ``c.ServerApp.jpserver_extensions`` of the queue service: its API only, no JupyterLab UI,
#: terminals or language servers.
SERVICE_EXTENSIONS = {
    "jupyter_gpuqueue": True,
    "jupyterlab": False,
    "jupyter_lsp": False,
    "jupyter_server_terminals": False,
    "notebook_shim": False,
}


def queue_roles(user_groups: Iterable[str], admin_users: Iterable[str] = (),
                admin_groups: Iterable[str] = ()) -> list[dict]:
    """``c.JupyterHub.load_roles`` entries: ``gpuqueue-users`` (submit, for ``user_groups``),
    ``gpuqueue-service`` (the service's own scopes) and ``gpuqueue-admins`` (admin, for
    ``admin_users`` and ``admin_groups``)."""
    admins: dict = {"name": "gpuqueue-admins", "description": "Administer the shared GPU queue",
                    "scopes": [ACCESS_SCOPE, ADMIN_SCOPE]}
    if admin_users:
        admins["users"] = sorted(admin_users)
    if admin_groups:
        admins["groups"] = sorted(admin_groups)
    return [
        {"name": "gpuqueue-users", "description": "Use the shared GPU queue", "groups": sorted(user_groups),
         "scopes": [ACCESS_SCOPE, SUBMIT_SCOPE]},
        {"name": "gpuqueue-service", "description": "The GPU queue service reads notebook servers' activity",
         "services": [SERVICE_NAME], "scopes": list(SERVICE_SCOPES)},
        admins,
    ]
