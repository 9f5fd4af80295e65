"""Moving a pending workload: another flavor, another MIG profile or another number of GPUs, in
place, in one step (issue 34 item 6; ``POST workloads/{namespace}/{name}/move``).

The panel's faster options (``fasterOptions``, service/estimates.py) are taken with one click: the
owner's workload keeps its uid, name, creation time (so its place in the queue: Kueue orders a
ClusterQueue's pending workloads by priority, then creation time), priority, command, maximum run
time and history; only its PodSet's request and flavor change. The change is one ledger update of
the workload's spec (its podSets, its flavor and the list of its ``moves``): a crash before it
leaves the workload as it was, after it as moved; never two workloads, never none. The engine
Workload is then replaced in the Scheduler (``remove_workload`` + ``add_workload`` of the same
key). Kueue itself has no such operation: a suspended Job whose pod template changes has its
Workload recreated (``jobframework``: ``EquivalentToWorkload`` fails, the Workload is deleted and
created again), which loses its history; ours keeps it.

Refused, changing nothing: anyone but the owner (Forbidden, field ``name``); a workload that is not
Pending any more (Conflict, field ``state``); one submitted as a Kubernetes manifest or with
several PodSets, and any workload where an installed Kueue admits (Conflict, field ``name``); a
request that does not validate or no longer fits its ClusterQueue (ValidationError naming
``flavor``, ``gpus`` or ``migProfile``: an unknown flavor, one the ClusterQueue does not offer for
the resource, Kueue's ExceedsMaxQuota); a move to what it already requests (Conflict, field
``body``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..engine import serialize
from ..engine.model import GPU, MIG_PREFIX
from ..engine.snapshot import copy_workload
from ..errors import Conflict, Forbidden, ValidationError
from ..ledger.failpoints import failpoint
from .states import PENDING

if TYPE_CHECKING:
    from ..ledger import Ledger
    from .checks import RequestChecks
    from .estimates import Estimates
    from .events import EventHub
    from .live import LiveConfig, LiveState

MOVE_FIELDS = ("flavor", "gpus", "migProfile")


def request_words(spec: dict) -> str:
    """What a form spec requests, in words: ``"4 × nvidia-a100"``, ``"2 GPUs (any flavor)"``,
    ``"MIG 1g.10gb"``."""
    reqs = (spec.get("podSets") or [{}])[0].get("requests") or {}
    flavor = spec.get("flavor") or "any"
    for r, q in reqs.items():
        if r.startswith(MIG_PREFIX):
            return f"MIG {r[len(MIG_PREFIX):]}" + ("" if flavor == "any" else f" on {flavor}")
        if r == GPU:
            n = int(q)
            if flavor == "any":
                return f"{n} GPU{'s' if n != 1 else ''} (any flavor)"
            return f"{n} × {flavor}"
    return "no GPU"


class Moves:
    """Collaborators: ``conf`` (the Scheduler, the configuration), ``live`` (the records and engine
    Workloads), the ``ledger``, ``checks`` (RequestChecks: the request's validation), ``estimates``
    (forgets the old shape's estimate) and ``events``; ``wake`` runs a scheduling cycle soon."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", checks: "RequestChecks",
                 estimates: "Estimates", events: "EventHub", wake: Callable[[], None], *, delegated: bool):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.checks = checks
        self.estimates = estimates
        self.events = events
        self.wake = wake
        self.delegated = delegated

    def move(self, namespace: str, name: str, *, user: str, data) -> dict:
        """Move the pending workload ``namespace/name`` of ``user`` to the request ``data``
        (``{"flavor": name | "any", "gpus": n, "migProfile": "1g.10gb"}``, each optional, at least
        one; the others are kept; or a callable returning it, called after the owner and state checks,
        so that a caller who may not move the workload is told that first). Returns its record,
        moved. Raises NotFound, Forbidden, Conflict, ValidationError as in the module docstring."""
        rec = self.live.record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"only {rec['owner']}, its owner, may move {namespace}/{name}", "name")
        key = f"{namespace}/{name}"
        sched = self.conf.scheduler
        if rec["state"] != PENDING or key in sched.admitted:
            state = "Admitted" if rec["state"] == PENDING else rec["state"]
            raise Conflict(f"{namespace}/{name} is {state}, not Pending: only a pending workload moves", "state")
        if self.delegated:
            raise Conflict("an installed Kueue admits here: change the Job itself (Kueue recreates its Workload)", "name")
        spec = dict(rec["spec"])
        uid = rec["uid"]
        old = self.live.engine_workloads.get(uid)
        if spec.get("source") != "form" or len(spec.get("podSets") or []) != 1 or old is None:
            raise Conflict(f"{namespace}/{name} was submitted as a Kubernetes manifest: edit the manifest and "
                           "submit it again", "name")
        request = self._request(spec, data() if callable(data) else data)
        cq_name = rec.get("cluster_queue") or self.conf.config.local_queues[f"{namespace}/{rec['local_queue']}"].cluster_queue
        ps = self.checks.pod_set_from_form(request, cq_name)  # ValidationError naming the field
        ps.tolerations = list(old.pod_sets[0].tolerations)  # spot tolerations, if it accepted spot
        wl = copy_workload(old)
        wl.pod_sets = [ps]
        wl.admission = None
        self.checks.check_max_quota(wl, cq_name, "migProfile" if request.get("migProfile") else "gpus")
        new_spec = dict(spec, podSets=[serialize.pod_set_to_dict(ps)], flavor=request.get("flavor") or "any")
        before, after = request_words(spec), request_words(new_spec)
        if before == after:
            raise Conflict(f"{namespace}/{name} already requests {before}: nothing to move", "body")
        now = self.conf.clock()
        new_spec["moves"] = list(spec.get("moves") or []) + [{"at": now, "by": user, "from": before, "to": after}]
        failpoint("move", "before")
        self.ledger.update_workload(uid, spec=new_spec)  # one statement: the workload is moved, or not at all
        failpoint("move", "after")
        rec["spec"] = new_spec
        self.live.engine_workloads[uid] = wl
        if key in sched.workloads:  # queued (not held by a budget, not waiting for its requeue)
            sched.remove_workload(key)
            sched.add_workload(wl)
        self.live.dirty = True
        self.estimates.forget(key)
        self.wake()
        self.events.emit_workload(uid)
        self.events.emit_coalesced("queues")
        return rec

    @staticmethod
    def _request(spec: dict, data) -> dict:
        """The form request of the move: the workload's own (flavor, GPUs or MIG profile) with
        the fields of ``data`` in their place."""
        if not isinstance(data, dict):
            raise ValidationError("must be a JSON object", "body")
        unknown = sorted(set(data) - set(MOVE_FIELDS))
        if unknown:
            raise ValidationError(f"a move changes only {', '.join(MOVE_FIELDS)}; remove {unknown[0]!r}", unknown[0])
        if not any(data.get(f) not in (None, "") for f in MOVE_FIELDS):
            raise ValidationError(f"give at least one of {', '.join(MOVE_FIELDS)}", "body")
        reqs = spec["podSets"][0].get("requests") or {}
        request: dict = {"flavor": spec.get("flavor") or "any"}
        for r, q in reqs.items():
            if r.startswith(MIG_PREFIX):
                request["migProfile"] = r[len(MIG_PREFIX):]
            elif r == GPU:
                request["gpus"] = int(q)
        if data.get("migProfile") not in (None, ""):
            request.pop("gpus", None)
            request["migProfile"] = data["migProfile"]
        elif data.get("gpus") not in (None, ""):
            request.pop("migProfile", None)
            request["gpus"] = data["gpus"]
        if data.get("flavor") not in (None, ""):
            request["flavor"] = data["flavor"]
        return request
