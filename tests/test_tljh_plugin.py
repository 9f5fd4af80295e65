"""The TLJH plugin (jupyter_gpuqueue/tljh_plugin.py) against The Littlest JupyterHub's hook
specifications (tests/data/tljh_hookspecs.py), loaded as TLJH loads plugins: a pluggy
``PluginManager("tljh")`` with the specifications, the plugins from the ``tljh`` entry-point group
of the installed distributions, and each hook called as TLJH's installer and jupyterhub_config.py
call it."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pluggy
import pytest
import yaml
from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner
from packaging.requirements import Requirement
from traitlets import Dict, List, Unicode
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from jupyter_gpuqueue import tljh_plugin
from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.hub import GpuQueueSpawnerMixin

HOOKSPECS = Path(__file__).parent / "data" / "tljh_hookspecs.py"


def _hookspecs():
    spec = importlib.util.spec_from_file_location("tljh_hookspecs", HOOKSPECS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pm():
    """TLJH's plugin manager (tljh/installer.py setup_plugins, tljh/utils.py get_plugin_manager)."""
    manager = pluggy.PluginManager("tljh")
    manager.add_hookspecs(_hookspecs())
    manager.load_setuptools_entrypoints("tljh")
    manager.check_pending()  # every hookimpl matches a specification, arguments included
    return manager


@pytest.fixture
def prefix(tmp_path, monkeypatch):
    """A TLJH install prefix (``$TLJH_INSTALL_PREFIX``, as TLJH's jupyterhub.service sets it)."""
    root = tmp_path / "tljh"
    (root / "config" / "gpuqueue").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("TLJH_INSTALL_PREFIX", str(root))
    monkeypatch.delenv("GPUQUEUE_DB_URL", raising=False)
    return root


def write_settings(prefix: Path, settings: dict) -> Path:
    path = prefix / "config" / "gpuqueue" / "gpuqueue.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


class UserCreatingSpawner(LocalProcessSpawner):
    """Stands in for TLJH's spawner class (tljh/user_creating_spawner.py: a SystemdSpawner
    subclass built with type() at import, with a configurable ``user_groups``)."""

    user_groups = Dict(key_trait=Unicode(), value_trait=List(Unicode()), config=True)


def tljh_config() -> Config:
    """What TLJH's jupyterhub_config.py and configurer have set when they call the hook."""
    c = Config()
    c.JupyterHub.spawner_class = UserCreatingSpawner
    c.JupyterHub.services = [{"name": "cull-idle", "admin": True, "command": ["python3", "-m", "jupyterhub_idle_culler"]}]
    c.Authenticator.admin_users = {"ada"}
    c.UserCreatingSpawner.user_groups = {"lab": ["alice"]}
    c.SystemdSpawner.username_template = "jupyter-{USERNAME}"
    return c


def test_registered_through_the_tljh_entry_point(pm):
    eps = [ep for ep in metadata.entry_points(group="tljh") if ep.name == "gpuqueue"]
    assert [ep.value for ep in eps] == ["jupyter_gpuqueue.tljh_plugin"]
    assert pm.get_plugin("gpuqueue") is tljh_plugin
    hooks = {name for name in dir(pm.hook) if name.startswith("tljh_")
             and any(i.plugin is tljh_plugin for i in getattr(pm.hook, name).get_hookimpls())}
    assert hooks == {"tljh_extra_hub_pip_packages", "tljh_extra_user_pip_packages",
                     "tljh_custom_jupyterhub_config", "tljh_post_install"}


def test_a_hook_that_does_not_match_the_specification_is_refused():
    """What the fixture's check relies on: pluggy refuses an argument the specification lacks."""
    manager = pluggy.PluginManager("tljh")
    manager.add_hookspecs(_hookspecs())

    class Wrong:
        @tljh_plugin.hookimpl
        def tljh_custom_jupyterhub_config(self, c, extra):
            pass

    with pytest.raises(pluggy.PluginValidationError):
        manager.register(Wrong())


def test_pip_packages_are_this_installation(pm, prefix):
    # TLJH's installer: list(set(itertools.chain(*hook.tljh_extra_hub_pip_packages())))
    hub = list(set(itertools.chain(*pm.hook.tljh_extra_hub_pip_packages())))
    user = list(set(itertools.chain(*pm.hook.tljh_extra_user_pip_packages())))
    direct = json.loads(metadata.distribution("jupyter_gpuqueue").read_text("direct_url.json") or "{}")
    for specs in (hub, user):
        assert len(specs) == 1
        req = Requirement(specs[0])
        assert req.name == "jupyter_gpuqueue" and not req.extras
        if direct.get("url"):  # the test venv's editable install: the same folder
            assert req.url == direct["url"]
        else:
            assert str(req.specifier) == f"=={metadata.version('jupyter_gpuqueue')}"

    # a PostgreSQL ledger: the hub's environment gets the driver through the extra
    write_settings(prefix, {"db_url": "postgresql+psycopg://gpuqueue:secret@localhost/gpuqueue"})
    (hub,) = pm.hook.tljh_extra_hub_pip_packages()
    assert Requirement(hub[0]).extras == {"postgresql"}
    (user,) = pm.hook.tljh_extra_user_pip_packages()
    assert not Requirement(user[0]).extras

    write_settings(prefix, {"pip_spec": "jupyter_gpuqueue[postgresql] @ https://example.org/jq.tar.gz"})
    assert pm.hook.tljh_extra_hub_pip_packages() == [["jupyter_gpuqueue[postgresql] @ https://example.org/jq.tar.gz"]]


def test_pip_spec_of_a_git_install(monkeypatch):
    class Dist:
        version = "0.1.0"

        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps({"url": "https://github.com/lab/jupyter-gpuqueue.git",
                               "vcs_info": {"vcs": "git", "commit_id": "abc123", "requested_revision": "main"}})

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())
    req = Requirement(tljh_plugin.pip_spec(("postgresql",)))
    assert (req.name, req.extras, req.url) == ("jupyter_gpuqueue", {"postgresql"},
                                               "git+https://github.com/lab/jupyter-gpuqueue.git@abc123")


def test_custom_jupyterhub_config(pm, prefix):
    write_settings(prefix, {
        "teams": {"team-a": ["team-a/team-a-queue"], "team-b": ["team-b/team-b-queue"]},
        "members": {"team-a": ["alice"], "team-b": ["bob"]},
        "service_port": 10999,
    })
    c = tljh_config()
    c.JupyterHub.load_groups = {"team-b": ["carol"], "other": {"users": ["dave"], "properties": {"x": 1}}}
    pm.hook.tljh_custom_jupyterhub_config(c=c)  # as TLJH's jupyterhub_config.py calls it

    # the service: hub-managed (run by the hub, as root under TLJH), its config file shipped
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {"cull-idle", "gpuqueue"}
    svc = services["gpuqueue"]
    assert svc["url"] == "http://127.0.0.1:10999"
    exe, config_arg = svc["command"]
    assert exe == str(Path(os.sys.executable).parent / "jupyterhub-singleuser")
    assert config_arg.startswith("--config=") and Path(config_arg[len("--config="):]).is_file()
    state = prefix / "state" / "gpuqueue"
    assert svc["cwd"] == str(state) and stat.S_IMODE(state.stat().st_mode) == 0o700
    assert svc["environment"] == {"TLJH_INSTALL_PREFIX": str(prefix)}
    assert "user" not in svc  # JupyterHub runs managed services as its own user: root under TLJH
    assert svc["oauth_client_allowed_scopes"] == ["custom:gpuqueue:submit", "custom:gpuqueue:admin"]

    # scopes and roles
    assert set(c.JupyterHub.custom_scopes) == {"custom:gpuqueue:submit", "custom:gpuqueue:admin"}
    assert c.JupyterHub.custom_scopes["custom:gpuqueue:admin"]["subscopes"] == ["custom:gpuqueue:submit"]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpuqueue-service"]["services"] == ["gpuqueue"]
    assert set(roles["gpuqueue-service"]["scopes"]) == {"read:users:activity", "read:servers"}
    assert roles["gpuqueue-users"]["groups"] == ["team-a", "team-b"]
    assert set(roles["gpuqueue-users"]["scopes"]) == {"access:services!service=gpuqueue", "custom:gpuqueue:submit"}
    assert roles["gpuqueue-admins"]["users"] == ["ada"]  # TLJH's admins (users.admin) by default
    assert "custom:gpuqueue:admin" in roles["gpuqueue-admins"]["scopes"]
    assert c.JupyterHub.load_groups == {"team-a": {"users": ["alice"]}, "team-b": {"users": ["bob", "carol"]},
                                        "other": {"users": ["dave"], "properties": {"x": 1}}}

    # users' servers: hub-client mode towards the service
    assert c.Spawner.environment["GPUQUEUE_SERVICE_URL"] == "http://127.0.0.1:10999/services/gpuqueue/"
    assert {"access:services!service=gpuqueue", "custom:gpuqueue:submit"} <= set(c.Spawner.server_token_scopes)

    # the spawner: TLJH's, with the queue's mixin first; TLJH's own config still applies to it
    cls = c.JupyterHub.spawner_class
    assert issubclass(cls, GpuQueueSpawnerMixin) and issubclass(cls, UserCreatingSpawner)
    assert cls.__mro__[1] is GpuQueueSpawnerMixin
    spawner = cls(config=c)
    assert spawner.user_groups == {"lab": ["alice"]}
    assert spawner.gpuqueue_url == "http://127.0.0.1:10999/services/gpuqueue/"
    assert [p["slug"] for p in spawner.gpuqueue_profiles] == ["cpu", "gpu"]
    assert "value='gpu'" in spawner.options_form

    # loading the config again (a hub restart in one process, tests) leaves one of each
    before = copy.deepcopy({k: c.JupyterHub[k] for k in ("services", "load_roles", "custom_scopes")})
    pm.hook.tljh_custom_jupyterhub_config(c=c)
    assert {k: c.JupyterHub[k] for k in ("services", "load_roles", "custom_scopes")} == before
    assert c.JupyterHub.spawner_class is cls


@pytest.mark.parametrize("value, base", [(None, LocalProcessSpawner), ("simple", SimpleLocalProcessSpawner),
                                         ("jupyterhub.spawner.SimpleLocalProcessSpawner", SimpleLocalProcessSpawner)])
def test_the_mixin_goes_over_any_spawner_class(pm, prefix, value, base):
    c = Config()
    if value is not None:
        c.JupyterHub.spawner_class = value
    pm.hook.tljh_custom_jupyterhub_config(c=c)
    cls = c.JupyterHub.spawner_class
    assert cls.__bases__ == (GpuQueueSpawnerMixin, base)
    # without gpuqueue.yaml: no teams, admins from the (unset) hub admins, default profiles
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpuqueue-admins"]["users"] == [] and roles["gpuqueue-users"]["groups"] == []


def test_service_config(pm, prefix, monkeypatch):
    (prefix / "config" / "gpuqueue" / "cluster.yaml").write_text("")
    write_settings(prefix, {
        "teams": {"team-a": ["team-a/team-a-queue"]},
        "db_url": "postgresql+psycopg://gpuqueue:secret@localhost/gpuqueue",
        "GpuQueueApp": {"idle_policy": {"idleTimeoutSeconds": 1800}},
    })
    c = tljh_config()
    pm.hook.tljh_custom_jupyterhub_config(c=c)
    (svc,) = [s for s in c.JupyterHub.services if s["name"] == "gpuqueue"]
    path = Path(svc["command"][1][len("--config="):])
    # the service's environment: what the hub passes (its env_keep and the service's environment)
    for var, value in svc["environment"].items():
        monkeypatch.setenv(var, value)
    sc = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    app = sc.GpuQueueApp
    assert app.mode == "hub-service"
    assert app.state_dir == str(prefix / "state" / "gpuqueue")
    assert app.os_account_template == "tljh"  # accounts jupyter-<name>
    assert app.owner_job_path.split(":")[0] == str(prefix / "user" / "bin")  # jobs' python: the users' env
    assert "run_jobs_as_owner" not in app  # its default: on, as the service runs as root
    assert app.group_local_queues == {"team-a": ["team-a/team-a-queue"]}
    assert app.config_files == [str(prefix / "config" / "gpuqueue" / "cluster.yaml")]
    assert app.db_url == "postgresql+psycopg://gpuqueue:secret@localhost/gpuqueue"
    assert app.idle_policy == {"idleTimeoutSeconds": 1800}
    assert sc.ServerApp.jpserver_extensions["jupyter_gpuqueue"] is True
    assert sc.ServerApp.allow_root is (os.geteuid() == 0)
    from jupyter_gpuqueue.backends.accounts import Accounts

    assert Accounts(app.os_account_template).account_name("alice") == "jupyter-alice"


@pytest.mark.parametrize("settings, field", [
    ({"team": {}}, "team"),
    ({"teams": {"team-a": "team-a/q"}}, "teams.team-a"),
    ({"teams": {"team-a": ["team-a-queue"]}}, "teams.team-a"),
    ({"service_port": 0}, "service_port"),
    ({"GpuQueueApp": {"os_account_template": "{username}"}}, "GpuQueueApp.os_account_template"),
    ({"profiles": [{"display_name": "no slug"}]}, "profiles"),
])
def test_a_bad_settings_file_is_refused_naming_the_field(pm, prefix, settings, field):
    path = write_settings(prefix, settings)
    c = tljh_config()
    before = copy.deepcopy(c)
    with pytest.raises(ValidationError) as e:
        pm.hook.tljh_custom_jupyterhub_config(c=c)
    assert e.value.field == field and str(path) in str(e.value)
    assert c == before  # nothing changed


def test_a_database_password_readable_by_others_is_refused(pm, prefix):
    path = write_settings(prefix, {"db_url": "postgresql+psycopg://gpuqueue:secret@localhost/gpuqueue"})
    path.chmod(0o644)
    path.parent.chmod(0o700)  # the folder keeps others out: taken
    pm.hook.tljh_custom_jupyterhub_config(c=tljh_config())
    path.parent.chmod(0o755)
    with pytest.raises(ValidationError, match="chmod 600") as e:
        pm.hook.tljh_custom_jupyterhub_config(c=tljh_config())
    assert e.value.field == "db_url"
    path.chmod(0o600)
    pm.hook.tljh_custom_jupyterhub_config(c=tljh_config())


def test_post_install(prefix, tmp_path):
    """The state folder 0700, the jupyterhub.service drop-in (GPUs visible, jobs outlive a hub
    restart) and the reload, once."""
    calls = []
    drop_in = tmp_path / "jupyterhub.service.d"
    tljh_plugin.post_install(drop_in_dir=str(drop_in), run=calls.append)
    assert calls == [["systemctl", "daemon-reload"], ["systemctl", "restart", "jupyterhub"]]
    text = (drop_in / "gpuqueue.conf").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines == ["[Service]", "PrivateDevices=no", "KillMode=process"]
    assert stat.S_IMODE((prefix / "state" / "gpuqueue").stat().st_mode) == 0o700
    assert stat.S_IMODE((prefix / "config" / "gpuqueue").stat().st_mode) == 0o700
    calls.clear()
    tljh_plugin.post_install(drop_in_dir=str(drop_in), run=calls.append)
    assert calls == []  # unchanged: no reload, no restart


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (the systemd package)")
def test_systemd_takes_every_line_of_the_drop_in(tmp_path):
    """``systemd-analyze verify`` of a jupyterhub.service with TLJH's hardening lines and the drop-in
    beside it (offline: no running systemd needed) names no unknown key and no value it cannot parse."""
    (tmp_path / "jupyterhub.service").write_text(
        "[Service]\nUser=root\nPrivateTmp=yes\nPrivateDevices=yes\nProtectKernelTunables=yes\n"
        "ProtectKernelModules=yes\nExecStart=/bin/true\n")
    assert tljh_plugin.write_drop_in(str(tmp_path / "jupyterhub.service.d"))
    res = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "jupyterhub.service")], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    out = res.stdout + res.stderr
    assert "gpuqueue.conf" not in out, out  # any complaint about the drop-in names it
    assert res.returncode == 0, out


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return any(ln.startswith("State:") and ln.split()[1] in ("Z", "X") for ln in status.splitlines())


def _wait(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_service_dies_with_the_hub_and_its_jobs_do_not(tmp_path):
    """die_with_hub: a process (the service) gets SIGTERM when its parent (the hub) is killed; a
    process it started in a session of its own (a job) goes on."""
    marks = tmp_path / "marks"
    service = (
        "import subprocess, sys, time\n"
        "from jupyter_gpuqueue.tljh_plugin import die_with_hub\n"
        "assert die_with_hub()\n"
        "job = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"open({str(marks)!r}, 'w').write(f'{{job.pid}}\\n')\n"
        "time.sleep(300)\n"
    )
    hub = subprocess.Popen([sys.executable, "-c",
                            f"import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', {service!r}])\n"
                            "print(p.pid, flush=True)\ntime.sleep(300)\n"], stdout=subprocess.PIPE, text=True)
    job = None
    try:
        service_pid = int(hub.stdout.readline())
        _wait(lambda: marks.exists() and marks.read_text().endswith("\n"), "the service armed and started its job")
        job = int(marks.read_text())
        assert not _gone(service_pid) and not _gone(job)
        hub.kill()
        hub.wait(30)
        _wait(lambda: _gone(service_pid), "the service ended with its hub")
        assert not _gone(job)  # the job goes on (the restarted service adopts it)
    finally:
        hub.kill()
        hub.wait(30)
        for pid in (job,):
            if pid and not _gone(pid):
                os.kill(pid, signal.SIGKILL)
