"""``jupyter gpuqueue replay``: replay a GPU job trace, or Kueue's performance-test workloads, in
simulated time through the scheduling engine (:mod:`jupyter_gpuqueue.engine.simulator`), and
report what teams would have experienced.

Trace replay
------------
``replay TRACE.csv --config QUEUES.yaml [--inventory FILE]``

* **Trace** (CSV, the columns of ``traces/philly.csv``): ``job_id, tenant, submit_time_s,
  duration_s, num_gpus`` are required; ``priority`` (integer) is used when present; other columns
  (``gpu_type, status, gpu_time_s, submit_timestamp, src_row``) are ignored. Every problem is a
  :class:`TraceError` naming the line and column (``philly.csv: line 12, column num_gpus: ...``).
* **Jobs → Workloads**: one Workload per row, named by ``job_id`` in its LocalQueue's namespace,
  created at ``submit_time_s`` (FIFO order; ties by row order), running ``duration_s`` seconds once
  admitted. GPUs: a job of at most ``max_gpus_per_pod`` (8) GPUs is one pod of ``num_gpus``
  ``nvidia.com/gpu``; a larger job is a gang of ``ceil(n / 8)`` pods sharing the GPUs as evenly as
  possible (16 → 2 × 8, 12 → 2 × 6, 128 → 16 × 8), admitted all or nothing. Without an inventory
  admission is by quota alone (as in Kueue) and the split does not matter; with one, pods are
  placed on nodes and must fit on one node each.
* **Queues** (``--config``): Kueue YAML (ResourceFlavors, ClusterQueues, Cohorts, LocalQueues,
  priority classes: anything ``jupyter gpuqueue simulate`` accepts) plus the **tenant mapping**, a
  ConfigMap named ``gpuqueue-replay-tenants`` whose key ``tenants.yaml`` holds a YAML mapping from
  trace tenant to LocalQueue ``namespace/name``; the key ``"*"`` catches every other tenant::

      apiVersion: v1
      kind: ConfigMap
      metadata: {name: gpuqueue-replay-tenants}
      data:
        tenants.yaml: |
          6214e9: philly-6214e9/jobs
          "*": philly-other/jobs

  (a ConfigMap so that the whole file still ``kubectl apply``-s). Without the ConfigMap a tenant
  ``t`` goes to the only LocalQueue of namespace ``t``. An unmapped tenant is an error.

Metrics (all times in seconds of simulated time; GPU = ``nvidia.com/gpu``)
--------------------------------------------------------------------------
Per team (tenant), per ClusterQueue and overall:

* ``queueingDelayS`` {mean, median, p95} = first admission − submission (jobs admitted at least
  once; linear-interpolated percentiles); ``completionTimeS`` {mean} = finish − submission
  (finished jobs; time lost to preemption included);
* ``gpuUtilization`` = GPU-seconds in use / (nominal GPU quota × window), per ClusterQueue (above 1
  when it borrows) and cluster-wide (over the summed quota of the cohort trees: every GPU the
  configuration can lend); window = first submission to last completion;
* ``borrowedGpuHours`` = ∫ max(0, usage − nominal) dt per ClusterQueue and flavor;
* ``preemptions``: workloads preempted (per team and ClusterQueue: as victims);
* ``jainFairnessIndex`` = (Σ xᵢ)² / (n Σ xᵢ²) over the teams' time-averaged **dominant shares**
  xᵢ (DRF: max over resources of the team's usage / the cluster's quota of that resource);
  ``jainFairnessIndexWeighted`` uses xᵢ / the team's ClusterQueue's share of the quota instead
  (1.0 when every team got usage in proportion to its quota);
* ``timeline``: per bin of ``binSeconds``: GPU utilization cluster-wide and per ClusterQueue (bin
  averages), pending workloads (time average), and mean / p95 queueing delay of the jobs submitted
  in the bin — the data of the plot (``--plot FILE.svg``);
* ``wallTimeS``: the replay's own wall time (reading, simulating, metrics).

Kueue performance workloads
---------------------------
``replay --kueue-perf baseline|large-scale``: see :mod:`jupyter_gpuqueue.engine.kueue_perf`;
reports mean ClusterQueue usage and mean time to admission per class beside Kueue's published
means, and the wall time.
"""

from __future__ import annotations

import csv
import io
import math
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional, TextIO

import yaml

from .engine import kueue_perf
from .engine.errors import ManifestError
from .engine.manifests import load_texts, parse_yaml_documents
from .engine.model import GPU, ClusterConfig, Inventory, PodSet, Workload
from .engine.scheduler import Scheduler, SchedulerOptions
from .engine.simulator import SimJob, Simulator
from .errors import ValidationError

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


# ------------------------------------------------------------------------------------------------
# Reading the trace


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


# ------------------------------------------------------------------------------------------------
# Queues and the tenant mapping


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


# ------------------------------------------------------------------------------------------------
# Running


@dataclass
class ReplayOptions:
    """``resume_preempted``: a preempted job keeps the time it ran (default: restarts);
    ``heads_per_cluster_queue``: workloads popped per ClusterQueue per cycle (Kueue: 1);
    ``cycle_seconds``: simulated cost of a scheduling cycle (default 0);
    ``requeue_batch_seconds``: parked workloads come back this long after quota is freed
    (Kueue's ``requeueBatchPeriod``, 1 s; 0: at once);
    ``max_gpus_per_pod``: pod size for large jobs; ``bin_seconds``: timeline bin (default: the
    span / 400, rounded to a whole minute, hour or day); ``limit``: replay only the first N jobs."""

    resume_preempted: bool = False
    heads_per_cluster_queue: int = 1
    cycle_seconds: float = 0.0
    requeue_batch_seconds: float = 1.0
    max_gpus_per_pod: int = 8
    bin_seconds: Optional[float] = None
    limit: Optional[int] = None


def make_simulator(config: ClusterConfig, inventory: Optional[Inventory], options: ReplayOptions) -> Simulator:
    """A :class:`Simulator` over a fresh :class:`Scheduler` of ``config`` with ``options``."""
    opts = SchedulerOptions(heads_per_cluster_queue=options.heads_per_cluster_queue)
    if hasattr(opts, "requeue_batch_seconds"):
        opts.requeue_batch_seconds = options.requeue_batch_seconds
    sched = Scheduler(config, inventory, opts)
    return Simulator(sched, resume_preempted=options.resume_preempted, cycle_seconds=options.cycle_seconds)


def replay_trace(
    trace: list[TraceJob],
    rc: ReplayConfig,
    *,
    inventory: Optional[Inventory] = None,
    options: Optional[ReplayOptions] = None,
    source: str = "<trace>",
    wall: Optional[dict] = None,
) -> dict:
    """Replay ``trace`` against ``rc`` (and ``inventory``); returns the report (see the module
    docstring; :func:`summary_text` renders it). ``wall``: wall times measured so far (e.g.
    ``{"read": s}``), completed here."""
    options = options or ReplayOptions()
    wall = dict(wall or {})
    t0 = time.perf_counter()
    jobs = build_jobs(trace, rc, max_gpus_per_pod=options.max_gpus_per_pod, source=source)
    sim = make_simulator(rc.config, inventory, options)
    sim.add_jobs(jobs)
    t1 = time.perf_counter()
    sim.run()
    t2 = time.perf_counter()
    report = trace_metrics(sim, rc, bin_seconds=options.bin_seconds)
    t3 = time.perf_counter()
    wall["build"] = t1 - t0
    wall["simulate"] = t2 - t1
    wall["metrics"] = t3 - t2
    wall["total"] = sum(v for k, v in wall.items() if k != "total")
    report["trace"] = {
        "source": source,
        "jobs": len(trace),
        "tenants": len({t.tenant for t in trace}),
        "gpuHoursDemanded": sum(t.gpus * t.duration for t in trace) / 3600.0,
    }
    report["options"] = {
        "resumePreempted": options.resume_preempted,
        "headsPerClusterQueue": options.heads_per_cluster_queue,
        "cycleSeconds": options.cycle_seconds,
        "requeueBatchSeconds": options.requeue_batch_seconds,
        "maxGpusPerPod": options.max_gpus_per_pod,
        "inventory": inventory is not None,
    }
    report["wallTimeS"] = {k: round(v, 4) for k, v in wall.items()}
    return report


# ------------------------------------------------------------------------------------------------
# Metrics


def percentile(sorted_xs: list[float], p: float) -> Optional[float]:
    """The ``p``-th percentile (0–100) of the sorted list, linearly interpolated (NumPy's default);
    None for an empty list."""
    n = len(sorted_xs)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_xs[0])
    pos = (n - 1) * p / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * frac


def jain_index(xs: list[float]) -> Optional[float]:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = all equal, 1/n = one takes everything. None for
    no values; 1.0 when all are 0."""
    n = len(xs)
    if n == 0:
        return None
    s2 = sum(x * x for x in xs)
    if s2 == 0:
        return 1.0
    s = sum(xs)
    return s * s / (n * s2)


def _delay_stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "mean": (sum(xs) / len(xs)) if xs else None,
        "median": percentile(xs, 50),
        "p95": percentile(xs, 95),
    }


def nice_bin(span: float, bins: int = DEFAULT_BINS) -> float:
    """A bin width of about ``span / bins`` seconds, rounded up to 1, 2, 5, 10, 15, 30 s / min,
    1, 2, 3, 6, 12 h, or whole days."""
    raw = max(span / max(bins, 1), 1e-3)
    steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
             900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
    for s in steps:
        if s >= raw:
            return float(s)
    return float(86400 * math.ceil(raw / 86400))


class _Bins:
    """Accumulates ∫ level dt of step functions into fixed bins over [t0, t1)."""

    __slots__ = ("t0", "w", "n", "acc")

    def __init__(self, t0: float, w: float, n: int):
        self.t0, self.w, self.n = t0, w, n
        self.acc = [0.0] * n

    def add(self, a: float, b: float, level: float) -> None:
        if b <= a or level == 0:
            return
        t0, w, acc = self.t0, self.w, self.acc
        i = int((a - t0) // w)
        last = min(int((b - t0) // w), self.n - 1)
        if i < 0:
            i = 0
        while i <= last:
            lo = t0 + i * w
            hi = lo + w
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                acc[i] += level * overlap
            i += 1

    def averages(self) -> list[float]:
        return [x / self.w for x in self.acc]


def _sweep(events: list[tuple[float, float]]):
    """Yield (a, b, level) for the step function Σ deltas at times (sorted here)."""
    events.sort()
    level = 0.0
    prev = None
    for t, d in events:
        if prev is not None and t > prev:
            yield prev, t, level
        level += d
        prev = t


def trace_metrics(sim: Simulator, rc: ReplayConfig, *, bin_seconds: Optional[float] = None) -> dict:
    """The replay report of a finished simulation (see the module docstring for definitions)."""
    sched = sim.scheduler
    tree = sched.tree
    jobs = list(sim.jobs.values())
    if not jobs:
        t0 = t1 = 0.0
    else:
        t0 = min(j.submit_time for j in jobs)
        t1 = max([sim.stats.end_time] + [j.finish_time for j in jobs if j.finish_time is not None])
    window = max(t1 - t0, 0.0)
    w = bin_seconds if bin_seconds and bin_seconds > 0 else nice_bin(window)
    nbins = max(1, int(math.ceil(window / w))) if window > 0 else 1

    # Quota: per ClusterQueue nominal GPUs; cluster capacity per resource = Σ over the roots'
    # subtree quota (what the cohort trees can hand out).
    cq_nominal_gpu: dict[str, int] = {}
    for name, node in tree.cluster_queues.items():
        cq_nominal_gpu[name] = sum(q for (f, r), q in node.nominal.items() if r == GPU)
    capacity: dict[str, int] = {}
    for root in tree.roots():
        for (f, r), q in root.subtree_quota.items():
            capacity[r] = capacity.get(r, 0) + q
    cap_gpu = capacity.get(GPU, 0)

    # Step-function events.
    cq_events: dict[tuple[str, tuple[str, str]], list] = {}
    team_events: dict[str, list] = {}
    pending_events: list[tuple[float, float]] = []
    team_of: dict[str, str] = {}
    team_lq: dict[str, str] = {}
    by_team: dict[str, list] = {}
    cq_preempted: dict[str, int] = {}
    cq_admissions: dict[str, int] = {}
    delays_by_bin: list[list[float]] = [[] for _ in range(nbins)]
    for j in jobs:
        team = str(j.tag)
        team_of[j.key] = team
        team_lq.setdefault(team, f"{j.workload.namespace}/{j.workload.queue_name}")
        by_team.setdefault(team, []).append(j)
        tev = team_events.setdefault(team, [])
        wait_from = j.submit_time
        for run in j.runs:
            end = run.end if run.end is not None else t1
            pending_events.append((wait_from, 1.0))
            pending_events.append((run.start, -1.0))
            cq_admissions[run.cluster_queue] = cq_admissions.get(run.cluster_queue, 0) + 1
            if run.preempted:
                cq_preempted[run.cluster_queue] = cq_preempted.get(run.cluster_queue, 0) + 1
            for fr, q in run.usage:
                ev = cq_events.setdefault((run.cluster_queue, fr), [])
                ev.append((run.start, q))
                ev.append((end, -q))
                tev.append((run.start, fr[1], q))
                tev.append((end, fr[1], -q))
            wait_from = end if run.preempted else None
        if wait_from is not None and j.finish_time is None:
            pending_events.append((wait_from, 1.0))
            pending_events.append((t1, -1.0))
        if j.first_admit_time is not None and window > 0:
            b = min(int((j.submit_time - t0) // w), nbins - 1)
            delays_by_bin[b].append(j.first_admit_time - j.submit_time)

    # ClusterQueues: used and borrowed GPU-seconds, timeline.
    cluster_bins = _Bins(t0, w, nbins)
    cq_bins: dict[str, _Bins] = {}
    cq_used: dict[str, float] = {}
    cq_borrowed: dict[str, float] = {}
    for (cq, fr), ev in cq_events.items():
        nominal = tree.cluster_queues[cq].nominal.get(fr, 0) if cq in tree.cluster_queues else 0
        is_gpu = fr[1] == GPU
        bins = cq_bins.get(cq)
        if bins is None and is_gpu:
            bins = cq_bins[cq] = _Bins(t0, w, nbins)
        used = borrowed = 0.0
        for a, b, level in _sweep(ev):
            dt = b - a
            used += level * dt
            if level > nominal:
                borrowed += (level - nominal) * dt
            if is_gpu:
                bins.add(a, b, level)
                cluster_bins.add(a, b, level)
        if is_gpu:
            cq_used[cq] = cq_used.get(cq, 0.0) + used
            cq_borrowed[cq] = cq_borrowed.get(cq, 0.0) + borrowed

    pending_bins = _Bins(t0, w, nbins)
    for a, b, level in _sweep(pending_events):
        pending_bins.add(a, b, level)

    # Teams: dominant share, time-averaged.
    dominant: dict[str, float] = {}
    for team, ev in team_events.items():
        ev.sort(key=lambda x: x[0])
        usage: dict[str, float] = {}
        acc = 0.0
        prev = None
        for t, r, d in ev:
            if prev is not None and t > prev and usage:
                share = max((u / capacity[r_]) for r_, u in usage.items() if capacity.get(r_))  \
                    if any(capacity.get(r_) for r_ in usage) else 0.0
                acc += share * (t - prev)
            usage[r] = usage.get(r, 0.0) + d
            prev = t
        dominant[team] = acc / window if window > 0 else 0.0

    lq_cq = {k: lq.cluster_queue for k, lq in rc.config.local_queues.items()}
    teams_out: dict[str, dict] = {}
    for team in sorted(by_team):
        tj = by_team[team]
        cq = lq_cq.get(team_lq[team])
        teams_out[team] = _group_stats(tj) | {
            "localQueue": team_lq[team],
            "clusterQueue": cq,
            "dominantShare": dominant.get(team, 0.0),
        }
    weighted = []
    for team, st in teams_out.items():
        cq = st["clusterQueue"]
        quota_share = (cq_nominal_gpu.get(cq, 0) / cap_gpu) if cap_gpu else 0.0
        if quota_share > 0:
            weighted.append(st["dominantShare"] / quota_share)

    cqs_out: dict[str, dict] = {}
    for name in sorted(tree.cluster_queues):
        nominal = cq_nominal_gpu.get(name, 0)
        used = cq_used.get(name, 0.0)
        cqs_out[name] = {
            "nominalGpus": nominal,
            "gpuHours": used / 3600.0,
            "gpuUtilization": (used / (nominal * window)) if nominal and window > 0 else None,
            "borrowedGpuHours": cq_borrowed.get(name, 0.0) / 3600.0,
            "admissions": cq_admissions.get(name, 0),
            "preemptions": cq_preempted.get(name, 0),
        }

    total_used = sum(cq_used.values())
    overall = _group_stats(jobs) | {
        "gpuUtilization": (total_used / (cap_gpu * window)) if cap_gpu and window > 0 else None,
        "borrowedGpuHours": sum(cq_borrowed.values()) / 3600.0,
        "jainFairnessIndex": jain_index(list(dominant.values())),
        "jainFairnessIndexWeighted": jain_index(weighted),
    }

    timeline = {
        "start": t0,
        "binSeconds": w,
        "t": [t0 + i * w for i in range(nbins)],
        "clusterGpuUtilization": [round(x / cap_gpu, 5) if cap_gpu else None for x in cluster_bins.averages()],
        "clusterQueueGpuUtilization": {
            cq: [round(x / cq_nominal_gpu[cq], 5) if cq_nominal_gpu.get(cq) else None for x in b.averages()]
            for cq, b in sorted(cq_bins.items())
        },
        "clusterQueueGpusInUse": {cq: [round(x, 3) for x in b.averages()] for cq, b in sorted(cq_bins.items())},
        "pendingWorkloads": [round(x, 3) for x in pending_bins.averages()],
        "meanQueueingDelayS": [round(sum(d) / len(d), 3) if d else None for d in delays_by_bin],
        "p95QueueingDelayS": [round(percentile(sorted(d), 95), 3) if d else None for d in delays_by_bin],
    }
    return {
        "windowS": {"start": t0, "end": t1},
        "capacity": {"gpus": cap_gpu, **{r: q for r, q in capacity.items() if r != GPU}},
        "overall": overall,
        "teams": teams_out,
        "clusterQueues": cqs_out,
        "timeline": timeline,
        "simulation": _sim_stats(sim),
    }


def _group_stats(jobs: list[SimJob]) -> dict:
    delays = [j.first_admit_time - j.submit_time for j in jobs if j.first_admit_time is not None]
    jct = [j.finish_time - j.submit_time for j in jobs if j.finish_time is not None]
    gpu_s = 0.0
    for j in jobs:
        for run in j.runs:
            if run.end is None:
                continue
            g = sum(q for fr, q in run.usage if fr[1] == GPU)
            gpu_s += g * (run.end - run.start)
    return {
        "jobs": len(jobs),
        "admitted": len(delays),
        "finished": len(jct),
        "queueingDelayS": _delay_stats(delays),
        "completionTimeS": {"mean": (sum(jct) / len(jct)) if jct else None},
        "gpuHours": gpu_s / 3600.0,
        "preemptions": sum(j.evictions for j in jobs),
    }


def _sim_stats(sim: Simulator) -> dict:
    s = sim.stats
    return {
        "cycles": s.cycles,
        "idleCycles": s.idle_cycles,
        "instants": s.instants,
        "arrivals": s.arrivals,
        "admissions": s.admissions,
        "completions": s.completions,
        "preemptions": s.preemptions,
        "maxCyclesInInstant": s.max_cycles_in_instant,
        "skippedInstants": s.skipped_instants,
        "endTimeS": s.end_time,
        "lostGpuHoursToPreemption": _lost_gpu_hours(sim),
    }


def _lost_gpu_hours(sim: Simulator) -> float:
    if sim.resume_preempted:
        return 0.0
    lost = 0.0
    for j in sim.jobs.values():
        for run in j.runs:
            if run.preempted and run.end is not None:
                lost += sum(q for fr, q in run.usage if fr[1] == GPU) * (run.end - run.start)
    return lost / 3600.0


# ------------------------------------------------------------------------------------------------
# Kueue performance workloads


def replay_kueue_perf(name: str, options: Optional[ReplayOptions] = None) -> dict:
    """Run Kueue's performance-test scenario ``name`` (``baseline`` or ``large-scale``); returns
    ``{"scenario", "source", "clusterQueues", "workloads", "ours": kueue_perf.summarize(...),
    "kueue": published means, "simulation": counters, "wallTimeS": {...}}``."""
    options = options or ReplayOptions()
    scenario = kueue_perf.SCENARIOS[name]
    t0 = time.perf_counter()
    config = kueue_perf.build_config(scenario)
    jobs = kueue_perf.generate_jobs(scenario)
    sim = make_simulator(config, None, options)
    sim.add_jobs(jobs)
    t1 = time.perf_counter()
    sim.run()
    t2 = time.perf_counter()
    ours = kueue_perf.summarize(scenario, sim.jobs.values())
    t3 = time.perf_counter()
    pub = scenario.published
    return {
        "scenario": scenario.name,
        "source": scenario.source,
        "clusterQueues": scenario.cluster_queues,
        "workloads": scenario.workloads,
        "ours": ours,
        "kueue": {
            "clusterQueueUsagePercent": pub.usage_percent,
            "timeToAdmissionS": dict(pub.time_to_admission_s),
            "wallTimeS": pub.wall_s,
            "source": pub.source,
        },
        "options": {
            "resumePreempted": options.resume_preempted,
            "headsPerClusterQueue": options.heads_per_cluster_queue,
            "cycleSeconds": options.cycle_seconds,
            "requeueBatchSeconds": options.requeue_batch_seconds,
        },
        "simulation": _sim_stats(sim),
        "wallTimeS": {"build": round(t1 - t0, 4), "simulate": round(t2 - t1, 4),
                      "metrics": round(t3 - t2, 4), "total": round(t3 - t0, 4)},
    }


def kueue_perf_text(report: dict) -> str:
    """A short human summary of :func:`replay_kueue_perf`'s report."""
    ours, pub = report["ours"], report["kueue"]
    sim = report["simulation"]
    lines = [
        f"Kueue performance workload '{report['scenario']}': {report['workloads']:,} workloads, "
        f"{report['clusterQueues']:,} ClusterQueues ({report['source']})",
        f"{'':24}{'ours':>12}{'Kueue':>12}",
        f"{'ClusterQueue usage':24}{ours['clusterQueueUsagePercent']:>11.1f}%{pub['clusterQueueUsagePercent']:>11.1f}%",
    ]
    for cls, v in ours["timeToAdmissionS"].items():
        k = pub["timeToAdmissionS"].get(cls)
        lines.append(f"{'time to admission ' + cls:24}{_secs(v):>12}{_secs(k):>12}")
    lines.append(f"{'wall time':24}{_secs(report['wallTimeS']['total']):>12}{_secs(pub['wallTimeS']):>12}")
    lines.append(
        f"simulated {sim['endTimeS']:.1f} s: {sim['cycles']:,} cycles, {sim['admissions']:,} admissions, "
        f"{sim['preemptions']:,} preemptions (evictions by class: "
        + ", ".join(f"{c} {n:,}" for c, n in ours["evictions"].items())
        + ")"
    )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# Human summary and plot


def _secs(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:,.1f} s"


def fmt_duration(seconds: Optional[float]) -> str:
    """``42 s``, ``12.5 min``, ``3.2 h``, ``4.1 d``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:.1f} s" if abs(s) < 10 and s != int(s) else f"{s:.0f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def summary_text(report: dict) -> str:
    """A short human summary of :func:`replay_trace`'s report: one row per team, one per
    ClusterQueue, the overall figures and the wall time."""
    tr, ov, sim = report["trace"], report["overall"], report["simulation"]
    span = report["windowS"]["end"] - report["windowS"]["start"]
    out = io.StringIO()
    out.write(
        f"Replay of {tr['source']}: {tr['jobs']:,} jobs from {tr['tenants']} tenants over "
        f"{fmt_duration(span)} simulated; {len(report['clusterQueues'])} ClusterQueues, "
        f"{report['capacity']['gpus']:,} GPUs of quota\n\n"
    )
    hdr = f"{'team':10} {'LocalQueue':24} {'jobs':>7} {'delay mean':>11} {'median':>9} {'p95':>9} " \
          f"{'JCT mean':>9} {'GPU-h':>9} {'share':>6} {'preempted':>9}\n"
    out.write(hdr)

    def row(name, lq, st, share):
        d = st["queueingDelayS"]
        out.write(
            f"{name[:10]:10} {lq[:24]:24} {st['jobs']:>7,} {fmt_duration(d['mean']):>11} "
            f"{fmt_duration(d['median']):>9} {fmt_duration(d['p95']):>9} "
            f"{fmt_duration(st['completionTimeS']['mean']):>9} {st['gpuHours']:>9,.0f} "
            f"{share:>6} {st['preemptions']:>9,}\n"
        )

    for team, st in report["teams"].items():
        row(team, st["localQueue"], st, _pct(st["dominantShare"]))
    row("all", "", ov, "")
    out.write(f"\n{'ClusterQueue':24} {'nominal GPUs':>12} {'utilization':>11} {'borrowed GPU-h':>14} "
              f"{'preempted':>9}\n")
    for name, st in report["clusterQueues"].items():
        out.write(
            f"{name[:24]:24} {st['nominalGpus']:>12,} {_pct(st['gpuUtilization']):>11} "
            f"{st['borrowedGpuHours']:>14,.0f} {st['preemptions']:>9,}\n"
        )
    jain = ov["jainFairnessIndex"]
    jw = ov["jainFairnessIndexWeighted"]
    out.write(
        f"\ncluster-wide GPU utilization {_pct(ov['gpuUtilization'])}, borrowed {ov['borrowedGpuHours']:,.0f} "
        f"GPU-h, {ov['preemptions']:,} preemptions ({sim['lostGpuHoursToPreemption']:,.0f} GPU-h lost), "
        f"Jain's index of dominant shares {('-' if jain is None else f'{jain:.3f}')} "
        f"(quota-weighted {('-' if jw is None else f'{jw:.3f}')})\n"
    )
    wt = report["wallTimeS"]
    out.write(
        f"wall time {wt['total']:.2f} s (read {wt.get('read', 0):.2f}, simulate {wt['simulate']:.2f}, "
        f"metrics {wt['metrics']:.2f}); {sim['cycles']:,} scheduling cycles at {sim['instants']:,} instants\n"
    )
    return out.getvalue()


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``raw`` (> 0)."""
    if raw <= 0:
        return 1.0
    exp = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * 10 ** exp
        if step >= raw * (1 - 1e-12):
            return step
    return 10.0 ** (exp + 1)


def plot_svg(report: dict, *, width: int = 960, height: int = 560, top_queues: int = 5) -> str:
    """An SVG of the timeline: GPU utilization over time (cluster-wide and the busiest
    ClusterQueues) above, mean and p95 queueing delay of the jobs submitted in each bin below."""
    tl = report["timeline"]
    n = len(tl["t"])
    w = tl["binSeconds"]
    t0 = tl["start"]
    xs_days = [(t - t0 + w / 2) / 86400.0 for t in tl["t"]]
    span_days = max((n * w) / 86400.0, 1e-9)
    unit, div = ("days", 1.0) if span_days >= 2 else ("hours", 1 / 24.0) if span_days * 24 >= 2 else ("seconds", 1 / 86400.0)
    xs = [x / div for x in xs_days]
    xmax = span_days / div
    ml, mr, mt, mb, gap = 70, 190, 30, 45, 50
    ph = (height - mt - mb - gap) / 2
    pw = width - ml - mr
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]

    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def poly(values, y0, ymax, color, dash=""):
        pts = []
        segs = []
        for x, v in zip(xs, values):
            if v is None:
                if pts:
                    segs.append(pts)
                    pts = []
                continue
            px = ml + pw * (x / xmax if xmax else 0)
            py = y0 + ph - ph * (min(v, ymax) / ymax if ymax else 0)
            pts.append(f"{px:.1f},{py:.1f}")
        if pts:
            segs.append(pts)
        for seg in segs:  # a lone point: a short dash, so that it shows
            if len(seg) == 1:
                x, y = map(float, seg[0].split(","))
                seg[:] = [f"{x - 1.5:.1f},{y:.1f}", f"{x + 1.5:.1f},{y:.1f}"]
        d = f' stroke-dasharray="{dash}"' if dash else ""
        return "".join(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.3"{d} points="{" ".join(s)}"/>' for s in segs
        )

    xstep = _nice_step(xmax / 5)

    def axes(y0, ymax, label, fmt):
        # ``ymax`` is a multiple of 4 nice steps (``nice_max``): ticks at round values.
        parts = [f'<rect x="{ml}" y="{y0:.1f}" width="{pw}" height="{ph:.1f}" fill="none" stroke="#888"/>']
        for k in range(5):
            v = ymax * k / 4
            py = y0 + ph - ph * k / 4
            parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{ml - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="11">{fmt(v)}</text>')
        k = 0
        while xmax and k * xstep <= xmax * (1 + 1e-9):
            x = k * xstep
            px = ml + pw * x / xmax
            parts.append(f'<text x="{px:.1f}" y="{y0 + ph + 14:.1f}" text-anchor="middle" font-size="11">{x:g}</text>')
            k += 1
        parts.append(f'<text x="{ml}" y="{y0 - 8:.1f}" font-size="13" font-weight="bold">{esc(label)}</text>')
        return "".join(parts)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    # Panel 1: utilization.
    y1 = mt
    series = [("cluster-wide", tl["clusterGpuUtilization"], "#000")]
    by_use = sorted(tl["clusterQueueGpusInUse"].items(), key=lambda kv: -sum(kv[1]))
    for i, (cq, _) in enumerate(by_use[:top_queues]):
        vals = tl["clusterQueueGpuUtilization"].get(cq)
        if vals and any(v is not None for v in vals):
            series.append((cq, vals, colors[i % len(colors)]))
    umax = max([v for _, vals, _ in series for v in vals if v is not None] + [1.0])
    umax = 4 * _nice_step(umax / 4)
    svg.append(axes(y1, umax, "GPU utilization (GPUs in use / nominal quota)", lambda v: f"{100 * v:.0f}%"))
    for k, (name, vals, color) in enumerate(series):
        svg.append(poly(vals, y1, umax, color))
        ly = y1 + 12 + 16 * k
        svg.append(f'<line x1="{ml + pw + 10}" x2="{ml + pw + 30}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        svg.append(f'<text x="{ml + pw + 35}" y="{ly + 4}" font-size="11">{esc(name)}</text>')
    # Panel 2: queueing delay (hours unless short).
    y2 = mt + ph + gap
    dmean = tl["meanQueueingDelayS"]
    dp95 = tl["p95QueueingDelayS"]
    dmax_s = max([v for v in dmean + dp95 if v is not None] + [1.0])
    dunit, ddiv = ("h", 3600.0) if dmax_s >= 7200 else ("min", 60.0) if dmax_s >= 120 else ("s", 1.0)
    dmax = 4 * _nice_step(dmax_s / ddiv / 4)
    svg.append(axes(y2, dmax, f"queueing delay of jobs submitted in each bin ({dunit})",
                    lambda v: f"{v:g}"))
    svg.append(poly([None if v is None else v / ddiv for v in dp95], y2, dmax, "#d62728", "4,3"))
    svg.append(poly([None if v is None else v / ddiv for v in dmean], y2, dmax, "#1f77b4"))
    for k, (name, color) in enumerate((("mean", "#1f77b4"), ("p95", "#d62728"))):
        ly = y2 + 12 + 16 * k
        svg.append(f'<line x1="{ml + pw + 10}" x2="{ml + pw + 30}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        svg.append(f'<text x="{ml + pw + 35}" y="{ly + 4}" font-size="11">{name}</text>')
    svg.append(f'<text x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle" font-size="12">'
               f'simulated time ({unit}); bins of {esc(fmt_duration(w))}</text>')
    svg.append("</svg>\n")
    return "".join(svg)


__all__ = [
    "REQUIRED_COLUMNS",
    "TENANT_CONFIGMAP",
    "ReplayConfig",
    "ReplayOptions",
    "TraceError",
    "TraceJob",
    "build_jobs",
    "jain_index",
    "kueue_perf_text",
    "load_replay_config",
    "percentile",
    "plot_svg",
    "pod_sets_for",
    "read_trace",
    "read_trace_file",
    "replay_kueue_perf",
    "replay_trace",
    "summary_text",
    "trace_metrics",
]
