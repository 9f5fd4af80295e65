"""The TLJH plugin in a real JupyterHub, end to end: the hub's config does what TLJH's
``jupyterhub_config.py`` does (its settings, then a pluggy ``PluginManager("tljh")`` with TLJH's
hook specifications and the ``tljh`` entry points, then ``tljh_custom_jupyterhub_config(c=c)``),
with ``$TLJH_INSTALL_PREFIX`` a temporary folder holding ``config/gpuqueue/``. The hub runs as
root (as TLJH's does), so the plugin's service does too; the hub user's job runs as the TLJH
account ``jupyter-<name>`` (made here with useradd, removed afterwards).

What is checked is what the plugin set up, seen from outside: the service process (uid 0, its
working folder the 0700 state folder), a team member's queue (from gpuqueue.yaml's teams and
members), her job's uid, a user in no team refused, TLJH's admin a queue admin. The spawner is
SimpleLocalProcessSpawner in TLJH's spawner slot (SystemdSpawner needs systemd); no user server is
started. Needs root, useradd and configurable-http-proxy; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hubtools import BINDIR, Hub, _wait_for, chp_path, free_port, stop_hub

REPO = Path(__file__).resolve().parents[2]
HOOKSPECS = REPO / "tests" / "data" / "tljh_hookspecs.py"
DEMO = REPO / "jupyter_gpuqueue" / "demo"
JOBPY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="TLJH's hub runs as root and makes OS accounts: needs root (tests run as root in CI)"),
    pytest.mark.skipif(shutil.which("useradd") is None, reason="needs useradd / userdel (the passwd package)"),
]

HUB_CONFIG = """\
import importlib.util
import pluggy

c = get_config()
# what TLJH's jupyterhub_config.py and configurer set before the plugins' hook
c.JupyterHub.spawner_class = "simple"  # TLJH's slot for UserCreatingSpawner
c.JupyterHub.cleanup_servers = False
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {users!r}
c.Authenticator.admin_users = {{{admin!r}}}
c.JupyterHub.services = []
c.JupyterHub.bind_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = {state!r} + "/jupyterhub-proxy.pid"
c.JupyterHub.db_url = "sqlite:///" + {state!r} + "/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = {state!r} + "/jupyterhub_cookie_secret"

# TLJH: pm = get_plugin_manager(); pm.hook.tljh_custom_jupyterhub_config(c=c)
spec = importlib.util.spec_from_file_location("tljh_hookspecs", {hookspecs!r})
hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hooks)
pm = pluggy.PluginManager("tljh")
pm.add_hookspecs(hooks)
pm.load_setuptools_entrypoints("tljh")
pm.hook.tljh_custom_jupyterhub_config(c=c)

# the tests' admin: a service with a known token
c.JupyterHub.services.append({{"name": "test-admin", "api_token": {admin_token!r}}})
c.JupyterHub.load_roles.append({{"name": "test-admin", "services": ["test-admin"],
    "scopes": ["admin:users", "admin:servers", "tokens", "read:users", "list:users", "admin:groups"]}})
"""


@pytest.fixture(scope="module")
def tljh_hub(tmp_path_factory):
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    if JOBPY is None:
        pytest.skip("needs a python3 in /usr/bin or /usr/local/bin that every account can run")
    rnd = secrets.token_hex(3)
    member, outsider, admin = f"al{rnd}", f"bo{rnd}", f"ad{rnd}"
    account = f"jupyter-{member}"  # TLJH's name for the hub user's OS account
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", "-c", "GPU queue TLJH test", account], check=True,
                   stdout=subprocess.DEVNULL)
    base = tmp_path_factory.mktemp("tljh")
    prefix, state = base / "tljh", base / "hub"
    settings = prefix / "config" / "gpuqueue"
    settings.mkdir(parents=True, mode=0o700)
    state.mkdir()
    shutil.copy(DEMO / "cluster.yaml", settings / "cluster.yaml")
    shutil.copy(DEMO / "inventory.yaml", settings / "inventory.yaml")
    ports = {name: free_port() for name in ("hub", "api", "proxy_api", "service")}
    (settings / "gpuqueue.yaml").write_text(yaml.safe_dump({
        "teams": {"vision": ["team-a/team-a-queue"]},
        "members": {"vision": [member]},
        "service_port": ports["service"],
    }))
    admin_token = secrets.token_hex(16)
    cfg = state / "jupyterhub_config.py"
    cfg.write_text(HUB_CONFIG.format(
        users={member, outsider, admin}, admin=admin, hub_port=ports["hub"], api_port=ports["api"],
        proxy_api_port=ports["proxy_api"], state=str(state), hookspecs=str(HOOKSPECS), admin_token=admin_token))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUQUEUE_", "JUPYTERHUB_", "JUPYTER_"))}
    env.update(TLJH_INSTALL_PREFIX=str(prefix),
               PATH=os.pathsep.join([str(Path(chp_path()).parent), str(BINDIR), env.get("PATH", "")]))
    log_path = state / "jupyterhub.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(BINDIR / "jupyterhub"), "-f", str(cfg)], cwd=state, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(url=f"http://127.0.0.1:{ports['hub']}/",
              service_url=f"http://127.0.0.1:{ports['service']}/services/gpuqueue/",
              admin_token=admin_token, state=state, proc=proc, log_path=log_path)
    try:
        deadline = time.monotonic() + 90
        _wait_for(hub, lambda: hub.api("GET", "").status_code == 200, deadline, "the hub API")
        _wait_for(hub, lambda: hub.queue("GET", "info", token=None).status_code == 403, deadline,
                  "the gpuqueue service through the proxy")
        service_pid = _service_pid(hub)
        yield {"hub": hub, "prefix": prefix, "member": member, "outsider": outsider, "admin": admin,
               "account": pwd.getpwnam(account)}
    finally:
        stop_hub(hub)
        try:  # the service has a session of its own: not in the hub's process group
            if b"tljh_service_config.py" in Path(f"/proc/{service_pid}/cmdline").read_bytes():
                os.kill(service_pid, signal.SIGKILL)
        except (NameError, OSError):
            pass
        uid = pwd.getpwnam(account).pw_uid
        for entry in os.listdir("/proc"):  # only processes of the test's own account
            try:
                if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
        subprocess.run(["userdel", "-r", "-f", account], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _service_pid(hub: Hub) -> int:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"tljh_service_config.py") for arg in cmdline):
            status = Path(f"/proc/{entry}/status").read_text()
            ppid = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")))
            if ppid == hub.proc.pid:
                return int(entry)
    raise AssertionError(f"no gpuqueue service process under the hub:\n{hub.log_tail()}")


def test_the_service_runs_as_the_hub_root_in_its_private_state_folder(tljh_hub):
    pid = _service_pid(tljh_hub["hub"])
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(ln.split()[1:] for ln in status.splitlines() if ln.startswith("Uid:"))
    assert uids == ["0", "0", "0", "0"]
    state = tljh_hub["prefix"] / "state" / "gpuqueue"
    assert os.readlink(f"/proc/{pid}/cwd") == str(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state / "gpuqueue.sqlite").exists()  # its ledger is there


def test_a_team_member_submits_and_her_job_runs_as_her_tljh_account(tljh_hub):
    hub, member, pw = tljh_hub["hub"], tljh_hub["member"], tljh_hub["account"]
    token = hub.token_for(member)
    info = hub.queue("GET", "info", token).json()
    assert [f"{q['namespace']}/{q['name']}" for q in info["localQueues"]] == ["team-a/team-a-queue"], info
    assert info["permissions"] == {"submit": True, "admin": False}
    r = hub.queue("POST", "workloads", token, json={
        "name": "tljh-uid", "gpus": 1, "maxRuntime": "2m", "workingDir": pw.pw_dir,
        "command": [JOBPY, "-c", "import json, os; print('SEEN ' + json.dumps([os.getuid(), os.getgid(), os.environ.get('USER')]))"],
    })
    assert r.status_code == 201, r.text
    wl = r.json()
    assert wl["owner"] == member
    deadline = time.monotonic() + 60
    while (state := hub.queue("GET", f"workloads/{wl['namespace']}/tljh-uid", token).json()["state"]) not in (
            "Succeeded", "Failed"):
        assert time.monotonic() < deadline, (state, hub.log_tail())
        time.sleep(0.3)
    text = hub.queue("GET", f"workloads/{wl['namespace']}/tljh-uid/logs", token).json()["text"]
    assert state == "Succeeded", text
    seen = json.loads(next(ln for ln in text.splitlines() if ln.startswith("SEEN "))[5:])
    assert seen == [pw.pw_uid, pw.pw_gid, f"jupyter-{member}"]


def test_a_user_in_no_team_is_refused_and_tljhs_admin_administers(tljh_hub):
    hub = tljh_hub["hub"]
    r = hub.queue("POST", "workloads", hub.token_for(tljh_hub["outsider"]), json={
        "name": "no-team", "gpus": 1, "command": ["true"]})
    assert r.status_code == 403, r.text
    info = hub.queue("GET", "info", hub.token_for(tljh_hub["admin"])).json()
    assert info["permissions"]["admin"] is True, info


def test_a_crashed_hub_takes_its_service_along(tljh_hub):
    """Last in this module: SIGKILL to the hub (a crash; TLJH's unit has KillMode=process from the
    plugin's drop-in, so systemd would not end the service) ends the service too, which would
    otherwise hold its port against the restarted hub's."""
    hub = tljh_hub["hub"]
    pid = _service_pid(hub)
    hub.proc.kill()
    hub.proc.wait(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            state = next(ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                         if ln.startswith("State:"))
        except FileNotFoundError:
            break
        if state in ("Z", "X"):
            break
        assert time.monotonic() < deadline, f"the service (pid {pid}) outlived its hub"
        time.sleep(0.2)
