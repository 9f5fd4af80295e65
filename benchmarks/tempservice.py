"""A QueueService on files in a new temporary directory (the benchmarks' own, not the tests'):
``temp_service(cluster_yaml, inventory_yaml, **create_service_kwargs)``; SQLite ledger there."""

from __future__ import annotations

import tempfile
from pathlib import Path

from jupyter_gpuqueue.service import QueueService, create_service


def temp_service(cluster: str, inventory: str, **kwargs) -> QueueService:
    tmp = Path(tempfile.mkdtemp(prefix="gpuqueue-bench-"))
    (tmp / "cluster.yaml").write_text(cluster)
    (tmp / "inventory.yaml").write_text(inventory)
    return create_service(config_paths=[str(tmp / "cluster.yaml")], inventory_path=str(tmp / "inventory.yaml"),
                          db_url=f"sqlite:///{tmp / 'q.sqlite'}", root_dir=str(tmp), data_dir=str(tmp / "data"),
                          **kwargs)
