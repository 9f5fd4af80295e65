"""The Littlest JupyterHub (TLJH) plugin: the GPU queue on a lab's one-server hub (docs/tljh.md).

Registered as the entry point ``gpuqueue`` of the ``tljh`` group (pyproject.toml), which TLJH's
installer and its ``jupyterhub_config.py`` load with pluggy (``PluginManager("tljh")``,
``load_setuptools_entrypoints("tljh")``). The hooks (their specifications: TLJH's
``tljh/hooks.py``):

- ``tljh_extra_hub_pip_packages`` / ``tljh_extra_user_pip_packages``: this package, as it was
  installed into the hub environment (its PEP 610 ``direct_url.json``: a git URL, an archive or a
  folder; else ``jupyter_gpuqueue==<version>``), in the hub environment with the ``postgresql``
  extra when the ledger is PostgreSQL.
- ``tljh_custom_jupyterhub_config(c)``: the hub-managed service ``gpuqueue`` (root, as the hub:
  ``run_jobs_as_owner`` at its default, on as root; accounts ``jupyter-<name>``, the ``tljh``
  template), the custom scopes ``custom:gpuqueue:submit`` / ``custom:gpuqueue:admin`` and the
  roles that grant them, the service's role (``read:users:activity``, ``read:servers``: idle
  reclaim), and the queue's spawner mixin over TLJH's spawner (``UserCreatingSpawner``, a
  SystemdSpawner: built here over whatever ``c.JupyterHub.spawner_class`` is).
- ``tljh_post_install``: the state folder (0700), and a drop-in for TLJH's ``jupyterhub.service``
  that lets the service and its jobs reach the GPUs (``PrivateDevices=no``) and outlive a hub
  restart (``KillMode=process``; the restarted service adopts them).

Paths are TLJH's (``tljh/config.py``): ``$TLJH_INSTALL_PREFIX`` (``/opt/tljh``), its ``hub``
(the hub's environment), ``user`` (users' environment), ``state`` and ``config``. The queue's own
settings are in ``{prefix}/config/gpuqueue/gpuqueue.yaml`` (:func:`load_settings`), its Kueue
objects in ``cluster.yaml`` beside it, its state (SQLite ledger, job logs, exit records) in
``{prefix}/state/gpuqueue``. (Not a section of TLJH's ``config.yaml``: ``tljh-config`` checks that
file against TLJH's schema, whose top-level ``additionalProperties: false`` sits inside
``properties`` and so lets other keys through today; the plugin does not rely on that.)

Nothing of ``tljh`` is imported: the module is loaded by TLJH's installer and hub, and by tests
without TLJH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Optional

from .errors import ValidationError
from .recipes import (
    ACCESS_SCOPE,
    ADMIN_SCOPE,
    CUSTOM_SCOPES,
    SERVER_TOKEN_SCOPES,
    SERVICE_EXTENSIONS,
    SERVICE_NAME,
    SERVICE_SCOPES,
    SUBMIT_SCOPE,
)

try:  # pluggy comes with TLJH (and with pytest); without it the hooks are plain functions
    import pluggy

    hookimpl = pluggy.HookimplMarker("tljh")
except ImportError:  # pragma: no cover - neither TLJH nor pytest installed
    def hookimpl(function):
        return function

DIST = "jupyter_gpuqueue"
DEFAULT_SERVICE_PORT = 10101
SETTINGS_NAME = "gpuqueue.yaml"
DROP_IN_DIR = "/etc/systemd/system/jupyterhub.service.d"
DROP_IN_NAME = "gpuqueue.conf"


DEFAULT_PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "default": True, "gpuqueue": {},
     "description": "No GPU: starts at once."},
    {"slug": "gpu", "display_name": "1 × GPU", "gpuqueue": {"gpus": 1},
     "description": "One whole GPU of whichever type your team's quota has free first: waits in the queue."},
]

SETTINGS_KEYS = ("teams", "members", "admins", "admin_groups", "profiles", "service_port", "config_files",
                 "inventory_file", "db_url", "pip_spec", "GpuQueueApp")
# set by the plugin (the service runs as TLJH's hub, root; accounts are TLJH's)
FIXED_APP_SETTINGS = ("mode", "state_dir", "os_account_template")


# -- TLJH's paths (tljh/config.py) -----------------------------------------------------------------


def install_prefix() -> str:
    """TLJH's ``INSTALL_PREFIX``: ``$TLJH_INSTALL_PREFIX`` (set in its jupyterhub.service), else
    ``/opt/tljh``."""
    return os.environ.get("TLJH_INSTALL_PREFIX") or "/opt/tljh"


def settings_dir() -> str:
    """``{prefix}/config/gpuqueue``: gpuqueue.yaml, cluster.yaml (root's, 0700 like TLJH's config)."""
    return os.path.join(install_prefix(), "config", "gpuqueue")


def state_dir() -> str:
    """``{prefix}/state/gpuqueue``: the queue's ledger (SQLite), job logs and exit records, 0700."""
    return os.path.join(install_prefix(), "state", "gpuqueue")


# -- the settings file -----------------------------------------------------------------------------


def _str_list(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError(f"must be a list of non-empty strings, got {value!r}", field=field)
    return list(value)


def _has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return bool(make_url(url).password)
    except ArgumentError as e:
        raise ValidationError(f"not a SQLAlchemy URL: {e}", field="db_url") from None


def _others_may_read(path: str) -> bool:
    """Whether an account other than the file's owner may read ``path``: the file readable by its
    group or others, and its folder open to them too."""
    return bool(os.stat(path).st_mode & 0o044) and bool(os.stat(os.path.dirname(os.path.abspath(path))).st_mode & 0o011)


def load_settings(path: Optional[str] = None) -> dict:
    """The plugin's settings: ``{prefix}/config/gpuqueue/gpuqueue.yaml`` (``path``), a YAML mapping;
    every key is optional and a missing file is an empty mapping:

    - ``teams``: hub group → LocalQueues ``"namespace/name"`` of the Kueue objects
      (``c.GpuQueueApp.group_local_queues``);
    - ``members``: hub group → user names (``c.JupyterHub.load_groups``; or manage groups in the
      hub's admin page);
    - ``admins`` / ``admin_groups``: queue admins (role ``gpuqueue-admins``); default: the hub's
      admin users (TLJH's ``users.admin``);
    - ``profiles``: the spawn page's profiles (``gpuqueue_profiles``; default: CPU only, 1 × GPU);
    - ``service_port`` (10101), ``config_files`` (default ``cluster.yaml`` there, when present),
      ``inventory_file`` (default ``inventory.yaml`` there, when present; else NVML), ``db_url``
      (default ``$GPUQUEUE_DB_URL``, else SQLite in the state folder), ``pip_spec`` (what the hooks
      install), ``GpuQueueApp``: any other ``c.GpuQueueApp`` setting (``idle_policy``, ``budgets``,
      ``prices``, ...).

    Relative paths are taken from the file's folder. Returns the checked mapping, paths absolute.
    Raises ValidationError naming the file and the field (unreadable YAML, an unknown key, a
    value of the wrong shape, a ``db_url`` with a password in a file other accounts can read)."""
    path = path or os.path.join(settings_dir(), SETTINGS_NAME)
    try:
        return _load_settings(path)
    except ValidationError as e:
        if path in e.message:
            raise
        raise ValidationError(f"{path}: {e.message}", field=e.field) from None


def _load_settings(path: str) -> dict:
    import yaml

    where = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError:
        raw = None
    except (OSError, yaml.YAMLError) as e:
        raise ValidationError(f"cannot read {path}: {e}", field=SETTINGS_NAME) from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ValidationError(f"{path} must hold a mapping, got {type(raw).__name__}", field=SETTINGS_NAME)
    unknown = sorted(set(raw) - set(SETTINGS_KEYS))
    if unknown:
        raise ValidationError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}; known: "
                              f"{', '.join(SETTINGS_KEYS)}", field=str(unknown[0]))
    out: dict[str, Any] = {}
    for key in ("teams", "members"):
        value = raw.get(key) or {}
        if not isinstance(value, dict):
            raise ValidationError(f"{path}: must map hub groups to lists, got {value!r}", field=key)
        out[key] = {str(g): _str_list(v, f"{key}.{g}") for g, v in value.items()}
    for group, queues in out["teams"].items():
        for q in queues:
            if q.count("/") != 1 or q.startswith("/") or q.endswith("/"):
                raise ValidationError(f"{path}: {q!r} is not a LocalQueue 'namespace/name'",
                                      field=f"teams.{group}")
    for key in ("admins", "admin_groups"):
        if raw.get(key) is not None:
            out[key] = _str_list(raw[key], key)
    profiles = raw.get("profiles")
    if profiles is not None:
        if not isinstance(profiles, list) or not profiles or not all(
                isinstance(p, dict) and isinstance(p.get("slug"), str) for p in profiles):
            raise ValidationError(f"{path}: must be a list of profiles, each with a 'slug'", field="profiles")
        out["profiles"] = profiles
    port = raw.get("service_port", DEFAULT_SERVICE_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValidationError(f"{path}: must be a TCP port (1-65535), got {port!r}", field="service_port")
    out["service_port"] = port
    if raw.get("config_files") is not None:
        out["config_files"] = [os.path.join(where, p) for p in _str_list(raw["config_files"], "config_files")]
    elif os.path.exists(os.path.join(where, "cluster.yaml")):
        out["config_files"] = [os.path.join(where, "cluster.yaml")]
    if raw.get("inventory_file") is not None:
        out["inventory_file"] = os.path.join(where, _str_list([raw["inventory_file"]], "inventory_file")[0])
    elif os.path.exists(os.path.join(where, "inventory.yaml")):
        out["inventory_file"] = os.path.join(where, "inventory.yaml")
    for key in ("db_url", "pip_spec"):
        if raw.get(key) is not None:
            out[key] = _str_list([raw[key]], key)[0]
    if "db_url" in out and _has_password(out["db_url"]) and _others_may_read(path):
        raise ValidationError(f"{path} holds a database password and other accounts can read it: "
                              f"chmod 600 {path} (or 700 its folder)", field="db_url")
    app = raw.get("GpuQueueApp") or {}
    if not isinstance(app, dict):
        raise ValidationError(f"{path}: must map GpuQueueApp settings to values", field="GpuQueueApp")
    fixed = sorted(set(app) & set(FIXED_APP_SETTINGS))
    if fixed:
        raise ValidationError(f"{path}: {', '.join(fixed)} is set by the TLJH plugin", field=f"GpuQueueApp.{fixed[0]}")
    out["GpuQueueApp"] = dict(app)
    return out


def db_url(settings: dict) -> Optional[str]:
    """The ledger's URL: ``db_url`` of the settings, else ``$GPUQUEUE_DB_URL``, else None (SQLite
    in the state folder)."""
    return settings.get("db_url") or os.environ.get("GPUQUEUE_DB_URL") or None


# -- what pip installs ---------------------------------------------------------------------------


def pip_spec(extras: tuple[str, ...] = (), settings: Optional[dict] = None) -> str:
    """The pip requirement of this package as it is installed here, with ``extras``: the settings'
    ``pip_spec`` (as it is, extras and all); else from the installed distribution's PEP 610 ``direct_url.json``
    (``jupyter_gpuqueue @ git+URL@COMMIT``, ``@ file:///folder``, ``@ https://…/archive``);
    else ``jupyter_gpuqueue==<version>`` (from the package index)."""
    from importlib import metadata

    name = DIST + (f"[{','.join(extras)}]" if extras else "")
    if settings and settings.get("pip_spec"):
        return settings["pip_spec"]
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        from .version import __version__

        return f"{name}=={__version__}"
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            info = json.loads(direct)
        except ValueError:
            info = {}
        url = info.get("url")
        vcs = info.get("vcs_info")
        if url and vcs:
            ref = vcs.get("commit_id") or vcs.get("requested_revision")
            return f"{name} @ {vcs.get('vcs', 'git')}+{url}" + (f"@{ref}" if ref else "")
        if url:
            return f"{name} @ {url}"
    return f"{name}=={dist.version}"


@hookimpl
def tljh_extra_hub_pip_packages() -> list[str]:
    """The hub environment: this package (the spawner mixin, and the ``gpuqueue`` service, which
    runs the hub environment's ``jupyterhub-singleuser``), with the ``postgresql`` extra (psycopg)
    when the settings' ledger is PostgreSQL."""
    settings = load_settings()
    url = db_url(settings) or ""
    extras = ("postgresql",) if url.startswith("postgresql") else ()
    return [pip_spec(extras, settings)]


@hookimpl
def tljh_extra_user_pip_packages() -> list[str]:
    """The users' environment: this package (each user's server runs its server extension in
    hub-client mode, and the JupyterLab panel, the ``%%gpujob`` magic and the CLI)."""
    return [pip_spec((), load_settings())]


# -- the hub's configuration ------------------------------------------------------------------------


def _spawner_base(value: Any) -> type:
    """The Spawner class ``c.JupyterHub.spawner_class`` names: a class, a dotted name, an entry
    point name of ``jupyterhub.spawners`` (``"simple"``), or unset (JupyterHub's default,
    LocalProcessSpawner)."""
    if isinstance(value, type):
        return value
    if value is None or (not isinstance(value, str)):
        from jupyterhub.spawner import LocalProcessSpawner

        return LocalProcessSpawner
    if "." in value:
        from traitlets.utils.importstring import import_item

        return import_item(value)
    from importlib.metadata import entry_points

    for ep in entry_points(group="jupyterhub.spawners"):
        if ep.name == value:
            return ep.load()
    raise ValidationError(f"no spawner named {value!r}", field="c.JupyterHub.spawner_class")


def queued_spawner_class(base: type) -> type:
    """``base`` with :class:`~jupyter_gpuqueue.hub.GpuQueueSpawnerMixin` first in its MRO (the
    class itself when it has it already). The class is named ``GpuQueue<base name>``; config
    sections of ``base`` and its parents (``c.UserCreatingSpawner.*``, ``c.SystemdSpawner.*``,
    ``c.Spawner.*``) still apply to it."""
    from .hub import GpuQueueSpawnerMixin

    if issubclass(base, GpuQueueSpawnerMixin):
        return base
    return type(f"GpuQueue{base.__name__}", (GpuQueueSpawnerMixin, base), {
        "__doc__": f"{base.__name__} whose GPU servers wait in the shared GPU queue (jupyter_gpuqueue.tljh_plugin).",
        "__module__": __name__,
    })


def _append_named(items: list, new: dict) -> list:
    """``items`` without any entry named ``new["name"]``, then ``new`` (so that loading the
    configuration twice leaves one of each)."""
    return [i for i in items if not (isinstance(i, dict) and i.get("name") == new["name"])] + [new]


def _config_list(section: Any, key: str) -> list:
    return list(section[key]) if key in section else []


@hookimpl
def tljh_custom_jupyterhub_config(c: Any) -> None:
    """Configure the hub ``c`` (TLJH calls this after applying its config.yaml): the ``gpuqueue``
    service, scopes, roles, groups, users' servers in hub-client mode, the spawner mixin. Raises
    ValidationError (the hub does not start; its log names the file and the field) for a bad
    gpuqueue.yaml."""
    from .backends.accounts import secure_state_dir

    settings = load_settings()
    secure_state_dir(state_dir())  # the service's working folder: it must exist when the hub starts it
    port = settings["service_port"]
    service_root = f"http://127.0.0.1:{port}/services/{SERVICE_NAME}/"
    bindir = os.path.dirname(sys.executable)  # the hub's environment: {prefix}/hub/bin

    # the queue: one hub-managed service, run by the hub as its own user (root under TLJH)
    service = {
        "name": SERVICE_NAME,
        "url": f"http://127.0.0.1:{port}",
        "command": [os.path.join(bindir, "jupyterhub-singleuser"),
                    f"--config={os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tljh_service_config.py')}"],
        "cwd": state_dir(),
        # the service sees JupyterHub's env_keep variables and these only
        "environment": {"TLJH_INSTALL_PREFIX": install_prefix(),
                        **({"GPUQUEUE_DB_URL": os.environ["GPUQUEUE_DB_URL"]}
                           if os.environ.get("GPUQUEUE_DB_URL") else {})},
        "oauth_no_confirm": True,
        # browser (OAuth) tokens for the service carry these where the user holds them
        "oauth_client_allowed_scopes": [SUBMIT_SCOPE, ADMIN_SCOPE],
    }
    c.JupyterHub.services = _append_named(_config_list(c.JupyterHub, "services"), service)

    # scopes, and who holds them
    c.JupyterHub.custom_scopes = {**(c.JupyterHub.custom_scopes if "custom_scopes" in c.JupyterHub else {}),
                                  **CUSTOM_SCOPES}
    teams = settings["teams"]
    members = settings["members"]
    if members:
        groups = dict(c.JupyterHub.load_groups) if "load_groups" in c.JupyterHub else {}
        for group, users in members.items():
            prev = groups.get(group) or {}
            prev = {"users": list(prev)} if isinstance(prev, (list, tuple, set)) else dict(prev)  # JupyterHub < 4: a list
            groups[group] = {**prev, "users": sorted(set(users) | set(prev.get("users", [])))}
        c.JupyterHub.load_groups = groups
    admins = settings.get("admins")
    if admins is None:
        admins = sorted(c.Authenticator.admin_users) if "admin_users" in c.Authenticator else []
    roles = _config_list(c.JupyterHub, "load_roles")
    roles = _append_named(roles, {
        "name": "gpuqueue-users",
        "description": "Use the shared GPU queue (the teams' hub groups)",
        "groups": sorted(set(teams) | set(members)),
        "scopes": [ACCESS_SCOPE, SUBMIT_SCOPE],
    })
    roles = _append_named(roles, {
        "name": "gpuqueue-service",
        "description": "The GPU queue service reads notebook servers' activity",
        "services": [SERVICE_NAME],
        "scopes": list(SERVICE_SCOPES),
    })
    roles = _append_named(roles, {
        "name": "gpuqueue-admins",
        "description": "Administer the shared GPU queue",
        "users": list(admins),
        "groups": list(settings.get("admin_groups") or []),
        "scopes": [ACCESS_SCOPE, ADMIN_SCOPE],
    })
    c.JupyterHub.load_roles = roles

    # users' servers: the queue's server extension in hub-client mode, forwarding to the service
    env = dict(c.Spawner.environment) if "environment" in c.Spawner else {}
    env["GPUQUEUE_SERVICE_URL"] = service_root
    c.Spawner.environment = env
    scopes = _config_list(c.Spawner, "server_token_scopes")
    c.Spawner.server_token_scopes = scopes + [s for s in SERVER_TOKEN_SCOPES if s not in scopes]

    # the spawner: TLJH's (UserCreatingSpawner, a SystemdSpawner) with the queue's mixin
    from .hub import profiles_form

    base = _spawner_base(c.JupyterHub.spawner_class if "spawner_class" in c.JupyterHub else None)
    c.JupyterHub.spawner_class = queued_spawner_class(base)
    profiles = settings.get("profiles") or DEFAULT_PROFILES
    c.GpuQueueSpawnerConfig.gpuqueue_url = service_root
    c.GpuQueueSpawnerConfig.gpuqueue_profiles = profiles
    c.Spawner.options_form = profiles_form(profiles)


# -- the service's configuration (tljh_service_config.py) ------------------------------------------


def die_with_hub(sig: int = 15) -> bool:
    """Have this process get ``sig`` (SIGTERM) when its parent, the hub, dies (Linux
    ``PR_SET_PDEATHSIG``; not inherited by the jobs it starts). TLJH's unit gets
    ``KillMode=process`` from the drop-in so that jobs outlive a hub restart; a hub that stops
    cleanly stops its services itself, and this ends the service of a hub that crashed, which
    would otherwise hold the service's port against the restarted hub's. Returns False where
    ``prctl`` is unavailable; exits when the parent is already gone."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    parent = os.getppid()
    if prctl(1, sig, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        return False
    if os.getppid() != parent:  # the hub died before the signal was armed
        sys.exit(f"gpuqueue: the hub (pid {parent}) is gone; not starting")
    return True


def configure_service(c: Any, settings: Optional[dict] = None) -> None:
    """Configure the ``gpuqueue`` service ``c`` (``jupyterhub-singleuser --config=
    tljh_service_config.py``, run by the hub as root): it dies with the hub (:func:`die_with_hub`),
    hub-service mode, the state folder (0700),
    jobs as their owners' ``jupyter-<name>`` accounts (``run_jobs_as_owner`` left at its default:
    on as root), teams from gpuqueue.yaml, and its other settings."""
    from .backends.accounts import secure_state_dir

    settings = load_settings() if settings is None else settings
    if os.environ.get("JUPYTERHUB_SERVICE_NAME") == SERVICE_NAME:  # started by the hub (not a test's loader)
        die_with_hub()
    state = state_dir()
    secure_state_dir(state)
    c.ServerApp.jpserver_extensions = dict(SERVICE_EXTENSIONS)
    c.ServerApp.default_url = "/gpuqueue/api/info"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        c.ServerApp.allow_root = True  # the hub's service under TLJH; users' jobs run as their owners
    for key, value in settings.get("GpuQueueApp", {}).items():
        setattr(c.GpuQueueApp, key, value)
    c.GpuQueueApp.mode = "hub-service"
    c.GpuQueueApp.state_dir = state
    c.GpuQueueApp.os_account_template = "tljh"
    if "owner_job_path" not in settings.get("GpuQueueApp", {}):
        # jobs find the users' environment first, as their notebooks do (TLJH's USER_ENV_PREFIX)
        c.GpuQueueApp.owner_job_path = os.path.join(install_prefix(), "user", "bin") + ":/usr/local/bin:/usr/bin:/bin"
    if settings["teams"]:
        c.GpuQueueApp.group_local_queues = dict(settings["teams"])
    if settings.get("config_files"):
        c.GpuQueueApp.config_files = list(settings["config_files"])
    if settings.get("inventory_file"):
        c.GpuQueueApp.inventory_file = settings["inventory_file"]
    url = db_url(settings)
    if url:
        c.GpuQueueApp.db_url = url


# -- after TLJH's installer ------------------------------------------------------------------------

DROP_IN = """\
# Written by jupyter_gpuqueue's TLJH plugin (jupyter_gpuqueue/tljh_plugin.py, docs/tljh.md).
# The hub-managed gpuqueue service and the jobs it starts run inside this unit:
# - PrivateDevices=no: they must reach the GPUs (/dev/nvidia*); TLJH's unit hides devices.
# - KillMode=process: a hub restart (tljh-config reload hub) stops the hub, which stops the service;
#   the jobs go on, and the restarted service adopts them (instead of systemd killing the unit's
#   whole control group, every running job with it). Users' servers are SystemdSpawner's own units.
[Service]
PrivateDevices=no
KillMode=process
"""


def write_drop_in(directory: str = DROP_IN_DIR) -> bool:
    """Write the jupyterhub.service drop-in (:data:`DROP_IN`) into ``directory``; True when it
    changed (systemd must reload and the hub restart)."""
    path = os.path.join(directory, DROP_IN_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == DROP_IN:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(directory, mode=0o755, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(DROP_IN)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


def post_install(drop_in_dir: str = DROP_IN_DIR,
                 run: Optional[Callable[[list[str]], Any]] = None) -> None:
    """After TLJH's installer (as root): the state folder 0700, the settings folder 0700, the
    jupyterhub.service drop-in in ``drop_in_dir``; when the drop-in changed, ``systemctl
    daemon-reload`` and a restart of the hub (TLJH started it before running plugins'
    post-install hooks). ``run``: runs a command (default: subprocess.run, check=True)."""
    from .backends.accounts import secure_state_dir

    run = run or (lambda argv: subprocess.run(argv, check=True))
    secure_state_dir(state_dir())
    os.makedirs(settings_dir(), mode=0o700, exist_ok=True)
    os.chmod(settings_dir(), 0o700)
    if write_drop_in(drop_in_dir):
        run(["systemctl", "daemon-reload"])
        run(["systemctl", "restart", "jupyterhub"])


@hookimpl
def tljh_post_install() -> None:
    """:func:`post_install` (TLJH's installer calls it last, as root)."""
    post_install()
