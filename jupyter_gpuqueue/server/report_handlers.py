"""Cost reports and budgets: ``{base_url}gpuqueue/api/reports/...`` and ``.../budgets``
(docs/rest-api.md, "Costs").

- ``GET reports/{kind}`` (kind: jobs, users, teams, flavors, months, idle, daily): a report over the
  ledger's usage intervals (``ledger/reports.py``). Query: ``month=2026-11`` or ``from=2026-11-01``
  & ``to=2026-12-01`` (UTC; default: the current month), ``namespace``, ``owner``,
  ``format=json|csv``. JSON: ``{"kind", "period", "generatedAt", "items"}``; CSV: the items with
  the columns of ``reports.CSV_COLUMNS[kind]``, money to the cent.
- ``GET budgets``: every team's month-to-date spend and budget state (``Budgets.status``).
- ``PUT budgets/{namespace}`` (admin): ``{"monthlyUSD", "warnAt", "hard"}``; ``DELETE`` (admin)
  drops the stored one.
- ``POST workloads/{namespace}/{name}/lift-budget-hold`` (admin): let a workload held with
  reason BudgetExceeded enter the queue.

Reading needs ``custom:gpuqueue:submit`` on the hub service (team-mates see each other's costs,
DESIGN.md); changing needs ``custom:gpuqueue:admin``.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import ValidationError
from ..ledger.reports import CSV_COLUMNS, to_csv
from .handlers import API_PREFIX, GpuQueueHandler
from .scopes import ADMIN_SCOPE, SUBMIT_SCOPE, require_scope


class ReportHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self, kind: str):
        """A cost report as JSON or CSV (module docstring)."""
        require_scope(self, SUBMIT_SCOPE)
        fmt = self.get_query_argument("format", "json")  # exactly json or csv, as documented
        if fmt not in ("json", "csv"):
            raise ValidationError(f"must be json or csv, got {fmt!r}", field="format")

        def arg(name):
            value = self.get_query_argument(name, None)
            if value == "" and name in ("month", "from", "to"):  # a date: "" is not one (400)
                raise ValidationError("must be a date; leave it out for the default", field=name)
            return value or None

        report = self.viewer.report(kind, self.service.report(
            kind, month=arg("month"), date_from=arg("from"), date_to=arg("to"), namespace=arg("namespace"),
            owner=arg("owner")))
        if fmt == "json":
            self.write_json(report)
            return
        label = report["period"]["label"].replace("..", "_to_").strip("_")
        self.set_header("Content-Disposition", f'attachment; filename="gpuqueue-{kind}-{label}.csv"')
        self.finish(to_csv(report["items"], CSV_COLUMNS[kind]), set_content_type="text/csv; charset=utf-8")


class BudgetsHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """Every team's month-to-date spend and budget state."""
        require_scope(self, SUBMIT_SCOPE)
        self.write_json(self.service.budgets_view(self.user))


class BudgetHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def put(self, namespace: str):
        """Admin: set a team's monthly budget (stored in the ledger, audited)."""
        require_scope(self, ADMIN_SCOPE)
        self.write_json(self.service.set_budget(namespace, self.json_body(), actor=self.user))

    @web.authenticated
    @authorized
    async def delete(self, namespace: str):
        """Admin: drop the stored budget (the configured one, if any, applies again)."""
        require_scope(self, ADMIN_SCOPE)
        self.write_json(self.service.delete_budget(namespace, actor=self.user))


class LiftBudgetHoldHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self, namespace: str, name: str):
        """Admin: let one workload held with reason BudgetExceeded enter its queue."""
        require_scope(self, ADMIN_SCOPE)
        self.write_json(self.service.lift_budget_hold(namespace, name, actor=self.user))


report_handlers = [
    (rf"{API_PREFIX}/reports/(?P<kind>[a-z]+)", ReportHandler),
    (rf"{API_PREFIX}/budgets", BudgetsHandler),
    (rf"{API_PREFIX}/budgets/(?P<namespace>[^/]+)", BudgetHandler),
    (rf"{API_PREFIX}/workloads/(?P<namespace>[^/]+)/(?P<name>[^/]+)/lift-budget-hold", LiftBudgetHoldHandler),
]
"""(pattern, handler) relative to the server's base_url; added before the JSON 404 catch-all."""
