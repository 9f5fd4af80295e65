"""JupyterHub with one shared GPU queue on a machine shared by real people (docs/shared-machine.md).

Installed by ``setup.sh`` into ``/etc/jupyterhub/`` with ``gpuqueue_service_config.py``,
``teams.yaml`` and ``cluster.yaml``; JupyterHub runs as root from the system-wide environment
(``/opt/jupyter_gpuqueue``, made with /usr/bin/python3 so that every account can run it):

- users log in with their own OS account and password (JupyterHub's PAMAuthenticator); who may log
  in, the teams (hub groups) and the admins come from ``teams.yaml``; root never logs in;
- each user's notebook server runs as that user (uid, gid, groups, home: LocalProcessSpawner) —
  never as root or a system account (jupyter_gpuqueue/hub/local_accounts.py) — with the queue's
  extension in hub-client mode; a server that asks for a GPU waits in the queue (the spawner mixin);
- the queue is one hub-managed service (``gpuqueue``, as root), which runs every job as its owner's
  OS account;
- the hub's state (``$GPUQUEUE_HUB_STATE``, default ``/var/lib/jupyterhub``) is root's, mode 0700,
  its database 0600.

Environment (all optional): ``GPUQUEUE_HUB_STATE``, ``GPUQUEUE_HUB_IP`` (0.0.0.0: put TLS in front,
or set c.JupyterHub.ssl_key / ssl_cert), ``GPUQUEUE_HUB_PORT`` (8000), ``GPUQUEUE_HUB_API_PORT``
(8081), ``GPUQUEUE_PROXY_API_PORT`` (8001), ``GPUQUEUE_SERVICE_PORT`` (10101); ``GPUQUEUE_INVENTORY``
and ``GPUQUEUE_DB_URL`` are passed on to the service (NVML discovers the GPUs when no inventory is set).
"""

import os
import shutil
import sys

import yaml

from jupyter_gpuqueue.recipes import CUSTOM_SCOPES, SERVER_TOKEN_SCOPES, queue_roles

c = get_config()  # noqa: F821
here = os.path.dirname(os.path.abspath(__file__))
bindir = os.path.dirname(sys.executable)  # the system-wide environment JupyterHub runs from

state = os.path.abspath(os.environ.get("GPUQUEUE_HUB_STATE") or "/var/lib/jupyterhub")
os.makedirs(state, mode=0o700, exist_ok=True)
os.chmod(state, 0o700)  # the hub's database, cookie secret and the queue's ledger: root's only
ip = os.environ.get("GPUQUEUE_HUB_IP", "0.0.0.0")
hub_port = int(os.environ.get("GPUQUEUE_HUB_PORT", "8000"))
hub_api_port = int(os.environ.get("GPUQUEUE_HUB_API_PORT", "8081"))
proxy_api_port = int(os.environ.get("GPUQUEUE_PROXY_API_PORT", "8001"))
service_port = int(os.environ.get("GPUQUEUE_SERVICE_PORT", "10101"))

with open(os.environ.get("GPUQUEUE_TEAMS") or os.path.join(here, "teams.yaml")) as f:
    site = yaml.safe_load(f) or {}
teams = site.get("teams") or {}
admins = set(site.get("admins") or [])
members = {u for t in teams.values() for u in (t.get("users") or [])}

# -- the hub, its proxy and its database ---------------------------------------------------------
c.JupyterHub.bind_url = f"http://{ip}:{hub_port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{hub_api_port}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "jupyterhub-proxy.pid")
chp = os.path.join(os.path.dirname(bindir), "node", "node_modules", ".bin", "configurable-http-proxy")
if os.path.exists(chp):  # setup.sh installs it with npm next to the environment
    c.ConfigurableHTTPProxy.command = [chp]
elif not shutil.which("configurable-http-proxy"):
    sys.exit(f"configurable-http-proxy not found ({chp}, or on PATH): run jupyterhub_config/shared/setup.sh")
hub_db = os.path.join(state, "jupyterhub.sqlite")
os.close(os.open(hub_db, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
os.chmod(hub_db, 0o600)  # its tokens: root's only
c.JupyterHub.db_url = f"sqlite:///{hub_db}"
c.JupyterHub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")

# -- who logs in: the machine's accounts, by teams.yaml ------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False
c.Authenticator.allowed_users = members | admins
c.Authenticator.admin_users = admins
c.Authenticator.blocked_users = {"root"}
c.JupyterHub.load_groups = {name: {"users": list(t.get("users") or [])} for name, t in teams.items()}

# -- the GPU queue's custom scopes and who holds them ----------------------------------------------
c.JupyterHub.custom_scopes = dict(CUSTOM_SCOPES)  # jupyter_gpuqueue/recipes.py
c.JupyterHub.load_roles = queue_roles(user_groups=teams, admin_users=admins)

# -- the queue: one hub-managed service, as root (it runs each job as its owner) ------------------
c.JupyterHub.services = [
    {
        "name": "gpuqueue",
        "url": f"http://127.0.0.1:{service_port}",
        "command": [os.path.join(bindir, "jupyterhub-singleuser"),
                    f"--config={os.path.join(here, 'gpuqueue_service_config.py')}"],
        "cwd": state,
        "environment": {
            "GPUQUEUE_HUB_STATE": state,
            **{var: os.environ[var] for var in ("GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL",
                                                "GPUQUEUE_TEAMS") if os.environ.get(var)},
        },
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": ["custom:gpuqueue:submit", "custom:gpuqueue:admin"],
    }
]

# -- users' servers: each as its user, the queue extension in hub-client mode ----------------------
c.JupyterHub.spawner_class = "jupyter_gpuqueue.hub.local_accounts.QueuedOwnAccountSpawner"
c.Spawner.cmd = [os.path.join(bindir, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {"GPUQUEUE_SERVICE_URL": f"http://127.0.0.1:{service_port}/services/gpuqueue/"}
c.Spawner.server_token_scopes = list(SERVER_TOKEN_SCOPES)
# GPU notebook servers: a profile's "gpuqueue" request is queued as a NotebookLease of the user's team
# at priority class "development"; "CPU only" starts at once. Edit to match the machine's GPUs.
from jupyter_gpuqueue.hub import profiles_form  # noqa: E402

profiles = [
    {"slug": "cpu", "display_name": "CPU only", "default": True, "gpuqueue": {},
     "description": "No GPU: starts at once."},
    {"slug": "gpu", "display_name": "1 × GPU", "gpuqueue": {"gpus": 1},
     "description": "One whole GPU, whichever type your team's quota has free first."},
]
c.QueuedOwnAccountSpawner.gpuqueue_profiles = profiles
c.QueuedOwnAccountSpawner.options_form = profiles_form(profiles)
c.QueuedOwnAccountSpawner.gpuqueue_url = f"http://127.0.0.1:{service_port}/services/gpuqueue/"
c.QueuedOwnAccountSpawner.gpuqueue_max_runtime_seconds = 8 * 3600  # a notebook lease lasts a working day
