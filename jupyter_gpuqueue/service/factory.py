"""``create_service``: a QueueService built from configuration files, an inventory, a ledger URL and
a backend, as the Jupyter server extension and the hub service build it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from ..engine.errors import ManifestError
from ..engine.manifests import load_text
from ..engine.model import ClusterConfig
from ..engine.scheduler import SchedulerOptions
from ..errors import ValidationError
from ..ledger import Ledger, Prices
from .queue_service import QueueService, log

DEMO_DIR = Path(__file__).parent.parent / "demo"


def create_service(
    *,
    config_paths: Optional[list[str]],
    inventory_path: Optional[str],
    db_url: Optional[str],
    root_dir: str,
    data_dir: str,
    prices: Optional[dict[str, float]] = None,
    default_local_queue: Optional[str] = None,
    default_priority_class: Optional[str] = None,
    user_local_queues: Optional[dict[str, list[str]]] = None,
    cycle_interval: float = 0.5,
    stop_grace_seconds: float = 10.0,
    options: Optional[SchedulerOptions] = None,
    logger: Optional[logging.Logger] = None,
    lease_preemption_grace_seconds: float = 300.0,
    lease_priority_class: Optional[str] = "development",
    backend: str = "local",
    kubernetes: Optional[dict] = None,
    upgrade_db: bool = False,
    owner_accounts=None,
) -> QueueService:
    """Build a QueueService with the local backend, or with ``backend`` "kubernetes" / "kueue" a
    cluster one (``kubernetes``: its options, see ``backends/k8s_factory.py``; the inventory then
    comes from the cluster's Nodes unless ``inventory_path`` is given).

    ``inventory_path`` None: NVML discovery where GPUs are present, else the demo inventory.
    ``config_paths`` None: with discovered GPUs, one team owning exactly them
    (``inventory.default_config``); else the demo cluster (``jupyter_gpuqueue/demo/cluster.yaml``). ``db_url`` None:
    ``sqlite:///{data_dir}/gpuqueue.sqlite``. ``upgrade_db``: upgrade a ledger of an older schema
    (``ledger/schema.py``). ``owner_accounts``: an ``Accounts`` (backends/accounts.py) to run local
    jobs as their owners' OS accounts (needs root; ``data_dir`` is then made the service's own,
    0700). Raises ValidationError for an invalid configuration, LedgerSchemaError for a ledger of
    another schema revision."""
    from ..backends.lease import LeaseBackend
    from ..backends.local import LocalBackend
    from ..inventory import load_inventory
    from ..inventory.default_config import config_for_inventory

    cluster = None
    if backend != "local":  # "kubernetes" | "kueue": see backends/k8s_factory.py
        from ..backends.k8s_factory import ClusterConnection

        cluster = ClusterConnection(backend, kubernetes or {})
    inventory = cluster.inventory() if cluster is not None and not inventory_path else load_inventory(inventory_path)
    config = ClusterConfig()
    if config_paths:
        paths = list(config_paths)
    elif inventory.source == "nvml":
        # Real GPUs and no configuration: one team owning exactly the discovered hardware.
        paths = []
        config = config_for_inventory(inventory)
    else:
        paths = [str(DEMO_DIR / "cluster.yaml")]
    for p in paths:
        try:
            text = Path(p).read_text()
        except OSError as exc:
            raise ValidationError(f"cannot read {p}: {exc}", "config_files") from None
        try:
            m = load_text(text, p)
        except ManifestError as exc:
            raise ValidationError(str(exc), "config_files") from None
        config.merge(m.config)
    if owner_accounts is not None:
        if cluster is not None:
            raise ValidationError(f"only the local backend runs jobs on this machine (backend is {backend!r})",
                                  "run_jobs_as_owner")
        from ..backends.accounts import require_root, secure_state_dir

        require_root()
        secure_state_dir(data_dir)  # ledger, logs, exit records: no job may read or write them
    os.makedirs(data_dir, exist_ok=True)
    ledger = Ledger(db_url or f"sqlite:///{os.path.join(os.path.abspath(data_dir), 'gpuqueue.sqlite')}",
                    upgrade=upgrade_db, logger=logger)
    price_obj = Prices(prices) if prices else Prices()
    if default_local_queue is None and "team-a/team-a-queue" in config.local_queues:
        default_local_queue = "team-a/team-a-queue"
    if default_priority_class is None and "experiment-normal" in config.priority_classes:
        default_priority_class = "experiment-normal"
    if lease_priority_class and lease_priority_class not in config.priority_classes \
            and lease_priority_class not in config.workload_priority_classes:
        # Jobs still run; a lease naming no priority class is refused with this class's name.
        (logger or log).warning(
            "gpuqueue: the notebook lease priority class %r is not in the cluster configuration; "
            "add it (a PriorityClass or WorkloadPriorityClass) or set c.GpuQueueApp.lease_priority_class",
            lease_priority_class)
    return QueueService(
        config=config,
        inventory=inventory,
        ledger=ledger,
        backend=LeaseBackend(cluster.backend(config) if cluster is not None else LocalBackend(
            accounts=owner_accounts, sightings_file=os.path.join(data_dir, "local-runs.seen"))),
        prices=price_obj,
        root_dir=root_dir,
        data_dir=data_dir,
        default_local_queue=default_local_queue,
        default_priority_class=default_priority_class,
        user_local_queues=user_local_queues,
        cycle_interval=cycle_interval,
        stop_grace_seconds=stop_grace_seconds,
        lease_preemption_grace_seconds=lease_preemption_grace_seconds,
        lease_priority_class=lease_priority_class,
        options=options,
        logger=logger,
    )
