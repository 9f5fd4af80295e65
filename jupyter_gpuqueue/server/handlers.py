"""REST handlers of the GPU queue: ``{base_url}gpuqueue/api/...``.

The contract is docs/rest-api.md (machine-readable: ``openapi.yaml`` next to this module). Handlers
are thin: they authenticate (``@web.authenticated``), authorize (``@authorized`` on the
``"gpuqueue"`` resource), parse and check the request's *shape*, call the
:class:`~jupyter_gpuqueue.service.QueueService` on the event-loop thread, and write its JSON.
Every :class:`~jupyter_gpuqueue.errors.GpuQueueError` becomes its HTTP status with the body
``{"message", "reason", "field"}``.

On the hub service (``HUB_SCOPES_KEY``) the workload endpoints and ``estimate`` also require the
JupyterHub scope ``custom:gpuqueue:submit`` (:mod:`.scopes`); the read-only views (info, queues,
inventory, prices, openapi) need only access to the service.
"""

from __future__ import annotations

import getpass
import json
from typing import Any, Optional

import yaml
from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import (
    IdentityProvider,
    LegacyIdentityProvider,
    PasswordIdentityProvider,
)
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..errors import GpuQueueError, NotFound, PayloadTooLarge, TooManyRequests, ValidationError
from ..service.visibility import Viewer
from .openapi import OPENAPI_PATH, openapi_json, openapi_text  # noqa: F401 (OPENAPI_PATH: tests)
from .scopes import ADMIN_SCOPE, HUB_SCOPES_KEY, SUBMIT_SCOPE, has_scope, require_scope
from .validation import check_body

AUTH_RESOURCE = "gpuqueue"
"""The resource name given to ``Authorizer.is_authorized`` for every GPU-queue endpoint."""

API_PREFIX = "gpuqueue/api"

# Keys in the tornado web-app settings, written by GpuQueueApp.initialize_settings.
SERVICE_KEY = "gpuqueue_service"
MAX_BODY_KEY = "gpuqueue_max_body_bytes"
STANDALONE_USER_KEY = "gpuqueue_standalone_user"
STARTUP_ERROR_KEY = "gpuqueue_startup_error"
HUB_GROUPS_KEY = "gpuqueue_hub_groups"  # hub-service mode: a HubGroups, fed by resolve_user
SUBMIT_LIMITER_KEY = "gpuqueue_submit_limiter"  # a ratelimit.TokenBucketLimiter, or None (no limit)

INT64_MAX = 2**63 - 1  # the largest query integer accepted (SQLite's INTEGER)
WORKLOAD_STATES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Cancelled")
YAML_CONTENT_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

# Identity providers of a single-user server: one shared token or password, so every client that
# authenticates is the person who started the server. jupyter_server gives each token-only client
# a new random "Anonymous <moon>" user, which would make ownership meaningless.
_SINGLE_USER_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)


class ServiceUnavailable(GpuQueueError):
    """503: the queue service could not be built (e.g. an invalid cluster configuration)."""

    status = 503
    reason = "Unavailable"


def service_or_error(settings: dict):
    """The QueueService in ``settings``; ServiceUnavailable (with the startup error) if none."""
    service = settings.get(SERVICE_KEY)
    if service is None:
        error = settings.get(STARTUP_ERROR_KEY) or "the extension did not initialise it"
        raise ServiceUnavailable(f"the GPU queue service is not running: {error}")
    return service


def default_standalone_user() -> str:
    """The OS login name of the server process (``"jupyter"`` when it cannot be determined)."""
    try:
        return getpass.getuser() or "jupyter"
    except Exception:  # no login name (containers without a passwd entry)
        return "jupyter"


def resolve_user(handler: Any) -> str:
    """The queue user name for an authenticated request or websocket.

    - JupyterHub single-user servers and the hub-managed service: the Hub user's name (in
      hub-service mode the user's groups are recorded too, for teams from hub groups).
    - jupyter_server's own token/password identity providers (a standalone ``jupyter lab``): the
      ``standalone_user`` setting (by default the OS user running the server), because every
      client holding the server's token is its owner.
    - any other identity provider: ``current_user.username``.
    """
    user = handler.current_user
    hub_user = getattr(user, "hub_user", None)
    if isinstance(hub_user, dict) and hub_user.get("name"):
        groups = handler.settings.get(HUB_GROUPS_KEY)
        if groups is not None:
            groups.remember(hub_user)
        return str(hub_user["name"])
    provider = handler.settings.get("identity_provider")
    if provider is not None and type(provider) in _SINGLE_USER_PROVIDERS:
        return str(handler.settings.get(STANDALONE_USER_KEY) or default_standalone_user())
    return str(user.username)


def as_gpuqueue_error(exc: BaseException) -> Optional[GpuQueueError]:
    """``exc`` as a GpuQueueError: itself, or the engine's ManifestError as a 400 ValidationError
    naming its field path; None for anything else (a server fault)."""
    if isinstance(exc, GpuQueueError):
        return exc
    try:
        from ..engine.errors import ManifestError
    except ImportError:  # pragma: no cover - the engine is part of the package
        return None
    if isinstance(exc, ManifestError):
        return ValidationError(str(exc), field=exc.field or "manifest")
    return None


def check_manifest_text(text: str, field: str) -> None:
    """Raise ValidationError(field) unless ``text`` is YAML whose documents are all mappings."""
    if not text.strip():
        raise ValidationError("the manifest is empty", field=field)
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ValidationError(f"invalid YAML{where}: {problem}", field=field) from None
    docs_present = [d for d in docs if d is not None]
    if not docs_present:
        raise ValidationError("the manifest has no documents", field=field)
    for i, doc in enumerate(docs):
        if doc is not None and not isinstance(doc, dict):
            where = f"{field}[{i}]" if len(docs) > 1 else field
            raise ValidationError(
                f"a Kubernetes manifest document must be a mapping, got {type(doc).__name__}",
                field=where,
            )


class GpuQueueHandler(APIHandler):
    """Base of the GPU-queue REST handlers: service access, JSON bodies and error mapping."""

    auth_resource = AUTH_RESOURCE

    @property
    def service(self):
        """The QueueService (ServiceUnavailable, 503, if it could not be built)."""
        return service_or_error(self.settings)

    @property
    def user(self) -> str:
        """The queue user name of this request (see :func:`resolve_user`)."""
        return resolve_user(self)

    @property
    def viewer(self) -> Viewer:
        """What this request's user sees of other people's workloads (service/visibility.py):
        everything for a queue admin, else :meth:`Teams.viewer`."""
        if has_scope(self, ADMIN_SCOPE):
            return Viewer(self.user)
        return self.service.teams.viewer(self.user)

    def check_visible(self, namespace: str, name: str) -> None:
        """NotFound (404, field ``name``) unless this user sees ``namespace/name`` (or it does not
        exist: NotFound too): another team's workload is answered as a missing one everywhere it is
        named (service/visibility.py)."""
        viewer = self.viewer
        if not viewer.sees_all:
            viewer.check(namespace, name, self.service.record(namespace, name)["owner"])

    # -- request parsing -----------------------------------------------------------------------

    def body_text(self) -> str:
        """The request body as text; PayloadTooLarge (field ``body``) above ``max_body_bytes``."""
        limit = int(self.settings.get(MAX_BODY_KEY, 1 << 20))
        body = self.request.body or b""
        if len(body) > limit:
            raise PayloadTooLarge(
                f"the request body is {len(body)} bytes; the limit is {limit} bytes",
                field="body",
            )
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValidationError(f"the body is not UTF-8 text: {e.reason}", field="body") from None

    def json_body(self) -> dict:
        """The body parsed as a JSON object; ValidationError (field ``body``) otherwise."""
        text = self.body_text()
        if not text.strip():
            raise ValidationError("a JSON object is required", field="body")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValidationError(
                f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", field="body"
            ) from None
        if not isinstance(data, dict):
            raise ValidationError(
                f"must be a JSON object, got {type(data).__name__}", field="body"
            )
        return data

    def is_yaml_body(self) -> bool:
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        return ctype in YAML_CONTENT_TYPES

    def int_argument(self, name: str, default: int, *, minimum: int = 0, maximum: Optional[int] = None) -> int:
        """A query argument that must be an integer ≥ ``minimum`` (and ≤ ``maximum`` when
        given); ValidationError naming it."""
        raw = self.get_query_argument(name, None)
        if raw is None:  # absent; present but empty ("?limit=") is not an integer: 400
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValidationError(f"must be an integer, got {raw!r}", field=name) from None
        if value < minimum:
            raise ValidationError(f"must be ≥ {minimum}, got {value}", field=name)
        maximum = INT64_MAX if maximum is None else maximum  # beyond it SQLite (offsets) overflows
        if value > maximum:
            raise ValidationError(f"must be ≤ {maximum}, got {value}", field=name)
        return value

    def bool_argument(self, name: str, default: bool = False) -> bool:
        raw = self.get_query_argument(name, None)
        if raw is None:  # absent; present but empty ("?mine=") is neither true nor false: 400
            return default
        value = raw.strip().lower()
        if value in ("1", "true", "yes"):
            return True
        if value in ("0", "false", "no"):
            return False
        raise ValidationError(f"must be true or false, got {raw!r}", field=name)

    # -- responses -----------------------------------------------------------------------------

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        exc = as_gpuqueue_error(exc_info[1]) if exc_info else None
        if exc is not None:
            self.set_status(exc.status)
            self.set_header("Content-Type", "application/json")
            if isinstance(exc, TooManyRequests):
                self.set_header("Retry-After", str(exc.retry_after_seconds))
            self.finish(json.dumps(exc.to_json()))
            return
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ, value, tb) -> None:
        if as_gpuqueue_error(value) is not None:
            # a client error, not a server fault: one line, no traceback
            self.log.info(
                "%s %s -> %s %s", self.request.method, self.request.path, value.status, value
            )
            return
        super().log_exception(typ, value, tb)


class InfoHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """Info: the user, their LocalQueues, flavors, MIG profiles, priority classes, and
        ``permissions`` ``{"submit": bool, "admin": bool}`` (the JupyterHub scopes held)."""
        info = self.service.info(self.user)
        info["permissions"] = {
            "submit": has_scope(self, SUBMIT_SCOPE),
            "admin": has_scope(self, ADMIN_SCOPE),
        }
        self.write_json(info)


class WorkloadsHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """``{"items": [Workload]}`` newest first; ``?namespace=&state=A,B&mine=true``."""
        require_scope(self, SUBMIT_SCOPE)
        namespace = self.get_query_argument("namespace", None) or None
        states: Optional[list[str]] = None
        raw_states = self.get_query_argument("state", None, strip=False)  # tornado drops control characters
        if raw_states:
            states = [s.strip() for s in raw_states.split(",") if s.strip()]
            for s in states:
                if s not in WORKLOAD_STATES:
                    raise ValidationError(
                        f"unknown state {s!r}; expected one of {', '.join(WORKLOAD_STATES)}",
                        field="state",
                    )
        owner = self.user if self.bool_argument("mine") else None
        items = self.viewer.workloads(self.service.list_workloads(namespace=namespace, owner=owner, states=states))
        if has_scope(self, ADMIN_SCOPE):  # admins see whom estimates wait for and who preempted, by name
            items = [self.service.views.reveal(v) for v in items]
        self.write_json({"items": items})

    @web.authenticated
    @authorized
    async def post(self):
        """Submit: a SubmitRequest JSON, a batch ``{"items": [SubmitRequest]}``,
        ``{"manifest": yaml}``, or a YAML body → 201."""
        require_scope(self, SUBMIT_SCOPE)
        # Each workload queued costs a submit_rate_limit token, however it came; the request is
        # checked against the document first, and one refused (4xx) gives its tokens back.
        if self.is_yaml_body():
            text = self.body_text()
            check_manifest_text(text, "body")
            self._created(await self._take_submissions(
                self._manifest_documents(text), lambda: self.service.submit_manifest_async(text, user=self.user),
                field="body"))
            return
        data = self.json_body()
        if "items" in data:  # a batch: each item is one submission for the rate limit
            check_body(data, "SubmitBatch", field_depth=3)
            self._created(await self._take_submissions(
                len(data["items"]), lambda: self.service.submit_many_async(data["items"], user=self.user)),
                batch=True)
            return
        if "manifest" in data:
            text = data["manifest"]
            if not isinstance(text, str):
                raise ValidationError(
                    f"must be a string of YAML, got {type(text).__name__}", field="manifest"
                )
            extra = sorted(set(data) - {"manifest"})
            if extra:
                raise ValidationError(
                    f"a manifest submission takes no other fields, got {', '.join(extra)}",
                    field=extra[0],
                )
            check_manifest_text(text, "manifest")
            self._created(await self._take_submissions(
                self._manifest_documents(text), lambda: self.service.submit_manifest_async(text, user=self.user),
                field="manifest"))
            return
        check_body(data, "SubmitRequest")  # the document's types and patterns: 400 naming the field
        # Answered once the submission's group commit returned: acknowledged => durable.
        workload = await self._take_submissions(1, lambda: self.service.submit_async(data, user=self.user))
        self._set_location(workload)
        self.write_json(workload, status=201)

    async def _take_submissions(self, n: int, submit, field: str = "items"):
        """Run ``submit()`` (a submission of at most ``n`` workloads) against ``submit_rate_limit``:
        ``n`` tokens are taken first (429 TooManyRequests with Retry-After beyond the limit, 400
        ``items`` for more than the burst), given back when the service refuses the request (a 4xx:
        nothing queued), and those of the workloads it did not queue (a manifest's documents that
        are no workload) given back after. ``field``: what the 400 names. No limit when unset."""
        limiter = self.settings.get(SUBMIT_LIMITER_KEY)
        if limiter is None:
            return await submit()
        limiter.take(self.user, n, field)
        try:
            result = await submit()
        except Exception as exc:
            err = as_gpuqueue_error(exc)
            if err is not None and err.status < 500:
                limiter.give_back(self.user, n)
            raise
        limiter.give_back(self.user, n - (len(result) if isinstance(result, list) else 1))
        return result

    @staticmethod
    def _manifest_documents(text: str) -> int:
        """The manifest's mapping documents: the most workloads it can queue (checked YAML)."""
        return max(1, sum(1 for doc in yaml.safe_load_all(text) if isinstance(doc, dict)))

    def _set_location(self, workload: dict) -> None:
        from jupyter_server.utils import url_path_join

        self.set_header(
            "Location",
            url_path_join(
                self.base_url, API_PREFIX, "workloads", workload["namespace"], workload["name"]
            ),
        )

    def _created(self, workloads: list, batch: bool = False) -> None:
        if len(workloads) == 1 and not batch:
            self._set_location(workloads[0])
            self.write_json(workloads[0], status=201)
        else:
            self.write_json({"items": workloads}, status=201)


class WorkloadHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self, namespace: str, name: str):
        """One Workload (404 NotFound, also for another team's: service/visibility.py)."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        view = self.service.get_workload(namespace, name)
        if has_scope(self, ADMIN_SCOPE):  # admins see whom the estimate waits for and who preempted, by name
            view = self.service.views.reveal(view)
        self.write_json(view)

    @web.authenticated
    @authorized
    async def delete(self, namespace: str, name: str):
        """Cancel (the owner; on the hub service also a holder of ``custom:gpuqueue:admin``, audited;
        403 otherwise); answers the Workload, state Cancelled or unchanged. Elsewhere every caller
        holds admin (scopes.py), so there only the owner cancels. Another team's: 404."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        admin = bool(self.settings.get(HUB_SCOPES_KEY)) and has_scope(self, ADMIN_SCOPE)
        self.write_json(self.service.cancel(namespace, name, user=self.user, admin=admin))


class KeepGpuHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self, namespace: str, name: str):
        """Keep an idle-warned notebook lease's GPU (owner only: 403; 409 when no idle warning
        runs or no keep is left; another team's: 404); answers the Workload, its idle clock restarted."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        self.write_json(self.service.keep_gpu(namespace, name, user=self.user))


class LeaseActivityHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self, namespace: str, name: str):
        """A notebook server reports its own activity for its lease, ``{"busy", "idleSeconds"}``
        (service/idle.py; owner only: 403; 400 naming the field; 409 when it is no running
        notebook lease; another team's: 404); answers ``{"busy", "lastActivity"}`` as taken."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        self.write_json(self.service.report_lease_activity(namespace, name, user=self.user, data=self.json_body()))


class ExtendLeaseHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self, namespace: str, name: str):
        """Extend a running notebook lease's maximum time by ``c.GpuQueueApp.lease_extension_seconds``
        (owner only: 403; 409 when not allowed, none left, not a running lease, or being
        preempted; another team's: 404); answers the Workload with its new maxRuntimeSeconds."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        self.write_json(self.service.extend_lease(namespace, name, user=self.user))


class MoveWorkloadHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self, namespace: str, name: str):
        """Move a pending workload to another flavor, MIG profile or number of GPUs, in place
        (``{"flavor", "gpus", "migProfile"}``; service/moves.py: owner only, 403; 409 naming
        ``state`` when it is not Pending any more; 400 naming the field when the request does not
        fit; another team's: 404); answers the Workload as moved."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        # the body is read after the owner and state checks: a caller who may not move it is told so first
        self.write_json(self.service.move_workload(namespace, name, user=self.user, data=self.json_body))


class WorkloadLogsHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self, namespace: str, name: str):
        """``{"text", "offset", "nextOffset", "eof", "size"}`` of the job's output (owner only;
        another team's: 404)."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        offset = self.int_argument("offset", 0)
        limit = self.int_argument("limit", 1 << 20, minimum=1)
        self.write_json(
            await self.service.read_log_async(namespace, name, user=self.user, offset=offset, limit=limit)
        )


class WorkloadTimelineHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self, namespace: str, name: str):
        """A job's timeline, runs (cost of each) and NVML samples (404 NotFound, also for another
        team's: service/visibility.py)."""
        require_scope(self, SUBMIT_SCOPE)
        self.check_visible(namespace, name)
        self.write_json(self.service.timeline(namespace, name, reveal=has_scope(self, ADMIN_SCOPE)))


class EstimateHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def post(self):
        """Estimate the cost of a SubmitRequest (nothing is created)."""
        require_scope(self, SUBMIT_SCOPE)
        data = self.json_body()
        check_body(data, "SubmitRequest")
        self.write_json(self.service.estimate(data, user=self.user))


class QueuesHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """ClusterQueues (quota, usage, pending workloads in order; another team's anonymised:
        service/visibility.py) and LocalQueues."""
        self.write_json(self.viewer.queues(self.service.queues()))


class InventoryHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """Nodes, GPUs and MIG devices with what is assigned (another team's holder as its namespace:
        service/visibility.py), and free/total per flavor."""
        self.write_json(self.viewer.inventory(self.service.inventory_view(), self.service.views.owner_of))


class PricesHandler(GpuQueueHandler):
    @web.authenticated
    @authorized
    async def get(self):
        """USD per GPU-hour per ResourceFlavor."""
        self.write_json(self.service.prices_view())


class OpenApiHandler(GpuQueueHandler):
    def initialize(self, fmt: str = "json", **kwargs: Any) -> None:
        super().initialize(**kwargs)
        self.fmt = fmt

    @web.authenticated
    @authorized
    async def get(self):
        """The OpenAPI 3 document of this API, as JSON or YAML."""
        if self.fmt == "yaml":
            self.finish(openapi_text(), set_content_type="application/yaml; charset=utf-8")
        else:
            self.finish(openapi_json())


class NotFoundHandler(GpuQueueHandler):
    """A JSON 404 for any other path under ``gpuqueue/api/``."""

    @web.authenticated
    @authorized
    async def get(self, path: str):
        raise NotFound(f"no such endpoint: {API_PREFIX}/{path}", field="path")

    post = put = patch = delete = get


_NAME = r"(?P<namespace>[^/]+)/(?P<name>[^/]+)"

default_handlers = [
    (rf"{API_PREFIX}/info", InfoHandler),
    (rf"{API_PREFIX}/workloads", WorkloadsHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/logs", WorkloadLogsHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/timeline", WorkloadTimelineHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/keep-gpu", KeepGpuHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/activity", LeaseActivityHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/extend", ExtendLeaseHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}/move", MoveWorkloadHandler),
    (rf"{API_PREFIX}/workloads/{_NAME}", WorkloadHandler),
    (rf"{API_PREFIX}/estimate", EstimateHandler),
    (rf"{API_PREFIX}/queues", QueuesHandler),
    (rf"{API_PREFIX}/inventory", InventoryHandler),
    (rf"{API_PREFIX}/prices", PricesHandler),
    (rf"{API_PREFIX}/openapi\.json", OpenApiHandler, {"fmt": "json"}),
    (rf"{API_PREFIX}/openapi\.yaml", OpenApiHandler, {"fmt": "yaml"}),
]
"""(pattern, handler[, kwargs]) relative to the server's base_url; the events websocket and the
JSON 404 catch-all are added by :class:`~jupyter_gpuqueue.server.app.GpuQueueApp`."""

not_found_handler = (rf"{API_PREFIX}/(?P<path>.*)", NotFoundHandler)
