"""The batch/v1 Jobs (and Volcano PodGroups) the Kubernetes backends create: pure functions from a
:class:`JobRequest` to manifests, no I/O.

A Job is the user's own manifest when the submission was one (``spec["source"] == "manifest"``,
the document kept in ``spec["manifest"]``), else one built from the submit form: one container
``main`` running the argv ``spec["command"]`` (never a shell string) in the configured image, the
PodSet's requests as requests *and* limits (extended resources such as ``nvidia.com/gpu`` must have
limit == request; core/v1 validation), ``restartPolicy: Never``, ``backoffLimit: 0`` (a failed
GPU job is reported, not silently retried), ``activeDeadlineSeconds`` = the maximum run time.

Every Job whose Pods have ``restartPolicy: Never`` (batch/v1 validation allows ``podFailurePolicy``
only then) and that has no ``podFailurePolicy`` of its own gets one that ignores a Pod failed by a
disruption (:data:`IGNORE_DISRUPTIONS`: condition ``DisruptionTarget``, which the taint manager,
preemption by the scheduler, the API-initiated eviction and the Pod GC set): a lost node does not
fail the job with ``BackoffLimitExceeded``; the queue evicts and requeues the workload instead
(``waitForPodsReady``, backends/kubernetes.py). With ``ttl_seconds_after_finished`` set, the Job
gets ``spec.ttlSecondsAfterFinished`` (unless it has one): the TTL-after-finished controller deletes
it, with its Pods, that long after it completed or failed.

Every Job gets (on the Job and on its pod template, so that Pods carry them too):

- ``kueue.x-k8s.io/queue-name``: the LocalQueue (Kueue's QueueLabel);
- ``gpuqueue.jupyter.org/workload-uid``: our workload uid (how a restarted service finds it);
- ``app.kubernetes.io/managed-by: jupyter-gpuqueue`` (the label selector of our watches);
- the priority: ``spec.template.spec.priorityClassName`` for a PriorityClass, the label
  ``kueue.x-k8s.io/priority-class`` for a Kueue WorkloadPriorityClass;
- ``spec.suspend: true`` (it is created suspended; admission unsuspends it, as Kueue does).

With an admission (our own engine's), :func:`apply_admission` injects what Kueue injects on
admission (``pkg/podset``: ``Merge`` of the ResourceFlavor's ``nodeLabels`` into the nodeSelector
and its ``tolerations`` into the tolerations, per PodSet, for every flavor assigned to it).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Optional

from ..engine.model import ClusterConfig, ResourceFlavor
from ..engine.quantity import format_quantity
from ..errors import ValidationError

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
UID_LABEL = "gpuqueue.jupyter.org/workload-uid"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "jupyter-gpuqueue"
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
# On a notebook Pod whose GPUs a lease of this queue holds (hub/kubespawner.py's pod hook; the Pod
# itself is KubeSpawner's, managed-by kubespawner).
LEASE_WORKLOAD_LABEL = "gpuqueue.io/workload"
# batch/v1 JobSpec.podFailurePolicy: a Pod failed by a disruption does not count against backoffLimit
# (the Job controller replaces it); KEP-3329, beta and on by default since Kubernetes 1.26.
IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # volcano pkg/apis scheduling KubeGroupNameAnnotationKey
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "managedFields", "selfLink")


@dataclass
class JobRequest:
    """What a backend needs to build a workload's Job. ``spec`` is the service's workload spec
    (``podSets``, ``command``, ``env``, ``maxRuntimeSeconds``, ``source``, ``manifest``);
    ``admission`` the engine's admission dict (``engine.serialize``) or None (Kueue admits)."""

    uid: str
    namespace: str
    name: str
    local_queue: str
    spec: dict
    priority_class: Optional[str] = None
    admission: Optional[dict] = None
    owner: str = ""
    extra_labels: dict = field(default_factory=dict)

    @classmethod
    def from_launch(cls, launch) -> "JobRequest":
        """From a ``LaunchSpec`` whose ``workload`` the service filled in. Raises
        ValidationError(field="workload") when it is missing."""
        w = getattr(launch, "workload", None)
        if not isinstance(w, dict):
            raise ValidationError("the Kubernetes backend needs the workload's spec (LaunchSpec.workload)", "workload")
        ns, _, name = launch.key.partition("/")
        return cls(uid=launch.uid, namespace=w.get("namespace") or ns, name=w.get("name") or name,
                   local_queue=w["localQueue"], spec=w["spec"], priority_class=w.get("priorityClass"),
                   admission=w.get("admission"), owner=w.get("owner") or "")


def _quantities(requests: dict) -> dict:
    return {r: format_quantity(r, int(v)) for r, v in sorted(requests.items())}


def _labels(meta: dict) -> dict:
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = {}
        meta["labels"] = labels
    return labels


def safe_name(text: str) -> str:
    """``text`` as a DNS label (lower case, other characters → '-'), e.g. for a PVC name."""
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return out[:63].strip("-") or "x"


def _substitute(value, owner: str):
    if isinstance(value, str):
        return value.replace("{owner_safe}", safe_name(owner)).replace("{owner}", owner)
    if isinstance(value, list):
        return [_substitute(v, owner) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, owner) for k, v in value.items()}
    return value


def apply_pod_template(pod_spec: dict, template: dict, owner: str) -> None:
    """Merge the operator's partial PodSpec ``template`` into a form-built Job's pod spec: its
    ``containers[0]`` into the container ``main`` (lists such as ``volumeMounts`` and ``env`` are
    appended), every other key set where the Job has none (``volumes`` appended). ``{owner}`` and
    ``{owner_safe}`` in strings become the submitting user (e.g. ``claim-{owner_safe}``)."""
    t = _substitute(copy.deepcopy(template), owner)
    extra = (t.pop("containers", None) or [{}])[0]
    main = pod_spec["containers"][0]
    for k, v in extra.items():
        if isinstance(v, list):
            main[k] = list(main.get(k) or []) + v
        else:
            main.setdefault(k, v)
    for k, v in t.items():
        if isinstance(v, list) and k in pod_spec:
            pod_spec[k] = list(pod_spec[k]) + v
        else:
            pod_spec.setdefault(k, v)


def _form_job(req: JobRequest, image: str, pod_template: Optional[dict] = None) -> dict:
    spec = req.spec
    ps = (spec.get("podSets") or [{}])[0]
    count = int(ps.get("count") or 1)
    argv = list(spec.get("command") or [])
    if not argv:
        raise ValidationError("a Job built from the form needs a command (argv)", "command")
    if not image:
        raise ValidationError("no container image configured for jobs built from the form", "image")
    container: dict = {"name": "main", "image": image, "command": argv}
    env = spec.get("env") or {}
    if env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in sorted(env.items())]
    requests = _quantities(ps.get("requests") or {})
    if requests:
        container["resources"] = {"requests": dict(requests), "limits": dict(requests)}
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if ps.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(ps["nodeSelector"])
    if ps.get("tolerations"):
        pod_spec["tolerations"] = [_toleration(t) for t in ps["tolerations"]]
    if pod_template:
        # The operator mounts the users' storage (e.g. their home PVC): the command's files and
        # working directory (%%gpujob's cell file) are then where the Jupyter server saw them.
        apply_pod_template(pod_spec, pod_template, req.owner)
        if spec.get("workingDir"):
            container.setdefault("workingDir", spec["workingDir"])
    job_spec: dict = {"parallelism": count, "completions": count, "backoffLimit": 0,
                      "template": {"metadata": {}, "spec": pod_spec}}
    if spec.get("maxRuntimeSeconds"):
        job_spec["activeDeadlineSeconds"] = int(spec["maxRuntimeSeconds"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": job_spec}


def _toleration(t: dict) -> dict:
    out = {k: v for k, v in t.items() if v not in (None, "")}
    if out.get("operator") == "Exists":
        out.pop("value", None)
    return out


def _manifest_job(req: JobRequest) -> dict:
    doc = req.spec.get("manifest")
    if not isinstance(doc, dict) or doc.get("kind") != "Job" or not str(doc.get("apiVersion", "")).startswith("batch/"):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        raise ValidationError(f"the Kubernetes backend runs batch/v1 Jobs; this manifest is a {kind}", "kind")
    job = copy.deepcopy(doc)
    job.pop("status", None)
    meta = job.setdefault("metadata", {})
    for k in _SERVER_FIELDS:
        meta.pop(k, None)
    meta.pop("generateName", None)
    return job


def build_job(req: JobRequest, config: Optional[ClusterConfig], *, image: str = "", suspend: bool = True,
              volcano: bool = False, pod_template: Optional[dict] = None,
              ttl_seconds_after_finished: Optional[int] = None) -> dict:
    """The Job for ``req`` (see the module docstring), created suspended unless ``suspend`` is
    False. With ``req.admission`` the flavors' node labels and tolerations are injected;
    ``ttl_seconds_after_finished`` (seconds, None: none) becomes ``spec.ttlSecondsAfterFinished``
    unless the manifest sets one. Raises
    ValidationError naming the field for a manifest that is not a batch/v1 Job, a form workload
    without command or image."""
    job = _manifest_job(req) if req.spec.get("source") == "manifest" else _form_job(req, image, pod_template)
    meta = job["metadata"]
    meta["name"] = req.name
    meta["namespace"] = req.namespace
    template = job["spec"].setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    pod_spec = template.setdefault("spec", {})
    ours = {QUEUE_LABEL: req.local_queue, UID_LABEL: req.uid, MANAGED_BY_LABEL: MANAGED_BY, **req.extra_labels}
    pc_kind = _priority_kind(config, req.priority_class)
    if pc_kind == "WorkloadPriorityClass":
        ours[PRIORITY_CLASS_LABEL] = req.priority_class
    elif pc_kind == "PriorityClass" and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = req.priority_class
    _labels(meta).update(ours)
    _labels(tmeta).update(ours)
    job["spec"]["suspend"] = bool(suspend)
    if pod_spec.get("restartPolicy") == "Never" and "podFailurePolicy" not in job["spec"]:
        job["spec"]["podFailurePolicy"] = copy.deepcopy(IGNORE_DISRUPTIONS)
    if ttl_seconds_after_finished is not None and "ttlSecondsAfterFinished" not in job["spec"]:
        job["spec"]["ttlSecondsAfterFinished"] = int(ttl_seconds_after_finished)
    if volcano:
        pod_spec["schedulerName"] = "volcano"
        tmeta.setdefault("annotations", {})[VOLCANO_GROUP_ANNOTATION] = podgroup_name(req)
    if req.admission and config is not None:
        apply_admission(job, req.admission, config.resource_flavors)
    return job


def _priority_kind(config: Optional[ClusterConfig], name: Optional[str]) -> Optional[str]:
    if not name or config is None:
        return None
    if name in config.workload_priority_classes:
        return "WorkloadPriorityClass"
    if name in config.priority_classes:
        return "PriorityClass"
    return None


def flavors_of(admission: dict, pod_set: str = "main") -> list[str]:
    """The flavors assigned to ``pod_set`` (every resource), in first-seen order."""
    out: list[str] = []
    for psa in admission.get("podSetAssignments") or []:
        if psa.get("name") == pod_set:
            for f in (psa.get("flavors") or {}).values():
                if f not in out:
                    out.append(f)
    return out


def apply_admission(job: dict, admission: dict, flavors: dict[str, ResourceFlavor]) -> dict:
    """Inject the assigned flavors' ``nodeLabels`` (nodeSelector) and ``tolerations`` into the
    Job's pod template (PodSet "main"). Raises ValidationError(field="nodeSelector") when the
    template already selects a different value for a flavor's label (Kueue rejects such a
    PodSet for that flavor too). Returns ``job``."""
    pod_spec = job["spec"]["template"].setdefault("spec", {})
    selector = dict(pod_spec.get("nodeSelector") or {})
    tolerations = list(pod_spec.get("tolerations") or [])
    for fname in flavors_of(admission):
        fl = flavors.get(fname)
        if fl is None:
            continue
        for k, v in fl.node_labels.items():
            if selector.get(k, v) != v:
                raise ValidationError(
                    f"nodeSelector {k}={selector[k]} conflicts with ResourceFlavor {fname} ({k}={v})",
                    "spec.template.spec.nodeSelector")
            selector[k] = v
        for t in fl.tolerations:
            td = _toleration({"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect})
            if td not in tolerations:
                tolerations.append(td)
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return job


def scheduling_directives(job: dict) -> dict:
    """The pod-template fields Kubernetes lets one change on a suspended Job that has not started
    (KEP-2926, "mutable scheduling directives": nodeSelector, tolerations, affinity, schedulingGates,
    template labels and annotations)."""
    t = job["spec"]["template"]
    ps = t.get("spec") or {}
    return {
        "labels": dict((t.get("metadata") or {}).get("labels") or {}),
        "annotations": dict((t.get("metadata") or {}).get("annotations") or {}),
        "nodeSelector": ps.get("nodeSelector"),
        "tolerations": ps.get("tolerations"),
        "affinity": ps.get("affinity"),
    }


def set_scheduling_directives(job: dict, d: dict) -> None:
    """Write :func:`scheduling_directives` ``d`` into ``job`` (absent ones removed)."""
    t = job["spec"]["template"]
    tm = t.setdefault("metadata", {})
    tm["labels"] = dict(d["labels"])
    if d["annotations"]:
        tm["annotations"] = dict(d["annotations"])
    else:
        tm.pop("annotations", None)
    ps = t.setdefault("spec", {})
    for k in ("nodeSelector", "tolerations", "affinity"):
        if d.get(k):
            ps[k] = d[k]
        else:
            ps.pop(k, None)


def podgroup_name(req: JobRequest) -> str:
    return f"{req.name}-pg"[:253]


def build_podgroup(req: JobRequest, job: dict, job_uid: str, queue: Optional[str] = None) -> dict:
    """A Volcano ``scheduling.volcano.sh/v1beta1`` PodGroup for the Job's pods: ``minMember`` =
    the Job's parallelism (all or nothing), ``minResources`` = the pods' summed requests, owned by
    the Job (garbage-collected with it). ``queue``: a Volcano queue name, or Volcano's default."""
    spec = job["spec"]
    count = int(spec.get("parallelism", 1) or 1)
    total: dict[str, int] = {}
    for p in req.spec.get("podSets") or []:
        for r, v in (p.get("requests") or {}).items():
            total[r] = total.get(r, 0) + int(v) * int(p.get("count") or 1)
    pg_spec: dict = {"minMember": count, "minResources": _quantities(total)}
    pc = spec["template"].get("spec", {}).get("priorityClassName")
    if pc:
        pg_spec["priorityClassName"] = pc
    if queue:
        pg_spec["queue"] = queue
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": podgroup_name(req), "namespace": req.namespace,
            "labels": {UID_LABEL: req.uid, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": req.name, "uid": job_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": pg_spec,
    }


def manifest_spec(doc: dict, wl) -> dict:
    """The service's workload spec for a manifest submission run on Kubernetes: the document itself
    is kept (``manifest``) and becomes the Job. ``wl``: the engine Workload parsed from it. Raises
    ValidationError(field="kind") unless it is a batch/v1 Job (the kinds the backend runs)."""
    from ..engine import serialize

    if not isinstance(doc, dict) or doc.get("kind") != "Job" or doc.get("apiVersion") != "batch/v1":
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise ValidationError(f"the Kubernetes backend runs batch/v1 Jobs; this document is a {kind} "
                              f"({doc.get('apiVersion') if isinstance(doc, dict) else ''})", "kind")
    template = (doc.get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    c0 = containers[0] if isinstance(containers[0], dict) else {}
    argv = [str(a) for a in list(c0.get("command") or []) + list(c0.get("args") or [])]
    env = {e["name"]: str(e.get("value", "")) for e in c0.get("env") or [] if isinstance(e, dict) and "name" in e}
    return {
        "podSets": [serialize.pod_set_to_dict(ps) for ps in wl.pod_sets],
        "command": argv,
        "workingDir": str(c0.get("workingDir") or ""),
        "env": env,
        "maxRuntimeSeconds": wl.maximum_execution_time_seconds,
        "flavor": "any",
        "source": "manifest",
        "manifest": doc,
    }
