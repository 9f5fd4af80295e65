"""A QueueService built in-process on files in a test's ``tmp_path``, as the server builds it.

``service_factory(tmp_path, cluster, inventory, **defaults)`` writes ``cluster.yaml``,
``inventory.yaml`` and ``root/`` and returns ``build(restore=True, **overrides)``: every call makes a
new service on the same files and the same ledger (SQLite in ``tmp_path``, or ``db_url``; calling it
again is a restart).
``stop_jobs(services)`` ends the local processes the services still run (test teardown).
``tick_until(svc, pred)`` runs the service's cycle until ``pred()`` holds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable

from jupyter_gpuqueue.service import QueueService, create_service


def service_factory(tmp_path: Path, cluster: str, inventory: str, **defaults: Any) -> Callable[..., QueueService]:
    """``defaults`` may name ``db_url`` (e.g. a PostgreSQL database, tests/conftest.py's
    ``ledger_url``); the default is a SQLite file in ``tmp_path``."""
    db_url = defaults.pop("db_url", None) or f"sqlite:///{tmp_path / 'q.sqlite'}"
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "inventory.yaml").write_text(inventory)
    (tmp_path / "root").mkdir(exist_ok=True)
    built: list[QueueService] = []

    def build(*, restore: bool = True, **overrides: Any) -> QueueService:
        svc = create_service(
            config_paths=[str(tmp_path / "cluster.yaml")],
            inventory_path=str(tmp_path / "inventory.yaml"),
            db_url=db_url,
            root_dir=str(tmp_path / "root"),
            data_dir=str(tmp_path / "data"),
            **{**defaults, **overrides},
        )
        if restore:
            svc.restore()
        built.append(svc)
        return svc

    build.services = built  # type: ignore[attr-defined]
    return build


def stop_jobs(services: Iterable[QueueService], grace: float = 0.0, wait: float = 5.0) -> None:
    """Stop every job the services still run (SIGTERM, SIGKILL after ``grace`` seconds) and reap
    them for up to ``wait`` seconds each."""
    for svc in services:
        for uid in list(svc.backend.running()):
            svc.backend.stop(uid, "test teardown", grace)
        deadline = time.time() + wait
        while svc.backend.running() and time.time() < deadline:
            svc.backend.poll()
            time.sleep(0.05)


def tick_until(svc: QueueService, pred: Callable[[], Any], timeout: float = 20.0) -> None:
    """Run ``svc.tick()`` every 50 ms until ``pred()`` is true; AssertionError after ``timeout``
    seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        svc.tick()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")
