"""A real JupyterHub for end-to-end tests: hub, configurable-http-proxy, the gpuqueue service.

:func:`start_hub` runs ``jupyterhub`` as a subprocess on free loopback ports, with a SQLite
database and all state in a temporary folder, loading the shipped example
``jupyterhub_config/local/jupyterhub_config.py`` (demo users, groups team-a / team-b, roles,
custom scopes, the ``gpuqueue`` managed service, DemoAccountSpawner in hub-client mode; as root,
users' servers and jobs run as an account made for the hub, ``Hub.demo_account``, never as root)
plus any ``extra_config`` lines, e.g. a spawner hook. The returned :class:`Hub` has an admin API
token (a ``test-admin`` service) and helpers for the Hub REST API and for requests through the
proxy. :func:`stop_hub` stops user servers, then the hub (which stops its service and proxy),
then kills whatever is left of the process group.

Import it from tests in tests/hub/ (pytest puts this folder on sys.path): ``from hubtools import
start_hub, stop_hub, chp_path``. tests/hub/conftest.py has the ``hub`` fixture (module scope, the
example configuration as shipped); for other configuration write a module fixture that calls
``start_hub(tmp_path_factory.mktemp(...), extra_config=...)`` and ``stop_hub`` in its teardown.

Needs ``configurable-http-proxy`` (npm): on PATH or in ``.ci-node/`` (scripts/test.sh installs
it); the tests are skipped without it.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import requests

from jupyter_gpuqueue.ports import free_port, port_taken

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "jupyterhub_config" / "local" / "jupyterhub_config.py"
LOCAL_CHP_BIN = REPO / ".ci-node" / "node_modules" / ".bin"
BINDIR = Path(sys.executable).parent
START_TIMEOUT = 60.0  # seconds for the hub, its proxy and the service to come up


def chp_path() -> Optional[str]:
    """The configurable-http-proxy executable (PATH, then .ci-node/), or None."""
    return shutil.which("configurable-http-proxy") or shutil.which(
        "configurable-http-proxy", path=str(LOCAL_CHP_BIN)
    )


@dataclass
class Hub:
    """A running hub. URLs end with ``/``; tokens go in ``Authorization: token ...``."""

    url: str  # public URL (the proxy), e.g. http://127.0.0.1:PORT/
    service_url: str  # the gpuqueue service itself, http://127.0.0.1:PORT/services/gpuqueue/
    admin_token: str
    state: Path
    proc: subprocess.Popen
    log_path: Path
    _tokens: dict = field(default_factory=dict)
    demo_account: Optional[str] = None  # the OS account users' servers and jobs run as (hub as root)
    homes: Optional[Path] = None  # the demo users' homes (<homes>/<user>)

    @property
    def api_url(self) -> str:
        return self.url + "hub/api/"

    def request(self, method: str, path: str, token: Optional[str] = None, **kw: Any) -> requests.Response:
        """``method`` on ``{url}{path}`` (through the proxy) with ``token``."""
        headers = dict(kw.pop("headers", {}) or {})
        if token:
            headers["Authorization"] = f"token {token}"
        kw.setdefault("timeout", 30)
        return requests.request(method, self.url + path.lstrip("/"), headers=headers, **kw)

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        """The Hub REST API as the test admin, e.g. ``api("GET", "users/alice")``."""
        return self.request(method, "hub/api/" + path.lstrip("/"), self.admin_token, **kw)

    def queue(self, method: str, path: str, token: str, **kw: Any) -> requests.Response:
        """The gpuqueue service's API through the proxy: ``/services/gpuqueue/gpuqueue/api/{path}``."""
        return self.request(method, "services/gpuqueue/gpuqueue/api/" + path.lstrip("/"), token, **kw)

    def token_for(self, user: str, scopes: Optional[list[str]] = None) -> str:
        """A new API token of ``user`` (all the user's permissions, or only ``scopes``), made with
        the Hub REST API as the admin; cached per (user, scopes)."""
        key = (user, tuple(scopes) if scopes is not None else None)
        if key not in self._tokens:
            body: dict[str, Any] = {"note": "gpuqueue tests", "expires_in": 3600}
            if scopes is not None:
                body["scopes"] = scopes
            r = self.api("POST", f"users/{user}/tokens", json=body)
            assert r.status_code == 201, (r.status_code, r.text)
            self._tokens[key] = r.json()["token"]
        return self._tokens[key]

    def start_server(self, user: str, timeout: float = 60.0) -> str:
        """Start ``user``'s server (the configured spawner) and wait until it is ready; returns
        its URL path, e.g. ``/user/alice/``."""
        r = self.api("POST", f"users/{user}/server")
        assert r.status_code in (201, 202, 400), (r.status_code, r.text)  # 400: already running
        deadline = time.monotonic() + timeout
        while True:
            model = self.api("GET", f"users/{user}").json()
            server = (model.get("servers") or {}).get("")
            if server and server.get("ready"):
                return server["url"]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{user}'s server not ready after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.25)

    def stop_server(self, user: str, timeout: float = 20.0) -> None:
        r = self.api("DELETE", f"users/{user}/server")
        if r.status_code not in (202, 204, 400):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.api("GET", f"users/{user}").json()
            if not (model.get("servers") or {}).get(""):
                return
            time.sleep(0.25)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no hub log)"


def _test_config(admin_token: str, extra_config: str) -> str:
    return textwrap.dedent(
        f"""\
        c = get_config()
        load_subconfig({str(EXAMPLE_CONFIG)!r})
        # the tests' admin: a service with a known token
        c.JupyterHub.services.append({{"name": "test-admin", "api_token": {admin_token!r}}})
        c.JupyterHub.load_roles.append({{
            "name": "test-admin",
            "services": ["test-admin"],
            "scopes": ["admin:users", "admin:servers", "tokens", "read:users", "list:users", "admin:groups"],
        }})
        c.JupyterHub.log_level = "DEBUG" if {bool(os.environ.get("GPUQUEUE_HUB_DEBUG"))!r} else "INFO"
        """
    ) + "\n" + textwrap.dedent(extra_config)


def start_hub(state: Path, extra_config: str = "", env: Optional[dict] = None,
              timeout: float = START_TIMEOUT, sigint_ignored: bool = False) -> Hub:
    """Start JupyterHub with the example config plus ``extra_config`` (Python lines using ``c``)
    in ``state``; return once the hub answers and the gpuqueue service is up. ``env``: extra
    environment for the hub (and so for its service and spawners). Raises RuntimeError with the
    hub's log when it does not come up within ``timeout`` seconds (the processes are stopped).
    A hub, proxy or service whose port another process took between ``free_port()`` and its
    bind (jupyter_gpuqueue/ports.py) is started again on other ports, twice at most."""
    for attempt in range(3):
        try:
            return _start_hub_once(state, extra_config, env, timeout, sigint_ignored)
        except RuntimeError as err:
            if attempt == 2 or not port_taken(str(err)):
                raise
    raise AssertionError("unreachable")


def _start_hub_once(state: Path, extra_config: str, env: Optional[dict], timeout: float,
                    sigint_ignored: bool) -> Hub:
    chp = chp_path()
    if chp is None:
        raise RuntimeError("configurable-http-proxy not found (run scripts/test.sh, or npm install it)")
    state = Path(state)
    state.mkdir(parents=True, exist_ok=True)
    demo_account, homes = _make_demo_account(state) if os.geteuid() == 0 else (None, state / "home")
    admin_token = secrets.token_hex(16)
    cfg = state / "jupyterhub_test_config.py"
    cfg.write_text(_test_config(admin_token, extra_config))
    ports = {name: free_port() for name in ("hub", "api", "proxy_api", "service")}
    full_env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(chp).parent), str(BINDIR), os.environ.get("PATH", "")]),
        "GPUQUEUE_HUB_STATE": str(state),
        "GPUQUEUE_HUB_PORT": str(ports["hub"]),
        "GPUQUEUE_HUB_API_PORT": str(ports["api"]),
        "GPUQUEUE_PROXY_API_PORT": str(ports["proxy_api"]),
        "GPUQUEUE_SERVICE_PORT": str(ports["service"]),
        **({"GPUQUEUE_DEMO_ACCOUNT": demo_account, "GPUQUEUE_DEMO_HOMES": str(homes)} if demo_account else {}),
        **(env or {}),
    }
    for var in ("GPUQUEUE_URL", "GPUQUEUE_TOKEN", "GPUQUEUE_SERVICE_URL", "JUPYTERHUB_API_TOKEN",
                "GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL",
                "JUPYTERHUB_SERVICE_NAME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        if var not in (env or {}):
            full_env.pop(var, None)
    log_path = state / "jupyterhub.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [str(BINDIR / "jupyterhub"), "-f", str(cfg)],
        cwd=state, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # sigint_ignored: as a background job of a non-interactive shell starts it (nohup … &)
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    log.close()
    hub = Hub(
        url=f"http://127.0.0.1:{ports['hub']}/",
        service_url=f"http://127.0.0.1:{ports['service']}/services/gpuqueue/",
        admin_token=admin_token, state=state, proc=proc, log_path=log_path, demo_account=demo_account, homes=homes,
    )
    deadline = time.monotonic() + timeout
    try:
        _wait_for(hub, lambda: hub.api("GET", "").status_code == 200, deadline, "the hub API")
        # the service answers (403 without a token) once it runs and the proxy routes to it
        _wait_for(hub, lambda: hub.queue("GET", "info", token=None).status_code == 403, deadline,
                  "the gpuqueue service through the proxy")
    except BaseException:
        stop_hub(hub)
        raise
    return hub


_made_homes: list[str] = []


def _make_demo_account(state: Path) -> tuple[str, Path]:
    """As root, the demo runs users' servers and jobs as an unprivileged account (never root,
    jupyter_gpuqueue/hub/demo_spawner.py): one made for this hub (removed by :func:`stop_hub`).
    The users' homes and the account's own go in a folder of /tmp that the account can reach
    (pytest keeps its temporary folders private, resetting their modes at each session), the
    same one when the hub is started again in ``state``. Returns (account, homes folder)."""
    name = "gqd-" + secrets.token_hex(4)
    marker = state / ".demo-homes"
    homes = Path(marker.read_text()) if marker.exists() else None
    if homes is None or not homes.is_dir():
        homes = Path(tempfile.mkdtemp(prefix="gq-homes-", dir="/tmp"))
        _made_homes.append(str(homes))
        marker.write_text(str(homes))
    os.chmod(homes, 0o711)
    own = homes / ".demo-account"
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(own),
                    "--shell", "/usr/sbin/nologin", "-c", "gpuqueue hub test demo account", name],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import pwd

    pw = pwd.getpwnam(name)
    own.mkdir(exist_ok=True)
    os.chown(own, pw.pw_uid, pw.pw_gid)
    os.chmod(own, 0o700)
    for d in homes.iterdir():  # homes of an earlier start of this hub: the new account's
        if d.is_dir():
            for sub in [d, *d.rglob("*")]:
                try:
                    os.lchown(sub, pw.pw_uid, pw.pw_gid)
                except OSError:
                    pass
    return name, homes


@atexit.register
def _remove_made_homes() -> None:
    for d in _made_homes:
        shutil.rmtree(d, ignore_errors=True)


def _remove_demo_account(name: str) -> None:
    import pwd

    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for entry in os.listdir("/proc"):  # whatever of its processes is left (only this account's)
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
    subprocess.run(["userdel", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for(hub: Hub, ready, deadline: float, what: str) -> None:
    while True:
        if hub.proc.poll() is not None:
            raise RuntimeError(f"jupyterhub exited ({hub.proc.returncode}) before {what} was up:\n{hub.log_tail()}")
        try:
            if ready():
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not up in time:\n{hub.log_tail()}")
        time.sleep(0.2)


def _stop_all_servers(hub: Hub, timeout: float) -> None:
    """Ask the hub to stop every user's servers (default and named) at once, then wait for all of
    them together, at most ``timeout`` seconds (one after the other, a teardown took 20-40 s)."""
    def live() -> list[tuple[str, str]]:
        users = hub.api("GET", "users", timeout=5).json()
        return [(u["name"], name) for u in users for name in (u.get("servers") or {})]

    for user, name in live():
        path = f"users/{user}/servers/{name}" if name else f"users/{user}/server"
        hub.api("DELETE", path, timeout=5)
    deadline = time.monotonic() + timeout
    while live() and time.monotonic() < deadline:
        time.sleep(0.25)


def stop_hub(hub: Hub, timeout: float = 20.0) -> None:
    """Stop user servers, then the hub (SIGTERM: it stops its service and proxy), then SIGKILL
    whatever is left in its process group and the proxy (from its pid file)."""
    if hub.proc.poll() is None:
        try:
            _stop_all_servers(hub, timeout=10)
        except (requests.RequestException, ValueError):
            pass
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(hub.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    hub.proc.wait(5)
    pid_file = hub.state / "jupyterhub-proxy.pid"
    try:
        pid = int(pid_file.read_text().strip())
        if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


    if hub.demo_account:
        _remove_demo_account(hub.demo_account)
