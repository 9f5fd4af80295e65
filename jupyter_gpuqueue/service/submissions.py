"""Submissions: a SubmitRequest (the panel's form, ``%%gpujob``, the CLI) or a Kubernetes manifest
turned into a spec and an engine ``Workload``, with every check (LocalQueue and team, priority
class, maximum run time, GPUs / MIG profile / flavor, command, Kueue's ExceedsMaxQuota), names, the
batch form (job arrays) and the cap of pending workloads per user. What is accepted is persisted by
``intake``.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path
from typing import Optional

from ..backends.lease import LEASE_KIND
from ..engine import serialize
from ..engine.errors import ManifestError
from ..engine.flavors import flavor_eligible
from ..engine.manifests import parse_duration, parse_workload_document, parse_yaml_documents
from ..engine.model import GPU, MIG_PREFIX, PodSet, Workload, apply_transformations
from ..engine.quantity import format_quantity
from ..errors import Conflict, Forbidden, GpuQueueError, TooManyRequests, ValidationError
from . import names
from .states import DEFAULT_MAX_RUNTIME, MAX_RUNTIME_LIMIT, PENDING


_MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb$")


def _pod_template(doc: dict) -> dict:
    spec = doc.get("spec") or {}
    if "template" in spec:
        return spec["template"] or {}
    if "podSets" in spec and spec["podSets"]:
        return spec["podSets"][0].get("template") or {}
    return {}


class Submissions:
    """Turns requests and manifests into (spec, Workload) pairs, checked against ``service``'s configuration."""

    def __init__(self, service):
        self.svc = service

    # The most SubmitRequests in one batch (``submit_many_async``; the API's SubmitBatch.maxItems).
    max_batch_items = 1000

    def resolve_priority(self, name) -> tuple[int, Optional[str]]:
        if name in (None, ""):
            name = self.svc.default_priority_class
        if name in (None, ""):
            pc = self.svc.config.default_priority_class()
            return (pc.value, pc.name) if pc else (0, None)
        if not isinstance(name, str):
            raise ValidationError("must be a string", "priorityClass")
        pc = self.svc.config.workload_priority_classes.get(name) or self.svc.config.priority_classes.get(name)
        if pc is None:
            known = sorted(set(self.svc.config.priority_classes) | set(self.svc.config.workload_priority_classes))
            raise ValidationError(f"unknown priority class {name!r} (known: {', '.join(known)})", "priorityClass")
        return pc.value, pc.name

    def max_runtime(self, request: dict) -> int:
        """Whole seconds (fractions round up, so 0.5 is 1 s, never 0 = "no limit"), at most
        MAX_RUNTIME_LIMIT (Kueue's maximumExecutionTimeSeconds is an int32): larger, NaN or
        infinite values are refused (they made costs infinite and broke the JSON answers)."""
        if request.get("maxRuntimeSeconds") is not None:
            v = request["maxRuntimeSeconds"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValidationError("must be a positive number of seconds", "maxRuntimeSeconds")
            if v > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {v:g}", "maxRuntimeSeconds")
            return math.ceil(v)
        if request.get("maxRuntime") not in (None, ""):
            try:
                seconds = parse_duration(request["maxRuntime"], "maxRuntime")
            except ManifestError as exc:
                raise ValidationError(exc.reason, "maxRuntime") from None
            if seconds > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {seconds}", "maxRuntime")
            return seconds
        return DEFAULT_MAX_RUNTIME

    def pod_set_from_form(self, request: dict, cq_name: str) -> PodSet:
        mig = request.get("migProfile")
        if mig not in (None, ""):
            if not isinstance(mig, str) or not _MIG_PROFILE.match(mig):
                raise ValidationError(f"{mig!r} is not a MIG profile like 1g.10gb", "migProfile")
            resource = MIG_PREFIX + mig
            if resource not in self.known_resources():
                raise ValidationError(f"unknown MIG profile {mig} (no ClusterQueue offers {resource})", "migProfile")
            qty = 1
        else:
            gpus = request.get("gpus", 1)
            if isinstance(gpus, str) and gpus.strip().isdigit():
                gpus = int(gpus)
            if isinstance(gpus, bool) or not isinstance(gpus, int):
                raise ValidationError("must be a whole number of GPUs", "gpus")
            if gpus <= 0:
                raise ValidationError("must be at least 1", "gpus")
            resource, qty = GPU, gpus
        ps = PodSet(name="main", count=1, requests={resource: qty})
        flavor = request.get("flavor")
        if flavor not in (None, "", "any"):
            fl = self.svc.config.resource_flavors.get(flavor)
            if fl is None:
                raise ValidationError(
                    f"unknown ResourceFlavor {flavor!r} (known: {', '.join(sorted(self.svc.config.resource_flavors))})",
                    "flavor",
                )
            cq = self.svc.config.cluster_queues.get(cq_name)
            rg = cq.group_for(resource) if cq else None
            if rg is None or flavor not in [f.name for f in rg.flavors]:
                raise ValidationError(f"ClusterQueue {cq_name} offers no {resource} in flavor {flavor}", "flavor")
            # Kueue users pin a flavor with a nodeSelector on its nodeLabels; so do we.
            ps.node_selector = dict(fl.node_labels)
        return ps

    def known_resources(self) -> set[str]:
        covered = {r for cq in self.svc.config.cluster_queues.values() for rg in cq.resource_groups for r in rg.covered_resources}
        return covered | self.svc.billing.transformed_inputs(covered)  # e.g. MIG profiles counted as GPU slices

    def check_max_quota(self, wl: Workload, cq_name: str, field: str) -> None:
        """Reject a workload that no ClusterQueue could ever admit (Kueue's ExceedsMaxQuota)."""
        cq = self.svc.config.cluster_queues.get(cq_name)
        node = self.svc.scheduler.tree.cluster_queues.get(cq_name)
        if cq is None or node is None:
            return
        for ps in wl.pod_sets:
            for r, q in apply_transformations(ps.requests, self.svc.config.resource_transformations).items():
                if q <= 0:
                    continue
                rg = cq.group_for(r)
                if rg is None:
                    raise ValidationError(f"resource {r} unavailable in ClusterQueue {cq_name}", field)
                best = 0
                for fq in rg.flavors:
                    fl = self.svc.config.resource_flavors.get(fq.name)
                    if fl is None or flavor_eligible(fl, ps) is not None:
                        continue
                    best = max(best, node.potential_available((fq.name, r)))
                need = q * ps.count
                if need > best:
                    raise ValidationError(
                        f"exceeds max quota: {format_quantity(r, need)} {r} requested, but ClusterQueue {cq_name} "
                        f"can never admit more than {format_quantity(r, best)} in the eligible flavors",
                        field,
                    )

    def command(self, request: dict) -> tuple[list[str], str]:
        has_cmd = request.get("command") not in (None, "", [])
        has_script = request.get("script") not in (None, "")
        if has_cmd == has_script:
            raise ValidationError("give exactly one of 'command' or 'script'", "command")
        wd = request.get("workingDir")
        if has_script:
            script = request["script"]
            if not isinstance(script, str):
                raise ValidationError("must be a path", "script")
            path = Path(script) if os.path.isabs(script) else Path(self.svc.root_dir) / script
            if not path.is_file():
                raise ValidationError(f"no such file: {script}", "script")
            args = request.get("args") or []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValidationError("must be a list of strings", "args")
            argv = [self.svc.python_executable, str(path.resolve()), *args]
            default_wd = str(path.resolve().parent)
        else:
            cmd = request["command"]
            if isinstance(cmd, str):
                try:
                    cmd = shlex.split(cmd)
                except ValueError as exc:
                    raise ValidationError(f"cannot split the command: {exc}", "command") from None
            if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
                raise ValidationError("must be a non-empty list of strings (argv)", "command")
            argv = list(cmd)
            default_wd = self.svc.root_dir
        if wd not in (None, ""):
            if not isinstance(wd, str):
                raise ValidationError("must be a path", "workingDir")
            wd_path = Path(wd) if os.path.isabs(wd) else Path(self.svc.root_dir) / wd
            if not wd_path.is_dir():
                raise ValidationError(f"no such directory: {wd}", "workingDir")
            cwd = str(wd_path.resolve())
        else:
            cwd = default_wd
        if not getattr(self.svc.backend, "local_commands", True):
            return argv, cwd  # runs in a container image (Kubernetes), not on this server
        exe = argv[0]
        if "/" in exe:
            p = Path(exe) if os.path.isabs(exe) else Path(cwd) / exe
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise ValidationError(f"command not found or not executable: {exe}", "command")
        elif names.which(exe) is None:
            raise ValidationError(f"command not found: {exe}", "command")
        return argv, cwd

    def new_name(self, request: dict, argv: list[str], namespace: str) -> str:
        name = request.get("name")
        if name not in (None, ""):
            return names.dns_label(name, "name")
        if not argv:
            base = "notebook"  # a lease runs nothing
        else:
            base = Path(argv[1]).stem if len(argv) > 1 and argv[0] == self.svc.python_executable else Path(argv[0]).name
        for _ in range(100):
            cand = f"{names.slug(base)}-{names.random_hex(6)}"
            key = f"{namespace}/{cand}"
            if key in self.svc.by_key or key in self.svc.inflight:
                continue
            # With the group commit, a clash with a finished workload (ledger only) is found by
            # the commit itself and the name drawn again (_accept_grouped): no query per submission.
            if self.svc.committer is not None or self.svc.ledger.find_workload(namespace, cand) is None:
                return cand
        raise GpuQueueError("could not generate a unique name", "name")  # pragma: no cover

    def prepare(self, request: dict, user: str) -> tuple[dict, Workload]:
        if not isinstance(request, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        ns, lq = self.svc.teams.resolve_local_queue(request.get("localQueue"), user)
        cq_name = self.svc.config.local_queues[f"{ns}/{lq}"].cluster_queue
        kind = request.get("kind") or "Job"
        if kind not in ("Job", LEASE_KIND):
            raise ValidationError(f"must be 'Job' or '{LEASE_KIND}', got {kind!r}", "kind")
        if kind == LEASE_KIND and self.svc.delegated:
            # Kueue admits here, and a lease has no Job for Kueue to admit: it would stay Pending
            # forever (a spawn waiting to its timeout). docs/kubernetes.md, "The Kueue mode".
            raise ValidationError(
                f"a {LEASE_KIND} needs the queue's own admission (backend 'local' or 'kubernetes'); with "
                "backend 'kueue', Kueue admits notebook pods itself: label them with kueue.x-k8s.io/queue-name "
                "(Kueue's pod integration) instead of queueing them here", "kind")
        pc_request = request.get("priorityClass")
        if kind == LEASE_KIND and pc_request in (None, ""):
            pc_request = self.svc.lease_priority_class
        priority, pc_name = self.resolve_priority(pc_request)
        max_runtime = self.max_runtime(request)
        ps = self.pod_set_from_form(request, cq_name)
        accept_spot = request.get("acceptSpot", False)
        if not isinstance(accept_spot, bool):
            raise ValidationError(f"must be true or false, got {accept_spot!r}", "acceptSpot")
        if accept_spot:  # may land on spot flavors: tolerate their taints (service/costs.py)
            ps.tolerations = list(ps.tolerations) + self.svc.costs.spot_tolerations()
        if kind == LEASE_KIND:
            # A lease holds devices for a notebook server started elsewhere: no command.
            for f in ("command", "script", "args", "workingDir", "env"):
                if request.get(f) not in (None, "", [], {}):
                    raise ValidationError(f"a {LEASE_KIND} runs no command; remove {f!r}", f)
            argv, cwd = [], self.svc.root_dir
        else:
            argv, cwd = self.command(request)
        env = request.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValidationError("must be an object of string values", "env")
        name = self.new_name(request, argv, ns)
        wl = Workload(namespace=ns, name=name, queue_name=lq, pod_sets=[ps], priority=priority,
                      priority_class=pc_name, maximum_execution_time_seconds=max_runtime)
        self.check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        spec = {
            "podSets": [serialize.pod_set_to_dict(ps)],
            "command": argv,
            "workingDir": cwd,
            "env": env,
            "maxRuntimeSeconds": max_runtime,
            "flavor": request.get("flavor") or "any",
            "source": "form",
        }
        if kind == LEASE_KIND:
            spec["kind"] = LEASE_KIND
        if accept_spot:
            spec["acceptSpot"] = True
        return spec, wl

    def submit(self, request: dict, *, user: str) -> dict:
        """Validate a SubmitRequest, persist it, queue it; returns the Workload view (docs/rest-api.md).

        Raises ValidationError (400, naming the field), Forbidden (403), Conflict (409, name taken),
        TooManyRequests (429) beyond ``max_pending_per_user``."""
        spec, wl = self.prepare(request, user)
        self.check_pending_cap(user, 1)
        return self.svc.intake.accept(spec, wl, user)

    def check_pending_cap(self, user: str, new: int) -> None:
        """TooManyRequests (429, nothing queued) when ``new`` more Pending workloads would take
        ``user`` past ``max_pending_per_user``. Costs one pass over the active workloads, and
        only when the cap is set."""
        cap = self.svc.max_pending_per_user
        if not cap:
            return
        pending = sum(1 for r in self.svc.records.values() if r["state"] == PENDING and r["owner"] == user)
        if pending + new > cap:
            raise TooManyRequests(
                f"user {user} has {pending} pending workload(s) and the limit is {cap} per user "
                f"(c.GpuQueueApp.max_pending_per_user): wait until some start, or cancel some",
                None, retry_after=self.svc.pending_cap_retry_after)

    def submit_manifest(self, text: str, *, user: str) -> list[dict]:
        """Submit the workloads of a Kubernetes manifest (batch/v1 Job, Kueue Workload, ...).

        The whole text is validated first; nothing is queued unless every document is valid."""
        return [self.svc.intake.accept(spec, wl, user) for spec, wl in self.prepare_manifest(text, user)]

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
                wl = parse_workload_document(doc, self.svc.config, "manifest", i)
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
        if lq_key not in self.svc.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {lq_key}", "metadata.labels[kueue.x-k8s.io/queue-name]")
        if lq_key not in self.svc.teams.allowed_local_queues(user):
            hint = "" if self.svc.teams.allowed_local_queues(user) else f": {self.svc.teams.no_team_hint}"
            raise Forbidden(f"user {user} may not submit to LocalQueue {lq_key}{hint}", "metadata.namespace")
        names.dns_label(wl.name, "metadata.name")
        if f"{wl.namespace}/{wl.name}" in self.svc.by_key or f"{wl.namespace}/{wl.name}" in self.svc.inflight \
                or self.svc.ledger.find_workload(wl.namespace, wl.name):
            raise Conflict(f"workload {wl.namespace}/{wl.name} already exists", "metadata.name")
        if getattr(self.svc.backend, "runs_manifests", False):  # Kubernetes: the Job itself runs
            from ..backends.k8s_jobs import manifest_spec

            self.check_max_quota(wl, self.svc.config.local_queues[lq_key].cluster_queue, "spec.template.spec.containers")
            wl.maximum_execution_time_seconds = wl.maximum_execution_time_seconds or DEFAULT_MAX_RUNTIME
            return manifest_spec(doc, wl), wl
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
            argv, cwd = self.command(req)
        except ValidationError as exc:
            exc.field = "spec.template.spec.containers[0]." + (exc.field or "command")
            raise
        env = {e["name"]: str(e.get("value", "")) for e in c0.get("env") or [] if isinstance(e, dict) and "name" in e}
        cq_name = self.svc.config.local_queues[lq_key].cluster_queue
        self.check_max_quota(wl, cq_name, "spec.template.spec.containers[0].resources")
        max_runtime = wl.maximum_execution_time_seconds or DEFAULT_MAX_RUNTIME
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
        return (await self.svc.intake.accept_grouped([(spec, wl)], user, redraw_name=generated))[0]

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
                if key in self.svc.by_key or key in self.svc.inflight or self.svc.ledger.find_workload(wl.namespace, wl.name):
                    raise Conflict(f"workload {key} already exists", f"items[{i}].name")
                chosen[key] = i
            else:
                self.svc.inflight.add(f"{wl.namespace}/{wl.name}")  # the batch's next names differ
            prepared.append((spec, wl))
            generated.append(is_generated)
        self.svc.inflight.difference_update(
            f"{wl.namespace}/{wl.name}" for (_spec, wl), g in zip(prepared, generated) if g)
        self.check_pending_cap(user, len(prepared))
        return await self.svc.intake.accept_grouped(prepared, user, redraw_name=generated)

    async def submit_manifest_async(self, text: str, *, user: str) -> list[dict]:
        """:meth:`submit_manifest` through the group commit; the workloads of one manifest are
        committed all together or not at all."""
        return await self.svc.intake.accept_grouped(self.prepare_manifest(text, user), user)
