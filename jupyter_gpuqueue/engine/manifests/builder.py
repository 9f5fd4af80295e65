"""The state of one manifest load (:class:`Builder`) and what it produces (:class:`Manifests`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .. import model
from ..errors import ManifestError
from .fields import (
    DEFAULT_NAMESPACE,
    PRIORITY_CLASS_LABEL,
    SYSTEM_PRIORITY_CLASSES,
    _annotations,
    _check,
    _dns1123_subdomain_errors,
    _duplicate,
    _key,
    _labels,
    _required,
    _show,
    _string,
    _timestamp,
    _unsupported,
    dns1123_label_errors,
)


@dataclass
class Manifests:
    """What a manifest stream holds.

    ``config``: the queueing objects (flavors, queues, cohorts, priority classes, namespaces,
    fair sharing). ``workloads``: one ``model.Workload`` per managed job or Workload object, in
    document order. ``ignored``: ``"<apiVersion>/<kind> [<namespace>/]<name>"`` for each document
    that is not used (e.g. ``"v1/ResourceQuota ml-team/gpu-quota"``, or
    ``"batch/v1/Job default/x"`` for a Job without a queue-name label). ``warnings``: fields that
    Kueue has but the engine does not act on, one line each with its location.
    """

    config: model.ClusterConfig
    workloads: list[model.Workload]
    ignored: list[str]
    warnings: list[str] = field(default_factory=list)


@dataclass
class _PriorityRef:
    """What a job asks for; resolved against the priority classes once all documents are read."""

    label: str = ""  # kueue.x-k8s.io/priority-class (a WorkloadPriorityClass, else PriorityClass)
    pod_class: str = ""  # a pod PriorityClass name
    pod_class_path: str = ""


@dataclass
class _Draft:
    workload: model.Workload
    index: int
    kind: str
    name: str
    priority: Optional[_PriorityRef]  # None: fixed (a Workload object)
    source: str = ""  # the file it came from, when several are loaded together


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, _, version = api_version.rpartition("/")
        return group, version
    return "", api_version


def _ignored_entry(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{api_version}/{kind} {namespace + '/' if namespace else ''}{name}"


class Builder:
    """The state of one load: the configuration read so far, workload drafts, ignored documents,
    warnings, and the document being read (for error locations). The readers of each object
    family (``kueue_objects``, ``jobs``, ``workloads``) add to it through the shared pieces here:
    metadata, duplicate checks, new workloads, priority resolution."""

    def __init__(self, source: str, priority_config: Optional[model.ClusterConfig] = None):
        self.source = source
        self.config = model.ClusterConfig()
        self.priority_config = priority_config  # None: resolve against self.config
        self.drafts: list[_Draft] = []
        self.ignored: list[str] = []
        self.warnings: list[str] = []
        self._seen: dict[tuple[str, str, str, str], int] = {}
        self._workload_keys: dict[str, tuple[int, str]] = {}
        self._configuration_index: Optional[int] = None
        self._index = 0
        self._kind = ""
        self._name = ""

    def warn(self, path: str, message: str) -> None:
        where = f"{self.source}: document {self._index}: {self._kind}/{self._name}"
        self.warnings.append(f"{where}: {path}: {message}")

    def _register(self, group: str, kind: str, namespace: str, name: str, path: str = "metadata.name") -> None:
        key = (group, kind, namespace, name)
        if key in self._seen:
            what = f"{namespace}/{name}" if namespace else name
            raise _duplicate(path, name, f"{kind} {what} is already defined in document {self._seen[key]}")
        self._seen[key] = self._index

    def _require_version(self, version: str, allowed: tuple[str, ...], group: str) -> None:
        if version not in allowed:
            raise _unsupported("apiVersion", f"{group}/{version}" if group else version,
                               [f"{group}/{v}" if group else v for v in allowed])

    def _cluster_scoped_meta(self, doc: dict, *, label_name: bool = False) -> tuple[str, dict, dict]:
        meta = doc["metadata"]
        name = meta["name"]
        if label_name:
            _check(dns1123_label_errors(name), "metadata.name", name)
        else:
            _check(_dns1123_subdomain_errors(name), "metadata.name", name)
        labels = _labels(meta.get("labels"), "metadata.labels")
        annotations = _annotations(meta.get("annotations"), "metadata.annotations")
        _timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        return name, labels, annotations

    def _namespaced_meta(self, doc: dict, *, require_namespace: bool = False) -> tuple[str, str, dict, dict]:
        meta = doc["metadata"]
        name = meta["name"]
        _check(_dns1123_subdomain_errors(name), "metadata.name", name)
        namespace = _string(meta.get("namespace"), "metadata.namespace")
        if not namespace:
            if require_namespace:
                raise _required("metadata.namespace", f"a {doc['kind']} is namespaced: name its namespace")
            namespace = DEFAULT_NAMESPACE
        _check(dns1123_label_errors(namespace), "metadata.namespace", namespace)
        labels = _labels(meta.get("labels"), "metadata.labels")
        annotations = _annotations(meta.get("annotations"), "metadata.annotations")
        return name, namespace, labels, annotations

    def _new_workload(self, *, kind: str, name: str, namespace: str, queue: str, pod_sets: list[model.PodSet],
                      meta: dict, labels: dict, annotations: dict,
                      priority: Optional[_PriorityRef], fixed_priority: Optional[tuple[int, Optional[str], Optional[str]]] = None,
                      max_exec: Optional[int] = None, active: bool = True,
                      admission: Optional[model.Admission] = None) -> _Draft:
        key = f"{namespace}/{name}"
        if key in self._workload_keys:
            prev_index, prev_kind = self._workload_keys[key]
            raise _duplicate("metadata.name", name,
                             f"the workload {key} is already defined by the {prev_kind} in document {prev_index}")
        self._workload_keys[key] = (self._index, kind)
        created = _timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        wl = model.Workload(
            namespace=namespace, name=name, queue_name=queue, pod_sets=pod_sets,
            creation_time=float(self._index) if created is None else created,
            uid=_string(meta.get("uid"), "metadata.uid"),
            maximum_execution_time_seconds=max_exec, active=active, admission=admission,
            labels=dict(labels), annotations=dict(annotations),
        )
        if fixed_priority is not None:
            wl.priority, wl.priority_class, wl.priority_class_kind = fixed_priority
        draft = _Draft(workload=wl, index=self._index, kind=kind, name=name, priority=priority, source=self.source)
        self.drafts.append(draft)
        return draft

    def resolve(self, draft: _Draft) -> None:
        """Kueue's jobframework ExtractPriority: the ``kueue.x-k8s.io/priority-class`` label (a
        WorkloadPriorityClass; here also a PriorityClass of that name), else the pod template's
        PriorityClass, else the globalDefault PriorityClass, else 0."""
        ref = draft.priority
        if ref is None:
            return
        config = self.priority_config if self.priority_config is not None else self.config
        wl = draft.workload
        try:
            if ref.label:
                path = _key("metadata.labels", PRIORITY_CLASS_LABEL)
                pc = config.workload_priority_classes.get(ref.label) or config.priority_classes.get(ref.label)
                if pc is None:
                    raise ManifestError(
                        f"Not found: {_show(ref.label)}: no WorkloadPriorityClass or PriorityClass has this name",
                        path,
                    )
                wl.priority, wl.priority_class, wl.priority_class_kind = pc.value, pc.name, pc.kind
            elif ref.pod_class:
                pc = config.priority_classes.get(ref.pod_class)
                if pc is not None:
                    wl.priority, wl.priority_class, wl.priority_class_kind = pc.value, pc.name, "PriorityClass"
                elif ref.pod_class in SYSTEM_PRIORITY_CLASSES:
                    wl.priority = SYSTEM_PRIORITY_CLASSES[ref.pod_class]
                    wl.priority_class, wl.priority_class_kind = ref.pod_class, "PriorityClass"
                else:
                    raise ManifestError(f"Not found: {_show(ref.pod_class)}: no PriorityClass has this name",
                                        ref.pod_class_path)
            else:
                default = config.default_priority_class()
                if default is not None:
                    wl.priority, wl.priority_class, wl.priority_class_kind = default.value, default.name, "PriorityClass"
                else:
                    wl.priority, wl.priority_class, wl.priority_class_kind = 0, None, None
        except ManifestError as exc:
            raise exc.located(source=draft.source or self.source, index=draft.index, kind=draft.kind,
                              name=draft.name) from None

    def result(self) -> Manifests:
        for draft in self.drafts:
            self.resolve(draft)
        return Manifests(config=self.config, workloads=[d.workload for d in self.drafts],
                         ignored=self.ignored, warnings=self.warnings)
