"""Submissions: a SubmitRequest (the panel's form, ``%%gpujob``, the CLI) or a Kubernetes manifest
turned into a spec and an engine ``Workload``, with every check (LocalQueue and team, then
``checks``: priority class, maximum run time, GPUs / MIG profile / flavor, command, Kueue's
ExceedsMaxQuota), names, notebooks (papermill, ``notebooks``), the batch form (job arrays) and the cap of pending workloads per user. What
is accepted is persisted by ``intake``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..backends.lease import LEASE_KIND, parse_notebook_server
from ..engine import serialize
from ..engine.errors import ManifestError
from ..engine.manifests import parse_workload_document, parse_yaml_documents
from ..engine.model import Workload
from ..errors import Conflict, Forbidden, GpuQueueError, TooManyRequests, ValidationError
from . import names
from .notebooks import is_notebook_request
from .states import PENDING

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..ledger import Ledger
    from .checks import RequestChecks
    from .costs import Costs
    from .intake import Intake
    from .live import LiveConfig, LiveState
    from .teams import Teams


def _pod_template(doc: dict) -> dict:
    spec = doc.get("spec") or {}
    if "template" in spec:
        return spec["template"] or {}
    if "podSets" in spec and spec["podSets"]:
        return spec["podSets"][0].get("template") or {}
    return {}


def max_exec_field(doc: dict) -> str:
    """Where a manifest sets its maximum execution time: a Kueue Workload's spec, a Job's label."""
    if isinstance(doc, dict) and doc.get("kind") == "Workload":
        return "spec.maximumExecutionTimeSeconds"
    return "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"


class Submissions:
    """Turns requests and manifests into (spec, Workload) pairs and hands them to ``intake``.

    Collaborators: ``conf`` (LiveConfig: configuration in force), ``live`` (LiveState: names taken
    or being committed, pending workloads per user), the ``ledger`` (names of finished workloads),
    the ``backend`` (whether it runs manifests itself, whether commands run here), ``teams`` (who
    may use which LocalQueue), ``checks`` (RequestChecks), ``costs`` (spot tolerations) and
    ``intake`` (persists what is accepted). Settings: ``delegated`` (Kueue admits),
    ``lease_priority_class``, ``python_executable`` and ``root_dir``."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 teams: "Teams", checks: "RequestChecks", costs: "Costs", intake: "Intake", *,
                 delegated: bool, lease_priority_class: Optional[str], python_executable: str, root_dir: str):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.teams = teams
        self.checks = checks
        self.costs = costs
        self.intake = intake
        self.delegated = delegated
        self.lease_priority_class = lease_priority_class
        self.python_executable = python_executable
        self.root_dir = root_dir

    # Most Pending workloads per user (GpuQueueApp.max_pending_per_user, set by the server); 0: no limit.
    max_pending_per_user = 0
    pending_cap_retry_after = 10.0  # seconds: the Retry-After hint when the cap is hit

    # The most SubmitRequests in one batch (``submit_many_async``; the API's SubmitBatch.maxItems).
    max_batch_items = 1000

    def new_name(self, request: dict, argv: list[str], namespace: str) -> str:
        name = request.get("name")
        if name not in (None, ""):
            return names.dns_label(name, "name")
        if not argv:  # a lease runs nothing: named after its notebook server, if any
            server = request.get("notebookServer")
            server = server.get("name") if isinstance(server, dict) else None
            base = f"notebook-{server}" if server and isinstance(server, str) else "notebook"
        elif is_notebook_request(request) and isinstance(request["notebook"], str):
            base = Path(request["notebook"]).stem
        else:
            base = Path(argv[1]).stem if len(argv) > 1 and argv[0] == self.python_executable else Path(argv[0]).name
        for _ in range(100):
            cand = f"{names.slug(base)}-{names.random_hex(6)}"
            key = f"{namespace}/{cand}"
            if key in self.live.by_key or key in self.live.inflight:
                continue
            # With the group commit, a clash with a finished workload (ledger only) is found by
            # the commit itself and the name drawn again (_accept_grouped): no query per submission.
            if self.live.committer is not None or self.ledger.find_workload(namespace, cand) is None:
                return cand
        raise GpuQueueError("could not generate a unique name", "name")  # pragma: no cover

    def prepare(self, request: dict, user: str) -> tuple[dict, Workload]:
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self.teams.resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.conf.config.local_queues[f"{ns}/{lq}"].cluster_queue
        kind = request.get("kind") or "Job"
        if kind not in ("Job", LEASE_KIND):
            raise ValidationError(f"must be 'Job' or '{LEASE_KIND}', got {kind!r}", "kind")
        if kind == LEASE_KIND and self.delegated:
            # Kueue admits here, and a lease has no Job for Kueue to admit: it would stay Pending
            # forever (a spawn waiting to its timeout). docs/kubernetes.md, "The Kueue mode".
            raise ValidationError(
                f"a {LEASE_KIND} needs the queue's own admission (backend 'local' or 'kubernetes'); with "
                "backend 'kueue', Kueue admits notebook pods itself: label them with kueue.x-k8s.io/queue-name "
                "(Kueue's pod integration) instead of queueing them here", "kind")
        account = self.check_owner_account(user) if kind != LEASE_KIND else None
        pc_request = request.get("priorityClass")
        if kind == LEASE_KIND and pc_request in (None, ""):
            pc_request = self.lease_priority_class
        priority, pc_name = self.checks.resolve_priority(pc_request)
        max_runtime = self.checks.max_runtime(request, ns)
        ps = self.checks.pod_set_from_form(request, cq_name)
        accept_spot = request.get("acceptSpot", False)
        if not isinstance(accept_spot, bool):
            raise ValidationError(f"must be true or false, got {accept_spot!r}", "acceptSpot")
        if accept_spot:  # may land on spot flavors: tolerate their taints (service/costs.py)
            ps.tolerations = list(ps.tolerations) + self.costs.spot_tolerations()
        if kind == LEASE_KIND:
            # A lease holds devices for a notebook server started elsewhere: no command.
            for f in ("command", "script", "args", "workingDir", "env", "notebook", "parameters"):
                if request.get(f) not in (None, "", [], {}):
                    raise ValidationError(f"a {LEASE_KIND} runs no command; remove {f!r}", f)
            argv, cwd = [], self.root_dir
            server = parse_notebook_server(request.get("notebookServer"))
        else:
            if request.get("notebookServer") is not None:
                raise ValidationError(f"only a {LEASE_KIND} names a notebook server", "notebookServer")
            notebook = None
            if is_notebook_request(request):  # papermill runs it (service/notebooks.py)
                argv, cwd, notebook = self.checks.notebook_command(request, home=getattr(account, "home", None))
            else:
                argv, cwd = self.checks.command(request, home=getattr(account, "home", None))
        env = request.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValidationError("must be an object of string values", "env")
        name = self.new_name(request, argv, ns)
        wl = Workload(namespace=ns, name=name, queue_name=lq, pod_sets=[ps], priority=priority,
                      priority_class=pc_name, maximum_execution_time_seconds=max_runtime)
        self.checks.check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps)],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": request.get("flavor") or "any",
            "source": "form",
        }
        if kind != LEASE_KIND and notebook is not None:
            spec["notebook"] = notebook
        if kind == LEASE_KIND:
            spec["kind"] = LEASE_KIND
            if server is not None:
                spec["notebookServer"] = server
        if accept_spot:
            spec["acceptSpot"] = True
        return spec, wl

    def check_owner_account(self, user: str):
        """Where jobs run as their owners' OS accounts (backends/accounts.py): the owner's Account
        (None where jobs run as the service); Forbidden naming the user and the account looked
        for when ``user`` has none, before anything is queued."""
        lookup = getattr(self.backend, "owner_account", None)
        return lookup(user) if lookup is not None else None

    def submit(self, request: dict, *, user: str) -> dict:
        """Validate a SubmitRequest, persist it, queue it; returns the Workload view (docs/rest-api.md).

        Raises ValidationError (400, naming the field), Forbidden (403), Conflict (409, name taken),
        TooManyRequests (429) beyond ``max_pending_per_user``."""
        spec, wl = self.prepare(request, user)
        self.check_pending_cap(user, 1)
        return self.intake.accept(spec, wl, user)

    def check_pending_cap(self, user: str, new: int) -> None:
        """TooManyRequests (429, nothing queued) when ``new`` more Pending workloads would take
        ``user`` past ``max_pending_per_user``. Costs one pass over the active workloads, and
        only when the cap is set."""
        cap = self.max_pending_per_user
        if not cap:
            return
        pending = sum(1 for r in self.live.records.values() if r["state"] == PENDING and r["owner"] == user)
        if pending + new > cap:
            raise TooManyRequests(
                f"user {user} has {pending} pending workload(s) and the limit is {cap} per user "
                f"(c.GpuQueueApp.max_pending_per_user): wait until some start, or cancel some",
                None, retry_after=self.pending_cap_retry_after)

    def submit_manifest(self, text: str, *, user: str) -> list[dict]:
        """Submit the workloads of a Kubernetes manifest (batch/v1 Job, Kueue Workload, ...).

        The whole text is validated first; nothing is queued unless every document is valid."""
        return [self.intake.accept(spec, wl, user) for spec, wl in self.prepare_manifest(text, user)]

    def prepare_manifest(self, text: str, user: str) -> list[tuple[dict, Workload]]:
        """Validate every document of a manifest; (spec, Workload) of each workload in it."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("empty manifest", "manifest")
        try:
            docs = parse_yaml_documents(text, "manifest")
        except ManifestError as exc:
            raise ValidationError(str(exc), exc.field or "manifest") from None
        prepared = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict):
                raise ValidationError(f"document {i} is not a mapping", "manifest")
            try:
                wl = parse_workload_document(doc, self.conf.config, "manifest", i)
            except ManifestError as exc:
                if "configuration kind" in exc.reason or "not a workload" in exc.reason:
                    raise Forbidden(f"{exc}: queue configuration is changed by admins only", "kind") from None
                raise ValidationError(str(exc), exc.field or "manifest") from None
            if wl is None:
                continue
            prepared.append(self.prepare_manifest_workload(doc, wl, user, i))
        if not prepared:
            raise ValidationError(
                "no workload in the manifest (a Job needs the label kueue.x-k8s.io/queue-name)", "manifest"
            )
        self.check_pending_cap(user, len(prepared))
        return prepared

    def prepare_manifest_workload(self, doc: dict, wl: Workload, user: str, index: int) -> tuple[dict, Workload]:
        lq_key = f"{wl.namespace}/{wl.queue_name}"
        if lq_key not in self.conf.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {lq_key}", "metadata.labels[kueue.x-k8s.io/queue-name]")
        if lq_key not in self.teams.allowed_local_queues(user):
            hint = "" if self.teams.allowed_local_queues(user) else f": {self.teams.no_team_hint}"
            raise Forbidden(f"user {user} may not submit to LocalQueue {lq_key}{hint}", "metadata.namespace")
        names.dns_label(wl.name, "metadata.name")
        if wl.invalid_resources:
            # Kueue would create it and never admit it (engine/manifests/pods.py): refused here, as
            # a workload over every quota is (ExceedsMaxQuota), rather than left pending forever.
            raise ValidationError(f"{wl.invalid_resources}: Kueue would queue this Workload but never admit it",
                                  "spec.podSets")
        if f"{wl.namespace}/{wl.name}" in self.live.by_key or f"{wl.namespace}/{wl.name}" in self.live.inflight \
                or self.ledger.find_workload(wl.namespace, wl.name):
            raise Conflict(f"workload {wl.namespace}/{wl.name} already exists", "metadata.name")
        if getattr(self.backend, "runs_manifests", False):  # Kubernetes: the Job itself runs
            from ..backends.k8s_jobs import manifest_spec

            self.checks.check_max_quota(wl, self.conf.config.local_queues[lq_key].cluster_queue, "spec.template.spec.containers")
            wl.maximum_execution_time_seconds = self.checks.manifest_max_runtime(
                wl.maximum_execution_time_seconds, wl.namespace, max_exec_field(doc))
            return manifest_spec(doc, wl), wl
        account = self.check_owner_account(user)
        pods = sum(ps.count for ps in wl.pod_sets)
        if pods != 1:
            raise ValidationError(
                f"the local backend runs one pod per workload; this one has {pods} (use the Kubernetes backend)",
                "spec",
            )
        template = _pod_template(doc)
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValidationError("no container", "spec.template.spec.containers")
        c0 = containers[0]
        argv = list(c0.get("command") or []) + list(c0.get("args") or [])
        if not argv:
            raise ValidationError("the local backend needs a command", "spec.template.spec.containers[0].command")
        req = {"command": argv, "workingDir": c0.get("workingDir")}
        try:
            argv, cwd = self.checks.command(req, home=getattr(account, "home", None))
        except ValidationError as exc:
            exc.field = "spec.template.spec.containers[0]." + (exc.field or "command")
            raise
        env = {e["name"]: str(e.get("value", "")) for e in c0.get("env") or [] if isinstance(e, dict) and "name" in e}
        cq_name = self.conf.config.local_queues[lq_key].cluster_queue
        self.checks.check_max_quota(wl, cq_name, "spec.template.spec.containers[0].resources")
        max_runtime = self.checks.manifest_max_runtime(wl.maximum_execution_time_seconds, wl.namespace, max_exec_field(doc))
        wl.maximum_execution_time_seconds = max_runtime
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps) for ps in wl.pod_sets],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": "any",
            "source": "manifest",
            "manifest": doc,
        }
        return spec, wl

    async def submit_async(self, request: dict, *, user: str) -> dict:
        """:meth:`submit` for the REST handlers: validated the same way, but the row is written by
        the ledger's group commit (one transaction, one fsync, for every submission of the moment),
        and the Workload view is returned once that commit has returned: acknowledged ⇒ durable.
        Same errors as :meth:`submit`."""
        spec, wl = self.prepare(request, user)
        self.check_pending_cap(user, 1)
        generated = request.get("name") in (None, "")
        return (await self.intake.accept_grouped([(spec, wl)], user, redraw_name=generated))[0]

    async def submit_many_async(self, requests: list, *, user: str) -> list[dict]:
        """Submit a batch of SubmitRequests (``POST workloads`` with ``{"items": [...]}``, e.g. a
        parameter sweep, as a Slurm job array): every item is validated as :meth:`submit`
        validates one, then all are committed in one group commit, all or nothing, and queued in
        their order; returns their Workload views in that order, once durable.

        Errors change nothing and name the item: ValidationError (400, field ``items[i].gpus``;
        ``items`` when the list is empty, not a list or longer than ``max_batch_items``),
        Forbidden (403), Conflict (409, ``items[i].name``: a name taken, or chosen twice in the
        batch), TooManyRequests (429) beyond ``max_pending_per_user``."""
        if not isinstance(requests, list) or not requests:
            raise ValidationError("must be a non-empty list of SubmitRequests", "items")
        if len(requests) > self.max_batch_items:
            raise ValidationError(
                f"a batch holds at most {self.max_batch_items} submissions, got {len(requests)}", "items")
        prepared, generated, chosen = [], [], {}
        for i, request in enumerate(requests):
            try:
                spec, wl = self.prepare(request, user)
            except GpuQueueError as exc:
                exc.field = f"items[{i}]" + (f".{exc.field}" if exc.field and exc.field != "body" else "")
                raise
            is_generated = request.get("name") in (None, "")
            if not is_generated:
                key = f"{wl.namespace}/{wl.name}"
                if key in chosen:
                    raise Conflict(f"workload {key} is submitted twice in this batch (items[{chosen[key]}] "
                                   f"and items[{i}])", f"items[{i}].name")
                if key in self.live.by_key or key in self.live.inflight or self.ledger.find_workload(wl.namespace, wl.name):
                    raise Conflict(f"workload {key} already exists", f"items[{i}].name")
                chosen[key] = i
            else:
                self.live.inflight.add(f"{wl.namespace}/{wl.name}")  # the batch's next names differ
            prepared.append((spec, wl))
            generated.append(is_generated)
        self.live.inflight.difference_update(
            f"{wl.namespace}/{wl.name}" for (_spec, wl), g in zip(prepared, generated) if g)
        self.check_pending_cap(user, len(prepared))
        return await self.intake.accept_grouped(prepared, user, redraw_name=generated)

    async def submit_manifest_async(self, text: str, *, user: str) -> list[dict]:
        """:meth:`submit_manifest` through the group commit; the workloads of one manifest are
        committed all together or not at all."""
        return await self.intake.accept_grouped(self.prepare_manifest(text, user), user)
