"""A real Kubernetes v1.28.7 control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as child processes (envtest-style, plus the two
controllers envtest leaves out). No kubelet: see :mod:`.nodes` for the node stand-in.

Usage::

    with ControlPlane("/tmp/work") as cp:          # start() ... stop()
        api = cp.admin_api_client()                 # kubernetes.client.ApiClient (system:masters)
        cp.ensure_namespace("team-a")
        cp.install_crds(kueue_crds_dir())

Everything listens on 127.0.0.1 on free ports (bound to port 0 first, so many control planes can
run side by side); each component logs to ``<workdir>/logs/<component>.log``; a failed start
raises :class:`ControlPlaneError` with the last lines of the failing component's log. Processes
are killed by :meth:`ControlPlane.stop`, and at interpreter exit (``atexit``) if still running.
Start-up takes ~5-10 s on 2 cores (apiserver /readyz ~4 s).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from . import assets, pki
from .objects import ClusterObjects
from .pdeathsig import pdeathsig_preexec
from ..ports import free_port

_LIVE: set["_Proc"] = set()
_LIVE_LOCK = threading.Lock()


def _kill_all_at_exit() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        p.stop(grace=2.0)


atexit.register(_kill_all_at_exit)


class ControlPlaneError(RuntimeError):
    """A component did not start (or did not become ready) in time; the message carries the
    tail of its log."""


def _pdeathsig_preexec():
    """A ``preexec_fn`` making the child get SIGKILL when the thread that started it dies
    (Linux ``PR_SET_PDEATHSIG``), so a killed test run leaves no components behind; None where
    unavailable or when called off the main thread (the signal follows the *thread*)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return pdeathsig_preexec()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"


class _Proc:
    """One component process: argv, its log file, start/stop (SIGTERM, then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, preexec_fn=_pdeathsig_preexec(),
            )
        with _LIVE_LOCK:
            _LIVE.add(self)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check(self) -> None:
        """Raise ControlPlaneError if the process has exited."""
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.popen.returncode}; last lines of {self.log}:\n"
                f"{_tail(self.log)}"
            )

    def stop(self, grace: float = 10.0) -> None:
        p = self.popen
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        with _LIVE_LOCK:
            _LIVE.discard(self)


class ControlPlane(ClusterObjects):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    ``workdir``: a folder of its own (created; holds ``pki/``, ``etcd/``, ``logs/``,
    kubeconfigs). ``authorization``: the API server's ``--authorization-mode``
    (``"Node,RBAC"``; ``"AlwaysAllow"`` is a little faster). ``extra_args``: additional flags per
    component (keys ``etcd``, ``kube-apiserver``, ``kube-controller-manager``,
    ``kube-scheduler``). ``controllers``: ``False`` starts only etcd and the API server (like
    envtest). ``node_monitor_grace_period``: seconds without a node heartbeat before the node
    lifecycle controller marks it NotReady/Unknown (upstream default 40). ``watch_cache``:
    ``True`` (upstream default), ``False`` (``--watch-cache=false``: every watch is served by
    etcd, so :meth:`compact_etcd` makes older resourceVersions expire at once) or a list of
    resources (``["configmaps", "jobs.batch"]``) whose watch cache is disabled.

    After :meth:`start`: ``url`` (``https://127.0.0.1:PORT``), ``ca_file``, ``kubeconfig_path``
    (admin, ``O=system:masters``), ``etcd_url``, ``pki`` (:class:`.pki.Pki`).
    """

    def __init__(self, workdir: str | os.PathLike, *, authorization: str = "Node,RBAC",
                 extra_args: dict[str, list[str]] | None = None, controllers: bool = True,
                 node_monitor_grace_period: int = 40, watch_cache: bool | list[str] = True,
                 start_timeout: float = 60.0):
        self.workdir = Path(workdir).resolve()
        self.authorization = authorization
        self.extra_args = extra_args or {}
        self.controllers = controllers
        self.node_monitor_grace_period = int(node_monitor_grace_period)
        self.watch_cache = watch_cache
        self.start_timeout = start_timeout
        self.bins: assets.Binaries | None = None
        self.pki: pki.Pki | None = None
        self.etcd_port = self.api_port = 0
        self._procs: dict[str, _Proc] = {}
        self._admin_client = None
        self._dynamic = None
        self._sa_seq = 0
        self.apiserver_starts = 0  # how many times kube-apiserver was started

    # -- properties -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        assert self.pki is not None, "start() first"
        return self.pki.ca_crt

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (client cert ``CN=admin, O=system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    def pids(self) -> dict[str, int]:
        """``{component: pid}`` of the running components."""
        return {n: p.popen.pid for n, p in self._procs.items() if p.alive() and p.popen}

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> "ControlPlane":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "ControlPlane":
        """Start every component and wait until each is healthy. Raises
        :class:`.assets.AssetsMissing` or :class:`ControlPlaneError` (after stopping whatever
        had started)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.bins = assets.binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = pki.make_pki(self.workdir / "pki")
        self._start_etcd()
        self.api_port = free_port()
        self._start_apiserver()
        p = self.pki
        pki.write_kubeconfig(self.kubeconfig_path, self.url, p.ca_crt,
                             client_crt=p.admin_crt, client_key=p.admin_key, user="admin")
        if not self.controllers:
            return
        kcm_cfg = pki.write_kubeconfig(self.workdir / "controller-manager.kubeconfig", self.url,
                                       p.ca_crt, client_crt=p.controller_manager_crt,
                                       client_key=p.controller_manager_key,
                                       user="system:kube-controller-manager")
        sched_cfg = pki.write_kubeconfig(self.workdir / "scheduler.kubeconfig", self.url, p.ca_crt,
                                         client_crt=p.scheduler_crt, client_key=p.scheduler_key,
                                         user="system:kube-scheduler")
        kcm_port, sched_port = free_port(), free_port()
        kcm = _Proc("kube-controller-manager", [
            str(self.bins.kube_controller_manager),
            "--kubeconfig", str(kcm_cfg),
            "--authentication-kubeconfig", str(kcm_cfg),
            "--authorization-kubeconfig", str(kcm_cfg),
            "--bind-address", "127.0.0.1", "--secure-port", str(kcm_port),
            "--controllers", "*",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--root-ca-file", str(p.ca_crt),
            "--service-account-private-key-file", str(p.sa_key),
            "--cluster-signing-cert-file", str(p.ca_crt),
            "--cluster-signing-key-file", str(p.ca_key),
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--node-monitor-grace-period", f"{self.node_monitor_grace_period}s",
            *self.extra_args.get("kube-controller-manager", []),
        ], self.logs_dir / "kube-controller-manager.log")
        sched = _Proc("kube-scheduler", [
            str(self.bins.kube_scheduler),
            "--kubeconfig", str(sched_cfg),
            "--authentication-kubeconfig", str(sched_cfg),
            "--authorization-kubeconfig", str(sched_cfg),
            "--bind-address", "127.0.0.1", "--secure-port", str(sched_port),
            "--leader-elect=false",
            *self.extra_args.get("kube-scheduler", []),
        ], self.logs_dir / "kube-scheduler.log")
        for proc in (kcm, sched):
            self._procs[proc.name] = proc
            proc.start()
        self._wait_https_ok(kcm, f"https://127.0.0.1:{kcm_port}/healthz", client_cert=False)
        self._wait_https_ok(sched, f"https://127.0.0.1:{sched_port}/healthz", client_cert=False)

    def _start_etcd(self) -> None:
        assert self.bins is not None
        for _attempt in range(3):
            self.etcd_port, peer = free_port(), free_port()
            data = self.workdir / "etcd"
            shutil.rmtree(data, ignore_errors=True)
            proc = _Proc("etcd", [
                str(self.bins.etcd),
                "--name", "default",
                "--data-dir", str(data),
                "--listen-client-urls", self.etcd_url,
                "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level", "warn",
                *self.extra_args.get("etcd", []),
            ], self.logs_dir / "etcd.log")
            self._procs["etcd"] = proc
            proc.start()
            try:
                self._wait(proc, lambda: self._etcd_post("/v3/kv/range",
                                                         {"key": _b64("health")}) is not None, 20)
                return
            except ControlPlaneError:
                if proc.alive() or "address already in use" not in _tail(proc.log):
                    raise
                proc.stop()
        raise ControlPlaneError("etcd: no free port after 3 attempts")

    def _apiserver_argv(self) -> list[str]:
        assert self.bins is not None and self.pki is not None
        p = self.pki
        return [
            str(self.bins.kube_apiserver),
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.api_port),
            "--tls-cert-file", str(p.apiserver_crt),
            "--tls-private-key-file", str(p.apiserver_key),
            "--client-ca-file", str(p.ca_crt),
            "--service-account-key-file", str(p.sa_pub),
            "--service-account-signing-key-file", str(p.sa_key),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--endpoint-reconciler-type", "none",
            "--authorization-mode", self.authorization,
            "--kubelet-client-certificate", str(p.kubelet_client_crt),
            "--kubelet-client-key", str(p.kubelet_client_key),
            "--kubelet-certificate-authority", str(p.ca_crt),
            "--kubelet-preferred-address-types", "InternalIP",
            "--allow-privileged=true",
            "--profiling=false",
            *self._watch_cache_args(),
            *self.extra_args.get("kube-apiserver", []),
        ]

    def _watch_cache_args(self) -> list[str]:
        if self.watch_cache is True:
            return []
        if self.watch_cache is False:
            return ["--watch-cache=false"]
        return ["--watch-cache-sizes", ",".join(f"{r}#0" for r in self.watch_cache)]

    def _start_apiserver(self) -> None:
        proc = _Proc("kube-apiserver", self._apiserver_argv(), self.logs_dir / "kube-apiserver.log")
        self._procs["kube-apiserver"] = proc
        self.apiserver_starts += 1
        proc.start()
        self._wait_https_ok(proc, f"{self.url}/readyz")

    def stop(self) -> None:
        """Stop the components (scheduler and controller-manager first, etcd last). Idempotent.
        The workdir is kept (logs)."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.stop(grace=3.0)
        if self._admin_client is not None:
            try:
                self._admin_client.close()
            except Exception:
                pass
            self._admin_client = None
            self._dynamic = None

    def restart_apiserver(self, downtime: float = 0.0, grace: float = 2.0) -> None:
        """Stop kube-apiserver (SIGTERM; SIGKILL after ``grace`` seconds: with clients connected
        its graceful shutdown lasts 60 s), wait ``downtime`` seconds, start it again on the same
        port and wait for ``/readyz`` (~3-5 s). Clients keep working (same URL and CA). Right
        after this the API server may answer 403 for a moment (RBAC not loaded yet), and its
        watch cache starts afresh: a watch from a resourceVersion older than the restart gets
        410 Gone ("too old resource version")."""
        proc = self._procs.get("kube-apiserver")
        if proc is not None:
            proc.stop(grace=grace)
        if downtime:
            time.sleep(downtime)
        self._start_apiserver()

    def stop_component(self, name: str, grace: float = 2.0) -> None:
        """Stop one component (``kube-scheduler``, ``kube-controller-manager``,
        ``kube-apiserver`` or ``etcd``): SIGTERM, SIGKILL after ``grace`` seconds (the API
        server's graceful shutdown takes 60 s while clients hold watches).
        :meth:`start_component` starts it again (same flags and ports)."""
        self._procs[name].stop(grace=grace)

    def restart_controllers(self) -> None:
        """Restart kube-controller-manager and kube-scheduler (same flags and ports). After API
        server restarts their client-go reflectors back off, up to 30 s, before they watch again
        (as in any cluster); a test that restarted the API server calls this afterwards so that
        the tests after it do not wait for that (tests/k8s/real/conftest.py does it)."""
        for name in ("kube-controller-manager", "kube-scheduler"):
            proc = self._procs.get(name)
            if proc is not None:
                proc.stop(grace=2.0)
                proc.start()

    def start_component(self, name: str) -> None:
        """Start a component stopped with :meth:`stop_component` (same flags and ports)."""
        if name == "kube-apiserver":
            self._start_apiserver()
        else:
            self._procs[name].start()

    # -- waiting ----------------------------------------------------------------------------------
    def _wait(self, proc: _Proc, ok, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            proc.check()
            try:
                if ok():
                    return
            except Exception as e:  # not up yet
                last = e
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{proc.name} not ready after {timeout:.0f} s (last error: {last}); "
            f"last lines of {proc.log}:\n{_tail(proc.log)}"
        )

    def _ssl_context(self, client_cert: bool = True, verify: bool = True) -> ssl.SSLContext:
        assert self.pki is not None
        if verify:
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        else:
            ctx = ssl._create_unverified_context()
        if client_cert:
            ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
        return ctx

    def _wait_https_ok(self, proc: _Proc, url: str, client_cert: bool = True) -> None:
        ctx = self._ssl_context(client_cert=client_cert, verify=client_cert)

        def ok() -> bool:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return r.status == 200

        self._wait(proc, ok, self.start_timeout)

    # -- etcd ---------------------------------------------------------------------------------------
    def _etcd_post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def etcd_revision(self) -> int:
        """etcd's current revision (= the newest resourceVersion the API server can hand out)."""
        return int(self._etcd_post("/v3/kv/range", {"key": _b64("/")})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (physically) and return that
        revision. Afterwards a watch *served by etcd* from an older resourceVersion fails with
        410 Gone. With the watch cache on (the default) the API server serves watches from its
        cache, which keeps every event since the API server started (for at least 75 s), so
        such a watch still succeeds: use ``watch_cache=False`` (or a list of resources) for
        compaction to bite, or :meth:`restart_apiserver`, after which older resourceVersions
        get 410 from the fresh cache."""
        rev = self.etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    # -- clients ------------------------------------------------------------------------------------
    def admin_api_client(self):
        """A new ``kubernetes.client.ApiClient`` from the admin kubeconfig (system:masters)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def _admin(self):
        """The control plane's own admin :class:`KubeClient` (shared, lazily created)."""
        if self._admin_client is None:
            from ..backends.k8s_client import KubeClient

            self._admin_client = self.admin_api_client()
            self._kube = KubeClient(self._admin_client, attempts=6)
        return self._kube

    @property
    def kube(self):
        """An admin ``jupyter_gpuqueue.backends.k8s_client.KubeClient`` (JSON requests with
        retries) for the harness' own calls."""
        return self._admin()

def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()
