"""One Pod played by the node stand-in (:mod:`.nodes`): its first container's ``command + args``
runs as a real subprocess on this machine, and its status goes to the API server the way a
kubelet reports it.

Life of a :class:`PodWorker` (one thread per Pod):

1. annotation ``devcluster.gpuqueue.io/waiting-reason`` set (e.g. ``ImagePullBackOff``): the
   container stays ``waiting`` with that reason (phase Pending) until the Pod is deleted;
2. otherwise the process starts (argv list, no shell; env = a minimal base + the container's
   ``env`` values; cwd = ``workingDir`` when it exists; stdout+stderr -> ``<workdir>/logs/
   <namespace>_<pod>_<uid>.log``) and the status becomes ``Running``;
   a command that cannot be executed -> ``terminated {exitCode: 128, reason: StartError}`` and
   phase Failed (what containerd-based kubelets report for ``restartPolicy: Never``);
3. the process exits -> phase ``Succeeded`` (exit 0) or ``Failed``, container
   ``terminated {exitCode, reason: Completed|Error, startedAt, finishedAt}`` (killed by signal N:
   exitCode 128+N, as container runtimes report);
4. graceful deletion (``metadata.deletionTimestamp``): SIGTERM to the process group, SIGKILL
   after ``deletionGracePeriodSeconds``, terminal status recorded, then ``DELETE`` with
   ``gracePeriodSeconds: 0`` (kubelet's final step). A Pod deleted outright is SIGKILLed.

Status writes: ``PUT pods/{name}/status`` with the last seen object (its resourceVersion); on
409 Conflict the Pod is read again and the write retried. 404 (Pod gone) ends the worker.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .pdeathsig import pdeathsig_preexec

log = logging.getLogger(__name__)

WAITING_ANNOTATION = "devcluster.gpuqueue.io/waiting-reason"


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes it (``2024-05-01T12:00:00Z``)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exit_code(returncode: int) -> int:
    """Popen's returncode (``-N`` when killed by signal N) as a container runtime reports it."""
    return 128 - returncode if returncode < 0 else returncode


class PodWorker:
    """Runs one Pod. ``pod``: the Pod dict as first seen; ``kube``: a
    ``backends.k8s_client.KubeClient``; ``log_dir``: where the container log file goes;
    ``base_env``: environment every container starts from; ``on_event(name)``: counter hook
    (``started``, ``succeeded``, ``failed``, ``start_error``, ``killed``, ``deleted``)."""

    def __init__(self, pod: dict, kube, log_dir: Path, base_env: dict[str, str],
                 on_event: Callable[[str], None]):
        md = pod["metadata"]
        self.namespace: str = md["namespace"]
        self.name: str = md["name"]
        self.uid: str = md["uid"]
        self.pod = pod
        self.kube = kube
        self.base_env = base_env
        self.on_event = on_event
        self.log_path = log_dir / f"{self.namespace}_{self.name}_{self.uid}.log"
        containers = pod["spec"].get("containers") or []
        self.container_names = [c["name"] for c in containers]
        self.waiting_reason: str | None = (md.get("annotations") or {}).get(WAITING_ANNOTATION)
        self.proc: subprocess.Popen | None = None
        self.started_at: str | None = None
        self.finished = threading.Event()
        self.gone = False  # the Pod no longer exists in the API
        self.done = False  # the worker thread has nothing left to do
        self._deleting = threading.Event()
        self._grace: float = 30.0
        self._lock = threading.Lock()
        self._kill_timer: threading.Timer | None = None
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}/{self.name}",
                                       daemon=True)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    # -- requests from the agent's watch thread ---------------------------------------------------
    def observe(self, pod: dict) -> None:
        """A newer version of the Pod was seen (keeps the resourceVersion for status PUTs)."""
        with self._lock:
            self.pod = pod

    def request_delete(self, grace_seconds: float) -> bool:
        """Graceful deletion: SIGTERM now, SIGKILL after ``grace_seconds``; the worker then
        records the terminal status and DELETEs the Pod with grace 0. Returns True when the
        worker has already ended, so the caller must call :meth:`final_delete` itself."""
        with self._lock:
            if self._deleting.is_set():
                return False
            self._grace = max(0.0, float(grace_seconds))
            self._deleting.set()
            proc, done = self.proc, self.done
        if done:
            return True
        if proc is not None and proc.poll() is None:
            self._signal(signal.SIGTERM if self._grace > 0 else signal.SIGKILL)
            if self._grace > 0:
                self._kill_timer = threading.Timer(self._grace, self._signal, (signal.SIGKILL,))
                self._kill_timer.daemon = True
                self._kill_timer.start()
        return False

    def kill(self) -> None:
        """The Pod was deleted outright: SIGKILL the process; no more API writes."""
        self.gone = True
        self._deleting.set()
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            self.on_event("killed")
        except ProcessLookupError:
            pass

    def _call(self, fn: Callable[[], Any], outage: float = 300.0) -> Any:
        """``fn()``, retried while the API server is unreachable or overloaded (status 0, 429,
        5xx; 403 during the first 10 s, as right after an API server restart) for at most
        ``outage`` seconds, like a kubelet riding out an API server restart. Returns None
        once the agent is stopping (``gone``)."""
        from ..backends.k8s_client import KubeApiError

        t0 = time.monotonic()
        wait = 0.1
        while True:
            if self.gone:
                return None
            try:
                return fn()
            except KubeApiError as e:
                transient = e.status in (0, 429) or e.status >= 500 or (
                    e.status == 403 and time.monotonic() - t0 < 10)
                if not transient or time.monotonic() - t0 > outage:
                    raise
            time.sleep(wait)
            wait = min(2.0, wait * 2)

    # -- the worker thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._run_inner()
        except Exception:  # noqa: BLE001 - a worker must never die silently
            log.exception("node stand-in: pod %s/%s", self.namespace, self.name)
            self.on_event("errors")
        finally:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            with self._lock:
                self.done = True
                deleting = self._deleting.is_set()
            try:
                if deleting:
                    self.final_delete()
            except Exception:  # noqa: BLE001
                log.exception("node stand-in: delete pod %s/%s", self.namespace, self.name)
                self.on_event("errors")
            finally:
                self.finished.set()

    def _run_inner(self) -> None:
        spec = self.pod["spec"]
        if self.waiting_reason:
            self._put_status(self._status("Pending", {"waiting": {"reason": self.waiting_reason}}))
            return
        if self._deleting.is_set():
            return
        c = (spec.get("containers") or [{}])[0]
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        env = dict(self.base_env)
        env["HOSTNAME"] = self.name
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef"):
                env[e["name"]] = self._field_ref(e["valueFrom"]["fieldRef"].get("fieldPath", ""))
        wd = c.get("workingDir")
        cwd = wd if wd and os.path.isdir(wd) else None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = now_rfc3339()
        try:
            if not argv:
                raise OSError("no command: the node stand-in has no images, so containers "
                              "need spec.containers[0].command")
            with open(self.log_path, "ab") as out:
                with self._lock:
                    if self._deleting.is_set():
                        raise _Deleted()
                    self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True, close_fds=True,
                                                 preexec_fn=_PDEATHSIG)
        except _Deleted:
            return
        except OSError as e:
            self.log_path.touch()
            self.on_event("start_error")
            what = f'exec: "{argv[0]}": ' if argv else ""
            msg = (f'failed to start container "{c.get("name")}": {what}'
                   f"{(e.strerror or str(e)).lower() if argv else e}")
            term = {"exitCode": 128, "reason": "StartError", "message": msg,
                    "startedAt": "1970-01-01T00:00:00Z", "finishedAt": now_rfc3339()}
            self._put_status(self._status("Failed", {"terminated": term}))
            self.on_event("failed")
            return
        self.on_event("started")
        self._put_status(self._status("Running", {"running": {"startedAt": self.started_at}}))
        rc = self.proc.wait()
        code = _exit_code(rc)
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": self.started_at, "finishedAt": now_rfc3339(),
                "containerID": f"standin://{self.proc.pid}"}
        phase = "Succeeded" if code == 0 else "Failed"
        self.on_event("succeeded" if code == 0 else "failed")
        if not self.gone:
            self._put_status(self._status(phase, {"terminated": term}))

    def _field_ref(self, path: str) -> str:
        md = self.pod["metadata"]
        return {
            "metadata.name": self.name, "metadata.namespace": self.namespace,
            "metadata.uid": self.uid, "spec.nodeName": self.pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
            "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1",
        }.get(path, (md.get("labels") or {}).get(path[len("metadata.labels['"):-2], "")
              if path.startswith("metadata.labels['") else "")

    def final_delete(self) -> None:
        """kubelet's last word on a terminated Pod marked for deletion."""
        if self.gone:
            return
        from ..backends.k8s_client import KubeApiError

        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}}
        try:
            self._call(lambda: self.kube.request("DELETE", self.path, body=body))
            self.on_event("deleted")
        except KubeApiError as e:
            if e.status not in (404, 409):
                raise

    # -- status -----------------------------------------------------------------------------------
    def _status(self, phase: str, state: dict) -> dict:
        """The Pod's ``status`` for ``phase`` with every container in ``state``."""
        now = now_rfc3339()
        running = phase == "Running"
        ready = "True" if running else "False"
        conds = [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ]
        if phase in ("Succeeded", "Failed"):
            for cd in conds[1:3]:
                cd["reason"] = "PodCompleted"
        elif not running:
            for cd in conds[1:3]:
                cd["reason"] = "ContainersNotReady"
        statuses = []
        for n, c in zip(self.container_names, self.pod["spec"].get("containers") or []):
            cs: dict[str, Any] = {
                "name": n, "image": c.get("image", ""), "imageID": "",
                "ready": running, "started": running, "restartCount": 0, "state": state,
            }
            if self.proc is not None:
                cs["containerID"] = f"standin://{self.proc.pid}"
            statuses.append(cs)
        st: dict[str, Any] = {
            "phase": phase, "conditions": conds, "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.started_at or now, "containerStatuses": statuses,
        }
        inits = self.pod["spec"].get("initContainers") or []
        if inits:
            st["initContainerStatuses"] = [
                {"name": i["name"], "image": i.get("image", ""), "imageID": "", "ready": True,
                 "restartCount": 0, "state": {"terminated": {
                     "exitCode": 0, "reason": "Completed", "startedAt": st["startTime"],
                     "finishedAt": st["startTime"]}}} for i in inits
            ]
        return st

    def _put_status(self, status: dict, attempts: int = 10) -> None:
        from ..backends.k8s_client import KubeApiError

        for _ in range(attempts):
            if self.gone:
                return
            with self._lock:
                pod = dict(self.pod)
            old = pod.get("status") or {}
            if "qosClass" in old:
                status["qosClass"] = old["qosClass"]
            pod["status"] = {**{k: v for k, v in old.items() if k in ("nominatedNodeName",)},
                             **status}
            if any(c.get("type") == "DisruptionTarget" for c in old.get("conditions") or []):
                pod["status"]["conditions"] = status["conditions"] + [
                    c for c in old["conditions"] if c.get("type") == "DisruptionTarget"]
            try:
                new = self._call(lambda: self.kube.request("PUT", self.path + "/status", body=pod))
                if new is not None:
                    self.observe(new)
                return
            except KubeApiError as e:
                if e.status == 404:
                    self.gone = True
                    return
                if e.status != 409:
                    raise
            try:
                fresh = self._call(lambda: self.kube.get(self.path))
                if fresh is None:
                    return
                self.observe(fresh)
            except KubeApiError as e:
                if e.status == 404:
                    self.gone = True
                    return
                raise
            time.sleep(0.05)
        raise RuntimeError(f"pod {self.namespace}/{self.name}: status write kept conflicting")

    # -- logs -------------------------------------------------------------------------------------
    def waiting_message(self) -> str | None:
        """kubelet's error text for logs of a container that has not started, or None."""
        if self.waiting_reason:
            return (f"container {self.container_names[0]!r} in pod {self.name!r} is waiting to "
                    f"start: {self.waiting_reason}").replace("'", '"')
        if self.proc is None and not self.finished.is_set():
            return (f'container "{self.container_names[0]}" in pod "{self.name}" is waiting to '
                    "start: ContainerCreating")
        return None


_PDEATHSIG = pdeathsig_preexec()  # SIGKILL the container process when its worker thread dies


class _Deleted(Exception):
    pass
