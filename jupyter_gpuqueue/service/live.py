"""The service's live state: two small objects that QueueService owns and hands, by reference, to
the collaborators that read or change them (never the service itself).

- :class:`LiveConfig`: what is in force and is *replaced* while the service runs: the queue
  configuration and prices (admins' changes, ``configuration``), the engine Scheduler built on them
  (rebuilt by ``load_stored_config`` before the start), the teams' budgets (``costs``) and the clock
  (tests replace it through ``QueueService.clock``). A collaborator reads ``conf.config`` each time,
  so it always sees the one in force.
- :class:`LiveState`: the workloads the service tracks and the loop's flags: the live ledger rows
  (``records``), ``by_key``, the engine Workloads of active work, what is being stopped and why,
  the names whose commit is under way, Kueue's queue positions (delegation), whether a scheduling
  cycle is due (``dirty``), and the loop's ``slicing`` / ``started`` / ``committer``.

Both are plain attribute holders: reading through them costs one attribute lookup, as reading the
service's own attributes did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from ..engine import serialize
from ..engine.model import ClusterConfig, Workload
from ..engine.runtime_model import COMMAND_ANNOTATION, OWNER_LABEL
from ..errors import NotFound

if TYPE_CHECKING:
    from ..budgets import Budgets
    from ..engine.scheduler import Scheduler
    from ..ledger import Ledger, Prices
    from ..ledger.group_commit import GroupCommitter


@dataclass(eq=False)
class LiveConfig:
    """The configuration in force (see the module docstring)."""

    config: ClusterConfig
    prices: "Prices"
    scheduler: "Scheduler"
    clock: Callable[[], float]
    budgets: Optional["Budgets"] = None  # None: no budget configured or set (service/costs.py)


@dataclass(eq=False)
class LiveState:
    """The workloads the service tracks and its loop's flags (see the module docstring).
    ``ledger`` answers :meth:`record` for workloads that are no longer live."""

    ledger: "Ledger"
    records: dict[str, dict] = field(default_factory=dict)  # uid -> ledger row (active and recently finished)
    by_key: dict[str, str] = field(default_factory=dict)  # "namespace/name" -> uid
    engine_workloads: dict[str, Workload] = field(default_factory=dict)  # uid -> engine Workload (active only)
    stopping: dict[str, str] = field(default_factory=dict)  # uid -> why we stopped it (cancel / max runtime)
    inflight: set[str] = field(default_factory=set)  # "namespace/name" of submissions being committed
    kueue_positions: dict[str, tuple] = field(default_factory=dict)  # uid -> (positionInClusterQueue, positionInLocalQueue)
    requeue_at: dict[str, float] = field(default_factory=dict)  # uid -> when an evicted workload is queued again (requeuingStrategy backoff)
    dirty: bool = True  # a scheduling cycle is due
    slicing: bool = False  # in the loop's tick: scheduling yields after Admission.schedule_slice_seconds
    started: bool = False
    committer: Optional["GroupCommitter"] = None  # the ledger's group commit, while the loop runs

    def track(self, row: dict, wl: Workload) -> None:
        self.records[row["uid"]] = row
        self.by_key[f"{row['namespace']}/{row['name']}"] = row["uid"]
        self.engine_workloads[row["uid"]] = wl

    def record(self, namespace: str, name: str) -> dict:
        """The live row of ``namespace/name``, else its ledger row; NotFound (field ``name``)."""
        uid = self.by_key.get(f"{namespace}/{name}")
        if uid is not None:
            return self.records[uid]
        row = self.ledger.find_workload(namespace, name)
        if row is None:
            raise NotFound(f"workload {namespace}/{name} not found", "name")
        return row


def engine_workload(row: dict) -> Workload:
    """The engine Workload of a ledger row (its admission is not set). Its owner and command are
    kept as the label / annotation the run-time history reads (engine/runtime_model.py)."""
    spec = row["spec"]
    command = spec.get("command") or []
    return Workload(
        namespace=row["namespace"],
        name=row["name"],
        queue_name=row["local_queue"],
        pod_sets=[serialize.pod_set_from_dict(p) for p in spec["podSets"]],
        priority=row["priority"],
        priority_class=row.get("priority_class"),
        creation_time=row["created_at"],
        uid=row["uid"],
        maximum_execution_time_seconds=spec.get("maxRuntimeSeconds"),
        labels={OWNER_LABEL: row.get("owner") or ""},
        annotations={COMMAND_ANNOTATION: " ".join(command) if isinstance(command, list) else str(command)},
    )
