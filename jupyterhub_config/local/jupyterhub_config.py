"""A single-machine JupyterHub with one shared GPU queue (demo; see README.md next to this file).

- The queue runs once, as the hub-managed service ``gpuqueue`` (``jupyterhub-singleuser`` loading
  the jupyter_gpuqueue server extension in hub-service mode, configured by
  ``gpuqueue_service_config.py``); its API is ``/services/gpuqueue/gpuqueue/api/``.
- Every user's server (DemoAccountSpawner) runs the extension in hub-client mode: its own
  ``/user/<name>/gpuqueue/api/`` forwards to the service as that user, with the server's
  ``$JUPYTERHUB_API_TOKEN`` (scopes from ``c.Spawner.server_token_scopes``).
- Teams are the hub groups ``team-a`` and ``team-b`` (mapped to LocalQueues in the service
  config). Scopes ``custom:gpuqueue:submit`` and ``custom:gpuqueue:admin`` (admin implies submit)
  are granted by the roles ``gpuqueue-users`` and ``gpuqueue-admins``.
- Demo login: DummyAuthenticator, any listed user with the password ``$GPUQUEUE_DEMO_PASSWORD``
  (default ``gpuqueue-demo``). Never use DummyAuthenticator on a machine others can reach.
- This is a demo. Its users are not OS accounts: when the hub runs as root, every user's server
  and job runs as one unprivileged account, ``$GPUQUEUE_DEMO_ACCOUNT`` (``gpuqueue-demo``, made
  by run.sh), never as root; otherwise as the hub's own account. The demo users can read each
  other's files. For a machine shared by real people: ``jupyterhub_config/shared/``.

Environment knobs (all optional): ``GPUQUEUE_HUB_STATE`` (where the hub database, cookie secret,
queue ledger and users' home folders go; default ``./.gpuqueue/hub``), ``GPUQUEUE_HUB_PORT``
(public port, 8000), ``GPUQUEUE_HUB_API_PORT`` (8081), ``GPUQUEUE_PROXY_API_PORT`` (8001),
``GPUQUEUE_SERVICE_PORT`` (10101), ``GPUQUEUE_HUB_IP`` (127.0.0.1), ``GPUQUEUE_DEMO_ACCOUNT`` (the
account servers and jobs run as when the hub is root, ``gpuqueue-demo``), ``GPUQUEUE_DEMO_HOMES``
(the users' homes, default ``$GPUQUEUE_HUB_STATE/home``). ``GPUQUEUE_CONFIG``,
``GPUQUEUE_INVENTORY`` and ``GPUQUEUE_DB_URL`` are passed on to the service (cluster YAML,
inventory YAML, ledger URL; the bundled demo cluster and inventory when unset and no GPU is found).

If a file ``spawner.py`` exists next to this one it is loaded last (the spawner hook that admits
notebook servers through the queue).
"""

import os
import shutil
import sys

from jupyter_gpuqueue.recipes import CUSTOM_SCOPES, SERVER_TOKEN_SCOPES, queue_roles

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
bindir = os.path.dirname(sys.executable)  # the environment JupyterHub runs from

state = os.path.abspath(os.environ.get("GPUQUEUE_HUB_STATE") or os.path.join(".gpuqueue", "hub"))
os.makedirs(state, exist_ok=True)
os.chmod(state, 0o711)  # users' homes are below it; nothing else of it may be listed or read
demo_account = os.environ.get("GPUQUEUE_DEMO_ACCOUNT", "gpuqueue-demo")
ip = os.environ.get("GPUQUEUE_HUB_IP", "127.0.0.1")
hub_port = int(os.environ.get("GPUQUEUE_HUB_PORT", "8000"))
hub_api_port = int(os.environ.get("GPUQUEUE_HUB_API_PORT", "8081"))
proxy_api_port = int(os.environ.get("GPUQUEUE_PROXY_API_PORT", "8001"))
service_port = int(os.environ.get("GPUQUEUE_SERVICE_PORT", "10101"))

# -- the hub, its proxy and its database ---------------------------------------------------------
c.JupyterHub.bind_url = f"http://{ip}:{hub_port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{hub_api_port}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "jupyterhub-proxy.pid")
if not shutil.which("configurable-http-proxy"):
    # scripts/test.sh and run.sh install it with npm into the repository's .ci-node/
    local_chp = os.path.join(repo, ".ci-node", "node_modules", ".bin", "configurable-http-proxy")
    if os.path.exists(local_chp):
        c.ConfigurableHTTPProxy.command = [local_chp]
hub_db = os.path.join(state, "jupyterhub.sqlite")
os.close(os.open(hub_db, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o600))  # the hub's tokens: its own only
os.chmod(hub_db, 0o600)
c.JupyterHub.db_url = f"sqlite:///{hub_db}"
c.JupyterHub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")

# -- who may log in: demo users, the hub groups that are teams -------------------------------------
team_a = ["alice", "anna"]
team_b = ["bob"]
both = ["carol"]  # in two teams: picks a LocalQueue in the submit form
no_team = ["dave"]  # may use the queue, but no group maps to a LocalQueue: gets a clear 403
admins = ["ada"]  # hub admin and queue admin, also in team-a
operators = ["ops"]  # hub admin and queue admin in no team: administers, cancels any job, submits nowhere

# DummyAuthenticator with one shared demo password (JupyterHub >= 5.3 logs that .password is
# deprecated in favour of SharedPasswordAuthenticator, whose admins need a separate 32-character
# password; for a loopback demo one password is simpler). Replace it in any real deployment.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ.get("GPUQUEUE_DEMO_PASSWORD", "gpuqueue-demo")
c.Authenticator.allowed_users = set(team_a + team_b + both + no_team + admins + operators)
c.Authenticator.admin_users = set(admins + operators)
c.JupyterHub.load_groups = {
    "team-a": {"users": team_a + both + admins},
    "team-b": {"users": team_b + both},
    "researchers": {"users": team_a + team_b + both + no_team + admins},
}

# -- the GPU queue's custom scopes and who holds them ----------------------------------------------
c.JupyterHub.custom_scopes = dict(CUSTOM_SCOPES)  # jupyter_gpuqueue/recipes.py
c.JupyterHub.load_roles = queue_roles(user_groups=["researchers"], admin_users=admins + operators)

# -- the queue: one hub-managed service ------------------------------------------------------------
c.JupyterHub.services = [
    {
        "name": "gpuqueue",
        "url": f"http://127.0.0.1:{service_port}",
        "command": [
            os.path.join(bindir, "jupyterhub-singleuser"),
            f"--config={os.path.join(here, 'gpuqueue_service_config.py')}",
        ],
        "cwd": state,
        # the service sees only JupyterHub's env_keep variables plus these: pass the queue's own
        "environment": {
            "GPUQUEUE_HUB_STATE": state,
            # the demo users' jobs run as the demo account when the service is root (never as root)
            "GPUQUEUE_DEMO_ACCOUNT": demo_account,
            "GPUQUEUE_DEMO_USERS": ",".join(sorted(c.Authenticator.allowed_users)),
            **{
                var: os.environ[var]
                for var in ("GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL",
                            "GPUQUEUE_OS_ACCOUNT_TEMPLATE")
                if os.environ.get(var)
            },
        },
        "oauth_no_confirm": True,
        # browser (OAuth) tokens for the service carry these scopes where the user holds them
        "oauth_client_allowed_scopes": ["custom:gpuqueue:submit", "custom:gpuqueue:admin"],
    }
]

# -- users' servers: local processes, the queue extension in hub-client mode ----------------------
# DemoAccountSpawner (jupyter_gpuqueue/hub/demo_spawner.py): as root, every server runs as the demo
# account (never root); otherwise as the hub's own account, as SimpleLocalProcessSpawner.
c.JupyterHub.spawner_class = "jupyter_gpuqueue.hub.demo_spawner.DemoAccountSpawner"
homes = os.environ.get("GPUQUEUE_DEMO_HOMES") or os.path.join(state, "home")  # <homes>/<user>
c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(homes, "{username}")
c.DemoAccountSpawner.demo_account = demo_account
c.Spawner.cmd = [os.path.join(bindir, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {
    # hub-client mode: forward {base_url}gpuqueue/api/ to the service (directly, not via the proxy)
    "GPUQUEUE_SERVICE_URL": f"http://127.0.0.1:{service_port}/services/gpuqueue/",
}
# The server's $JUPYTERHUB_API_TOKEN gets the subset of these that its user holds: the queue's
# scopes for members of gpuqueue-users, admin only for gpuqueue-admins.
c.Spawner.server_token_scopes = list(SERVER_TOKEN_SCOPES)

# -- the spawner hook (admits notebook servers through the queue), when present --------------------
if os.path.exists(os.path.join(here, "spawner.py")):
    load_subconfig(os.path.join(here, "spawner.py"))  # noqa: F821
