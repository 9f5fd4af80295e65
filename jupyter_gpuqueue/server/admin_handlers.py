"""Admin REST handlers: ``{base_url}gpuqueue/api/admin/...`` (docs/rest-api.md, "Admin").

Only holders of the JupyterHub scope ``custom:gpuqueue:admin`` (in a standalone server: its owner,
unless the ``gpuqueue_standalone_admin`` setting is False) may call them; everyone else gets 403
naming the scope. Every verb is ``@web.authenticated @authorized`` on the ``gpuqueue`` resource
first, like the rest of the API.

- ``GET admin/config``: the configuration as JSON (``AdminConfig``), or as Kueue YAML with
  ``?format=yaml`` or ``Accept: application/yaml`` (the export; ``kubectl apply`` takes it).
- ``PUT admin/config`` / ``POST admin/import``: replace the whole configuration with Kueue YAML
  (a YAML body, or JSON ``{"yaml": "..."}``); ``?dryRun=true`` validates only.
- ``PATCH admin/cluster-queues/{name}``: cohort and quotas (nominalQuota, borrowingLimit,
  lendingLimit per flavor and resource).
- ``PATCH admin/priority-classes/{name}``: value and description.
- ``GET`` / ``PUT admin/prices``: USD per GPU-hour per ResourceFlavor.
- ``GET admin/audit``: who changed what, when, before → after (newest first), and the warnings
  the change was applied with.
- ``GET admin/idle-policy``, ``PUT`` / ``DELETE admin/idle-policy/{namespace}``: idle notebook
  GPU reclaim per team (service/idle.py).
- ``GET admin/runtime-caps``, ``PUT`` / ``DELETE admin/runtime-caps/{namespace}``: each team's
  cap on maxRuntimeSeconds (service/runtime_caps.py).
- ``PUT admin/webhooks/{namespace}``: a team's webhook URL for its jobs' notifications
  (service/webhooks.py).

A change that leaves a cohort tree more nominal quota of a flavor's devices than the inventory has
is applied, with ``warnings`` in the answer (and in ``GET admin/config``) saying where
(``admin.capacity_warnings``).

Changes are validated by :mod:`jupyter_gpuqueue.admin` (Kueue's rules, 400 naming the field,
nothing changed on error) and applied live by ``QueueService.apply_config``.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from .. import admin
from ..errors import ValidationError
from .handlers import API_PREFIX, GpuQueueHandler
from .scopes import ADMIN_SCOPE, require_scope

YAML_TYPE = "application/yaml"


class AdminHandler(GpuQueueHandler):
    """Base: the admin scope check and the shared answers."""

    def check_admin(self) -> None:
        require_scope(self, ADMIN_SCOPE)

    def import_text(self) -> str:
        """The Kueue YAML of an import: a YAML body, or JSON ``{"yaml": "..."}``."""
        if self.is_yaml_body():
            return self.body_text()
        data = self.json_body()
        extra = sorted(set(data) - {"yaml"})
        if extra:
            raise ValidationError("unknown field; send {\"yaml\": \"<Kueue YAML>\"} or a YAML body", field=extra[0])
        text = data.get("yaml")
        if not isinstance(text, str):
            raise ValidationError("must be a string of Kueue YAML", field="yaml")
        return text

    def do_import(self) -> None:
        service = self.service
        text = self.import_text()
        m = admin.load_import(text)
        dry_run = self.bool_argument("dryRun")
        answer: dict[str, Any] = {
            "dryRun": dry_run,
            "summary": admin.config_summary(m.config),
            "ignored": m.ignored,
            "warnings": m.warnings,
        }
        if dry_run:
            answer["warnings"] = m.warnings + admin.capacity_warnings(m.config, service.inventory)
        else:
            before = {"summary": admin.config_summary(service.config), "kueueYaml": admin.config_to_yaml(service.config)}
            after = {"summary": admin.config_summary(m.config), "kueueYaml": admin.config_to_yaml(m.config)}
            applied = service.apply_config(m.config, actor=self.user, operation="import",
                                           target="configuration", before=before, after=after)
            answer.update(applied, warnings=m.warnings + applied["warnings"])
        self.write_json(answer)


class AdminConfigHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """The configuration: JSON ``AdminConfig``, or Kueue YAML (``?format=yaml`` / Accept)."""
        self.check_admin()
        service = self.service
        fmt = self.get_query_argument("format", None)
        if fmt not in (None, "json", "yaml"):  # "?format=" too: 400, as the document says
            raise ValidationError(f"must be json or yaml, got {fmt!r}", field="format")
        accept = self.request.headers.get("Accept", "")
        if fmt == "yaml" or (fmt is None and YAML_TYPE in accept):
            header = (f"jupyter_gpuqueue configuration, exported by {self.user}\n"
                      "Kueue v1beta1 objects; `kubectl apply -f` this file, or import it with "
                      "`jupyter gpuqueue import-kueue`.")
            # the charset said: a client must not guess it (a guess of Latin-1 broke on U+008B)
            self.finish(admin.config_to_yaml(service.config, header), set_content_type=f"{YAML_TYPE}; charset=utf-8")
            return
        view = admin.config_view(service.config, service.prices, service.inventory)
        stored = service.ledger.active_config()
        view["stored"] = (
            {"updatedAt": stored["created_at"], "updatedBy": stored["actor"]} if stored else None
        )
        self.write_json(view)

    @web.authenticated
    @authorized
    async def put(self):
        """Replace the whole configuration (same as ``POST admin/import``)."""
        self.check_admin()
        self.do_import()


class AdminImportHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def post(self):
        """Import Kueue YAML: it replaces the configuration (``?dryRun=true``: validate only)."""
        self.check_admin()
        self.do_import()


class AdminClusterQueueHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def patch(self, name: str):
        """Change a ClusterQueue's cohort and quotas; answers the new ``AdminConfig``."""
        self.check_admin()
        service = self.service
        config, before, after = admin.patch_cluster_queue(service.config, name, self.json_body())
        applied = service.apply_config(config, actor=self.user, operation="patch-cluster-queue",
                                       target=f"ClusterQueue/{name}", before=before, after=after)
        self.write_json({**admin.config_view(service.config, service.prices, service.inventory), **applied})


class AdminPriorityClassHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def patch(self, name: str):
        """Change a priority class's value / description; answers the new ``AdminConfig``."""
        self.check_admin()
        service = self.service
        config, before, after = admin.patch_priority_class(service.config, name, self.json_body())
        applied = service.apply_config(config, actor=self.user, operation="patch-priority-class",
                                       target=f"{after['kind']}/{name}", before=before, after=after)
        self.write_json({**admin.config_view(service.config, service.prices, service.inventory), **applied})


class AdminPricesHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """The price list and every flavor's effective USD per GPU-hour."""
        self.check_admin()
        service = self.service
        self.write_json(admin.prices_view(service.config, service.prices))

    @web.authenticated
    @authorized
    async def put(self):
        """Replace the price list (USD per GPU-hour per ResourceFlavor)."""
        self.check_admin()
        service = self.service
        prices = admin.prices_from_request(service.config, self.json_body())
        applied = service.apply_config(service.config, actor=self.user, operation="set-prices", target="prices",
                                       before=service.prices.to_json(), after=prices.to_json(), prices=prices)
        self.write_json({**admin.prices_view(service.config, service.prices), **applied})


class AdminAuditHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """``{"items": [AuditEntry], "total"}``, newest first; ``?limit=&offset=``."""
        self.check_admin()
        limit = self.int_argument("limit", 100, minimum=1, maximum=1000)  # 400 above, as documented
        offset = self.int_argument("offset", 0)
        rows, total = self.service.ledger.audit_log(limit=limit, offset=offset)
        items = []
        for r in rows:
            after, warnings = r["after"], []
            if isinstance(after, dict) and "warnings" in after:  # recorded by apply_config
                after = dict(after)
                warnings = after.pop("warnings")
                if set(after) == {"value"}:
                    after = after["value"]
            items.append({"id": r["id"], "at": r["at"], "actor": r["actor"], "operation": r["operation"],
                          "target": r["target"], "before": r["before"], "after": after, "warnings": warnings})
        self.finish(json.dumps({"items": items, "total": total}))


class AdminIdlePoliciesHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """Idle notebook reclaim: the default policy, the smallest timeout, every team's policy."""
        self.check_admin()
        self.write_json(self.service.idle.policies_view())


class AdminIdlePolicyHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def put(self, namespace: str):
        """Set a team's idle notebook reclaim policy (stored, audited); answers every policy."""
        self.check_admin()
        self.write_json(self.service.idle.set_policy(namespace, self.json_body(), actor=self.user))

    @web.authenticated
    @authorized
    async def delete(self, namespace: str):
        """Drop a team's stored idle policy (the default applies again; audited)."""
        self.check_admin()
        self.write_json(self.service.idle.delete_policy(namespace, actor=self.user))


class AdminRuntimeCapsHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """Every team's cap on maxRuntimeSeconds (null: none) and where it comes from."""
        self.check_admin()
        self.write_json(self.service.runtime_caps.view())


class AdminRuntimeCapHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def put(self, namespace: str):
        """Set a team's cap (``{"maxRuntimeSeconds": seconds | null}``; stored, audited)."""
        self.check_admin()
        self.write_json(self.service.runtime_caps.set_cap(namespace, self.json_body(), actor=self.user))

    @web.authenticated
    @authorized
    async def delete(self, namespace: str):
        """Drop a team's stored cap (the configured one applies again; audited)."""
        self.check_admin()
        self.write_json(self.service.runtime_caps.delete_cap(namespace, actor=self.user))


class AdminWebhookHandler(AdminHandler):
    @web.authenticated
    @authorized
    async def put(self, namespace: str):
        """Set (``{"url": "https://…"}``) or remove (``{"url": null}``) a team's webhook: its
        jobs' started / finished / failed / preempted notifications are POSTed there as JSON
        (service/webhooks.py). Stored, audited; answers ``{"namespace", "url", "updatedAt",
        "updatedBy"}``."""
        self.check_admin()
        self.write_json(self.service.webhooks.set_url(namespace, self.json_body(), actor=self.user))


_ADMIN = f"{API_PREFIX}/admin"

admin_handlers = [
    (rf"{_ADMIN}/config", AdminConfigHandler),
    (rf"{_ADMIN}/import", AdminImportHandler),
    (rf"{_ADMIN}/cluster-queues/(?P<name>[^/]+)", AdminClusterQueueHandler),
    (rf"{_ADMIN}/priority-classes/(?P<name>[^/]+)", AdminPriorityClassHandler),
    (rf"{_ADMIN}/prices", AdminPricesHandler),
    (rf"{_ADMIN}/audit", AdminAuditHandler),
    (rf"{_ADMIN}/idle-policy", AdminIdlePoliciesHandler),
    (rf"{_ADMIN}/idle-policy/(?P<namespace>[^/]+)", AdminIdlePolicyHandler),
    (rf"{_ADMIN}/runtime-caps", AdminRuntimeCapsHandler),
    (rf"{_ADMIN}/runtime-caps/(?P<namespace>[^/]+)", AdminRuntimeCapHandler),
    (rf"{_ADMIN}/webhooks/(?P<namespace>[^/]+)", AdminWebhookHandler),
]
"""(pattern, handler) relative to the server's base_url; registered before the JSON 404."""
