"""Costs and budgets (issue 6).

- **Budget holds.** A new submission of a team whose *hard* budget is spent (``budgets.py``) is
  persisted and acknowledged like any other, but it is **not handed to the engine's Scheduler**:
  it waits in ``budget_holds`` with the pending reason ``BudgetExceeded`` (no queue position, so it
  neither blocks a StrictFIFO head nor counts in fair sharing). The engine stays pure and unaware.
  Every ``budget_check_interval`` seconds (and at once when a budget changes) held workloads whose
  team is no longer over its hard limit (new month, budget raised or removed, limit made soft) are
  handed to the Scheduler in their original order (creation time); their original creation time
  keeps their place in the queue. An admin can lift the hold of one workload
  (:meth:`Costs.lift_budget_hold`, audited); a lifted workload is never held again. Held workloads
  are re-held after a restart (their reason is in the ledger).
- **Spot flavors.** ResourceFlavors listed in ``spot_flavors`` are preemptible capacity with their
  own price (``GpuQueueApp.prices``); mark them with a ``nodeTaints`` entry as Kueue users do, and a
  submission with ``acceptSpot: true`` gets the matching tolerations. Such a job is started with
  ``GPUQUEUE_SPOT=1`` (on a spot flavor), ``GPUQUEUE_PREEMPTION_NOTICE_FILE``,
  ``GPUQUEUE_PREEMPTION_SIGNAL`` and ``GPUQUEUE_PREEMPTION_GRACE_SECONDS``; when it is chosen as a
  preemption victim it is first told: the notice file is written (JSON: reason, message,
  deadline), ``spot_signal`` (SIGUSR1) is sent, and only ``spot_grace_seconds`` later the normal
  stop follows (SIGTERM, then SIGKILL after ``stop_grace_seconds``). Its usage is billed until it
  stops; the preemptor waits for the devices, as with any victim.
- **GPU utilization and memory.** Where the inventory came from NVML, the devices of running jobs
  are sampled every ``utilization_interval`` seconds, utilization and memory in one NVML pass
  (``inventory/nvml.gpu_samples``), into the ledger: utilization for the reports' average
  utilization and both for a job's page (``Views.timeline``). Nowhere else is either recorded.
- **Reports and capacity:** :meth:`Costs.capacity_by_flavor` (GPU-equivalents per flavor, for idle
  capacity), :meth:`Costs.report` (``ledger/reports.py`` over the ledger's intervals).

What a workload costs is ``billing``'s.
"""

from __future__ import annotations

import json
import os
import signal as signals
import logging
from typing import TYPE_CHECKING, Callable, Optional

from ..budgets import BUDGET_EXCEEDED, Budgets
from ..engine.model import GPU, MIG_PREFIX, Toleration
from ..errors import Conflict, ValidationError
from ..ledger import reports

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..engine.model import Inventory
    from ..ledger import Ledger
    from .billing import Billing
    from .events import EventHub
    from .live import LiveConfig, LiveState
    from .teams import Teams
    from .views import Views


def _signal_number(name: str) -> int:
    try:
        return int(getattr(signals, name)) if not name.isdigit() else int(name)
    except (AttributeError, TypeError, ValueError):
        raise ValidationError(f"unknown signal {name!r} (e.g. SIGUSR1)", "spot_signal") from None


class Costs:
    """Budget holds, spot preemption notices, utilization sampling and reports.

    Collaborators: ``conf`` (LiveConfig: configuration, prices, Scheduler, clock, and the budgets,
    which this class sets), ``live`` (LiveState: records, engine Workloads, what is being stopped),
    the ``ledger``, the ``backend`` (signals and stops spot jobs), the ``inventory`` (devices,
    capacity), ``billing`` (transformed resources), ``teams`` (a user's teams), ``events``,
    ``views`` (a lifted workload's view), ``wake`` (the loop's wake-up) and ``log``. Settings:
    ``data_dir`` (preemption notices) and ``stop_grace_seconds``."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 inventory: "Inventory", billing: "Billing", teams: "Teams", events: "EventHub", views: "Views",
                 wake: Callable[[], None], log: logging.Logger, *, data_dir: str, stop_grace_seconds: float):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.inventory = inventory
        self.billing = billing
        self.teams = teams
        self.events = events
        self.views = views
        self.wake = wake
        self.log = log
        self.data_dir = data_dir
        self.stop_grace_seconds = stop_grace_seconds
        self._costs = {"holds": {}, "spot_stops": {}, "last_check": 0.0, "last_sample": 0.0}

    @property
    def budgets(self) -> Optional[Budgets]:
        """The teams' budgets (``budgets.Budgets``), None when none is configured or set; kept in
        ``conf`` so that the views read the one in force."""
        return self.conf.budgets

    @budgets.setter
    def budgets(self, value: Optional[Budgets]) -> None:
        self.conf.budgets = value

    budget_check_interval = 2.0  # seconds between checks whether held workloads may go

    spot_flavors: frozenset = frozenset()

    spot_signal = "SIGUSR1"

    spot_grace_seconds = 30.0

    # callable(uuids) -> {uuid: percent or nvml.DeviceSample}; set where NVML answers
    utilization_sampler = None

    utilization_interval = 30.0

    def configure_costs(self, *, budgets: Optional[dict] = None, spot_flavors=(), spot_signal: str = "SIGUSR1",
                        spot_grace_seconds: float = 30.0, utilization_interval: float = 30.0,
                        utilization_sampler="auto") -> None:
        """Before :meth:`start`: ``budgets`` ``{namespace: {"monthlyUSD", "warnAt", "hard"}}``
        (``GpuQueueApp.budgets``); ``spot_flavors`` (ResourceFlavor names); ``spot_signal`` (a
        signal name, SIGUSR1) and ``spot_grace_seconds`` (≥ 0) of spot preemption notices;
        ``utilization_interval`` (seconds, > 0) between NVML samples; ``utilization_sampler``
        ``"auto"`` (NVML, ``inventory/nvml.NvmlSampler``: initialised once, shut down by
        :meth:`close_sampler` at the service's stop, when the inventory came from NVML, else none),
        None, or a callable ``uuids -> {uuid: percent or nvml.DeviceSample}`` (a bare percent:
        utilization only). Raises ValidationError naming the trait."""
        from ..budgets import parse_budgets
        from ..inventory.nvml import NvmlSampler

        self.budgets = Budgets(self.ledger, parse_budgets(budgets or {}, "budgets"), self.conf.clock)
        names = [spot_flavors] if isinstance(spot_flavors, str) else list(spot_flavors or ())
        if not all(isinstance(n, str) and n for n in names):
            raise ValidationError("must be a list of ResourceFlavor names", "spot_flavors")
        for n in names:
            if n not in self.conf.config.resource_flavors:
                self.log.warning("spot_flavors: ResourceFlavor %s is not configured (yet)", n)
        self.spot_flavors = frozenset(names)
        _signal_number(spot_signal)
        self.spot_signal = spot_signal
        if isinstance(spot_grace_seconds, bool) or not isinstance(spot_grace_seconds, (int, float)) \
                or spot_grace_seconds < 0:
            raise ValidationError(f"must be a number of seconds >= 0, got {spot_grace_seconds!r}", "spot_grace_seconds")
        self.spot_grace_seconds = float(spot_grace_seconds)
        if isinstance(utilization_interval, bool) or not isinstance(utilization_interval, (int, float)) \
                or utilization_interval <= 0:
            raise ValidationError(f"must be a number of seconds > 0, got {utilization_interval!r}",
                                  "utilization_interval")
        self.utilization_interval = float(utilization_interval)
        if utilization_sampler == "auto":
            utilization_sampler = NvmlSampler() if self.inventory.source == "nvml" else None
        self.close_sampler()
        self.utilization_sampler = utilization_sampler

    def close_sampler(self) -> None:
        """Release what the utilization sampler holds (NVML: ``nvmlShutdown``); the service stops."""
        close = getattr(self.utilization_sampler, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # pragma: no cover - logged; the service stops anyway
                self.log.warning("gpuqueue: could not close the GPU sampler", exc_info=True)

    def costs_state(self) -> dict:
        return self._costs

    @property
    def budget_holds(self) -> dict[str, float]:
        """uid → creation time of the workloads held by a hard budget (reason BudgetExceeded)."""
        return self.costs_state()["holds"]

    def budget_hold_message(self, namespace: str, now: float) -> Optional[str]:
        return self.budgets.hold_message(namespace, now) if self.budgets is not None else None

    CAPACITY_SINCE_KEY = "inventory.firstKnownAt"

    _capacity_since: Optional[float] = None

    def capacity_since(self, now: Optional[float] = None) -> Optional[float]:
        """When the service first knew its inventory (seconds since the epoch): the start of the
        idle capacity it reports, kept in the ledger (setting ``inventory.firstKnownAt``) so that
        after a restart it counts from there, not from the restart nor from the 1st of the month.
        Stored at ``now`` (default: the clock) the first time it is asked for with an inventory
        of nodes; None while there is none."""
        if self._capacity_since is None and self.inventory.nodes:
            at = self.conf.clock() if now is None else float(now)
            self._capacity_since = float(self.ledger.setting_default(self.CAPACITY_SINCE_KEY, at, at=at))
        return self._capacity_since

    def costs_tick(self, now: float) -> None:
        """Called by ``tick``: notes when the inventory was first known (:meth:`capacity_since`),
        releases budget holds, sends due SIGTERMs of noticed spot jobs, samples utilization."""
        if self._capacity_since is None:
            self.capacity_since(now)
        st = self.costs_state()
        if st["holds"] and now - st["last_check"] >= self.budget_check_interval:
            st["last_check"] = now
            self.release_budget_holds(now)
        for uid, (at, message) in list(st["spot_stops"].items()):
            if now >= at:
                del st["spot_stops"][uid]
                if uid in self.live.records:
                    self.backend.stop(uid, message, self.stop_grace_seconds)
        if self.utilization_sampler is not None and now - st["last_sample"] >= self.utilization_interval:
            st["last_sample"] = now
            self.sample_utilization(now)

    def release_budget_holds(self, now: Optional[float] = None) -> list[str]:
        """Hand every held workload whose team may spend again to the Scheduler, oldest first;
        returns their uids."""
        now = self.conf.clock() if now is None else now
        holds = self.budget_holds
        if self.budgets is not None:
            self.budgets.invalidate()
        released = []
        for uid, _created in sorted(holds.items(), key=lambda kv: (kv[1], kv[0])):
            rec = self.live.records.get(uid)
            if rec is None or rec["state"] != "Pending":
                holds.pop(uid, None)
                continue
            if self.budget_hold_message(rec["namespace"], now) is None:
                self.release_hold(uid)
                released.append(uid)
        return released

    def release_hold(self, uid: str, lifted_by: Optional[str] = None) -> None:
        rec = self.live.records[uid]
        self.budget_holds.pop(uid, None)
        fields = {"reason": "Pending", "message": None}
        if lifted_by is not None:
            spec = dict(rec["spec"])
            spec["budgetHoldLiftedBy"] = lifted_by
            fields["spec"] = spec
            now = self.conf.clock()
            with self.ledger.transaction():
                self.ledger.update_workload(uid, **fields)
                self.ledger.add_audit(actor=lifted_by, operation="lift-budget-hold",
                                      target=f"workload/{rec['namespace']}/{rec['name']}",
                                      before={"reason": BUDGET_EXCEEDED, "message": rec.get("message")},
                                      after={"reason": "Pending"}, at=now)
        else:
            self.ledger.update_workload(uid, **fields)
        rec.update(fields)
        self.conf.scheduler.add_workload(self.live.engine_workloads[uid])
        self.wake()
        self.events.emit_workload(uid)
        self.events.emit({"type": "queues"})

    def lift_budget_hold(self, namespace: str, name: str, *, actor: str) -> dict:
        """Admin: let one workload held by its team's hard budget enter the queue now (audited).
        Raises NotFound, Conflict (field ``name``) when the workload is not held. Returns its view."""
        rec = self.live.record(namespace, name)
        if rec["uid"] not in self.budget_holds:
            raise Conflict(f"workload {namespace}/{name} is not held by a budget (state {rec['state']}, "
                           f"reason {rec.get('reason')})", "name")
        self.release_hold(rec["uid"], lifted_by=actor)
        return self.views.view(self.live.records[rec["uid"]])

    def budgets_view(self, user: str) -> dict:
        """``{"month", "at", "teams": [Budgets.status], "myTeams": [namespace], "defaultTeam"}``:
        every team (a LocalQueue's namespace or a budget's) with its month-to-date spend."""
        now = self.conf.clock()
        namespaces = {lq.namespace for lq in self.conf.config.local_queues.values()}
        budgets = self.budgets or Budgets(self.ledger, {}, self.conf.clock)
        mine = list(dict.fromkeys(k.split("/")[0] for k in self.teams.allowed_local_queues(user)))
        default = self.teams.default_local_queue(user)
        return {"month": reports.month_of(now), "at": now, "teams": budgets.statuses(namespaces, now),
                "myTeams": mine, "defaultTeam": default.split("/")[0] if default else None}

    def set_budget(self, namespace: str, data, *, actor: str) -> dict:
        """Admin: set ``namespace``'s budget (``budgets.parse_budget``; stored and audited), then
        release holds it no longer justifies. Returns its status."""
        if not isinstance(namespace, str) or not namespace:
            raise ValidationError("must be a team's namespace", "namespace")
        self.ensure_budgets().set(namespace, data, actor=actor)
        return self.after_budget_change(namespace)

    def delete_budget(self, namespace: str, *, actor: str) -> dict:
        """Admin: drop the budget stored for ``namespace`` (the configured one applies again)."""
        self.ensure_budgets().delete(namespace, actor=actor)
        return self.after_budget_change(namespace)

    def ensure_budgets(self) -> Budgets:
        if self.budgets is None:
            self.budgets = Budgets(self.ledger, {}, self.conf.clock)
        return self.budgets

    def after_budget_change(self, namespace: str) -> dict:
        now = self.conf.clock()
        self.release_budget_holds(now)
        self.events.emit({"type": "budgets"})
        return self.budgets.status(namespace, now)

    def spot_tolerations(self) -> list[Toleration]:
        """Tolerations of every spot flavor's nodeTaints (added to ``acceptSpot`` submissions)."""
        out = []
        for name in sorted(self.spot_flavors):
            fl = self.conf.config.resource_flavors.get(name)
            for t in fl.node_taints if fl else []:
                out.append(Toleration(key=t.key, operator="Equal", value=t.value, effect=t.effect))
        return out

    def on_spot(self, rec: dict) -> bool:
        adm = rec.get("admission") or {}
        return any(f in self.spot_flavors for a in adm.get("podSetAssignments", []) for f in a["flavors"].values())

    def notice_path(self, uid: str) -> str:
        return os.path.join(self.data_dir, "preemption-notices", f"{uid}.json")

    def spot_env(self, rec: dict) -> dict:
        """Environment of a job that accepts spot: GPUQUEUE_SPOT (1 on a spot flavor, else 0),
        GPUQUEUE_PREEMPTION_NOTICE_FILE / _SIGNAL / _GRACE_SECONDS. Empty for other jobs."""
        if not rec["spec"].get("acceptSpot"):
            return {}
        path = self.notice_path(rec["uid"])
        try:
            os.unlink(path)  # a notice of an earlier admission
        except OSError:
            pass
        return {"GPUQUEUE_SPOT": "1" if self.on_spot(rec) else "0",
                "GPUQUEUE_PREEMPTION_NOTICE_FILE": path,
                "GPUQUEUE_PREEMPTION_SIGNAL": self.spot_signal,
                "GPUQUEUE_PREEMPTION_GRACE_SECONDS": f"{self.spot_grace_seconds:g}"}

    def spot_notice(self, uid: str, reason: str, message: str, now: float) -> bool:
        """If ``uid`` is a spot job that accepted spot and still runs here, tell it it will be
        preempted (notice file + signal) and schedule the stop ``spot_grace_seconds`` later.
        Returns False (nothing done) otherwise."""
        rec = self.live.records[uid]
        notify = getattr(self.backend, "signal", None)
        if not (rec["spec"].get("acceptSpot") and self.on_spot(rec) and callable(notify)
                and uid in self.backend.running()):
            return False
        st = self.costs_state()
        if uid in st["spot_stops"]:
            return True  # already told
        deadline = now + max(0.0, float(self.spot_grace_seconds))
        path = self.notice_path(uid)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"reason": reason, "message": message, "deadline": deadline,
                       "signal": self.spot_signal, "graceSeconds": self.spot_grace_seconds}, f)
        os.replace(tmp, path)
        if not notify(uid, _signal_number(self.spot_signal), f"preemption notice ({reason}); SIGTERM in "
                      f"{self.spot_grace_seconds:g} s"):
            return False
        run = dict(rec.get("run") or {})
        run.update(evictionDeadline=deadline, evictionReason=reason)
        self.ledger.update_workload(uid, run=run)
        rec["run"] = run
        self.live.stopping[uid] = "Preempted:" + reason
        st["spot_stops"][uid] = (deadline, message)
        return True

    def device_uuids(self, rec: dict) -> list[str]:
        by_index = {(n.name, str(g.index)): g.uuid for n in self.inventory.nodes for g in n.gpus}
        out = []
        for p in (rec.get("admission") or {}).get("placements", []):
            for d in p["devices"]:
                out.append(by_index.get((p["node"], d), d) if p.get("resource", GPU) == GPU else d)
        return out

    def sample_utilization(self, now: float) -> int:
        """One NVML pass over every running job's devices (``utilization_sampler``) into the
        ledger, in one transaction: their utilization (``add_utilization_samples``, percent) and
        their memory (``add_memory_samples``, MiB used and in all) where NVML gave them. Returns
        how many utilization samples were stored (a MIG device has memory samples only)."""
        from ..inventory.nvml import DeviceSample

        devices = {uid: self.device_uuids(rec) for uid, rec in self.live.records.items() if rec["state"] == "Running"}
        uuids = [u for us in devices.values() for u in us]
        if not uuids:
            return 0
        answers = self.utilization_sampler(uuids)
        rates, memory = [], []
        for uid, us in devices.items():
            for u in us:
                a = answers.get(u)
                if isinstance(a, DeviceSample):
                    if a.percent is not None:
                        rates.append((uid, u, now, a.percent))
                    if a.memory_used_mib is not None:
                        memory.append((uid, u, now, a.memory_used_mib, a.memory_total_mib))
                elif a is not None:  # a sampler of utilization only: {uuid: percent}
                    rates.append((uid, u, now, a))
        if not (rates or memory):
            return 0
        with self.ledger.transaction():
            self.ledger.add_memory_samples(memory)
            return self.ledger.add_utilization_samples(rates)

    def capacity_by_flavor(self) -> dict[str, float]:
        """GPU-equivalents of the inventory per ResourceFlavor: the GPUs and MIG slices on the
        nodes matching its nodeLabels, of the resources some ClusterQueue offers in it (a MIG
        slice as its share of the GPU's compute slices)."""
        alloc = self.conf.scheduler.allocator
        out: dict[str, float] = {}
        for fname, fl in self.conf.config.resource_flavors.items():
            nodes = [n for n in self.inventory.nodes if all(n.labels.get(k) == v for k, v in fl.node_labels.items())]
            offered = {r for cq in self.conf.config.cluster_queues.values() for rg in cq.resource_groups
                       for f in rg.flavors if f.name == fname for r in rg.covered_resources}
            offered |= self.billing.transformed_inputs(offered)
            total = 0.0
            for r in offered:
                if not (r == GPU or r.startswith(MIG_PREFIX)) or alloc is None:
                    continue
                _free, n = alloc.totals(r, nodes)
                total += self.conf.prices.gpu_equivalent(r, n)
            if total:
                out[fname] = total
        return out

    def report(self, kind: str, *, month: Optional[str] = None, date_from: Optional[str] = None,
               date_to: Optional[str] = None, namespace: Optional[str] = None, owner: Optional[str] = None) -> dict:
        """A cost report (``ledger/reports.py``) over the ledger's usage intervals.

        ``kind``: jobs | users | teams | flavors | months | idle | daily | waits. Period: ``month``
        ("YYYY-MM") or ``date_from`` / ``date_to`` (UTC dates), default the current UTC month;
        ``namespace`` / ``owner`` filter. Idle capacity (``idle``, and the idle columns of
        ``flavors``) counts from :meth:`capacity_since` at the earliest. Returns ``{"kind", "period": {"label", "since", "until"},
        "generatedAt", "items": [...]}`` (teams also carry their budget status). Raises
        ValidationError naming ``kind``, ``month``, ``from`` or ``to``."""
        if kind not in reports.CSV_COLUMNS:
            raise ValidationError(f"unknown report {kind!r}; expected one of {', '.join(reports.CSV_COLUMNS)}", "kind")
        now = self.conf.clock()
        since, until, label = reports.parse_period(month, date_from, date_to, now)
        end = min(until, now)  # nothing is used, nor idle, in the future
        ivs = [i for i in self.ledger.report_intervals(now, since=since, until=until)
               if (namespace is None or i["namespace"] == namespace) and (owner is None or i["owner"] == owner)]
        if kind == "jobs":
            items = reports.job_report(ivs, since, end, self.ledger.utilization(since, until))
        elif kind == "users":
            items = reports.user_report(ivs, since, end)
        elif kind == "waits":
            teams = {lq.namespace for lq in self.conf.config.local_queues.values()} if namespace is None else {namespace}
            items = reports.wait_report(ivs, self.ledger.wait_history(i["workload_uid"] for i in ivs), since, end, teams)
        elif kind == "teams":
            teams = {lq.namespace for lq in self.conf.config.local_queues.values()}
            if namespace is not None:
                teams = {namespace}
            items = reports.team_report(ivs, since, end, self.ledger.utilization(since, until), teams)
            budgets = self.budgets.all() if self.budgets is not None else {}
            # GPU-hours reclaimed from idle notebooks (service/idle.py), released in the period
            reclaimed = reports.idle_reclaimed_by_team(self.ledger.idle_reclaims(since, until))
            for t in items:
                t.update(reclaimed.get(t["namespace"], {"idleReclaimedGpuHours": 0.0, "idleReclaims": 0}))
                b = budgets.get(t["namespace"])
                t["month"] = label
                t["budgetUsd"] = b.monthly_usd if b else None
                t["budget"] = b.to_json() if b else None
        elif kind == "flavors":
            items = reports.flavor_report(ivs, since, end, self.capacity_by_flavor(), self.conf.prices.price)
            idle = {i["flavor"]: i for i in self._idle(ivs, since, end, now)}
            for item in items:  # the usage from ``since``, the idle part from capacity_since
                i = idle.get(item["flavor"], {})
                for key in ("capacityGpuHours", "idleGpuHours", "idleCostUsd"):
                    item[key] = i.get(key, 0.0)
        elif kind == "idle":
            items = self._idle(ivs, since, end, now)
        elif kind == "months":
            items = reports.month_report(ivs, since, end)
        else:
            items = reports.daily_spend(ivs, since, end)  # days up to today
        return {"kind": kind, "period": {"label": label, "since": since, "until": until}, "generatedAt": now,
                "items": items}

    def _idle(self, intervals: list, since: float, end: float, now: float) -> list[dict]:
        """:func:`reports.idle_capacity` over [max(since, capacity_since), end): no capacity is
        idle before the queue knew it (none at all without an inventory)."""
        start = self.capacity_since(now)
        capacity = self.capacity_by_flavor()
        if start is None:
            start, capacity = end, {}
        return reports.idle_capacity(intervals, max(since, start), end, capacity, self.conf.prices.price)
