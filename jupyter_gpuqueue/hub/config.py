"""Settings of the hub-side queue integration, and its error.

:class:`GpuQueueSpawnerConfig` holds the ``gpuqueue_*`` traits: :class:`~.spawner.GpuQueueSpawnerMixin`
inherits them (``c.Spawner.gpuqueue_url``, ``c.KubeSpawner.gpuqueue_url``), the plain hooks read
them from ``c.GpuQueueSpawnerConfig`` (:func:`setting`).
"""

from __future__ import annotations

from typing import Any, Optional

from traitlets import Bool, Dict, Float, List, Unicode
from traitlets.config import LoggingConfigurable

from ..backends.lease import LEASE_KIND  # noqa: F401 (the Workload kind, one name on both sides)

API_PATH = "gpuqueue/api/"
DEFAULT_TOKEN_SCOPES = ["access:services!service=gpuqueue", "custom:gpuqueue:submit"]
REQUEST_KEYS = ("gpus", "migProfile", "flavor", "localQueue", "priorityClass", "maxRuntimeSeconds", "maxRuntime")


class GpuQueueSpawnError(Exception):
    """The lease could not be obtained or the queue answered an error. ``str()`` is shown to the
    user on the spawn page; ``status`` the HTTP status from the queue (None: not reached)."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status
        # JupyterHub shows ``jupyterhub_message`` of a failed spawn's exception on the spawn page.
        self.jupyterhub_message = message


def _refusal_base() -> type:
    """JupyterHub's ``SpawnException`` (6.0 and later: the spawn fails with its status code and
    message, no traceback is logged), else tornado's ``HTTPError`` (JupyterHub 5: passed through
    to the spawn page likewise)."""
    try:
        from jupyterhub.spawner import SpawnException

        return SpawnException
    except ImportError:  # pragma: no cover - JupyterHub 5
        from tornado.web import HTTPError

        return HTTPError


class GpuQueueSpawnRefused(GpuQueueSpawnError, _refusal_base()):  # type: ignore[misc]
    """A spawn the GPU queue refuses for a reason the user can act on (no team, a scope not held,
    a request the queue finds invalid, an unknown profile): the spawn page shows ``message`` with
    the 4xx ``status`` (``status_code``) instead of JupyterHub's "500: Unhandled error starting
    server". ``str()`` is the message."""

    def __init__(self, message: str, status: int = 400):
        base = type(self).__mro__[2]  # SpawnException or HTTPError
        if base.__name__ == "SpawnException":
            base.__init__(self, message, reason="gpuqueue", status_code=status)
        else:  # pragma: no cover - JupyterHub 5
            base.__init__(self, status, None, reason="GPU queue")
        self.status = status
        self.status_code = status
        self.jupyterhub_message = message
        self._message = message

    def __str__(self) -> str:
        return self._message

    def get_message(self) -> str:  # tornado's HTTPError interface (JupyterHub's error page)
        return self._message


class GpuQueueSpawnerConfig(LoggingConfigurable):
    """The ``gpuqueue_*`` settings (traits of :class:`GpuQueueSpawnerMixin`; for the plain hooks
    set them as ``c.GpuQueueSpawnerConfig.<name>``)."""

    gpuqueue_url = Unicode(
        "",
        help="""Root URL of the gpuqueue service, e.g. http://127.0.0.1:9999/services/gpuqueue/
        (the API is at {gpuqueue_url}gpuqueue/api/). Empty: the URL and prefix of the hub service
        named gpuqueue_service_name.""",
    ).tag(config=True)

    gpuqueue_service_name = Unicode("gpuqueue", help="Name of the hub-managed queue service.").tag(config=True)

    gpuqueue_api_token = Unicode(
        "",
        help="""A fixed token for the queue instead of per-lease user tokens (a queue that is not
        a hub service). The queue then bills whoever owns this token.""",
    ).tag(config=True)

    gpuqueue_token_scopes = List(
        Unicode(),
        default_value=list(DEFAULT_TOKEN_SCOPES),
        help="""Scopes of the user token the hub creates to submit, watch and release a lease
        (the user must hold them; the token is deleted with the lease).""",
    ).tag(config=True)

    gpuqueue_profiles = List(
        Dict(),
        help="""Profiles for spawners without KubeSpawner's profile_list: [{"slug", "display_name",
        "default", "gpuqueue": {"gpus": 1, "flavor": "nvidia-a100"} | {"migProfile": "1g.10gb"} |
        {}}]. The chosen slug comes from user_options["profile"].""",
    ).tag(config=True)

    gpuqueue_request = Dict(
        help="""The lease request when there are no profiles, e.g. {"gpus": 1}. Empty: no GPU,
        the server starts without queueing.""",
    ).tag(config=True)

    gpuqueue_local_queue = Unicode(
        "",
        help="""LocalQueue ("namespace/name") of leases that name none in their profile. Empty:
        the user's default team in the queue.""",
    ).tag(config=True)

    gpuqueue_max_runtime_seconds = Float(
        8 * 3600.0,
        help="""Maximum lease time in seconds (the queue releases the GPUs then, and the spawner
        stops the server: see gpuqueue_lease_watch_interval).""",
    ).tag(config=True)

    gpuqueue_admission_timeout = Float(
        0.0,
        help="""Seconds a spawn may wait in the queue before it fails (the lease is released).
        0: until admitted or cancelled.""",
    ).tag(config=True)

    gpuqueue_poll_interval = Float(1.0, help="Seconds between queue polls while a spawn waits.").tag(config=True)

    gpuqueue_release_retry_seconds = Float(
        300.0,
        help="""Seconds a lease whose server stopped is retried for release while the queue does
        not answer (at hub start the queue service starts after the spawners are checked; at hub
        shutdown it stops before them). The queue service also ends, when it starts, the leases
        whose own server is gone. 0: not retried (that reconcile ends it).""",
    ).tag(config=True)

    gpuqueue_lease_watch_interval = Float(
        10.0,
        help="""Seconds between looks at the lease of a running server (GpuQueueSpawnerMixin).
        Once the lease has an end (the evictionDeadline of a preemption warning, or its maximum
        lease time) the server is stopped at that moment, when the queue gives its devices to
        other work, instead of at the hub's next poll (Spawner.poll_interval, 30 s by default):
        two users on one GPU until then. A lease the queue ended otherwise (released, unknown)
        stops the server at the next look. 0: only the hub's poll does this.""",
    ).tag(config=True)

    gpuqueue_server_goes_on_without_gpus = Bool(
        None,
        allow_none=True,
        help="""Whether this spawner can keep a notebook server running once its GPU lease ends, so
        that a team's idle policy ``onIdle: "release"`` lets the server go on without its GPUs
        (told to the queue with each lease: ``notebookServer.goesOnWithoutGpus``). True where the
        devices reach the server through its environment (LocalProcessSpawner, SystemdSpawner, …:
        its gpuqueue server extension then shuts down the kernels that held the GPUs and starts
        new ones with none visible; users' servers must run it in hub-client mode, as
        jupyterhub_config/local/ does: without it, set this to False). A KubeSpawner pod cannot
        give an extended resource (nvidia.com/gpu) back while it runs, so there the server stops
        instead. None (default): False for a KubeSpawner, else True.""",
    ).tag(config=True)

    gpuqueue_config_files = List(
        Unicode(),
        help="""Kueue YAML files with the ResourceFlavors (the queue's own configuration, e.g. a
        ConfigMap mounted in the hub): KubeSpawner's modify_pod_hook takes each assigned
        flavor's nodeLabels (as nodeSelector) and tolerations from them.""",
    ).tag(config=True)


def setting(spawner: Any, name: str):
    if hasattr(spawner, name):
        return getattr(spawner, name)
    cfg = GpuQueueSpawnerConfig(config=getattr(spawner, "config", None))
    return getattr(cfg, name)


def goes_on_without_gpus(spawner: Any) -> bool:
    """``gpuqueue_server_goes_on_without_gpus`` of ``spawner``, None resolved (see the trait)."""
    value = setting(spawner, "gpuqueue_server_goes_on_without_gpus")
    if value is None:
        return not any(cls.__name__ == "KubeSpawner" for cls in type(spawner).__mro__)
    return bool(value)


def server_label(spawner: Any) -> str:
    """``"notebook server 'exp2'"`` for a named server, ``"default notebook server"`` otherwise."""
    name = getattr(spawner, "name", "") or ""
    return f"notebook server '{name}'" if name else "default notebook server"


def queue_url(spawner: Any) -> str:
    url = setting(spawner, "gpuqueue_url")
    if url:
        return url
    name = setting(spawner, "gpuqueue_service_name")
    try:
        from jupyterhub.app import JupyterHub

        if JupyterHub.initialized():
            svc = JupyterHub.instance()._service_map.get(name)
            if svc is not None and svc.url:
                return svc.url.rstrip("/") + svc.prefix
    except Exception:  # pragma: no cover - best effort; explicit configuration is documented
        pass
    raise GpuQueueSpawnError(
        f"set c.Spawner.gpuqueue_url: no hub service named {name!r} with a url was found"
    )
