"""A real Jupyter server with jupyter_gpuqueue for the benchmarks, or one given by URL and token.

:class:`BenchServer` starts ``python -m jupyter_server`` in a process of its own with token
authentication (a random token; every request carries ``Authorization: token …``), the queue's
SQLite ledger and job logs in a private folder, and private Jupyter runtime / data folders (so that
the bench server is never discovered by other clients on this machine). The other server
extensions (JupyterLab, terminals, LSP) are turned off: the REST API and event stream do not need
them, and the server starts faster.

:class:`ExternalServer` is a running server given by ``--url`` / ``--token``: the benchmarks use it
as it is configured (its queues must be those of :mod:`.stream` for ``drain``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import requests

from ..ports import free_port, port_taken
from . import stream

API = "gpuqueue/api/"


def client_session(**kwargs):
    """An ``aiohttp.ClientSession`` that keeps the server's cookies, as a browser and
    ``GpuQueueClient`` (a ``requests.Session``) do. Without them jupyter_server answers every
    token-authenticated request as a first visit: it makes a new anonymous user and signs and
    sets a login cookie each time (≈ 0.15 ms of its CPU). ``unsafe``: the bench server is
    ``127.0.0.1``, an IP address, whose cookies aiohttp refuses otherwise."""
    import aiohttp

    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), **kwargs)


class ExternalServer:
    """A running server: ``url`` (base URL, e.g. ``http://127.0.0.1:8888/``) and ``token``."""

    pid: Optional[int] = None
    ledger_path: Optional[str] = None

    def __init__(self, url: str, token: Optional[str]):
        self.url = url if url.endswith("/") else url + "/"
        self.token = token or ""

    @property
    def api(self) -> str:
        """Base URL of the REST API (ends with ``gpuqueue/api/``)."""
        return self.url + API

    @property
    def ws_url(self) -> str:
        """URL of the event stream (websocket)."""
        return "ws" + self.api[len("http"):] + "events"

    @property
    def headers(self) -> dict:
        """The authentication header of every request."""
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def info(self) -> dict:
        r = requests.get(self.api + "info", headers=self.headers, timeout=10)
        r.raise_for_status()
        return r.json()

    def __enter__(self) -> "ExternalServer":
        return self

    def __exit__(self, *exc) -> None:
        pass


class BenchServer(ExternalServer):
    """Start a real ``jupyter server`` with jupyter_gpuqueue (see the module docstring).

    ``config_yaml`` / ``inventory_yaml``: Kueue YAML and a static inventory (default: the stream's
    16 × 8 A100 cluster with borrowing). ``cycle_interval``: seconds (``GpuQueueApp.cycle_interval``).
    ``profile_path``: run the server under cProfile and write its profile there on ``stop()``.
    ``workdir``: where everything goes (a new temporary folder by default, removed on exit unless
    ``keep``). ``extra_config``: more ``GpuQueueApp`` traits. ``env``: extra environment.
    Use as a context manager; ``stop()`` stops the server (SIGTERM, then SIGKILL after 10 s).
    """

    def __init__(self, *, config_yaml: Optional[str] = None, inventory_yaml: Optional[str] = None,
                 cycle_interval: float = 0.5, workdir: Optional[str] = None, keep: bool = False,
                 extra_config: Optional[dict] = None, env: Optional[dict] = None, log_level: str = "WARN",
                 python: str = sys.executable, startup_timeout: float = 120.0,
                 profile_path: Optional[str] = None):
        self.workdir = os.path.abspath(workdir) if workdir else tempfile.mkdtemp(prefix="gpuqueue-bench-")
        self._own_workdir = workdir is None
        self.keep = keep
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}/", secrets.token_hex(24))
        self.config_path = os.path.join(self.workdir, "cluster.yaml")
        self.inventory_path = os.path.join(self.workdir, "inventory.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_yaml if config_yaml is not None else stream.cluster_yaml(borrowing=True))
        with open(self.inventory_path, "w") as f:
            f.write(inventory_yaml if inventory_yaml is not None else stream.inventory_yaml())
        self.state_dir = os.path.join(self.workdir, "state")
        self.ledger_path = os.path.join(self.workdir, "ledger.sqlite")
        self.jobs_dir = os.path.join(self.workdir, "jobs")
        os.makedirs(self.jobs_dir, exist_ok=True)
        gq = {
            "config_files": [self.config_path],
            "inventory_file": self.inventory_path,
            "db_url": f"sqlite:///{self.ledger_path}",
            "state_dir": self.state_dir,
            "cycle_interval": cycle_interval,
            "discard_stored_config": True,
            "lease_priority_class": None,  # the stream's cluster has no notebook leases
        }
        gq.update(extra_config or {})
        self.db_url = gq["db_url"]  # SQLite in the folder, or what --db-url named (PostgreSQL)
        self.server_config = {
            "ServerApp": {
                "ip": "127.0.0.1", "port": self.port, "port_retries": 0, "open_browser": False,
                "root_dir": self.jobs_dir, "log_level": log_level,
                "allow_root": hasattr(os, "geteuid") and os.geteuid() == 0,
                "jpserver_extensions": {"jupyter_gpuqueue": True, "jupyterlab": False, "jupyter_lsp": False,
                                        "notebook_shim": False, "jupyter_server_terminals": False},
            },
            "IdentityProvider": {"token": self.token},
            "GpuQueueApp": gq,
        }
        self.config_file = os.path.join(self.workdir, "jupyter_server_config.json")
        self._write_config()
        self.log_path = os.path.join(self.workdir, "server.log")
        self.python = python
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.profile_path = profile_path  # cProfile of the server process, written when it stops
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "BenchServer":
        """Start the server and wait until its queue answers (RuntimeError with the log's tail if
        it does not within ``startup_timeout`` seconds)."""
        env = dict(os.environ)
        for var in ("GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL", "GPUQUEUE_URL", "GPUQUEUE_TOKEN",
                    "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_SERVICE_NAME"):
            env.pop(var, None)
        env.update({
            "JUPYTER_RUNTIME_DIR": os.path.join(self.workdir, "runtime"),
            "JUPYTER_DATA_DIR": os.path.join(self.workdir, "data"),
            "JUPYTER_CONFIG_DIR": os.path.join(self.workdir, "config"),
            **self.extra_env,
        })
        if self.profile_path:
            cmd = [self.python, "-m", "jupyter_gpuqueue.bench._profiled_server", self.profile_path]
        else:
            cmd = [self.python, "-m", "jupyter_server"]
        cmd.append(f"--config={self.config_file}")
        self._log = open(self.log_path, "ab")
        self._spawn(cmd, env)
        deadline = time.monotonic() + self.startup_timeout
        retries = 3  # another process took the port between free_port() and the bind (ports.py)
        while True:
            if self.proc.poll() is not None:
                if retries and port_taken(self.log_tail(5)):
                    retries -= 1
                    self._use_port(free_port())
                    self._spawn(cmd, env)
                    continue
                raise RuntimeError(f"the bench server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                r = requests.get(self.api + "info", headers=self.headers, timeout=5)
                if r.status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the bench server did not answer within {self.startup_timeout:g} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.2)

    def _spawn(self, cmd: list, env: dict) -> None:
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    def _use_port(self, port: int) -> None:
        """Serve on ``port`` from the next start: the URL and the config file change with it."""
        self.port = port
        self.url = f"http://127.0.0.1:{port}/"
        self.server_config["ServerApp"]["port"] = port
        self._write_config()

    def _write_config(self) -> None:
        with open(self.config_file, "w") as f:
            json.dump(self.server_config, f, indent=1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (the queue's loop stops; running jobs keep running), SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            if self.profile_path:  # _profiled_server writes the profile on SIGUSR1
                try:
                    os.unlink(self.profile_path)
                except FileNotFoundError:
                    pass
                self.proc.send_signal(signal.SIGUSR1)
                deadline = time.monotonic() + 60
                while not os.path.exists(self.profile_path) and time.monotonic() < deadline:
                    time.sleep(0.1)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None

    def ledger_rows(self, sql: str) -> list[tuple]:
        """Rows of a read-only SQL query on the server's ledger (SQLite or PostgreSQL)."""
        from .ledger_read import ledger_rows

        return ledger_rows(self.db_url, sql)

    def kill_jobs(self) -> int:
        """After :meth:`stop`: SIGKILL the process groups of the jobs the ledger says still run
        (the local backend's jobs outlive their server by design); returns how many."""
        if self.db_url.startswith("sqlite") and not os.path.exists(self.ledger_path):
            return 0
        runs = [r[0] for r in self.ledger_rows("SELECT run FROM workloads WHERE state IN ('Admitted', 'Running')")]
        killed = 0
        for run in runs:
            try:
                pgid = int((json.loads(run or "null") if isinstance(run, (str, type(None))) else run)["pgid"])
            except (TypeError, ValueError, KeyError):
                continue
            if pgid <= 1:
                continue
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        return killed

    def __enter__(self) -> "BenchServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.kill_jobs()
        if self._own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
