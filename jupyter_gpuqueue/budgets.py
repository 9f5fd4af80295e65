"""Team budgets: USD per team (namespace) per UTC month, with a soft warning and a hard hold.

A budget is ``{"monthlyUSD": 500, "warnAt": 0.8, "hard": true}``:

- ``monthlyUSD`` (USD per UTC month, > 0);
- ``warnAt`` (share of it, 0 < warnAt ≤ 1, default 0.8): at ``spent ≥ warnAt × monthlyUSD`` the team's
  state is ``warning`` (shown in the panel, the status bar and the ``%%gpujob`` widget);
- ``hard`` (default false): at ``spent ≥ monthlyUSD`` the state is ``exceeded`` and, when hard, the
  service holds the team's *new* submissions pending with reason ``BudgetExceeded`` (admins can lift
  the hold per workload). Workloads queued or running before stay where they are.

``spent`` is the team's month-to-date cost from the ledger's usage intervals: closed intervals plus
open ones up to now (work that runs counts as it accrues), split at the UTC month boundary
(``Ledger.usage_summary``). When the month rolls over, or a budget is raised or removed, the
service releases held workloads into the queue in their original order.

Budgets come from ``c.GpuQueueApp.budgets`` (configuration) and from admins through the REST API
(stored in the ledger's ``budgets`` table; a stored budget wins over the configured one of the same
namespace until it is deleted). Every admin change is written to the audit log.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from .errors import ValidationError
from .ledger.reports import clip, month_of, parse_month

DEFAULT_WARN_AT = 0.8
BUDGET_EXCEEDED = "BudgetExceeded"
"""The pending reason of a workload held by a hard budget (Kueue-style, like ``NoFit``)."""

_KEYS = ("monthlyUSD", "warnAt", "hard")


@dataclass(frozen=True)
class Budget:
    """One team's budget: ``monthly_usd`` USD per UTC month, ``warn_at`` share (0-1], ``hard``;
    ``source`` is ``"config"`` (GpuQueueApp.budgets) or ``"admin"`` (stored in the ledger)."""

    namespace: str
    monthly_usd: float
    warn_at: float = DEFAULT_WARN_AT
    hard: bool = False
    source: str = "config"
    updated_by: Optional[str] = None
    updated_at: Optional[float] = None

    def to_json(self) -> dict:
        return {"namespace": self.namespace, "monthlyUSD": self.monthly_usd, "warnAt": self.warn_at,
                "hard": self.hard, "source": self.source, "updatedBy": self.updated_by,
                "updatedAt": self.updated_at}


MIN_MONTHLY_USD = 0.01  # a cent: below it the spent share is no finite number (found by the fuzz)


def parse_budget(namespace: str, data: Any, field: str = "budget") -> Budget:
    """Validate ``{"monthlyUSD": number ≥ 0.01, "warnAt": 0 < number ≤ 1 (0.8), "hard": bool (false)}``.

    Raises ValidationError whose field is ``<field>.monthlyUSD`` (etc.) for a missing, unknown or
    ill-typed key."""
    if not isinstance(data, dict):
        raise ValidationError(f"must be an object like {{\"monthlyUSD\": 500, \"warnAt\": 0.8, \"hard\": true}}, "
                              f"got {type(data).__name__}", field=field)
    for k in data:
        if k not in _KEYS:
            raise ValidationError(f"unknown field; expected one of {', '.join(_KEYS)}", field=f"{field}.{k}")
    if "monthlyUSD" not in data:
        raise ValidationError("required (USD per UTC month)", field=f"{field}.monthlyUSD")
    usd = data["monthlyUSD"]
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < MIN_MONTHLY_USD:
        raise ValidationError(f"must be a number of USD ≥ {MIN_MONTHLY_USD} (a cent), got {usd!r}",
                              field=f"{field}.monthlyUSD")
    warn = data.get("warnAt", DEFAULT_WARN_AT)
    if isinstance(warn, bool) or not isinstance(warn, (int, float)) or not math.isfinite(warn) or not 0 < warn <= 1:
        raise ValidationError(f"must be a share between 0 (exclusive) and 1, e.g. 0.8, got {warn!r}",
                              field=f"{field}.warnAt")
    hard = data.get("hard", False)
    if not isinstance(hard, bool):
        raise ValidationError(f"must be true or false, got {hard!r}", field=f"{field}.hard")
    if not isinstance(namespace, str) or not namespace:
        raise ValidationError("must be a team's namespace", field="namespace")
    return Budget(namespace, float(usd), float(warn), hard)


def parse_budgets(mapping: Any, field: str = "budgets") -> dict[str, Budget]:
    """``{namespace: {...}}`` (``GpuQueueApp.budgets``) → ``{namespace: Budget}``; ValidationError
    naming ``budgets[<namespace>].<key>``."""
    if not isinstance(mapping, dict):
        raise ValidationError("must map team namespaces to budgets", field=field)
    return {ns: parse_budget(ns, v, f"{field}[{ns}]") for ns, v in mapping.items()}


class Budgets:
    """The live budgets and each team's month-to-date spend.

    ``ledger``: the service's Ledger; ``configured``: ``{namespace: Budget}`` from the
    configuration; ``clock``: seconds since the epoch. Spend is cached for ``cache_seconds`` (so
    that rendering many workload views costs one query), and dropped on every change.
    """

    def __init__(self, ledger, configured: Optional[dict[str, Budget]] = None,
                 clock: Callable[[], float] = time.time, cache_seconds: float = 1.0):
        self.ledger = ledger
        self.configured = dict(configured or {})
        self.clock = clock
        self.cache_seconds = cache_seconds
        self._spent: Optional[tuple[float, str, dict[str, float], dict[str, float]]] = None
        self._stored: Optional[dict[str, dict]] = None  # the ledger's budgets table (only we write it)

    # -- budgets ------------------------------------------------------------------------------

    def all(self) -> dict[str, Budget]:
        """Every budget in force: configured ones overlaid by the stored (admin) ones."""
        out = dict(self.configured)
        if self._stored is None:
            self._stored = self.ledger.budgets()
        for ns, b in self._stored.items():
            out[ns] = Budget(ns, b["monthlyUSD"], b["warnAt"], b["hard"], "admin", b["updatedBy"], b["updatedAt"])
        return out

    def get(self, namespace: str) -> Optional[Budget]:
        return self.all().get(namespace)

    def set(self, namespace: str, data: Any, *, actor: str) -> Budget:
        """Store ``namespace``'s budget (validated by :func:`parse_budget`, field ``body``) and
        audit it (operation ``set-budget``). Returns the Budget in force."""
        budget = parse_budget(namespace, data, "body")
        now = self.clock()
        before = self.get(namespace)
        with self.ledger.transaction():
            self.ledger.set_budget(namespace, budget.monthly_usd, budget.warn_at, budget.hard, actor=actor, at=now)
            self.ledger.add_audit(actor=actor, operation="set-budget", target=f"budget/{namespace}",
                                  before=before.to_json() if before else None,
                                  after={k: v for k, v in budget.to_json().items() if k in _KEYS}, at=now)
        self._spent = self._stored = None
        return self.get(namespace)

    def delete(self, namespace: str, *, actor: str) -> Optional[Budget]:
        """Drop the stored budget of ``namespace`` (audited, operation ``delete-budget``); the
        configured one, if any, applies again and is returned. Raises NotFound when none is stored."""
        from .errors import NotFound

        before = self.get(namespace)
        now = self.clock()
        with self.ledger.transaction():
            if not self.ledger.delete_budget(namespace):
                raise NotFound(f"no budget of {namespace} was set through the API"
                               + (" (it comes from c.GpuQueueApp.budgets)" if namespace in self.configured else ""),
                               field="namespace")
            self.ledger.add_audit(actor=actor, operation="delete-budget", target=f"budget/{namespace}",
                                  before=before.to_json() if before else None, after=None, at=now)
        self._spent = self._stored = None
        return self.get(namespace)

    # -- spend --------------------------------------------------------------------------------

    def _month_to_date(self, now: float) -> tuple[str, dict[str, float], dict[str, float]]:
        month = month_of(now)
        c = self._spent
        if c is not None and c[1] == month and 0 <= now - c[0] < self.cache_seconds:
            return c[1], c[2], c[3]
        since, until = parse_month(month)
        parts: dict[str, list[float]] = {}
        rate: dict[str, float] = {}
        for iv in self.ledger.report_intervals(now, since=since, until=until):
            piece = clip(iv, since, min(until, now))
            if piece is not None:
                parts.setdefault(iv["namespace"], []).append(piece["costUsd"])
            if iv["open"]:
                rate[iv["namespace"]] = rate.get(iv["namespace"], 0.0) + iv["usd_per_hour"]
        spent = {ns: math.fsum(v) for ns, v in parts.items()}
        self._spent = (now, month, spent, rate)
        return month, spent, rate

    def invalidate(self) -> None:
        """Forget the cached spend (after intervals opened or closed)."""
        self._spent = None

    def spent(self, namespace: str, now: float) -> float:
        """USD ``namespace`` has spent this UTC month up to ``now`` (open intervals included)."""
        return self._month_to_date(now)[1].get(namespace, 0.0)

    def status(self, namespace: str, now: float, budget: Optional[Budget] = None) -> dict:
        """``{"namespace", "month", "spentUsd", "burnRateUsdPerHour", "at", "budget": {...} | None,
        "share": spent/monthlyUSD | None, "state": "none" | "ok" | "warning" | "exceeded",
        "holdsNewWorkloads": bool}``. ``burnRateUsdPerHour``: USD per hour of the team's running
        work (what ``spentUsd`` grows by until the next change); ``at``: the time of the figures."""
        month, spent, rate = self._month_to_date(now)
        budget = budget if budget is not None else self.get(namespace)
        usd = spent.get(namespace, 0.0)
        state, share = "none", None
        if budget is not None:
            share = usd / budget.monthly_usd
            if not math.isfinite(share):  # a stored budget from before the minimum
                share = None
            state = "exceeded" if usd >= budget.monthly_usd else "warning" if share >= budget.warn_at else "ok"
        return {"namespace": namespace, "month": month, "spentUsd": usd,
                "burnRateUsdPerHour": rate.get(namespace, 0.0), "at": now,
                "budget": budget.to_json() if budget else None, "share": share, "state": state,
                "holdsNewWorkloads": bool(budget and budget.hard and state == "exceeded")}

    def statuses(self, namespaces: Iterable[str], now: float) -> list[dict]:
        """:meth:`status` of every namespace given and every one with a budget, by namespace."""
        budgets = self.all()
        names = sorted(set(namespaces) | set(budgets))
        return [self.status(ns, now, budgets.get(ns)) for ns in names]

    def hold_message(self, namespace: str, now: float) -> Optional[str]:
        """Why a new workload of ``namespace`` is held (hard budget spent), or None."""
        budget = self.get(namespace)
        if budget is None or not budget.hard:
            return None
        usd = self.spent(namespace, now)
        if usd < budget.monthly_usd:
            return None
        return (f"team {namespace} has spent ${usd:,.2f} of its ${budget.monthly_usd:,.2f} budget for "
                f"{month_of(now)} (hard limit); the workload waits until the budget is raised or the month "
                f"ends, or an admin lifts the hold")

    def warning(self, namespace: str, now: float) -> Optional[str]:
        """The soft-limit warning of ``namespace`` (``warning`` or ``exceeded`` state), or None."""
        budget = self.get(namespace)
        if budget is None:
            return None
        usd = self.spent(namespace, now)
        if usd < budget.warn_at * budget.monthly_usd:
            return None
        return (f"team {namespace} has spent ${usd:,.2f} of its ${budget.monthly_usd:,.2f} budget for "
                f"{month_of(now)} ({usd / budget.monthly_usd:.0%})")
