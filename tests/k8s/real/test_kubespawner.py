"""The JupyterHub side on the real control plane: a real ``kubespawner.KubeSpawner`` with the
project's ``GpuQueueSpawnerMixin`` and ``gpuqueue_modify_pod_hook`` (wired as in
``tests/hub/test_kubespawner.py`` and ``jupyterhub_config/kubernetes/``) talks to the real
kube-apiserver v1.28.7 (kubernetes_asyncio, as the hub's service account with z2jh's hub Role)
and to a real gpuqueue server (pytest-jupyter, REST over HTTP) whose ``kubernetes`` backend reads
its GPUs from the cluster's Nodes (as ``jupyterhub_config/kubernetes/gpuqueue_service_config.py``
configures it).

Per spawn: the lease is queued and admitted, KubeSpawner creates the notebook Pod with the
lease's GPUs (the flavor's ``nvidia.com/gpu.product`` node selector and tolerations, the
``development`` PriorityClass, the GPU / MIG request equal to its limit), the real kube-scheduler
binds it to the matching GPU node (the node stand-in runs its command as a local process) and it
runs; when the lease ends (the server is stopped, or its maximum lease time is over) the Pod is
deleted and is gone from the API server, and the queue has the lease back."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("kubespawner")

from jupyterhub.objects import Hub, Server  # noqa: E402
from kubespawner import KubeSpawner  # noqa: E402

from jupyter_gpuqueue.backends.k8s_client import KubeApiError  # noqa: E402
from jupyter_gpuqueue.hub import GpuQueueSpawnerMixin  # noqa: E402
from jupyter_gpuqueue.hub.kubespawner import gpuqueue_modify_pod_hook  # noqa: E402

from .conftest import H100_PRODUCT  # noqa: E402
from .kubetools import A100, documented_cluster_role  # noqa: E402

pytestmark = pytest.mark.kube

PY = sys.executable
DEMO_CLUSTER = Path(__file__).resolve().parents[3] / "jupyter_gpuqueue" / "demo" / "cluster.yaml"
# The rules of z2jh's hub Role (jupyterhub chart templates/hub/rbac.yaml): all KubeSpawner may do
# (bound cluster-wide here by the harness; z2jh binds them in the hub's namespace).
HUB_RULES = [
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
     "verbs": ["get", "watch", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]
DEVELOPMENT = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "development"}, "value": 1000, "preemptionPolicy": "Never",
               "description": "Development and notebooks - lowest priority, uses spare capacity"}
A100_TOLERATION = "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "1 × A100", "slug": "a100", "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"},
     "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "mem_limit": "2G"}},
    {"display_name": "2 × H100", "slug": "h100", "gpuqueue": {"gpus": 2, "flavor": "nvidia-h100"},
     "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "2"}}},
    {"display_name": "1 × MIG 1g.10gb", "slug": "mig",
     "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}}},
]


# --------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def cluster_setup(control_plane, node_agent):
    """The ``development`` PriorityClass (as in the demo cluster.yaml) and the queue's service
    account (the documented ClusterRole); the PriorityClass is deleted afterwards if this module
    created it."""
    kube = control_plane.kube
    created = False
    try:
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", DEVELOPMENT)
        created = True
    except KubeApiError as e:
        if e.status != 409:
            raise
    _token, queue_kubeconfig = control_plane.service_account(
        "kube-system", "gpuqueue-hub-test", documented_cluster_role()["rules"])
    yield {"queue_kubeconfig": str(queue_kubeconfig)}
    if created:
        kube.delete("/apis/scheduling.k8s.io/v1/priorityclasses/development")


@pytest.fixture
def hub_namespace(control_plane, namespace):
    """The namespace of the notebook pods, and a kubeconfig of the hub's service account there."""
    _token, path = control_plane.service_account(namespace, "hub", HUB_RULES)
    return namespace, str(path)


@pytest.fixture
def cluster_file(tmp_path):
    """The demo cluster.yaml, with a toleration on the nvidia-a100 flavor (the hook adds it)."""
    text = DEMO_CLUSTER.read_text()
    a100 = f"  name: nvidia-a100\nspec:\n  nodeLabels:\n    nvidia.com/gpu.product: {A100}\n"
    assert a100 in text
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace(a100, a100 + A100_TOLERATION))
    return str(path)


@pytest.fixture
def gpuqueue_config(gpuqueue_config, cluster_file, cluster_setup):
    """The queue as the shipped z2jh configuration runs it: the kubernetes backend, GPUs from the
    cluster's Nodes, leases at priority class ``development``."""
    return {**gpuqueue_config, "config_files": [cluster_file], "backend": "kubernetes",
            "kubeconfig": cluster_setup["queue_kubeconfig"], "inventory_file": "",
            "lease_priority_class": "development", "default_local_queue": "team-a/team-a-queue"}


@pytest.fixture
def kube_asyncio_config(hub_namespace, monkeypatch, jp_asyncio_loop):
    """kubernetes_asyncio's default Configuration from the hub's kubeconfig (what KubeSpawner's
    ``load_config`` does with ``~/.kube/config``); restored afterwards. KubeSpawner's shared
    clients and its class-wide reflectors are closed before the test's loop goes away."""
    from kubernetes_asyncio import config as kconfig
    from kubernetes_asyncio.client import Configuration

    saved = Configuration.get_default_copy()
    conf = Configuration()
    jp_asyncio_loop.run_until_complete(
        kconfig.load_kube_config(config_file=hub_namespace[1], client_configuration=conf))
    Configuration.set_default(conf)
    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kw: None)
    yield conf
    jp_asyncio_loop.run_until_complete(KubeSpawner._stop_all_reflectors())
    tasks = [t for t in asyncio.all_tasks(jp_asyncio_loop) if t.get_coro().__name__ == "close_client_task"]
    for t in tasks:
        t.cancel()
    if tasks:
        jp_asyncio_loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    Configuration.set_default(saved)


class QueuedKubeSpawner(GpuQueueSpawnerMixin, KubeSpawner):
    pass


class MockUser:
    def __init__(self, name: str = "alice"):
        self.name = self.escaped_name = name
        self.url = f"/user/{name}/"
        self.id = abs(hash(name)) % 10_000
        self.server = Server()


def make_spawner(env, cluster_file, namespace, profile, user="alice", **traits):
    from traitlets.config import Config

    c = Config()
    c.KubeSpawner.namespace = namespace
    c.KubeSpawner.profile_list = PROFILES
    c.KubeSpawner.modify_pod_hook = gpuqueue_modify_pod_hook
    # The node stand-in runs the container's command (it has no images): a sleeping Python.
    c.KubeSpawner.extra_container_config = {"command": [PY, "-c", "import time; time.sleep(600)"]}
    c.KubeSpawner.image = "quay.io/jupyter/base-notebook:latest"
    c.KubeSpawner.delete_grace_period = 2
    c.KubeSpawner.start_timeout = 60
    c.KubeSpawner.gpuqueue_url = env["GPUQUEUE_URL"]
    c.KubeSpawner.gpuqueue_api_token = env["GPUQUEUE_TOKEN"]
    c.KubeSpawner.gpuqueue_config_files = [cluster_file]
    c.KubeSpawner.gpuqueue_poll_interval = 0.1
    c.KubeSpawner.gpuqueue_lease_watch_interval = 0.2
    for k, v in traits.items():
        setattr(c.KubeSpawner, k, v)
    sp = QueuedKubeSpawner(config=c, user=MockUser(user), hub=Hub(), _mock=True)
    sp.user_options = {"profile": profile}
    return sp


async def polled_stopped(sp, timeout: float = 15.0) -> bool:
    """``await sp.poll() == 1`` within ``timeout``: KubeSpawner's poll reads its Pod reflector,
    which may see the Pod's deletion a moment after the API server did."""
    deadline = time.monotonic() + timeout
    while await sp.poll() != 1:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def until(predicate, timeout: float = 30.0, what: str = ""):
    """Await ``predicate()`` (sync) becoming truthy without blocking the loop (the queue service
    runs on it); returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = predicate()
        except KubeApiError:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(0.1)


def pod_or_none(kube, namespace, name):
    try:
        return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise


async def spawn(sp):
    """What JupyterHub does for a spawn: the pre-spawn hook (queueing), then ``start()``."""
    await asyncio.wait_for(sp.run_pre_spawn_hook(), 30)
    return await asyncio.wait_for(sp.start(), 90)


def gpu_resources(pod: dict) -> tuple[dict, dict]:
    res = pod["spec"]["containers"][0]["resources"]
    pick = lambda d: {k: v for k, v in (d or {}).items() if k.startswith("nvidia.com/")}  # noqa: E731
    return pick(res.get("requests")), pick(res.get("limits"))


# --------------------------------------------------------------------------------------------------
# tests


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


async def test_notebook_pods_run_on_their_leased_gpus_and_are_deleted_when_the_servers_stop(
        gpuqueue_env, gpuqueue_service, cluster_file, hub_namespace, kube_asyncio_config, control_plane):
    """A whole A100 (alice) and a MIG slice (bob): each pod is created with its lease's
    admission, bound by the real scheduler to node-a (the A100 node, MIG strategy mixed) and
    runs; stopping the server deletes the pod and releases the lease."""
    ns, _ = hub_namespace
    kube = control_plane.kube
    assert gpuqueue_service.inventory.source == "kubernetes"  # the GPUs are the cluster's Nodes'
    a100 = make_spawner(gpuqueue_env, cluster_file, ns, "a100", user="alice")
    mig = make_spawner(gpuqueue_env, cluster_file, ns, "mig", user="bob")
    urls = await asyncio.gather(spawn(a100), spawn(mig))
    assert urls == ["http://127.0.0.1:8888"] * 2  # the stand-in's pod IP, KubeSpawner's port

    w = a100.gpuqueue_workload
    assert w["state"] == "Running" and w["kind"] == "NotebookLease" and w["priorityClass"] == "development"
    assert w["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "nvidia-a100"}
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{a100.pod_name}")
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": A100}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # The PriorityClass exists in the cluster: the API server's Priority admission resolved it.
    assert spec["priorityClassName"] == "development" and spec["priority"] == 1000
    assert spec["preemptionPolicy"] == "Never"
    assert gpu_resources(pod) == ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})
    assert spec["containers"][0]["resources"]["limits"]["memory"] == str(2 * 1024**3)  # the profile's own
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert labels["kueue.x-k8s.io/priority-class"] == "development"
    assert labels["gpuqueue.io/workload"] == w["name"]
    # The device plugin picks the devices in a cluster: no CUDA_/NVIDIA_VISIBLE_DEVICES in the pod.
    env = env_of(pod)
    assert "CUDA_VISIBLE_DEVICES" not in env and "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["GPUQUEUE_LEASE"] == f"{w['namespace']}/{w['name']}"
    # The real scheduler bound it to the A100 node, where it runs.
    assert spec["nodeName"] == "node-a" and pod["status"]["phase"] == "Running"

    wm = mig.gpuqueue_workload
    assert wm["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/mig-1g.10gb": "nvidia-a100-mig"}
    mpod = kube.get(f"/api/v1/namespaces/{ns}/pods/{mig.pod_name}")
    assert mpod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": A100, "nvidia.com/mig.strategy": "mixed"}
    assert gpu_resources(mpod) == ({"nvidia.com/mig-1g.10gb": "1"}, {"nvidia.com/mig-1g.10gb": "1"})
    assert "CUDA_VISIBLE_DEVICES" not in env_of(mpod)
    assert mpod["spec"]["nodeName"] == "node-a" and mpod["status"]["phase"] == "Running"

    # The users stop their servers: KubeSpawner deletes the pods (and waits until they are gone
    # from its reflector), the leases are released.
    await asyncio.wait_for(asyncio.gather(a100.stop(), mig.stop()), 60)
    for sp, lease in ((a100, w), (mig, wm)):
        assert pod_or_none(kube, ns, sp.pod_name) is None
        assert gpuqueue_service.get_workload(lease["namespace"], lease["name"])["state"] == "Cancelled"
    assert await polled_stopped(a100)  # what the hub's next poll sees


async def test_the_pod_is_deleted_when_the_lease_time_is_over(
        gpuqueue_env, gpuqueue_service, cluster_file, hub_namespace, kube_asyncio_config, control_plane):
    """Two H100s (borrowed from team-b's quota in the cohort) for 6 s: the pod runs on node-b;
    at the lease's end the spawner's lease watch stops the server, the pod is deleted and is gone
    from the API server before the hub's next poll, which then finds the server stopped."""
    ns, _ = hub_namespace
    kube = control_plane.kube
    sp = make_spawner(gpuqueue_env, cluster_file, ns, "h100", gpuqueue_max_runtime_seconds=6)
    await spawn(sp)
    w = sp.gpuqueue_workload
    assert w["maxRuntimeSeconds"] == 6
    assert w["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "nvidia-h100"}
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{sp.pod_name}")
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": H100_PRODUCT}
    assert "tolerations" not in pod["spec"] or not any(
        t.get("key") == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])  # the H100 flavor has none
    assert gpu_resources(pod) == ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"})
    assert pod["spec"]["nodeName"] == "node-b" and pod["status"]["phase"] == "Running"
    uid = pod["metadata"]["uid"]
    end = w["startedAt"] + 6

    gone = await until(lambda: pod_or_none(kube, ns, sp.pod_name) is None, 30, "the pod deleted")
    assert gone and time.time() >= end - 0.5  # not before the lease's end
    assert time.time() - end < 15
    assert not [p for p in kube.list(f"/api/v1/namespaces/{ns}/pods")[0] if p["metadata"]["uid"] == uid]
    assert sp.gpuqueue_lease.done
    assert await polled_stopped(sp)  # the hub's next poll: the server is gone
    lease = await until(lambda: (lambda v: v if v["state"] != "Running" else None)(
        gpuqueue_service.get_workload(w["namespace"], w["name"])), 15, "the queue ends the lease")
    assert (lease["state"], lease["reason"]) == ("Succeeded", "MaxRuntimeReached"), lease
