"""KubeSpawner pod manifests after ``gpuqueue_modify_pod_hook``, for every profile, without a
cluster (reference: shared/reference/jupyter.md §5): a real KubeSpawner (``_mock=True``) with the
GpuQueue mixin gets a real lease from a real gpuqueue server (pytest-jupyter, REST over HTTP), then
KubeSpawner builds the pod manifest and the hook applies the admission."""

from __future__ import annotations

import asyncio
import json

import pytest

kubespawner = pytest.importorskip("kubespawner")

from jupyterhub.objects import Hub, Server  # noqa: E402
from kubespawner import KubeSpawner  # noqa: E402

from jupyter_gpuqueue.hub import GpuQueueSpawnerMixin, lease_request_for  # noqa: E402
from jupyter_gpuqueue.hub.kubespawner import gpuqueue_modify_pod_hook  # noqa: E402
from jupyter_gpuqueue.service import DEMO_DIR  # noqa: E402

A100_TOLERATION = """
  nodeLabels:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {
        "display_name": "1 × MIG 1g.10gb",
        "slug": "mig-small",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}},
    },
    {
        "display_name": "1 × A100",
        "slug": "a100",
        "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"},
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "mem_limit": "32G"},
    },
    {
        "display_name": "2 × GPU, any type",
        "slug": "two-gpus",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "2"}},
    },
    {
        # KubeSpawner's profile_options: the GPU is picked in the form, not by the profile.
        "display_name": "Pick a GPU",
        "slug": "pick",
        "kubespawner_override": {"mem_limit": "16G"},
        "profile_options": {
            "gpu": {
                "display_name": "GPU",
                "choices": {
                    "none": {"display_name": "None", "default": True},
                    "a100": {"display_name": "1 × A100", "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"},
                             "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}}},
                    "mig": {"display_name": "1 × MIG 1g.10gb",
                            "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}}},
                },
                "unlisted_choice": {
                    "enabled": True, "display_name": "GPUs (1-4)", "validation_regex": "^[1-4]$",
                    "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "{value}"}},
                },
            },
        },
    },
]


@pytest.fixture
def cluster_file(tmp_path):
    text = (DEMO_DIR / "cluster.yaml").read_text()
    a100 = "  name: nvidia-a100\nspec:\n  nodeLabels:\n    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB\n"
    assert a100 in text
    text = text.replace(a100, "  name: nvidia-a100\nspec:" + A100_TOLERATION)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def gpuqueue_config(gpuqueue_config, cluster_file):
    return {**gpuqueue_config, "config_files": [cluster_file]}


@pytest.fixture(autouse=True)
def no_kube_config(monkeypatch):
    # KubeSpawner.__init__ loads a kube config even with _mock=True (reference §5).
    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kw: None)


@pytest.fixture(autouse=True)
def close_kube_clients(jp_asyncio_loop):
    """KubeSpawner's shared kubernetes_asyncio clients close with a task that lives until its loop
    closes (kubespawner/clients.py); end those tasks before the test's loop goes away."""
    yield
    tasks = [t for t in asyncio.all_tasks(jp_asyncio_loop) if t.get_coro().__name__ == "close_client_task"]
    for t in tasks:
        t.cancel()
    if tasks:
        jp_asyncio_loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class QueuedKubeSpawner(GpuQueueSpawnerMixin, KubeSpawner):
    pass


class MockUser:
    name = "alice"
    escaped_name = "alice"
    url = "/user/alice/"
    id = 1

    def __init__(self):
        self.server = Server()


def make_spawner(env, cluster_file, profile, options=None, cls=None):
    from traitlets.config import Config

    c = Config()
    c.KubeSpawner.profile_list = PROFILES
    c.KubeSpawner.modify_pod_hook = gpuqueue_modify_pod_hook
    c.KubeSpawner.gpuqueue_url = env["GPUQUEUE_URL"]
    c.KubeSpawner.gpuqueue_api_token = env["GPUQUEUE_TOKEN"]
    c.KubeSpawner.gpuqueue_config_files = [cluster_file]
    c.KubeSpawner.gpuqueue_poll_interval = 0.1
    c.KubeSpawner.gpuqueue_lease_watch_interval = 0.1
    sp = (cls or QueuedKubeSpawner)(config=c, user=MockUser(), hub=Hub(), _mock=True)
    sp.user_options = {"profile": profile, **(options or {})}
    return sp


async def manifest_for(env, cluster_file, profile, options=None):
    sp = make_spawner(env, cluster_file, profile, options)
    await asyncio.wait_for(sp.run_pre_spawn_hook(), 30)  # queues and waits for admission
    await sp.load_user_options()  # what KubeSpawner._start() does next
    pod = await sp.get_pod_manifest()
    pod = sp.modify_pod_hook(sp, pod)
    return sp, pod


async def test_cpu_profile_is_not_queued_and_pod_is_unchanged(gpuqueue_env, cluster_file, gpuqueue_service):
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "cpu")
    assert sp.gpuqueue_lease is None and gpuqueue_service.list_workloads() == []
    assert pod.spec.priority_class_name is None
    assert "kueue.x-k8s.io/queue-name" not in pod.metadata.labels
    limits = pod.spec.containers[0].resources.limits or {}
    assert not any(k.startswith("nvidia.com/") for k in limits)


async def test_a100_profile_pod_carries_the_admission(gpuqueue_env, cluster_file, gpuqueue_service):
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "a100")
    w = sp.gpuqueue_workload
    assert w["kind"] == "NotebookLease" and w["state"] == "Running" and w["owner"] == "alice"
    assert w["priorityClass"] == "development"
    assert pod.spec.priority_class_name == "development"
    labels = pod.metadata.labels
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert labels["kueue.x-k8s.io/priority-class"] == "development"
    assert labels["gpuqueue.io/workload"] == w["name"]
    assert pod.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    tols = [(t.key, t.operator, t.effect) for t in pod.spec.tolerations]
    assert ("nvidia.com/gpu", "Exists", "NoSchedule") in tols
    res = pod.spec.containers[0].resources
    assert res.limits["nvidia.com/gpu"] == "1" and res.requests["nvidia.com/gpu"] == "1"
    assert res.limits["memory"] == 32 * 1024**3  # the profile's own override (mem_limit 32G) is kept
    # In a cluster the device plugin picks the devices: the queue's (advisory) device ids are not
    # put in the pod, where they would hide its GPUs or name others (hub/kubespawner.py).
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert "CUDA_VISIBLE_DEVICES" not in env and "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["GPUQUEUE_LEASE"] == f"{w['namespace']}/{w['name']}"
    assert sp.get_env()["CUDA_VISIBLE_DEVICES"] == w["visibleDevices"]  # what a local server gets
    # The spawner stops: the lease is released (Cancelled) and the GPU is free again.
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")
    assert gpuqueue_service.get_workload(w["namespace"], w["name"])["state"] == "Cancelled"


async def test_mig_profile_pod_requests_the_mig_slice(gpuqueue_env, cluster_file, gpuqueue_service):
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "mig-small")
    w = sp.gpuqueue_workload
    assert w["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/mig-1g.10gb": "nvidia-a100-mig"}
    assert pod.spec.node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/mig.strategy": "mixed",
    }
    res = pod.spec.containers[0].resources
    assert res.limits["nvidia.com/mig-1g.10gb"] == "1"
    assert "nvidia.com/gpu" not in res.limits
    assert w["visibleDevices"].startswith("MIG-")
    assert not {e.name for e in pod.spec.containers[0].env} & {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")


async def test_any_gpu_profile_gets_the_flavor_the_queue_chose(gpuqueue_env, cluster_file, gpuqueue_service):
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "two-gpus")
    w = sp.gpuqueue_workload
    flavor = w["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"]
    products = {"nvidia-a100": "NVIDIA-A100-SXM4-80GB", "nvidia-h100": "NVIDIA-H100-SXM5-80GB", "nvidia-l4": "NVIDIA-L4"}
    assert pod.spec.node_selector["nvidia.com/gpu.product"] == products[flavor]
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    assert len(w["visibleDevices"].split(",")) == 2
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")


async def test_a_gpu_picked_in_profile_options_is_queued(gpuqueue_env, cluster_file, gpuqueue_service):
    """KubeSpawner's profile_options: the choice made in the form decides the lease, and the pod
    KubeSpawner builds from the same choice carries its admission."""
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "pick", {"gpu": "mig"})
    w = sp.gpuqueue_workload
    assert w["state"] == "Running"
    assert w["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/mig-1g.10gb": "nvidia-a100-mig"}
    res = pod.spec.containers[0].resources
    assert res.limits["nvidia.com/mig-1g.10gb"] == "1" and "nvidia.com/gpu" not in res.limits
    assert res.limits["memory"] == 16 * 1024**3  # the profile's own override is kept
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")

    # A free-form count (unlisted_choice): "{value}" in its override becomes the count.
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "pick", {"gpu--unlisted-choice": "2"})
    w = sp.gpuqueue_workload
    assert w["state"] == "Running" and len(w["visibleDevices"].split(",")) == 2
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")

    # The default choice ("none") asks for no GPU: nothing is queued.
    sp, pod = await manifest_for(gpuqueue_env, cluster_file, "pick")
    assert sp.gpuqueue_lease is None
    assert not any(k.startswith("nvidia.com/") for k in (pod.spec.containers[0].resources.limits or {}))


def test_profile_options_map_to_a_request_or_are_refused_as_kubespawner_refuses_them():
    class S:
        profile_list = PROFILES
        user_options: dict = {}

    s = S()
    expected = [
        ({}, None),  # the default choice: no GPU
        ({"gpu": "none"}, None),
        ({"gpu": "a100"}, {"gpus": 1, "flavor": "nvidia-a100"}),  # the choice's own gpuqueue request
        ({"gpu": "mig"}, {"migProfile": "1g.10gb"}),  # read from the choice's override
        ({"gpu": ["mig"]}, {"migProfile": "1g.10gb"}),  # an unprocessed form value
        ({"gpu--unlisted-choice": "3"}, {"gpus": 3}),
    ]
    for options, req in expected:
        s.user_options = {"profile": "pick", **options}
        assert lease_request_for(s) == req, options
    assert PROFILES[-1]["kubespawner_override"] == {"mem_limit": "16G"}  # the profile is not changed
    for options, match in (({"gpu": "h200"}, "unknown choice 'h200' for option 'gpu'"),
                           ({"gpu--unlisted-choice": "9"}, "does not match the 'gpu' option's validation_regex")):
        s.user_options = {"profile": "pick", **options}
        with pytest.raises(ValueError, match=match):
            lease_request_for(s)


def test_every_profile_maps_to_a_request():
    class S:
        profile_list = PROFILES
        user_options: dict = {}

    s = S()
    expected = {
        "cpu": None,
        "mig-small": {"migProfile": "1g.10gb"},
        "a100": {"gpus": 1, "flavor": "nvidia-a100"},
        "two-gpus": {"gpus": 2},
    }
    for slug, req in expected.items():
        s.user_options = {"profile": slug}
        assert lease_request_for(s) == req, slug
    s.user_options = {}
    assert lease_request_for(s) is None  # the default profile is CPU only
    s.user_options = {"profile": "nope"}
    with pytest.raises(ValueError, match="unknown profile"):
        lease_request_for(s)


async def test_shipped_kubernetes_config_every_gpu_profile(gpuqueue_env, cluster_file, gpuqueue_service,
                                                           monkeypatch, tmp_path):
    """jupyterhub_config/kubernetes/jupyterhub_config.py as z2jh loads it (hub.extraConfig →
    load_subconfig): its spawner class, hook and profiles give a queued, admitted pod per GPU
    profile."""
    from pathlib import Path

    from traitlets.config.loader import PyFileConfigLoader

    shipped = Path(__file__).resolve().parents[2] / "jupyterhub_config" / "kubernetes" / "jupyterhub_config.py"
    (tmp_path / "z2jh.py").write_text(
        "c = get_config()\nc.JupyterHub.services = [{'name': 'chart-service', 'api_token': 'x'}]\n"
        f"load_subconfig({str(shipped)!r})\n")
    monkeypatch.setenv("GPUQUEUE_CONFIG", cluster_file)
    c = PyFileConfigLoader("z2jh.py", path=str(tmp_path)).load_config()
    assert [s["name"] for s in c.JupyterHub.services] == ["chart-service", "gpuqueue"]
    cls = c.JupyterHub.spawner_class
    c.KubeSpawner.gpuqueue_url = gpuqueue_env["GPUQUEUE_URL"]  # the test server instead of the hub Service
    c.KubeSpawner.gpuqueue_api_token = gpuqueue_env["GPUQUEUE_TOKEN"]
    c.KubeSpawner.gpuqueue_poll_interval = 0.1
    expected = {"mig-1g": "nvidia.com/mig-1g.10gb", "a100": "nvidia.com/gpu", "any-gpu": "nvidia.com/gpu"}
    for profile in c.KubeSpawner.profile_list:
        sp = cls(config=c, user=MockUser(), hub=Hub(), _mock=True)
        assert sp.modify_pod_hook is gpuqueue_modify_pod_hook
        sp.user_options = {"profile": profile["slug"]}
        await asyncio.wait_for(sp.run_pre_spawn_hook(), 30)
        await sp.load_user_options()
        pod = sp.modify_pod_hook(sp, await sp.get_pod_manifest())
        if profile["slug"] == "cpu":
            assert sp.gpuqueue_lease is None and pod.spec.priority_class_name is None
            continue
        w = sp.gpuqueue_workload
        assert pod.spec.priority_class_name == "development"
        assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a-queue"
        assert pod.spec.containers[0].resources.limits[expected[profile["slug"]]] == "1"
        flavor = w["admission"]["podSetAssignments"][0]["flavors"][expected[profile["slug"]]]
        assert pod.spec.node_selector["nvidia.com/gpu.product"], flavor
        await sp._gpuqueue_release(sp.gpuqueue_lease, "test")
        assert gpuqueue_service.get_workload(w["namespace"], w["name"])["state"] == "Cancelled"


async def test_lease_survives_a_hub_restart_in_spawner_state(gpuqueue_env, cluster_file, gpuqueue_service):
    """get_state / load_state (what JupyterHub stores in its database) keep the lease, so a
    restarted hub still releases it when the server stops."""
    sp, _ = await manifest_for(gpuqueue_env, cluster_file, "a100")
    w = sp.gpuqueue_workload
    state = json.loads(json.dumps(sp.get_state()))  # as stored: JSON
    assert state["gpuqueue_lease"]["workload"]["name"] == w["name"]
    restarted = make_spawner(gpuqueue_env, cluster_file, "a100")
    restarted.load_state(state)
    assert restarted.gpuqueue_workload["name"] == w["name"]
    # Without a cluster KubeSpawner's stop fails: the pod may still hold the GPU, so the lease stays.
    with pytest.raises(Exception):
        await restarted.stop()
    assert gpuqueue_service.get_workload(w["namespace"], w["name"])["state"] == "Running"
    await restarted._gpuqueue_release(restarted.gpuqueue_lease, "stopped")  # what a successful stop does
    assert gpuqueue_service.get_workload(w["namespace"], w["name"])["state"] == "Cancelled"


class _RunningPod:
    """KubeSpawner's poll and stop need a cluster: here the server runs until stopped."""

    stopped = False

    async def poll(self):
        return 0 if self.stopped else None

    async def stop(self, now=False):
        self.stopped = True


class RestoredKubeSpawner(GpuQueueSpawnerMixin, _RunningPod, KubeSpawner):
    pass


async def test_a_restored_server_has_its_lease_watched_from_its_first_poll(gpuqueue_env, cluster_file,
                                                                          gpuqueue_service):
    """After a hub restart, JupyterHub polls the servers it restored (it does not start them): the
    first poll starts the lease watch, which stops the server once the queue ends the lease (here
    an admin cancels it), without waiting for the hub's next poll."""
    sp, _ = await manifest_for(gpuqueue_env, cluster_file, "a100")
    w = sp.gpuqueue_workload
    state = json.loads(json.dumps(sp.get_state()))
    restored = make_spawner(gpuqueue_env, cluster_file, "a100", cls=RestoredKubeSpawner)
    restored.load_state(state)
    assert await restored.poll() is None and restored._gpuqueue_watch_task is not None
    gpuqueue_service.cancel(w["namespace"], w["name"], user=w["owner"])
    for _ in range(100):
        if restored.stopped:
            break
        await asyncio.sleep(0.05)
    assert restored.stopped and restored.gpuqueue_lease.done
    assert await restored.poll() == 0  # what the hub's next poll sees: the server is gone



async def test_a_named_kubespawner_server_names_its_lease_and_cannot_go_on_without_its_gpu(
        gpuqueue_env, cluster_file, gpuqueue_service):
    """A lease names its server (``notebookServer.name``: the spawner's ``name``), in its own name
    and in the spawn progress; a KubeSpawner pod cannot give its GPUs back while it runs, so its
    lease says ``goesOnWithoutGpus: false`` and an idle release under ``onIdle: "release"`` stops
    it (``idleAction`` "stop": tests/test_idle_reclaim.py)."""
    from types import SimpleNamespace

    sp = make_spawner(gpuqueue_env, cluster_file, "a100")
    sp.orm_spawner = SimpleNamespace(name="exp2", server=None)  # JupyterHub's Spawner.name reads it
    assert sp.name == "exp2"
    await asyncio.wait_for(sp.run_pre_spawn_hook(), 30)
    w = sp.gpuqueue_workload
    assert w["notebookServer"] == {"name": "exp2", "goesOnWithoutGpus": False}
    assert w["name"].startswith("notebook-exp2-")
    assert sp.gpuqueue_lease.progress["message"].startswith("notebook server 'exp2': 1 × A100 admitted"), \
        sp.gpuqueue_lease.progress
    await sp._gpuqueue_release(sp.gpuqueue_lease, "test")
