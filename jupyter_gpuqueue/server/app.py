"""The jupyter_server extension: ``GpuQueueApp``.

Loaded by ``jupyter lab`` / ``jupyter server`` when ``jpserver_extensions.jupyter_gpuqueue`` is
enabled (the package installs ``jupyter-config/server-config/jupyter_gpuqueue.json``). It builds one
:class:`~jupyter_gpuqueue.service.QueueService`, starts it once the server's event loop runs, and
serves the REST API and the event stream under ``{base_url}gpuqueue/api/`` (docs/rest-api.md).

Configure with ``c.GpuQueueApp.<trait>`` in ``jupyter_server_config.py``, for example::

    c.GpuQueueApp.config_files = ["/etc/gpuqueue/cluster.yaml"]
    c.GpuQueueApp.prices = {"nvidia-a100": 2.21, "nvidia-h100": 3.75}
    c.GpuQueueApp.default_local_queue = "team-a/team-a-queue"
"""

from __future__ import annotations

import os
from typing import Any, Optional

from jupyter_server.extension.application import ExtensionApp
from traitlets import Dict, Float, Int, List, Unicode, default

from ..errors import GpuQueueError
from .events import PING_INTERVAL_KEY, events_handler
from .handlers import (
    MAX_BODY_KEY,
    SERVICE_KEY,
    STANDALONE_USER_KEY,
    STARTUP_ERROR_KEY,
    default_handlers,
    default_standalone_user,
    not_found_handler,
)

ENV_CONFIG = "GPUQUEUE_CONFIG"
ENV_INVENTORY = "GPUQUEUE_INVENTORY"
ENV_DB_URL = "GPUQUEUE_DB_URL"


class GpuQueueApp(ExtensionApp):
    """A fair, quota-aware GPU queue (Kueue semantics) inside the Jupyter server."""

    name = "jupyter_gpuqueue"
    description = __doc__
    load_other_extensions = True

    config_files = List(
        Unicode(),
        help="""Kubernetes / Kueue YAML files that define the queueing objects: ResourceFlavors,
        ClusterQueues, Cohorts, LocalQueues, PriorityClasses, WorkloadPriorityClasses, Namespaces.
        Later files override earlier objects of the same kind and name. Empty: the paths in the
        GPUQUEUE_CONFIG environment variable (separated by os.pathsep), else the bundled demo
        cluster.""",
    ).tag(config=True)

    inventory_file = Unicode(
        None,
        allow_none=True,
        help="""A static inventory YAML (nodes, GPUs, MIG devices). None: the GPUQUEUE_INVENTORY
        environment variable, else the GPUs NVML reports, else the bundled demo inventory.""",
    ).tag(config=True)

    db_url = Unicode(
        None,
        allow_none=True,
        help="""SQLAlchemy URL of the ledger (workloads, decisions, usage intervals), e.g.
        "postgresql+psycopg://gpuqueue@db/gpuqueue". None: the GPUQUEUE_DB_URL environment
        variable, else SQLite at {state_dir}/gpuqueue.sqlite.""",
    ).tag(config=True)

    state_dir = Unicode(
        help="""Where the queue keeps its SQLite ledger and job logs. Default: the
        "gpuqueue" folder in the Jupyter data directory.""",
    ).tag(config=True)

    @default("state_dir")
    def _state_dir_default(self) -> str:
        from jupyter_core.paths import jupyter_data_dir

        return os.path.join(jupyter_data_dir(), "gpuqueue")

    prices = Dict(
        key_trait=Unicode(),
        value_trait=Float(),
        help="""USD per GPU-hour by ResourceFlavor name, e.g. {"nvidia-a100": 2.21}. The key
        "default" sets the price of flavors not listed. Empty: the built-in price list.""",
    ).tag(config=True)

    default_local_queue = Unicode(
        None,
        allow_none=True,
        help="""The LocalQueue ("namespace/name") used when a submission names none. None: the
        user's first permitted LocalQueue.""",
    ).tag(config=True)

    default_priority_class = Unicode(
        None,
        allow_none=True,
        help="""The PriorityClass or WorkloadPriorityClass used when a submission names none.
        None: the cluster's globalDefault PriorityClass, else priority 0.""",
    ).tag(config=True)

    user_local_queues = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        help="""Which LocalQueues ("namespace/name") each user may submit to, e.g.
        {"alice": ["team-a/team-a-queue"]}. Empty: every user may use every LocalQueue.""",
    ).tag(config=True)

    standalone_user = Unicode(
        help="""The queue user name of a standalone server (jupyter_server's own token or
        password login, where every client is the server's owner). Default: the OS user
        running the server. Under JupyterHub the Hub user name is used instead.""",
    ).tag(config=True)

    @default("standalone_user")
    def _standalone_user_default(self) -> str:
        return default_standalone_user()

    max_body_bytes = Int(
        1 << 20,
        help="""Largest accepted request body in bytes (a SubmitRequest or a manifest); larger
        bodies are answered with 413 PayloadTooLarge.""",
    ).tag(config=True)

    cycle_interval = Float(
        0.5,
        help="""Seconds between the service's background scheduling cycles (it also runs one
        right after every change).""",
    ).tag(config=True)

    event_ping_interval = Float(
        30.0,
        help="""Seconds between {"type": "ping"} messages on the event stream; 0 disables.""",
    ).tag(config=True)

    # -- lifecycle ------------------------------------------------------------------------------

    _service_started = False
    service = None

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)
        self.handlers.append(events_handler)
        self.handlers.append(not_found_handler)  # must stay last: JSON 404 under gpuqueue/api/

    def _resolved_config_paths(self) -> Optional[list[str]]:
        if self.config_files:
            return list(self.config_files)
        env = os.environ.get(ENV_CONFIG, "")
        paths = [p for p in env.split(os.pathsep) if p.strip()]
        return paths or None

    def initialize_settings(self) -> None:
        """Build the QueueService. An invalid configuration is logged and every endpoint then
        answers 503 with the reason, instead of the extension silently missing."""
        self.service = None
        self.settings.update(
            {
                SERVICE_KEY: None,
                MAX_BODY_KEY: self.max_body_bytes,
                STANDALONE_USER_KEY: self.standalone_user,
                PING_INTERVAL_KEY: self.event_ping_interval,
            }
        )
        try:
            service = self._create_service()
        except GpuQueueError as e:
            self.log.error("jupyter_gpuqueue: the queue service cannot start: %s", e)
            self.settings[STARTUP_ERROR_KEY] = str(e)
            return
        self.service = service
        self.settings[SERVICE_KEY] = service

    def _create_service(self):
        from ..service import create_service

        os.makedirs(self.state_dir, exist_ok=True)
        root_dir = getattr(self.serverapp, "root_dir", None) or os.getcwd()
        return create_service(
            config_paths=self._resolved_config_paths(),
            inventory_path=self.inventory_file or os.environ.get(ENV_INVENTORY) or None,
            db_url=self.db_url or os.environ.get(ENV_DB_URL) or None,
            root_dir=os.path.abspath(os.path.expanduser(root_dir)),
            data_dir=self.state_dir,
            prices=dict(self.prices) or None,
            default_local_queue=self.default_local_queue,
            default_priority_class=self.default_priority_class,
            user_local_queues=(
                {u: list(q) for u, q in self.user_local_queues.items()}
                if self.user_local_queues
                else None
            ),
            cycle_interval=self.cycle_interval,
            logger=self.log,
        )

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Start the service once the server's event loop runs (restore, adopt, loop)."""
        service = getattr(self, "service", None)
        if service is None or self._service_started:
            return
        await service.start()
        self._service_started = True
        self.log.info("jupyter_gpuqueue: queue service started")

    async def stop_extension(self) -> None:
        """Stop the service's loop and close its ledger; running jobs keep running and are
        adopted on restart. Safe when the service never started (or could not be built)."""
        service, self.service = self.service, None
        self.settings[SERVICE_KEY] = None
        web_app = getattr(self.serverapp, "web_app", None)
        if web_app is not None:
            web_app.settings[SERVICE_KEY] = None  # late requests get 503, not a closed ledger
        was_started, self._service_started = self._service_started, False
        if service is None:
            return
        await service.stop()
        if was_started:
            self.log.info("jupyter_gpuqueue: queue service stopped")
