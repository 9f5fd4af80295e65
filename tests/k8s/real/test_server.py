"""A real ``jupyter server`` with ``c.GpuQueueApp.backend = "kubernetes"`` and a kubeconfig of a
service account bound to the documented ClusterRole, against the real control plane: jobs
submitted over REST run as Jobs; the server is killed with SIGKILL while they run and one
waits, and the restarted server adopts them without creating any Job twice; the backends'
log lines reach the server's log with its time and level (issue 12, item 8)."""

from __future__ import annotations

import re
import sys
import time

import pytest

from servertools import Launcher, ServerSetup

from .kubetools import CLUSTER_YAML, KubeQueue, wait_for

pytestmark = pytest.mark.kube

PY = sys.executable


@pytest.fixture
def launcher():
    la = Launcher(zygote=False)
    yield la
    la.close()


def _setup(tmp_path, q: KubeQueue) -> ServerSetup:
    return ServerSetup(base=tmp_path / "server", cluster_yaml=CLUSTER_YAML, inventory_yaml="", cycle_interval=0.2,
                       extra_config=f"""
c.GpuQueueApp.backend = "kubernetes"
c.GpuQueueApp.kubeconfig = {q.api_client.kubeconfig_path!r}
c.GpuQueueApp.inventory_file = ""
c.GpuQueueApp.kube_namespaces = {{"team-a": {q.ns!r}}}
c.GpuQueueApp.default_local_queue = "team-a/q"
c.GpuQueueApp.job_image = "busybox:1.36"
c.GpuQueueApp.prices = {{"nvidia-a100": 2.21, "nvidia-h100": 3.75}}
""")


def _states(server, names):
    out = {}
    for n in names:
        r = server.request("GET", f"workloads/team-a/{n}")
        assert r.status_code == 200, r.text
        out[n] = r.json()["state"]
    return out


def test_kill9_and_restart_adopt_every_job_once_and_logs_reach_the_server_log(control_plane, node_agent,
                                                                            tmp_path, launcher):
    q = KubeQueue(control_plane, tmp_path)
    try:
        setup = _setup(tmp_path, q)
        server = launcher.start(setup)
        names = [f"job-{i}" for i in range(5)]  # 1 GPU each, 4 GPUs of quota: four run, one waits
        # The jobs run until the test lets them end (a file appears; 120 s at most): they are
        # sure to run across the kill and the restart, and end as soon as that is checked.
        go = tmp_path / "go"
        job = (f"import os, time\nend = time.time() + 120\nwhile not os.path.exists({str(go)!r}) "
               "and time.time() < end:\n    time.sleep(0.1)\nprint('done')")
        for n in names:
            r = server.request("POST", "workloads", json={
                "name": n, "command": [PY, "-c", job], "gpus": 1,
                "flavor": "any", "maxRuntimeSeconds": 300})
            assert r.status_code == 201, r.text
        wait_for(lambda: list(_states(server, names).values()).count("Running") == 4, timeout=60,
                 what="four jobs running")
        assert list(_states(server, names).values()).count("Pending") == 1
        server.kill9()
        server2 = launcher.start(setup)
        states = _states(server2, names)
        assert sorted(states.values()) == ["Pending"] + ["Running"] * 4, states  # adopted, not failed
        go.touch()
        wait_for(lambda: set(_states(server2, names).values()) == {"Succeeded"}, timeout=120,
                 what="every job succeeded")
        jobs = q.get(f"/apis/batch/v1/namespaces/{q.ns}/jobs")["items"]
        assert sorted(j["metadata"]["name"] for j in jobs) == names  # no Job created twice
        for n in names:
            assert len(q.pods(n)) == 1  # ... nor run twice

        # Item 8: an API server restart with etcd compacted: the informers' warnings and their
        # relist (after 410 Gone, or after the 403s of RBAC loading) are in the server log, with
        # time and level.
        for i in range(5):  # writes the informers do not watch: their last resourceVersion falls behind
            control_plane.kube.create(f"/api/v1/namespaces/{q.ns}/configmaps",
                                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"churn-{i}"}})
        control_plane.stop_component("kube-apiserver")
        try:
            time.sleep(1)
            control_plane.compact_etcd()
        finally:
            control_plane.start_component("kube-apiserver")

        def logged():
            text = server2.log_path.read_text(errors="replace")
            warn = re.search(r"^\[W \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [\w.]+\] kubernetes informer \w+: ",
                             text, re.M)
            info = re.search(r"^\[I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [\w.]+\] kubernetes informer \w+: "
                             r"listed again \(\d+ objects", text, re.M)  # after 410 Gone or a 403
            return warn and info
        try:
            wait_for(logged, timeout=60, what="the informers' WARNING and INFO lines in the server log")
        except AssertionError:
            lines = [x for x in server2.log_path.read_text(errors="replace").splitlines() if "kubernetes" in x]
            print("\n".join(lines[-40:]))
            raise
        r = server2.request("POST", "workloads", json={"name": "after", "command": [PY, "-c", "print(1)"],
                                                        "gpus": 1})
        assert r.status_code == 201, r.text
        wait_for(lambda: _states(server2, ["after"])["after"] == "Succeeded", timeout=60, what="a job after it")
        server2.stop()
    finally:
        q.close()
