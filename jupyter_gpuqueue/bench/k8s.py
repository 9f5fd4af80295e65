"""``jupyter gpuqueue bench k8s``: the Kubernetes backend against a real control plane.

N workloads are submitted to the queue service by ``clients`` concurrent submitters (batches of
``batch``, as ``POST workloads`` with ``{"items": [...]}`` submits them: each item is checked by the
API server's dry run, off the loop, side by side), admitted by
the engine, and run as batch/v1 Jobs: Job created (running, with the flavor's nodeSelector),
Pod created by the Job controller, bound by kube-scheduler, run by the node stand-in (a real
process: ``sleep 1`` by default), Job ``Complete``, reported Succeeded. The service runs in this
process on its own asyncio loop (``QueueService.start``: the loop the Jupyter server runs it on,
without the HTTP layer), with the Kubernetes backend's watches waking it.

Without ``kubeconfig`` the benchmark starts its own control plane (``jupyter_gpuqueue.devcluster``:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler v1.28.7 from ``../shared/kube-assets``
or ``$GPUQUEUE_KUBE_ASSETS``) and ``nodes`` × ``gpus_per_node`` GPU nodes played by the node
stand-in; the controller-manager's and scheduler's client rate limits are raised
(``--kube-api-qps``), as Kubernetes' own scalability tests do, or the Job controller would create
Pods at its default 20 per second.

Figures (:func:`run_k8s_bench`): admissions per second (workloads whose Job was created running,
per second from the first submission to the last such creation), p50/p99 seconds from
submission to the Job created ("resumed") and to the first Running report, to Succeeded; API
requests the queue sent per workload, by verb (watches apart), and its API errors; workloads
that did not succeed. Beside them, what they ran under: the load average before and after the run,
and the CPU seconds each component used during it (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the node stand-in, this process: the queue service with the submitting
clients, and its helper processes alive at the end of the run: the estimates' worker), from
``/proc/<pid>/stat`` (utime + stime); a figure measured on a loaded machine is not comparable with
one from an idle one, the CPU seconds per workload are. Timings are reported, never checked.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from typing import Optional

PRODUCT = "NVIDIA-A100-SXM4-80GB"


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15,
    in clock ticks); None when it cannot be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _component_cpu(pids: dict[str, int]) -> dict[str, Optional[float]]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def _children(pid: int) -> dict[int, str]:
    """pid -> name of the live child processes of ``pid`` (``/proc``; {} elsewhere): the queue's
    own helpers (the estimates' worker process) and the commands of local jobs."""
    out: dict[int, str] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return out
    for e in entries:
        try:
            with open(f"/proc/{e}/stat") as f:
                head, _, rest = f.read().rpartition(")")
            if int(rest.split()[1]) != pid:
                continue
            with open(f"/proc/{e}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out[int(e)] = "estimates worker" if "estimate_worker_main" in cmd else head.partition("(")[2]
    return out


def _cluster_yaml(quota: int, namespaces: int, hold: bool = False) -> str:
    hold_line = "\n  stopPolicy: Hold" if hold else ""
    docs = [f"""apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: nvidia-a100}}
spec:
  nodeLabels: {{nvidia.com/gpu.product: {PRODUCT}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: bench}}
spec:
  namespaceSelector: {{}}{hold_line}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: nvidia-a100
      resources: [{{name: nvidia.com/gpu, nominalQuota: {quota}}}]"""]
    for i in range(namespaces):
        docs.append(f"""apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: q, namespace: bench-{i}}}
spec: {{clusterQueue: bench}}""")
    return "\n---\n".join(docs) + "\n"


def _pct(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def _summary(values: list[float]) -> dict:
    return {"p50": _pct(values, 0.5), "p99": _pct(values, 0.99), "max": round(max(values), 3) if values else None,
            "count": len(values)}


class _Timing:
    """Wraps the Kubernetes backend's ``start`` and ``poll`` to time each workload: when its Job
    was created running, when a Running and a final report first came back."""

    def __init__(self, backend):
        self.resumed: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        waiting: set[str] = set()  # started, Job not created yet (a worker's or a retried start)
        self.polls = 0
        self.poll_cpu = 0.0  # CPU seconds of the loop's thread inside the backend's poll
        start, poll = backend.start, backend.poll

        def timed_start(spec):
            info = start(spec)
            if backend._runs.get(spec.uid) is not None and backend._runs[spec.uid].op is None:
                self.resumed.setdefault(spec.uid, time.time())
            elif spec.uid not in self.resumed:
                waiting.add(spec.uid)
            return info

        def timed_poll():
            t = time.thread_time()
            out = poll()
            self.poll_cpu += time.thread_time() - t
            self.polls += 1
            now = time.time()
            for st in out:
                if st.state == "Running":
                    self.running.setdefault(st.uid, now)
                elif st.state in ("Succeeded", "Failed"):
                    self.finished.setdefault(st.uid, now)
            for uid in list(waiting):  # starts done by the workers, or retried from poll
                run = backend._runs.get(uid)
                if run is None:
                    waiting.discard(uid)
                elif run.op is None and run.resumed_at is not None:
                    self.resumed.setdefault(uid, now)
                    waiting.discard(uid)
            return out

        backend.start, backend.poll = timed_start, timed_poll


async def _drive(svc, timing: _Timing, n: int, batch: int, command: list[str], namespaces: int,
                 timeout: float, clients: int, release=None) -> dict:
    submitted: dict[str, float] = {}
    names: dict[str, tuple[str, str]] = {}
    t0 = time.time()
    errors: list[str] = []
    starts = list(range(0, n, batch))

    async def client() -> None:  # one of `clients` submitters, each waiting for its answer
        while starts:
            i = starts.pop(0)
            items = [{"name": f"job-{j}", "command": command, "gpus": 1, "maxRuntimeSeconds": 600,
                      "localQueue": f"bench-{j % namespaces}/q"} for j in range(i, min(n, i + batch))]
            try:
                views = await svc.submit_many_async(items, user="bench")
            except Exception as exc:  # noqa: BLE001 - counted, reported
                errors.append(f"submit {i}: {exc}")
                continue
            now = time.time()
            for v in views:
                submitted[v["uid"]] = now
                names[v["uid"]] = (v["namespace"], v["name"])

    await asyncio.gather(*(client() for _ in range(clients)))
    t_submitted = time.time()
    t_released = None
    if release is not None:  # backlog: every workload is queued; an admin opens the ClusterQueue
        await asyncio.sleep(1.0)
        t_released = time.time()
        release()
    deadline = t_submitted + timeout
    while len(timing.finished) < len(submitted) and time.time() < deadline:
        await asyncio.sleep(0.1)
    return {"t0": t0, "tSubmitted": t_submitted, "tReleased": t_released, "submitted": submitted, "names": names,
            "errors": errors}


def run_k8s_bench(n: int = 2000, *, nodes: int = 25, gpus_per_node: int = 80, batch: int = 50, clients: int = 4,
                  command: Optional[list[str]] = None, namespaces: int = 4, kube_api_qps: int = 500,
                  timeout: float = 900.0, keep: bool = False, backlog: bool = False,
                  start_concurrency: int = 16) -> dict:
    """Start a control plane and nodes, run the benchmark, stop them; the figures (module doc).
    ``backlog``: the ClusterQueue is created with ``stopPolicy: Hold``; once every workload is
    queued, an admin change (``QueueService.apply_config``, as the admin view makes it) sets it to
    ``None`` and the admissions are timed from that moment (Kueue's performance test also times
    admissions of workloads that are all there). Raises ``devcluster.assets.AssetsMissing``
    without the Kubernetes binaries."""
    import json
    import subprocess

    from ..devcluster.controlplane import ControlPlane
    from ..service import create_service

    command = list(command or ["sleep", "1"])
    work = tempfile.mkdtemp(prefix="gpuqueue-bench-k8s-")
    qps = [f"--kube-api-qps={kube_api_qps}", f"--kube-api-burst={2 * kube_api_qps}"]
    cp = ControlPlane(os.path.join(work, "kube"), authorization="Node,RBAC",
                      extra_args={"kube-controller-manager": qps, "kube-scheduler": qps})
    t_boot = time.time()
    cp.start()
    # The node stand-in runs in a process of its own, as kubelets do (k8s_nodes.py).
    agent = subprocess.Popen([sys.executable, "-m", "jupyter_gpuqueue.bench.k8s_nodes", str(cp.workdir), str(nodes),
                              str(gpus_per_node), PRODUCT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    svc = None
    node_counters: dict = {}
    try:
        if agent.stdout.readline().strip() != "ready":
            raise RuntimeError("the node stand-in did not start")
        for i in range(namespaces):
            cp.ensure_namespace(f"bench-{i}")
        _wait_nodes_ready(cp, nodes)
        boot_seconds = time.time() - t_boot
        with open(os.path.join(work, "cluster.yaml"), "w") as f:
            f.write(_cluster_yaml(nodes * gpus_per_node, namespaces, hold=backlog))
        svc = create_service(config_paths=[os.path.join(work, "cluster.yaml")], inventory_path=None,
                             db_url=f"sqlite:///{os.path.join(work, 'ledger.sqlite')}", root_dir=work,
                             data_dir=os.path.join(work, "state"), default_local_queue="bench-0/q",
                             cycle_interval=0.5, backend="kubernetes",
                             kubernetes={"api_client": cp.admin_api_client(), "image": "busybox:1.36",
                                         "start_concurrency": start_concurrency})
        k8s = getattr(svc.backend, "inner", svc.backend)
        timing = _Timing(k8s)
        # Start-up requests (the informers' lists, the access check) are not the workloads'.
        for inf in k8s._informers:
            inf.wait_synced(30)
        k8s.access_done.wait(30)
        before = dict(k8s.client.counts)
        pids = {**cp.pids(), "node stand-in": agent.pid, "queue service + clients": os.getpid()}
        load_before = os.getloadavg()
        cpu_before = _component_cpu(pids)
        helpers_before = {pid: cpu_seconds(pid) for pid in _children(os.getpid())}
        cpu_after: dict = {}

        def release():
            import copy

            cfg = copy.deepcopy(svc.config)
            cfg.cluster_queues["bench"].stop_policy = "None"
            svc.apply_config(cfg, actor="bench", operation="release", target="ClusterQueue bench",
                             before={"stopPolicy": "Hold"}, after={"stopPolicy": "None"})

        async def main():
            loop_cpu = time.thread_time()
            await svc.start()
            try:
                out = await _drive(svc, timing, n, batch, command, namespaces, timeout, clients,
                                   release if backlog else None)
                # before the service stops (its helper processes end with it)
                cpu_after.update(_component_cpu(pids))
                for pid, name in _children(os.getpid()).items():
                    if pid in pids.values():
                        continue  # the control plane and the node stand-in, counted above
                    used = (cpu_seconds(pid) or 0.0) - (helpers_before.get(pid) or 0.0)
                    cpu_after[name] = cpu_after.get(name, 0.0) + used
                    cpu_before.setdefault(name, 0.0)
                out["loopCpu"] = time.thread_time() - loop_cpu
                return out
            finally:
                await svc.stop()

        r = asyncio.run(main())
        cpu = {k: round(cpu_after[k] - cpu_before[k], 1) if cpu_after.get(k) is not None
               and cpu_before.get(k) is not None else None for k in cpu_after}
        agent.stdin.close()
        node_counters.update(json.loads(agent.stdout.readline() or "{}"))
        counts = {k: v - before.get(k, 0) for k, v in k8s.client.counts.items()}
        states: dict[str, int] = {}
        for uid in r["submitted"]:
            st = svc.get_workload(*r["names"][uid])["state"]
            states[st] = states.get(st, 0) + 1
        # From submission, or with a backlog from the release (every workload was queued by then).
        sub = {u: max(t, r["tReleased"] or 0.0) for u, t in r["submitted"].items()}
        start = r["tReleased"] or r["t0"]
        resumed = [timing.resumed[u] - sub[u] for u in sub if u in timing.resumed]
        running = [timing.running[u] - sub[u] for u in sub if u in timing.running]
        finished = [timing.finished[u] - sub[u] for u in sub if u in timing.finished]
        last_resumed = max((timing.resumed[u] for u in sub if u in timing.resumed), default=start)
        verbs = {k: v for k, v in counts.items() if not k.startswith("error") and k != "WATCH"}
        api_errors = {k: v for k, v in counts.items() if k.startswith("error")}
        return {
            "workloads": n, "submitted": len(sub), "states": states,
            "succeeded": states.get("Succeeded", 0),
            "nodes": nodes, "gpusPerNode": gpus_per_node, "batch": batch, "clients": clients, "command": command,
            "startConcurrency": start_concurrency,
            "clusterBootSeconds": round(boot_seconds, 1),
            "backlog": backlog, "submitSeconds": round(r["tSubmitted"] - r["t0"], 2),
            "submissionsPerSecond": round(len(sub) / max(1e-9, r["tSubmitted"] - r["t0"]), 1),
            "admissionsPerSecond": round(len(resumed) / max(1e-9, last_resumed - start), 1),
            "submitToResumed": _summary(resumed), "submitToRunning": _summary(running),
            "submitToSucceeded": _summary(finished),
            "apiRequestsPerWorkload": round(sum(verbs.values()) / max(1, len(sub)), 2),
            "apiRequestsByVerb": verbs, "watchRequests": counts.get("WATCH", 0), "apiErrors": api_errors,
            "errors": r["errors"], "errorCount": len(r["errors"]) + sum(api_errors.values()),
            "nodeAgent": node_counters, "loadAverage": os.getloadavg(), "loadAverageBefore": load_before,
            "cpuSeconds": cpu, "cpuCount": os.cpu_count(),
            # the service's loop thread (scheduling, the backend's poll, the clients' coroutines)
            "loopCpuSeconds": round(r["loopCpu"], 1), "polls": timing.polls,
            "pollCpuSeconds": round(timing.poll_cpu, 1),
            "python": sys.version.split()[0],
        }
    finally:
        if svc is not None:
            svc.backend.close()
            svc.ledger.close()
        if agent.poll() is None:
            try:
                agent.stdin.close()
            except OSError:
                pass
            try:
                agent.wait(30)
            except subprocess.TimeoutExpired:
                agent.kill()
        cp.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _wait_nodes_ready(cp, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items, _ = cp.kube.list("/api/v1/nodes")
        ok = [x for x in items if not (x.get("spec") or {}).get("taints")]
        if len(ok) >= count:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{count} untainted nodes not ready after {timeout} s")


def format_k8s(r: dict) -> str:
    """The figures as text (BENCHMARKS.md's table)."""
    def s(d):
        return f"p50 {d['p50']} s, p99 {d['p99']} s (n={d['count']})"
    frm = "release" if r["backlog"] else "submit "
    return "\n".join([
        f"bench k8s: {r['workloads']} workloads on {r['nodes']} nodes x {r['gpusPerNode']} GPUs "
        f"(real kube-apiserver v1.28.7; command {' '.join(r['command'])}; {r['clients']} clients, batches of {r['batch']}; "
        f"{r['startConcurrency']} Jobs created at a time)",
        f"  succeeded           {r['succeeded']}/{r['workloads']}   states {r['states']}",
        f"  submissions/s       {r['submissionsPerSecond']}  (each with the API server's dry run; {r['submitSeconds']} s)",
        f"  admissions/s        {r['admissionsPerSecond']}"
        + ("  (a backlog of every workload, from the ClusterQueue's release)" if r["backlog"] else ""),
        f"  {frm} -> resumed   {s(r['submitToResumed'])}",
        f"  {frm} -> running   {s(r['submitToRunning'])}",
        f"  {frm} -> succeeded {s(r['submitToSucceeded'])}",
        f"  API requests/wl     {r['apiRequestsPerWorkload']}  {r['apiRequestsByVerb']}  watches {r['watchRequests']}",
        f"  errors              {r['errorCount']}  {r['apiErrors']} {r['errors'][:3]}",
        f"  node stand-in       {r['nodeAgent']}",
        f"  cluster boot        {r['clusterBootSeconds']} s",
        f"  load average        before {tuple(round(x, 2) for x in r.get('loadAverageBefore') or ())}, "
        f"after {tuple(round(x, 2) for x in r['loadAverage'])} ({r.get('cpuCount')} CPUs)",
        "  CPU seconds         " + ", ".join(f"{k} {v}" for k, v in (r.get("cpuSeconds") or {}).items()),
        f"  queue's loop        {r.get('loopCpuSeconds')} CPU s, of which the backend's poll {r.get('pollCpuSeconds')} "
        f"in {r.get('polls')} polls",
    ])


def format_k8s_runs(runs: list[dict]) -> str:
    """Several runs side by side (``--repeat``): admissions/s with the load average each ran
    under, and the CPU milliseconds per workload of each component (load-independent)."""
    lines = [f"{len(runs)} runs: admissions/s (load average before -> after)"]
    for i, r in enumerate(runs, 1):
        before = round((r.get("loadAverageBefore") or (float("nan"),))[0], 2)
        lines.append(f"  run {i}: {r['admissionsPerSecond']}  (load {before} -> {round(r['loadAverage'][0], 2)})")
    rates = sorted(r["admissionsPerSecond"] for r in runs)
    lines.append(f"  median {rates[len(rates) // 2]}, min {rates[0]}, max {rates[-1]}")
    lines.append("CPU ms per workload, per run")
    for name in runs[0].get("cpuSeconds") or {}:
        per = [round(1000 * (r["cpuSeconds"].get(name) or 0.0) / max(1, r["workloads"]), 1) for r in runs]
        lines.append(f"  {name:<26} {per}")
    return "\n".join(lines)
