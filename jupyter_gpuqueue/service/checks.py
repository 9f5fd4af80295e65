"""Request checks: the parts of a SubmitRequest that submissions and cost estimates validate alike:
the priority class, the maximum run time, the PodSet of the form (GPUs or a MIG profile, a flavor
pinned by its nodeLabels), Kueue's ExceedsMaxQuota, and the command (argv, working directory, an
executable that exists where jobs run locally)."""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..engine.errors import ManifestError
from ..engine.flavors import flavor_eligible
from ..engine.manifests import parse_duration
from ..engine.model import GPU, MIG_PREFIX, PodSet, Workload, apply_transformations
from ..engine.quantity import format_quantity
from ..errors import ValidationError
from . import names
from .notebooks import NOTEBOOK_FIELDS, NotebookChecks, is_notebook_request
from .states import DEFAULT_MAX_RUNTIME, MAX_RUNTIME_LIMIT

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .runtime_caps import RuntimeCaps
    from .billing import Billing
    from .live import LiveConfig


_MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb$")


class RequestChecks:
    """Validates the parts of a request that do not depend on who submits it.

    Collaborators: ``conf`` (LiveConfig: configuration and Scheduler in force), ``billing`` (which
    resources transformations make requestable) and the ``backend`` (whether commands run on this
    server). Settings: ``root_dir`` (relative paths), ``python_executable`` (scripts) and
    ``default_priority_class`` (None: the configuration's globalDefault)."""

    def __init__(self, conf: "LiveConfig", billing: "Billing", backend: "Backend", *, root_dir: str,
                 python_executable: str, default_priority_class: Optional[str] = None):
        self.conf = conf
        self.billing = billing
        self.backend = backend
        self.root_dir = root_dir
        self.python_executable = python_executable
        self.default_priority_class = default_priority_class
        self.notebooks = NotebookChecks(root_dir=root_dir, python_executable=python_executable)
        self.runtime_caps: Optional["RuntimeCaps"] = None  # the teams' caps (service/runtime_caps.py)

    def resolve_priority(self, name) -> tuple[int, Optional[str]]:
        if name in (None, ""):
            name = self.default_priority_class
        if name in (None, ""):
            pc = self.conf.config.default_priority_class()
            return (pc.value, pc.name) if pc else (0, None)
        if not isinstance(name, str):
            raise ValidationError("must be a string", "priorityClass")
        pc = self.conf.config.workload_priority_classes.get(name) or self.conf.config.priority_classes.get(name)
        if pc is None:
            known = sorted(set(self.conf.config.priority_classes) | set(self.conf.config.workload_priority_classes))
            raise ValidationError(f"unknown priority class {name!r} (known: {', '.join(known)})", "priorityClass")
        return pc.value, pc.name

    def max_runtime(self, request: dict, namespace: Optional[str] = None) -> int:
        """Whole seconds (fractions round up, so 0.5 is 1 s, never 0 = "no limit"), at most
        MAX_RUNTIME_LIMIT (Kueue's maximumExecutionTimeSeconds is an int32): larger, NaN or
        infinite values are refused (they made costs infinite and broke the JSON answers). With
        ``namespace``, at most that team's cap (service/runtime_caps.py): more is refused naming
        the field the request used; none asked gets the default, cut to the cap."""
        seconds, field = self._max_runtime(request)
        cap = self.runtime_caps.cap(namespace) if self.runtime_caps is not None and namespace else None
        if cap is not None:
            if field is None:
                return min(seconds, cap)
            self.runtime_caps.check(namespace, seconds, field, request.get(field))
        return seconds

    def manifest_max_runtime(self, seconds: Optional[int], namespace: str, field: str) -> int:
        """A manifest's maximum execution time (None: not set) as :meth:`max_runtime` takes a form's."""
        cap = self.runtime_caps.cap(namespace) if self.runtime_caps is not None else None
        if seconds is None:
            return min(DEFAULT_MAX_RUNTIME, cap) if cap is not None else DEFAULT_MAX_RUNTIME
        if cap is not None:
            self.runtime_caps.check(namespace, seconds, field)
        return seconds

    def _max_runtime(self, request: dict) -> tuple[int, Optional[str]]:
        if request.get("maxRuntimeSeconds") is not None:
            v = request["maxRuntimeSeconds"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValidationError("must be a positive number of seconds", "maxRuntimeSeconds")
            if v > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {v:g}", "maxRuntimeSeconds")
            return math.ceil(v), "maxRuntimeSeconds"
        if request.get("maxRuntime") not in (None, ""):
            try:
                seconds = parse_duration(request["maxRuntime"], "maxRuntime")
            except ManifestError as exc:
                raise ValidationError(exc.reason, "maxRuntime") from None
            if seconds > MAX_RUNTIME_LIMIT:
                raise ValidationError(f"must be at most {MAX_RUNTIME_LIMIT} seconds, got {seconds}", "maxRuntime")
            return seconds, "maxRuntime"
        return DEFAULT_MAX_RUNTIME, None

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
            fl = self.conf.config.resource_flavors.get(flavor)
            if fl is None:
                raise ValidationError(
                    f"unknown ResourceFlavor {flavor!r} (known: {', '.join(sorted(self.conf.config.resource_flavors))})",
                    "flavor",
                )
            cq = self.conf.config.cluster_queues.get(cq_name)
            rg = cq.group_for(resource) if cq else None
            if rg is None or flavor not in [f.name for f in rg.flavors]:
                raise ValidationError(f"ClusterQueue {cq_name} offers no {resource} in flavor {flavor}", "flavor")
            # Kueue users pin a flavor with a nodeSelector on its nodeLabels; so do we.
            ps.node_selector = dict(fl.node_labels)
        return ps

    def known_resources(self) -> set[str]:
        covered = {r for cq in self.conf.config.cluster_queues.values() for rg in cq.resource_groups for r in rg.covered_resources}
        return covered | self.billing.transformed_inputs(covered)  # e.g. MIG profiles counted as GPU slices

    def check_max_quota(self, wl: Workload, cq_name: str, field: str) -> None:
        """Reject a workload that no ClusterQueue could ever admit (Kueue's ExceedsMaxQuota)."""
        cq = self.conf.config.cluster_queues.get(cq_name)
        node = self.conf.scheduler.tree.cluster_queues.get(cq_name)
        if cq is None or node is None:
            return
        for ps in wl.pod_sets:
            for r, q in apply_transformations(ps.requests, self.conf.config.resource_transformations).items():
                if q <= 0:
                    continue
                rg = cq.group_for(r)
                if rg is None:
                    raise ValidationError(f"resource {r} unavailable in ClusterQueue {cq_name}", field)
                best = 0
                for fq in rg.flavors:
                    fl = self.conf.config.resource_flavors.get(fq.name)
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

    def _as_owner(self) -> bool:
        """Jobs run as their owners' OS accounts (backends/accounts.py): the files a request
        names are checked by the job's wrapper as the owner when it starts (a failure is the
        job's, with the reason), never here as the service's (root) account, which would let a
        user probe folders closed to them."""
        return getattr(self.backend, "accounts", None) is not None

    def working_dir(self, wd, base: str, owner: bool) -> Optional[str]:
        """A request's ``workingDir`` made absolute (None when not given); ValidationError when
        it is no folder (checked unless jobs run as their owners: the wrapper enters it)."""
        if wd in (None, ""):
            return None
        if not isinstance(wd, str):
            raise ValidationError("must be a path", "workingDir")
        wd_path = Path(wd) if os.path.isabs(wd) else Path(base) / wd
        if owner:
            return os.path.abspath(wd_path)  # entered by the wrapper as the owner
        if not wd_path.is_dir():
            raise ValidationError(f"no such directory: {wd}", "workingDir")
        return str(wd_path.resolve())

    def notebook_command(self, request: dict, home: Optional[str] = None) -> tuple[list[str], str, dict]:
        """(argv, working folder, the spec's ``notebook`` entry) of a notebook SubmitRequest
        (service/notebooks.py); ValidationError naming the field."""
        owner = self._as_owner()
        base = home if (owner and home) else self.root_dir
        wd = self.working_dir(request.get("workingDir"), base, owner)
        return self.notebooks.command(request, base=base, as_owner=owner, workdir=wd)

    def command(self, request: dict, home: Optional[str] = None) -> tuple[list[str], str]:
        """(argv, working folder) of a SubmitRequest's ``command`` or ``script``; ValidationError
        naming the field. The paths are checked here unless jobs run as their owners
        (:meth:`_as_owner`), where only their form is.

        ``home``: where jobs run as their owners, the owner's home folder: relative paths are taken
        from it and a command without ``workingDir`` runs there (never in a folder of the service,
        such as the hub's state folder, which no job may use: issue 31)."""
        owner = self._as_owner()
        base = home if (owner and home) else self.root_dir
        if is_notebook_request(request):  # papermill runs it (service/notebooks.py)
            argv, cwd, _entry = self.notebook_command(request, home)
            return argv, cwd
        has_cmd = request.get("command") not in (None, "", [])
        has_script = request.get("script") not in (None, "")
        if has_cmd == has_script:
            raise ValidationError("give exactly one of 'command', 'script' or 'notebook'", "command")
        wd = request.get("workingDir")
        for f in NOTEBOOK_FIELDS[1:]:
            if request.get(f) not in (None, "", {}):
                raise ValidationError(f"only a notebook job takes {f!r}", f)
        if has_script:
            script = request["script"]
            if not isinstance(script, str):
                raise ValidationError("must be a path", "script")
            path = Path(script) if os.path.isabs(script) else Path(base) / script
            if not owner and not path.is_file():
                raise ValidationError(f"no such file: {script}", "script")
            args = request.get("args") or []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValidationError("must be a list of strings", "args")
            full = Path(os.path.abspath(path)) if owner else path.resolve()
            argv = [self.python_executable, str(full), *args]
            default_wd = str(full.parent)
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
            default_wd = base
        cwd = self.working_dir(wd, base, owner) or default_wd
        if owner or not getattr(self.backend, "local_commands", True):
            # Kubernetes: runs in a container image, not on this server; as the owner: the
            # wrapper finds the command on the owner's PATH and says so if it cannot.
            return argv, cwd
        exe = argv[0]
        if "/" in exe:
            p = Path(exe) if os.path.isabs(exe) else Path(cwd) / exe
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise ValidationError(f"command not found or not executable: {exe}", "command")
        elif names.which(exe) is None:
            raise ValidationError(f"command not found: {exe}", "command")
        return argv, cwd

