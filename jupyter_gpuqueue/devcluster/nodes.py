"""The node stand-in: plays the kubelets of fake GPU nodes against a real API server.

:class:`NodeAgent` registers Nodes (capacity/allocatable with ``nvidia.com/gpu`` or MIG
resources, GPU Feature Discovery labels given by the caller, ``Ready=True``), keeps them fresh
(a Lease in ``kube-node-lease`` renewed every ``heartbeat_interval`` seconds, the Ready
condition re-posted every ``status_interval`` seconds) so the node lifecycle controller never
taints them, watches all Pods and runs those bound to its nodes as real processes
(:class:`.podrunner.PodWorker`, one thread each), and serves the kubelet's
``GET /containerLogs/{namespace}/{pod}/{container}`` over HTTPS, which the API server proxies
``GET .../pods/{name}/log`` to (Node ``status.daemonEndpoints.kubeletEndpoint.Port``).

Usage::

    agent = NodeAgent.for_control_plane(cp)         # or NodeAgent(api_client, workdir, ...)
    agent.start()
    agent.add_node("node-b", allocatable={"nvidia.com/gpu": "4"},
                   labels={"nvidia.com/gpu.product": "NVIDIA-H100-SXM5-80GB"})
    ...
    agent.stop()                                    # kills every child process

``counters()`` -> ``{"started", "succeeded", "failed", "start_error", "killed", "deleted"}``:
processes started, exited 0, ended otherwise (incl. start errors), could not start, signals
sent because of a deletion, final ``gracePeriodSeconds: 0`` DELETEs sent, unexpected errors
of pod workers (logged).
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .podrunner import PodWorker, now_rfc3339
from .server import KubeletServer

log = logging.getLogger(__name__)

DEFAULT_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110",
                       "ephemeral-storage": "1Ti"}
KUBELET_VERSION = "v1.28.7"

_AGENTS: "weakref.WeakSet[NodeAgent]" = weakref.WeakSet()


@atexit.register
def _stop_agents_at_exit() -> None:
    for agent in list(_AGENTS):
        agent.stop()


def _micro_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class NodeAgent:
    """Fake kubelets for several Nodes, backed by real processes. (Slightly over 400 lines: the
    Nodes' heartbeats and the Pod watch share its lock and counters; one Pod's life is in
    ``podrunner.PodWorker``, the log endpoint in ``server.KubeletServer``.)

    ``api_client``: a ``kubernetes.client.ApiClient`` allowed to write Nodes, Leases, Pods and
    pods/status (the admin client). ``workdir``: folder for container logs
    (``<workdir>/logs``). ``tls_cert``/``tls_key``: the serving certificate of the log endpoint
    (must be trusted by the API server's ``--kubelet-certificate-authority``); ``client_ca``:
    when given, clients (the API server) must present a certificate signed by it.
    ``heartbeat_interval``/``status_interval``: seconds between Lease renewals / Ready
    re-posts. ``base_env``: the environment containers start from (default: PATH, HOME, LANG
    and TMPDIR of this process, plus ``KUBERNETES_SERVICE_HOST/PORT`` of the API server).
    """

    def __init__(self, api_client, workdir: str | os.PathLike, *, tls_cert: str | os.PathLike,
                 tls_key: str | os.PathLike, client_ca: str | os.PathLike | None = None,
                 heartbeat_interval: float = 5.0, status_interval: float = 60.0,
                 base_env: dict[str, str] | None = None):
        from ..backends.k8s_client import KubeClient

        self.api_client = api_client
        self.kube = KubeClient(api_client, attempts=8, backoff_max=1.0)
        self.workdir = Path(workdir).resolve()
        self.log_dir = self.workdir / "logs"
        self.heartbeat_interval = heartbeat_interval
        self.status_interval = status_interval
        if base_env is None:
            base_env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR")
                        if k in os.environ}
            host = api_client.configuration.host.split("://", 1)[-1]
            h, _, p = host.rpartition(":")
            base_env.update(KUBERNETES_SERVICE_HOST=h or host, KUBERNETES_SERVICE_PORT=p or "443")
        self.base_env = base_env
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls_cert), str(tls_key))
        if client_ca:
            ctx.load_verify_locations(str(client_ca))
            ctx.verify_mode = ssl.CERT_REQUIRED
        self.server = KubeletServer(ctx, self._worker_by_name)
        self._nodes: dict[str, dict] = {}  # name -> {"ready": bool, "heartbeat": bool, ...}
        self._workers: dict[str, PodWorker] = {}  # uid -> worker
        self._by_name: dict[tuple[str, str], PodWorker] = {}
        self._lock = threading.RLock()
        self._counters = dict.fromkeys(
            ("started", "succeeded", "failed", "start_error", "killed", "deleted", "errors"), 0)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="node-standin")
        self._watch_resp = None
        self.watch_restarts = 0

    @classmethod
    def for_control_plane(cls, cp, workdir: str | os.PathLike | None = None, **kw) -> "NodeAgent":
        """An agent for a started :class:`.controlplane.ControlPlane`: its admin client, its
        kubelet serving certificate, the CA for client certificates; ``workdir`` defaults to
        ``<cp.workdir>/nodes``."""
        return cls(cp.admin_api_client(), workdir or cp.workdir / "nodes",
                   tls_cert=cp.pki.kubelet_crt, tls_key=cp.pki.kubelet_key,
                   client_ca=cp.pki.ca_crt, **kw)

    @property
    def port(self) -> int:
        """The HTTPS port of the kubelet endpoint (all nodes share it)."""
        return self.server.port

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "NodeAgent":
        """Serve logs, start the Pod watch and the heartbeats. Returns self."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.server.start()
        _AGENTS.add(self)
        for target, name in ((self._watch_loop, "node-standin-watch"),
                             (self._heartbeat_loop, "node-standin-heartbeat")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, remove_nodes: bool = False) -> None:
        """Stop watching and heartbeating, SIGKILL every running container process, stop the
        log server. ``remove_nodes``: also delete the Node objects. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        _AGENTS.discard(self)
        resp = self._watch_resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:
                pass
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.gone = True
            w.kill()
        for w in workers:
            w.finished.wait(5)
        if remove_nodes:
            for n in list(self._nodes):
                self.remove_node(n)
        self.server.stop()
        for t in self._threads:
            t.join(5)
        self._threads.clear()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> "NodeAgent":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def counters(self) -> dict[str, int]:
        """A copy of the counters (see the module docstring)."""
        with self._lock:
            return dict(self._counters)

    def _count(self, name: str) -> None:
        with self._lock:
            self._counters[name] += 1

    # -- nodes ------------------------------------------------------------------------------------
    def add_node(self, name: str, *, allocatable: dict[str, str] | None = None,
                 labels: dict[str, str] | None = None, taints: list[dict] | None = None,
                 capacity: dict[str, str] | None = None) -> dict:
        """Register Node ``name`` (Ready) and heartbeat it. ``allocatable``: resources merged
        over ``cpu: 64, memory: 512Gi, pods: 110, ephemeral-storage: 1Ti`` (e.g.
        ``{"nvidia.com/gpu": "4"}``); ``capacity`` defaults to the same. ``labels``: e.g. GPU
        Feature Discovery's ``nvidia.com/gpu.product``; ``kubernetes.io/hostname``, ``.../os``
        and ``.../arch`` are added. ``taints``: ``[{key, value, effect}]``. Returns the Node.
        Replaces a Node of the same name."""
        alloc = {**DEFAULT_ALLOCATABLE, **(allocatable or {})}
        cap = {**alloc, **(capacity or {})}
        lab = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
               "kubernetes.io/arch": "amd64", **(labels or {})}
        from ..backends.k8s_client import KubeApiError

        try:
            self.kube.request("DELETE", f"/api/v1/nodes/{name}")
        except KubeApiError as e:
            if e.status != 404:
                raise
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": lab},
                "spec": {"taints": list(taints or [])},
                "status": self._node_status(name, cap, alloc, True)}
        for _ in range(50):
            try:
                node = self.kube.create("/api/v1/nodes", body)
                break
            except KubeApiError as e:  # the old one may still be going away
                if e.status != 409:
                    raise
                time.sleep(0.1)
        with self._lock:
            self._nodes[name] = {"ready": True, "heartbeat": True, "capacity": cap,
                                 "allocatable": alloc, "uid": node["metadata"]["uid"]}
        self._post_status(name)
        self._renew_lease(name)
        return node

    def _node_status(self, name: str, cap: dict, alloc: dict, ready: bool) -> dict:
        now = now_rfc3339()
        return {
            "capacity": cap, "allocatable": alloc,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "gpuqueue-standin://1", "machineID": "",
                         "systemUUID": "", "bootID": "", "kernelVersion": "",
                         "osImage": "jupyter_gpuqueue node stand-in"},
            "conditions": [
                {"type": t, "status": "False", "reason": f"KubeletHasNo{t[:-8]}Pressure"
                 if t.endswith("Pressure") else "KubeletHasSufficientPID",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ] + [{"type": "Ready", "status": "True" if ready else "False",
                  "reason": "KubeletReady" if ready else "KubeletNotReady",
                  "message": "node stand-in is posting ready status" if ready
                  else "node stand-in: set_ready(False)",
                  "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }

    def _post_status(self, name: str) -> None:
        from ..backends.k8s_client import KubeApiError

        with self._lock:
            n = self._nodes.get(name)
            if n is None:
                return
            st = self._node_status(name, n["capacity"], n["allocatable"], n["ready"])
        try:
            self.kube.merge_patch(f"/api/v1/nodes/{name}/status", {"status": st})
        except KubeApiError as e:
            if e.status != 404:
                raise

    def _renew_lease(self, name: str) -> None:
        from ..backends.k8s_client import KubeApiError

        with self._lock:
            uid = (self._nodes.get(name) or {}).get("uid")
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        try:
            self.kube.merge_patch(path, {"spec": {"renewTime": _micro_now(),
                                                  "holderIdentity": name}})
        except KubeApiError as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                      "name": name, "uid": uid}]},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                             "renewTime": _micro_now()}}
            try:
                self.kube.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                 body)
            except KubeApiError as e2:
                if e2.status != 409:
                    raise

    def remove_node(self, name: str) -> None:
        """Stop heartbeating ``name`` and delete the Node (its Lease goes with it)."""
        from ..backends.k8s_client import KubeApiError

        with self._lock:
            self._nodes.pop(name, None)
        try:
            self.kube.request("DELETE", f"/api/v1/nodes/{name}")
        except KubeApiError as e:
            if e.status != 404:
                raise

    def set_ready(self, name: str, ready: bool) -> None:
        """Post ``Ready=True``/``False`` for ``name`` now (heartbeats go on with that value)."""
        with self._lock:
            self._nodes[name]["ready"] = bool(ready)
        self._post_status(name)

    def set_heartbeat(self, name: str, on: bool) -> None:
        """Stop (``False``) or resume heartbeats of ``name``; without them the node lifecycle
        controller marks it ``Unknown`` and taints it after ``--node-monitor-grace-period``."""
        with self._lock:
            self._nodes[name]["heartbeat"] = bool(on)
            if on:
                self._nodes[name].pop("lost", None)
        if on:
            self._post_status(name)
            self._renew_lease(name)

    def lose_node(self, name: str) -> None:
        """The machine ``name`` is gone (its kubelet stopped, power lost): no more heartbeats,
        its Pods' processes are killed without a word to the API server, and its Pods are left
        as the API server has them (the node lifecycle controller marks the Node ``Unknown``
        after ``--node-monitor-grace-period`` and its Pods not Ready). :meth:`set_heartbeat`
        ``(name, True)`` brings it back (empty)."""
        with self._lock:
            self._nodes[name]["heartbeat"] = False
            self._nodes[name]["lost"] = True
            victims = [w for w in self._workers.values() if (w.pod.get("spec") or {}).get("nodeName") == name]
        for w in victims:
            w.kill()

    def nodes(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(self.heartbeat_interval):
            post = time.monotonic() - last_status >= self.status_interval
            if post:
                last_status = time.monotonic()
            with self._lock:
                names = [n for n, v in self._nodes.items() if v["heartbeat"]]
            for n in names:
                try:
                    self._renew_lease(n)
                    if post:
                        self._post_status(n)
                except Exception as e:  # API server restarting: next round
                    log.info("node stand-in: heartbeat of %s failed: %s", n, e)

    # -- pods -------------------------------------------------------------------------------------
    def _worker_by_name(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            return self._by_name.get((namespace, name))

    def workers(self) -> list[PodWorker]:
        """The Pods this agent runs or has run (and that still exist)."""
        with self._lock:
            return list(self._workers.values())

    def _watch_loop(self) -> None:
        from ..backends.k8s_client import KubeApiError

        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    items, rv = self.kube.list("/api/v1/pods")
                    self._resync(items)
                for ev in self._watch("/api/v1/pods", rv):
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") != "BOOKMARK":
                        self._handle(ev["type"], obj)
            except KubeApiError as e:
                if self._stop.is_set():
                    return
                self.watch_restarts += 1
                if e.status == 410:
                    rv = ""
                else:
                    log.info("node stand-in: pod watch: %s", e)
                    self._stop.wait(0.5)
            except Exception as e:
                if self._stop.is_set():
                    return
                self.watch_restarts += 1
                log.warning("node stand-in: pod watch failed: %r", e)
                self._stop.wait(0.5)

    def _watch(self, path: str, rv: str):
        """Events of a watch from ``rv`` (like KubeClient.watch, but stoppable: the response
        is kept so :meth:`stop` can shut it down)."""
        import json

        from ..backends.k8s_client import KubeApiError

        def _status_error(code: int, text: str) -> KubeApiError:
            try:
                st = json.loads(text)
            except ValueError:
                st = {}
            st = st if isinstance(st, dict) else {}
            return KubeApiError(int(st.get("code") or code), str(st.get("reason") or ""),
                                str(st.get("message") or text[:500]), [], st)

        ac = self.api_client
        q = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "60"),
             ("resourceVersion", rv)]
        hdr = {"Accept": "application/json"}
        try:
            if hasattr(ac, "param_serialize"):  # kubernetes >= 35
                params = ac.param_serialize(method="GET", resource_path=path, query_params=q,
                                            header_params=hdr, auth_settings=["BearerToken"])
                resp = ac.call_api(*params, _request_timeout=(10, 90)).response
            else:  # pragma: no cover - older clients
                resp = ac.call_api(path, "GET", query_params=q, header_params=hdr,
                                   auth_settings=["BearerToken"], _preload_content=False,
                                   _return_http_data_only=True, _request_timeout=(10, 90))
        except Exception as exc:
            st = getattr(exc, "status", None)
            if isinstance(st, int) and st:
                raise _status_error(st, getattr(exc, "body", "") or "") from None
            raise KubeApiError(0, "ConnectionError", str(exc)) from None
        self._watch_resp = resp
        try:
            if resp.status != 200:
                raise _status_error(resp.status, resp.read().decode("utf-8", "replace"))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        if ev.get("type") == "ERROR":
                            o = ev.get("object") or {}
                            raise KubeApiError(int(o.get("code") or 500), str(o.get("reason")),
                                               str(o.get("message")), [], o)
                        yield ev
        finally:
            self._watch_resp = None
            resp.release_conn()

    def _resync(self, items: list[dict]) -> None:
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self._handle("ADDED", pod)
        with self._lock:
            stale = [w for uid, w in self._workers.items() if uid not in seen]
        for w in stale:
            self._handle("DELETED", w.pod)

    def _handle(self, typ: str, pod: dict) -> None:
        md = pod.get("metadata") or {}
        uid = md.get("uid")
        node = (pod.get("spec") or {}).get("nodeName")
        with self._lock:
            if node in self._nodes and self._nodes[node].get("lost"):
                return  # nobody there to see it
            w = self._workers.get(uid)
            if w is None:
                if typ == "DELETED" or node not in self._nodes:
                    return
                phase = (pod.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):  # finished before this agent started
                    if md.get("deletionTimestamp"):
                        self._pool.submit(self._delete_now, pod)
                    return
                w = PodWorker(pod, self.kube, self.log_dir, self.base_env, self._count)
                self._workers[uid] = w
                self._by_name[(w.namespace, w.name)] = w
                w.thread.start()
            if typ == "DELETED":
                self._workers.pop(uid, None)
                if self._by_name.get((w.namespace, w.name)) is w:
                    del self._by_name[(w.namespace, w.name)]
        if typ == "DELETED":
            w.kill()
            return
        w.observe(pod)
        if md.get("deletionTimestamp"):
            grace = md.get("deletionGracePeriodSeconds")
            if w.request_delete(30 if grace is None else grace):
                self._pool.submit(w.final_delete)

    def _delete_now(self, pod: dict) -> None:
        from ..backends.k8s_client import KubeApiError

        md = pod["metadata"]
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}",
                              body={"kind": "DeleteOptions", "apiVersion": "v1",
                                    "gracePeriodSeconds": 0,
                                    "preconditions": {"uid": md["uid"]}})
            self._count("deleted")
        except KubeApiError as e:
            if e.status not in (404, 409):
                log.warning("node stand-in: delete %s: %s", md["name"], e)
