"""Trace reading: a job trace (CSV) and its queue configuration (Kueue YAML with the tenant
mapping ConfigMap) turned into the engine's Workloads."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, TextIO

import yaml

from ..engine.errors import ManifestError
from ..engine.manifests import load_texts, parse_yaml_documents
from ..engine.model import GPU, ClusterConfig, PodSet, Workload
from ..engine.simulator import SimJob
from ..errors import ValidationError


TENANT_CONFIGMAP = "gpuqueue-replay-tenants"


TENANT_KEY = "tenants.yaml"


CATCH_ALL = "*"


REQUIRED_COLUMNS = ("job_id", "tenant", "submit_time_s", "duration_s", "num_gpus")


DEFAULT_BINS = 400


class TraceError(ValidationError):
    """A trace that cannot be read: ``line`` (1-based line in the file, the header is line 1),
    ``column`` (the column name) and what is wrong."""

    def __init__(self, message: str, *, source: str = "", line: Optional[int] = None, column: Optional[str] = None):
        loc = ", ".join(w for w in (f"line {line}" if line else "", f"column {column}" if column else "") if w)
        text = (f"{source}: " if source else "") + (f"{loc}: " if loc else "") + message
        super().__init__(text, field=column)
        self.source = source
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return self.message


@dataclass(slots=True)
class TraceJob:
    """One trace row: ``submit_time`` and ``duration`` in seconds, ``gpus`` ≥ 1, ``priority``
    (0 unless the trace has the column), ``line`` in the file."""

    job_id: str
    tenant: str
    submit_time: float
    duration: float
    gpus: int
    priority: int = 0
    line: int = 0


def _number(text: str, *, source: str, line: int, column: str) -> float:
    t = text.strip()
    if not t:
        raise TraceError("a number is required, got an empty cell", source=source, line=line, column=column)
    try:
        v = float(t)
    except ValueError:
        raise TraceError(f"not a number: {text!r}", source=source, line=line, column=column) from None
    if not math.isfinite(v):
        raise TraceError(f"must be finite, got {text!r}", source=source, line=line, column=column)
    if v < 0:
        raise TraceError(f"must be >= 0, got {text!r}", source=source, line=line, column=column)
    return v


def _integer(text: str, *, source: str, line: int, column: str, minimum: Optional[int]) -> int:
    t = text.strip()
    try:
        v = int(t)
    except ValueError:
        try:
            f = float(t)
        except ValueError:
            f = math.nan
        if not f.is_integer():
            raise TraceError(f"not an integer: {text!r}", source=source, line=line, column=column) from None
        v = int(f)
    if minimum is not None and v < minimum:
        raise TraceError(f"must be an integer >= {minimum}, got {text!r}", source=source, line=line, column=column)
    return v


def read_trace(f: TextIO, source: str = "<trace>", limit: Optional[int] = None) -> list[TraceJob]:
    """Read a job trace (CSV with a header row) from the text stream ``f``.

    Returns the jobs in file order (at most ``limit``). Raises :class:`TraceError` naming the line
    and column of the first problem: a missing required column, an empty job id or tenant, a
    repeated job id, a submit time or duration that is not a number ≥ 0, a GPU count that is not
    an integer ≥ 1, a priority that is not an integer, a row with too few cells."""
    reader = csv.reader(f)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError("empty trace: a header row is required", source=source, line=1) from None
    except csv.Error as e:
        raise TraceError(f"invalid CSV: {e}", source=source, line=1) from None
    header = [h.strip() for h in header]
    index = {}
    for i, h in enumerate(header):
        index.setdefault(h, i)
    for col in REQUIRED_COLUMNS:
        if col not in index:
            raise TraceError(
                f"missing required column (the header has: {', '.join(header) or 'nothing'})",
                source=source, line=1, column=col,
            )
    i_id, i_tenant, i_submit, i_dur, i_gpus = (index[c] for c in REQUIRED_COLUMNS)
    i_prio = index.get("priority")
    need = max(index[c] for c in REQUIRED_COLUMNS) + 1
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    try:
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if len(row) < need:
                missing = header[len(row)] if len(row) < len(header) else REQUIRED_COLUMNS[-1]
                raise TraceError(f"row has {len(row)} cells, {len(header)} expected", source=source,
                                 line=line, column=missing)
            job_id = row[i_id].strip()
            if not job_id:
                raise TraceError("job id is empty", source=source, line=line, column="job_id")
            if job_id in seen:
                raise TraceError(f"job id {job_id!r} repeats line {seen[job_id]}", source=source, line=line,
                                 column="job_id")
            seen[job_id] = line
            tenant = row[i_tenant].strip()
            if not tenant:
                raise TraceError("tenant is empty", source=source, line=line, column="tenant")
            submit = _number(row[i_submit], source=source, line=line, column="submit_time_s")
            dur = _number(row[i_dur], source=source, line=line, column="duration_s")
            gpus = _integer(row[i_gpus], source=source, line=line, column="num_gpus", minimum=1)
            prio = 0
            if i_prio is not None and i_prio < len(row) and row[i_prio].strip():
                prio = _integer(row[i_prio], source=source, line=line, column="priority", minimum=None)
            jobs.append(TraceJob(job_id, tenant, submit, dur, gpus, prio, line))
            if limit is not None and len(jobs) >= limit:
                break
    except csv.Error as e:
        raise TraceError(f"invalid CSV: {e}", source=source, line=reader.line_num) from None
    return jobs


def read_trace_file(path: str, limit: Optional[int] = None) -> list[TraceJob]:
    """:func:`read_trace` on the file ``path`` (UTF-8). Raises TraceError if it cannot be read."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return read_trace(f, path, limit)
    except OSError as e:
        raise TraceError(f"cannot read trace: {e.strerror or e}", source=path) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"not UTF-8 text: {e}", source=path) from None


@dataclass
class ReplayConfig:
    """The queueing configuration of a replay and how tenants map to LocalQueues
    (``tenants``: tenant → ``namespace/name``; ``default``: the catch-all LocalQueue or None)."""

    config: ClusterConfig
    tenants: dict[str, str] = field(default_factory=dict)
    default: Optional[str] = None
    has_mapping: bool = False
    warnings: list[str] = field(default_factory=list)

    def local_queue_for(self, tenant: str) -> Optional[str]:
        """The LocalQueue key (``namespace/name``) of ``tenant``, or None if it has none."""
        lq = self.tenants.get(tenant)
        if lq is not None:
            return lq
        if self.default is not None:
            return self.default
        if not self.has_mapping:
            found = [k for k, q in self.config.local_queues.items() if q.namespace == tenant]
            if len(found) == 1:
                return found[0]
        return None


def load_replay_config(texts: list[tuple[str, str]]) -> ReplayConfig:
    """Load Kueue YAML streams ``texts`` ((source name, text) pairs) and the tenant mapping
    ConfigMap among them. Raises ``ManifestError`` (file, document, field, reason) when a Kueue
    object is invalid or the mapping is malformed or names a LocalQueue that does not exist."""
    mapping_docs: list[tuple[str, int, dict]] = []
    for source, text in texts:
        for i, doc in enumerate(parse_yaml_documents(text, source)):
            if (
                isinstance(doc, dict)
                and doc.get("kind") == "ConfigMap"
                and isinstance(doc.get("metadata"), dict)
                and doc["metadata"].get("name") == TENANT_CONFIGMAP
            ):
                mapping_docs.append((source, i, doc))
    # The Kueue loader lists ConfigMaps as ignored: the streams load as they are, so that errors
    # keep their file and document index.
    m = load_texts(texts)
    config, warnings = m.config, list(m.warnings)
    rc = ReplayConfig(config=config, warnings=warnings)
    if len(mapping_docs) > 1:
        source, i, _ = mapping_docs[1]
        raise ManifestError(f"ConfigMap {TENANT_CONFIGMAP} is given more than once", "metadata.name",
                            source=source, index=i, kind="ConfigMap", name=TENANT_CONFIGMAP)
    for source, i, doc in mapping_docs:
        _parse_mapping(rc, doc, source, i)
    return rc


def _parse_mapping(rc: ReplayConfig, doc: dict, source: str, index: int) -> None:
    def fail(fieldpath: str, reason: str) -> ManifestError:
        return ManifestError(reason, fieldpath, source=source, index=index, kind="ConfigMap", name=TENANT_CONFIGMAP)

    data = doc.get("data")
    if not isinstance(data, dict) or TENANT_KEY not in data:
        raise fail("data", f"Required value: key {TENANT_KEY!r} with a YAML mapping tenant: namespace/localQueue")
    text = data[TENANT_KEY]
    if not isinstance(text, str):
        raise fail(f"data[{TENANT_KEY}]", "Invalid value: must be a string holding a YAML mapping")
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise fail(f"data[{TENANT_KEY}]", f"Invalid value: invalid YAML: {e}") from None
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        raise fail(f"data[{TENANT_KEY}]", "Invalid value: must be a mapping tenant: namespace/localQueue")
    rc.has_mapping = True
    for tenant, lq in mapping.items():
        path = f"data[{TENANT_KEY}][{tenant}]"
        if not isinstance(lq, str) or lq.count("/") != 1 or not all(lq.split("/")):
            raise fail(path, f"Invalid value: {lq!r}: a LocalQueue as \"namespace/name\" is required")
        if lq not in rc.config.local_queues:
            raise fail(path, f"Not found: LocalQueue {lq} is not defined in the configuration")
        tenant = str(tenant)
        if tenant == CATCH_ALL:
            rc.default = lq
        else:
            rc.tenants[tenant] = lq


def pod_sets_for(gpus: int, max_gpus_per_pod: int = 8) -> list[PodSet]:
    """The PodSets of a job of ``gpus`` GPUs: one pod when ``gpus <= max_gpus_per_pod``, else
    ``k = ceil(gpus / max)`` pods sharing them evenly (two PodSets when they do not divide: ``r``
    pods of ``q + 1`` and ``k − r`` of ``q``)."""
    if gpus <= max_gpus_per_pod:
        return [PodSet("main", 1, {GPU: gpus})]
    k = -(-gpus // max_gpus_per_pod)
    q, r = divmod(gpus, k)
    if r == 0:
        return [PodSet("main", k, {GPU: q})]
    return [PodSet("main", k - r, {GPU: q}), PodSet("main-extra", r, {GPU: q + 1})]


def build_jobs(trace: Iterable[TraceJob], rc: ReplayConfig, *, max_gpus_per_pod: int = 8,
               source: str = "<trace>") -> list[SimJob]:
    """One :class:`SimJob` per trace row (``tag`` = tenant). Raises :class:`TraceError` for a
    tenant without a LocalQueue."""
    jobs = []
    for seq, tj in enumerate(trace):
        lq_key = rc.local_queue_for(tj.tenant)
        if lq_key is None:
            raise TraceError(
                f"tenant {tj.tenant!r} has no LocalQueue: map it in ConfigMap {TENANT_CONFIGMAP} "
                f"(key {TENANT_KEY}), or add a catch-all \"*\"",
                source=source, line=tj.line, column="tenant",
            )
        ns, name = lq_key.split("/", 1)
        wl = Workload(
            namespace=ns,
            name=tj.job_id,
            queue_name=name,
            pod_sets=pod_sets_for(tj.gpus, max_gpus_per_pod),
            priority=tj.priority,
            creation_time=tj.submit_time,
            uid=f"{seq:09d}",
        )
        jobs.append(SimJob(wl, tj.submit_time, tj.duration, tag=tj.tenant))
    return jobs
