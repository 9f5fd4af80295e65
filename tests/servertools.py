"""Real ``jupyter server`` processes with the gpuqueue extension, for tests that need one outside
the test's own event loop: crash tests (SIGKILL and restart), concurrent REST clients from threads,
schemathesis.

- :class:`ServerSetup`: one queue's folders and configuration (cluster YAML, inventory YAML,
  ``jupyter_server_config.py``, a token); every server started from it shares the same ledger, state
  folder and root directory, so a restarted server continues where the killed one stopped.
- :class:`Launcher`: starts servers. With ``zygote=True`` they are forked from ``server_zygote.py``,
  a Python that has imported jupyter_server once (about 1 s per start instead of 3-6 s on a small
  machine); otherwise ``python -m jupyter_server``. Either way the server is a separate process
  running jupyter_server's own ``main()``.
- :class:`RunningServer`: its URL and token, ``request()``, ``kill9()``, ``stop()``.

Import it from tests in tests/ (``from servertools import ...``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import requests

from jupyter_gpuqueue.ports import free_port, port_taken

HERE = Path(__file__).resolve().parent
ZYGOTE = HERE / "server_zygote.py"
START_TIMEOUT = 90.0  # seconds; a loaded 2-core machine is slow to import and start

# the queue API only: the rest of JupyterLab stays off, as in the hub service's configuration
SERVER_CONFIG = """\
c = get_config()
c.ServerApp.jpserver_extensions = {{
    "jupyter_gpuqueue": True, "jupyterlab": False, "jupyter_lsp": False,
    "jupyter_server_terminals": False, "notebook_shim": False,
}}
c.IdentityProvider.token = {token!r}
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
c.ServerApp.root_dir = {root!r}
c.ServerApp.shutdown_no_activity_timeout = 0
c.GpuQueueApp.config_files = [{cluster!r}]
c.GpuQueueApp.inventory_file = {inventory!r}
c.GpuQueueApp.db_url = {db_url!r}
c.GpuQueueApp.state_dir = {state!r}
c.GpuQueueApp.standalone_user = "alice"
c.GpuQueueApp.cycle_interval = {cycle_interval!r}
"""


@dataclass
class ServerSetup:
    """Folders and configuration of one queue under ``base`` (created)."""

    base: Path
    cluster_yaml: str
    inventory_yaml: str
    extra_config: str = ""
    cycle_interval: float = 0.05
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    def __post_init__(self) -> None:
        self.base = Path(self.base)
        for d in ("config", "data", "runtime", "root", "state"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "cluster.yaml").write_text(self.cluster_yaml)
        (self.base / "inventory.yaml").write_text(self.inventory_yaml)
        (self.base / "config" / "jupyter_server_config.py").write_text(SERVER_CONFIG.format(
            token=self.token, root=str(self.root), cluster=str(self.base / "cluster.yaml"),
            inventory=str(self.base / "inventory.yaml"), db_url=f"sqlite:///{self.db_path}",
            state=str(self.base / "state"), cycle_interval=self.cycle_interval,
        ) + textwrap.dedent(self.extra_config))

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def db_path(self) -> Path:
        return self.base / "ledger.sqlite"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUQUEUE_", "JUPYTER_", "JUPYTERHUB_", "PYTEST_"))}
        env.update({
            "JUPYTER_CONFIG_DIR": str(self.base / "config"),
            "JUPYTER_DATA_DIR": str(self.base / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONUNBUFFERED": "1",
        })
        return env


@dataclass
class RunningServer:
    setup: ServerSetup
    pid: int
    port: int
    log_path: Path
    launcher: "Launcher"
    popen: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        """The API root, ending in ``/``: ``http://127.0.0.1:PORT/gpuqueue/api/``."""
        return f"http://127.0.0.1:{self.port}/gpuqueue/api/"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.setup.token}"}

    def request(self, method: str, path: str, session: Optional[requests.Session] = None,
                **kw: Any) -> requests.Response:
        kw.setdefault("timeout", 30)
        headers = {**self.headers, **(kw.pop("headers", None) or {})}
        return (session or requests).request(method, self.url + path.lstrip("/"), headers=headers, **kw)

    def alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False

    def kill9(self) -> None:
        """SIGKILL the server process (only it: its jobs run in sessions of their own) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.launcher.reap(self)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout`` seconds."""
        if not self.alive():
            self.launcher.reap(self)
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill9()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Launcher:
    """Starts :class:`RunningServer` processes (see the module docstring). Close it at the end."""

    def __init__(self, zygote: bool = True):
        self._lock = threading.Lock()
        self._zygote: Optional[subprocess.Popen] = None
        if zygote:
            self._zygote = subprocess.Popen(
                [sys.executable, "-u", str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, start_new_session=True,
            )

    def _ask(self, cmd: dict) -> dict:
        assert self._zygote is not None and self._zygote.stdin and self._zygote.stdout
        with self._lock:
            self._zygote.stdin.write(json.dumps(cmd) + "\n")
            self._zygote.stdin.flush()
            line = self._zygote.stdout.readline()
        if not line:
            raise RuntimeError("the server zygote exited")
        return json.loads(line)

    def start(self, setup: ServerSetup, timeout: float = START_TIMEOUT) -> RunningServer:
        """Start a server of ``setup`` on a free port; return once ``GET info`` answers 200 (its
        queue service restored and started). Raises RuntimeError with its log otherwise. A server
        whose port another process took before it bound it is started again on another
        (``ports.port_taken``)."""
        for _attempt in range(3):
            server = self._start_once(setup, timeout)
            if server is not None:
                return server
        raise RuntimeError("no free port after 3 attempts")

    def _start_once(self, setup: ServerSetup, timeout: float) -> Optional[RunningServer]:
        port = free_port()
        log_path = setup.base / f"server-{port}.log"
        argv = [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
        if self._zygote is not None:
            pid = self._ask({"op": "spawn", "argv": argv, "env": setup.env(), "cwd": str(setup.base),
                             "log": str(log_path)})["pid"]
            server = RunningServer(setup, pid, port, log_path, self)
        else:
            with open(log_path, "ab") as log:
                popen = subprocess.Popen([sys.executable, "-m", "jupyter_server", *argv], cwd=setup.base,
                                         env=setup.env(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            server = RunningServer(setup, popen.pid, port, log_path, self, popen)
        deadline = time.monotonic() + timeout
        while True:
            if not server.alive():
                if port_taken(server.log_tail(5)):
                    self.reap(server)
                    return None
                raise RuntimeError(f"the server exited before it answered:\n{server.log_tail()}")
            try:
                if server.request("GET", "info", timeout=5).status_code == 200:
                    return server
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                server.kill9()
                raise RuntimeError(f"the server did not answer within {timeout} s:\n{server.log_tail()}")
            time.sleep(0.05)

    def reap(self, server: RunningServer) -> None:
        if server.popen is not None:
            server.popen.wait(10)
        elif self._zygote is not None and self._zygote.poll() is None:
            self._ask({"op": "wait", "pid": server.pid})

    def close(self) -> None:
        if self._zygote is not None and self._zygote.poll() is None:
            assert self._zygote.stdin is not None
            self._zygote.stdin.close()
            try:
                self._zygote.wait(10)
            except subprocess.TimeoutExpired:
                self._zygote.kill()
                self._zygote.wait(5)
