"""Reading manifest streams: YAML (strict, no repeated keys), the dispatch of each document to the
reader of its object family, and the public entry points (:func:`load_text`,
:func:`load_documents`, :func:`load_texts`, :func:`parse_workload_document`)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import yaml

from .. import model
from ..errors import ManifestError
from .builder import Builder, Manifests, _Draft, _ignored_entry, _split_api_version
from .fields import KUEUE_GROUP, _child, _index, _known_fields, _mapping, _sequence, _string, _type_name
from .jobs import JobKinds, _KUBEFLOW
from .kueue_objects import KueueObjects
from .pods import _OBJECT_META_FIELDS
from .workloads import WorkloadObjects


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML API
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen[key] = True
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, source: str) -> list:
    if not isinstance(text, str):
        raise TypeError(f"load_text: text must be str, got {type(text).__name__}")
    docs: list = []
    try:
        loader = _StrictLoader(text)  # the reader refuses non-printable characters up front
    except yaml.YAMLError as exc:
        raise ManifestError(f"invalid YAML: {exc}", source=source, index=0) from None
    try:
        while True:
            try:
                if not loader.check_data():
                    break
                doc = loader.get_data()
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
                problem = getattr(exc, "problem", None) or str(exc)
                raise ManifestError(f"invalid YAML: {problem}{where}", source=source, index=len(docs)) from None
            if doc is not None:
                docs.append(doc)
    finally:
        loader.dispose()
    return docs


_KUEUE_VERSIONS = ("v1beta1", "v1beta2")


_COHORT_VERSIONS = ("v1alpha1", "v1beta1", "v1beta2")


_CONFIG_VERSIONS = ("v1beta1", "v1beta2")


class Loader(Builder):
    """A :class:`Builder` that reads documents: YAML lists, Kueue's Configuration, and every kind
    through the reader of its family."""

    def __init__(self, source: str, priority_config: Optional[model.ClusterConfig] = None):
        super().__init__(source, priority_config)
        self.kueue = KueueObjects(self)
        self.jobs = JobKinds(self)
        self.workloads = WorkloadObjects(self)

    def add(self, doc: Any, index: int) -> None:
        self._index = index
        self._kind, self._name = "", ""
        if isinstance(doc, dict):
            kind = doc.get("kind")
            self._kind = kind if isinstance(kind, str) else ""
            meta = doc.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                self._name = meta["name"]
        try:
            self._add(doc)
        except ManifestError as exc:
            raise exc.located(source=self.source, index=index, kind=self._kind or None,
                              name=self._name or None) from None

    def _add(self, doc: Any, *, workload_only: bool = False) -> Optional[_Draft]:
        if not isinstance(doc, dict):
            raise ManifestError(
                f"a document must be a Kubernetes object (a mapping with apiVersion, kind and "
                f"metadata), got {_type_name(doc)}"
            )
        api_version = _string(doc.get("apiVersion"), "apiVersion", required=True)
        kind = _string(doc.get("kind"), "kind", required=True)
        group, version = _split_api_version(api_version)

        if group == "config.kueue.x-k8s.io" and kind == "Configuration":
            self._require_version(version, _CONFIG_VERSIONS, group)
            if workload_only:
                raise self._not_a_workload(kind)
            self.kueue.configuration(doc, version)
            return None
        if group == "" and kind == "List":
            if workload_only:
                raise self._not_a_workload(kind)
            items = _sequence(doc.get("items"), "items")
            for i, item in enumerate(items):
                item_kind = item.get("kind") if isinstance(item, dict) else None
                item_meta = item.get("metadata") if isinstance(item, dict) else None
                item_name = item_meta.get("name") if isinstance(item_meta, dict) else None
                try:
                    self._add(item)
                except ManifestError as exc:
                    exc.field = _child(_index("items", i), exc.field) if exc.field else _index("items", i)
                    exc.located(kind=item_kind if isinstance(item_kind, str) else None,
                                name=item_name if isinstance(item_name, str) else None)
                    raise
            return None

        meta_path = "metadata"
        meta = _mapping(doc.get("metadata"), meta_path, required=True)
        _known_fields(meta, _OBJECT_META_FIELDS, meta_path)
        name = _string(meta.get("name"), "metadata.name", required=True)
        namespace = _string(meta.get("namespace"), "metadata.namespace")

        handler = self._handler(group, version, kind)
        if handler is None:
            self.ignored.append(_ignored_entry(api_version, kind, namespace, name))
            return None
        config_kind, func = handler
        if workload_only and config_kind:
            raise self._not_a_workload(kind)
        return func(doc, group, version, kind, name)

    def _not_a_workload(self, kind: str) -> ManifestError:
        return ManifestError(
            f"{kind} is not a workload: submit a batch/v1 Job, a kueue.x-k8s.io Workload, a "
            "batch.volcano.sh Job or a kubeflow.org PyTorchJob/TFJob",
            "kind",
        )

    def _handler(self, group: str, version: str, kind: str) -> Optional[tuple[bool, Callable]]:
        """(is a configuration kind, handler) for the kinds we read; None for ignored kinds."""
        if group == "" and kind == "Namespace":
            self._require_version(version, ("v1",), group)
            return True, self.kueue.namespace
        if group == "scheduling.k8s.io" and kind == "PriorityClass":
            self._require_version(version, ("v1",), group)
            return True, self.kueue.priority_class
        if group == KUEUE_GROUP:
            table = {
                "ResourceFlavor": (True, self.kueue.resource_flavor),
                "ClusterQueue": (True, self.kueue.cluster_queue),
                "Cohort": (True, self.kueue.cohort),
                "LocalQueue": (True, self.kueue.local_queue),
                "WorkloadPriorityClass": (True, self.kueue.workload_priority_class),
                "Workload": (False, self.workloads.workload),
            }
            if kind in table:
                self._require_version(version, _COHORT_VERSIONS if kind == "Cohort" else _KUEUE_VERSIONS, group)
                return table[kind]
            return None
        if group == "batch" and kind == "Job":
            self._require_version(version, ("v1",), group)
            return False, self.jobs.batch_job
        if group == "batch.volcano.sh" and kind == "Job":
            self._require_version(version, ("v1alpha1",), group)
            return False, self.jobs.volcano_job
        if group == "kubeflow.org" and kind in _KUBEFLOW:
            self._require_version(version, ("v1",), group)
            return False, self.jobs.kubeflow_job
        return None


def parse_yaml_documents(text: str, source: str = "<input>") -> list:
    """The non-empty documents of a YAML stream, parsed safely, with a key repeated in a mapping
    rejected (the API server's strict decoding) instead of silently keeping the last value.

    Returns a list of parsed documents (``None`` for empty documents is dropped), suitable for
    :func:`load_documents` or one by one for :func:`parse_workload_document` (the list position
    is the document index). Raises :class:`ManifestError` with ``source``, the index of the
    failing document and ``invalid YAML: ... (line L, column C)``; ``TypeError`` if ``text`` is
    not a str."""
    return _parse_yaml(text, source)


def load_text(text: str, source: str = "<input>") -> Manifests:
    """Parse and validate a multi-document YAML stream of Kubernetes/Kueue manifests.

    ``text``: the YAML text (the caller reads the file). ``source``: a name for error messages
    (a file name, ``<stdin>``, ``<request>``).

    Returns :class:`Manifests`. Raises :class:`ManifestError` (with ``source``, the 0-based
    ``index`` of the offending non-empty document, its ``kind`` and ``name``, the ``field`` path
    and the ``reason``) on the first problem anywhere in the stream, including YAML syntax errors
    and repeated keys; nothing is returned then. Raises ``TypeError`` when ``text`` is not a str.
    """
    return load_documents(_parse_yaml(text, source), source)


def load_documents(docs: list, source: str = "<input>") -> Manifests:
    """Validate already-parsed documents (dicts, as from ``yaml.safe_load_all``) into
    :class:`Manifests`. ``None`` entries (empty documents) are skipped; the index in errors is
    the position in ``docs``. Raises :class:`ManifestError` on the first problem."""
    builder = Loader(source)
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        builder.add(doc, index)
    return builder.result()


def load_texts(texts: list[tuple[str, str]]) -> Manifests:
    """Load several YAML streams as one: ``texts`` are (source name, text) pairs, read in order.

    Objects may refer across files (a Job in one file naming a PriorityClass of another); a
    duplicate object across files is an error. Errors name the file they come from."""
    builder = None
    for source, text in texts:
        docs = _parse_yaml(text, source)
        if builder is None:
            builder = Loader(source)
        builder.source = source
        for index, doc in enumerate(docs):
            if doc is None:
                continue
            builder.add(doc, index)
    if builder is None:
        return Manifests(config=model.ClusterConfig(), workloads=[], ignored=[], warnings=[])
    return builder.result()


def parse_workload_document(
    doc: dict, config: model.ClusterConfig, source: str = "<input>", index: int = 0
) -> Optional[model.Workload]:
    """Turn ONE submitted manifest into a ``model.Workload``, with priority classes resolved
    against ``config`` (the live cluster configuration; it is not modified).

    ``doc``: a parsed batch/v1 Job, kueue.x-k8s.io Workload, Volcano Job or Kubeflow
    PyTorchJob/TFJob. Returns ``None`` for a kind that :func:`load_text` would list as ignored
    (e.g. a Job without the ``kueue.x-k8s.io/queue-name`` label, a ConfigMap). Raises
    :class:`ManifestError` located at ``source``/``index`` when the document is invalid, names an
    unknown priority class, or is a configuration kind (ClusterQueue, LocalQueue, ...: not a
    workload). The queue name is not checked against ``config``: an unknown LocalQueue is
    Kueue's ``Inadmissible``, not a validation error.
    """
    builder = Loader(source, priority_config=config)
    builder._index = index
    builder._kind = doc.get("kind", "") if isinstance(doc, dict) and isinstance(doc.get("kind"), str) else ""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    builder._name = meta.get("name", "") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
    try:
        draft = builder._add(doc, workload_only=True)
    except ManifestError as exc:
        raise exc.located(source=source, index=index, kind=builder._kind or None, name=builder._name or None) from None
    if draft is None:
        return None
    builder.resolve(draft)
    return draft.workload
