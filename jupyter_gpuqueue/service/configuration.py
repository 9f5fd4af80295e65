"""Configuration changes: the live queue configuration replaced by what admins apply (built and
validated by ``admin.py``), stored in the ledger with an audit entry, and restored at the next start."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

from ..engine.model import ClusterConfig
from ..engine.scheduler import Scheduler
from ..errors import GpuQueueError, ValidationError
from ..ledger import Prices
from .states import ACTIVE_STATES, PENDING

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .events import EventHub
    from .live import LiveConfig, LiveState


class Configuration:
    """Applies, loads and discards the live configuration.

    Collaborators: ``conf`` (LiveConfig: the configuration, prices and Scheduler it replaces),
    ``live`` (LiveState: the active workloads a change must keep), the ``ledger`` (stored
    configurations, audit), ``events``, ``wake`` (the loop's wake-up) and ``log``."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", events: "EventHub",
                 wake: Callable[[], None], log: logging.Logger):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.events = events
        self.wake = wake
        self.log = log

    def apply_config(self, config: ClusterConfig, *, actor: str, operation: str, target: str = "",
                     before=None, after=None, prices: Optional[Prices] = None) -> dict:
        """Make ``config`` (and ``prices``, USD per GPU-hour, when given) the live configuration.

        ``config`` must come validated from ``admin.py`` (Kueue's rules). The engine Scheduler is
        rebuilt on it (``Scheduler.update_config``) with every active workload re-added: admitted
        ones keep their admission, quota usage, admission time and devices, even where a lowered
        quota no longer covers them (Kueue does not evict on a quota change; nothing new is
        admitted there until usage is below the quota again); pending ones are re-queued in their
        original order. The change, the whole configuration (Kueue YAML,
        restored at the next start) and an audit entry (``actor``, ``operation`` on ``target``,
        ``before`` → ``after``) are written in one ledger transaction before the swap; the next
        scheduling cycle uses the new configuration.

        Where the new configuration gives a cohort tree more nominal quota of a flavor's devices
        than the inventory has (``admin.capacity_warnings``), the warnings are returned and
        recorded in the audit entry, as ``after["warnings"]`` (a list of sentences; the audit API
        shows them as the entry's ``warnings``).

        Raises ValidationError (field ``localQueues``, nothing changed) when an active workload's
        LocalQueue, the ClusterQueue behind it, or the ClusterQueue that admitted it would
        disappear. Returns ``{"appliedAt": seconds, "auditId": int, "warnings": [str]}``."""
        from ..admin import capacity_warnings, config_to_yaml

        lost = []
        for rec in self.live.records.values():
            if rec["state"] not in ACTIVE_STATES:
                continue
            key, lq_key = f"{rec['namespace']}/{rec['name']}", f"{rec['namespace']}/{rec['local_queue']}"
            lq = config.local_queues.get(lq_key)
            if lq is None:
                lost.append(f"{key} (LocalQueue {lq_key} would not exist)")
            elif lq.cluster_queue not in config.cluster_queues:
                lost.append(f"{key} (ClusterQueue {lq.cluster_queue} of LocalQueue {lq_key} would not exist)")
            elif rec.get("admission") and rec["admission"]["clusterQueue"] not in config.cluster_queues:
                lost.append(f"{key} (admitted by ClusterQueue {rec['admission']['clusterQueue']}, which would not exist)")
        if lost:
            more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
            raise ValidationError(
                "the new configuration drops queues that active workloads use; keep those queues, or let the "
                f"workloads finish or cancel them first: {'; '.join(lost[:10])}{more}", "localQueues")
        prices = (prices or self.conf.prices).bind_flavors(config.resource_flavors)
        now = self.conf.clock()
        moved = {}  # pending workloads whose LocalQueue now points to another ClusterQueue
        for uid, rec in self.live.records.items():
            lq = config.local_queues.get(f"{rec['namespace']}/{rec['local_queue']}")
            if rec["state"] == PENDING and lq is not None and lq.cluster_queue != rec.get("cluster_queue"):
                moved[uid] = lq.cluster_queue
        warnings = capacity_warnings(config, self.conf.scheduler.inventory)
        if warnings:
            after = {**after, "warnings": warnings} if isinstance(after, dict) else {"value": after,
                                                                                   "warnings": warnings}
        with self.ledger.transaction():
            self.ledger.save_config(config_to_yaml(config), prices.to_json(), actor, now)
            audit_id = self.ledger.add_audit(actor=actor, operation=operation, target=target,
                                             before=before, after=after, at=now)
            for uid, cq in moved.items():
                self.ledger.update_workload(uid, cluster_queue=cq)
        for uid, cq in moved.items():
            self.live.records[uid]["cluster_queue"] = cq
        # The engine's live reconfiguration: quota tree and queues rebuilt, every admitted workload
        # re-charged with its admission, admission time and devices, every pending one re-queued in
        # its original order.
        self.conf.scheduler.update_config(config)
        self.conf.config, self.conf.prices = config, prices
        self.log.info("gpuqueue: %s applied %s %s", actor, operation, target)
        self.wake()
        self.events.emit({"type": "queues"})
        self.events.emit({"type": "inventory"})
        return {"appliedAt": now, "auditId": audit_id, "warnings": warnings}

    def load_stored_config(self) -> bool:
        """Before :meth:`start`: make the configuration admins applied last (stored in the ledger)
        the live one, instead of the config files'. Returns False when none is stored. Raises
        ValidationError (field ``storedConfig``) when the stored YAML no longer validates."""
        from ..admin import load_config_text

        row = self.ledger.active_config()
        if row is None:
            return False
        try:
            config = load_config_text(row["kueue_yaml"], "stored configuration").config
            prices = Prices.from_json(row["prices"]).bind_flavors(config.resource_flavors)
        except GpuQueueError as exc:
            raise ValidationError(f"the stored configuration is invalid ({exc}); start with "
                                  "GpuQueueApp.discard_stored_config=True to drop it", "storedConfig") from None
        self.conf.config, self.conf.prices = config, prices
        self.conf.scheduler = Scheduler(config, self.conf.scheduler.inventory, self.conf.scheduler.options)
        return True

    def discard_stored_config(self, *, actor: str) -> int:
        """Drop every stored configuration (audited) so that the config files rule from the next
        start on; returns how many were dropped."""
        now = self.conf.clock()
        with self.ledger.transaction():
            n = self.ledger.discard_config()
            if n:
                self.ledger.add_audit(actor=actor, operation="discard-stored-config", target="",
                                      before={"storedConfigurations": n}, after=None, at=now)
        return n
