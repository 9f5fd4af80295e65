"""One submission through the REST API of a real Jupyter server whose queue runs Jobs on the fake
cluster, configured the way an operator does it: ``c.GpuQueueApp.backend = "kubernetes"`` and a
kubeconfig file."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from .fake_apiserver import FakeApiServer, FakeCluster
from .test_service_kubernetes import CLUSTER, GPU_NODE_LABELS, TAINT

API = ("gpuqueue", "api")


@pytest.fixture
def fake_cluster():
    c = FakeCluster()
    c.add_namespace("team-a")
    c.add_priority_class("low", 100)
    c.add_node("gpu-1", labels=GPU_NODE_LABELS, allocatable={"nvidia.com/gpu": "2"}, taints=TAINT)
    c.now = time.time()
    srv = FakeApiServer(c).start()
    c.run_controllers(0.02, real_time=True)
    yield c, srv
    srv.stop()


@pytest.fixture
def gpuqueue_config(tmp_path, monkeypatch, fake_cluster):
    _, srv = fake_cluster
    for var in ("GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": srv.url}}],
        "users": [{"name": "gpuqueue", "user": {"token": "test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuqueue"}}]}))
    return {
        "db_url": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        "state_dir": str(tmp_path / "state"),
        "config_files": [str(tmp_path / "cluster.yaml")],
        "cycle_interval": 0.05,
        "standalone_user": "alice",
        "default_local_queue": "team-a/q",
        "prices": {"a100": 3.6},
        "backend": "kubernetes",
        "kubeconfig": str(kubeconfig),
        "job_image": "busybox:1.36",
    }


async def _get(jp_fetch, *parts, params=None):
    resp = await jp_fetch(*API, *parts, method="GET", params=params)
    return json.loads(resp.body)


async def _wait(jp_fetch, name, state, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        wl = await _get(jp_fetch, "workloads", "team-a", name)
        if wl["state"] == state:
            return wl
        assert time.monotonic() < deadline, f"{name} stuck in {wl['state']} ({wl['message']})"
        await asyncio.sleep(0.05)


async def test_rest_submission_runs_as_a_kubernetes_job(jp_fetch, started, fake_cluster):
    cluster, _ = fake_cluster
    inv = await _get(jp_fetch, "inventory")
    assert inv["source"] == "kubernetes" and [n["name"] for n in inv["nodes"]] == ["gpu-1"]
    resp = await jp_fetch(*API, "workloads", method="POST", body=json.dumps(
        {"name": "rest-job", "command": ["nvidia-smi", "-L"], "gpus": 1, "priorityClass": "low"}))
    assert resp.code == 201
    await _wait(jp_fetch, "rest-job", "Running")
    job = cluster.get(("batch", "jobs"), "team-a", "rest-job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["nvidia-smi", "-L"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    await asyncio.sleep(1.1)  # condition times have whole seconds
    cluster.finish_pods("team-a", "rest-job", 0)
    done = await _wait(jp_fetch, "rest-job", "Succeeded")
    assert done["exitCode"] == 0 and done["costUsd"] > 0
    assert done["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "a100"}
    assert cluster.schema_errors == []


async def test_a_kubernetes_jobs_output_is_its_pods_log(jp_fetch, started, fake_cluster):
    """``GET workloads/{ns}/{name}/logs`` of a Kubernetes job reads its Pod's log from the API
    server (``…/pods/{pod}/log``), in pieces (offset, limit), as the panel follows a local job's
    file; empty while the container waits to start; eof once the job ended and all was read."""
    cluster, _ = fake_cluster
    resp = await jp_fetch(*API, "workloads", method="POST", body=json.dumps(
        {"name": "talker", "command": ["python", "train.py"], "gpus": 1}))
    assert resp.code == 201
    log = await _get(jp_fetch, "workloads", "team-a", "talker", "logs")
    assert log["text"] == "" and not log["eof"]  # not started yet, or no pod: nothing, no error
    await _wait(jp_fetch, "talker", "Running")
    pod = cluster.write_job_log("team-a", "talker", "epoch 1 loss 0.9\n")
    log = await _get(jp_fetch, "workloads", "team-a", "talker", "logs")
    assert log == {"text": "epoch 1 loss 0.9\n", "offset": 0, "nextOffset": 17, "eof": False, "size": 17}
    cluster.write_job_log("team-a", "talker", "\u00e9poch 2 loss 0.5\n" + "x" * 100)
    part = await _get(jp_fetch, "workloads", "team-a", "talker", "logs", params={"offset": 17, "limit": 8})
    assert part["text"] == "\u00e9poch 2" and part["nextOffset"] == 25 and not part["eof"]  # 8 bytes: é is 2
    await asyncio.sleep(1.1)  # condition times have whole seconds
    cluster.finish_pods("team-a", "talker", 0)
    await _wait(jp_fetch, "talker", "Succeeded")
    rest = await _get(jp_fetch, "workloads", "team-a", "talker", "logs", params={"offset": 25})
    assert rest["text"] == " loss 0.5\n" + "x" * 100 and rest["eof"] and rest["nextOffset"] == rest["size"] == 135
    assert any(m == "GET" and path.startswith(f"/api/v1/namespaces/team-a/pods/{pod}/log") and q.get("limitBytes")
               for m, path, q in cluster.requests)


async def test_a_gpujob_cell_runs_as_a_kubernetes_job(jp_fetch, started, fake_cluster, gpuqueue_env, tmp_path):
    """``%%gpujob`` in a real kernel (nbclient) against a real server whose backend is the
    Kubernetes one: the cell becomes a Job in the team's namespace that runs ``python <cell file>``
    in the kernel's folder; the kubelet (the fake's) ends its pod and the cell's handle sees the
    job succeed, billed."""
    from nbformat.v4 import new_code_cell

    from tests.test_magics import run_notebook, text_of

    cluster, _ = fake_cluster
    work = tmp_path / "work"
    work.mkdir()

    async def kubelet():  # ends the Job's pod once it runs (whole seconds: condition times)
        while True:
            job = cluster.get(("batch", "jobs"), "team-a", "cell-job")
            if job is not None and not job["spec"].get("suspend") and cluster.finish_pods("team-a", "cell-job", 0):
                return job
            await asyncio.sleep(0.5)

    cells = [
        new_code_cell("%load_ext jupyter_gpuqueue"),
        new_code_cell("%%gpujob --gpus 1 --max-runtime 5m --name cell-job\nprint('hello from the cluster')"),
        new_code_cell("print('STATE', _gpujob.wait(timeout=60), _gpujob.info['exitCode'], _gpujob.cost_usd >= 0)"),
    ]
    ended = asyncio.ensure_future(kubelet())
    nb = await run_notebook(cells, work, gpuqueue_env, timeout=120)
    job = await asyncio.wait_for(ended, 5)
    assert "STATE Succeeded 0 True" in text_of(nb.cells[2]), [text_of(c) for c in nb.cells]
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container.get("command", []) + container.get("args", [])
    assert any(part.endswith(".py") for part in command), command  # python <the cell's file>
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert container["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    assert cluster.schema_errors == []
