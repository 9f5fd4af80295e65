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
* ``contendedFairness`` (fairness over contended time): in every interval where some ClusterQueue
  has a pending workload, each ClusterQueue with demand (GPUs held + GPUs requested by its pending
  workloads) gets xᵢ = its allocated GPUs / its **fair share**: the weighted max-min share of the
  cluster's GPUs (every GPU the cohort trees can lend: quota left idle in one tree while another
  team queues counts as unfair), capped by its demand, with weights nominal GPU quota × the
  ClusterQueue's fairSharing weight (Kueue's dominant resource share measures usage relative to
  nominal quota, divided by the weight); Jain's index (Σ xᵢ)² / (n Σ xᵢ²) of the xᵢ (1 = everyone
  got its fair share). ``jainIndexMean``: its time-weighted mean over contended time;
  ``contendedHours``: how long some work was pending; ``timeline.contendedJainIndex``: per bin
  (None: no contention in the bin). ``preemptionLossShare``: GPU-hours lost to preemption
  (restarted runs) / all GPU-hours used;
* ``jainIndexOfMeanDominantShares`` (formerly ``jainFairnessIndex``): Jain's index over the teams'
  dominant shares averaged over the whole window (DRF: max over resources of the team's usage /
  the cluster's quota of that resource), and ``…Weighted`` with each share divided by the team's
  share of the quota. It measures how much each team *used* over the trace, which every policy
  serves in the end (0.455 for the Philly trace under any configuration): not fairness;
* ``timeline``: per bin of ``binSeconds``: GPU utilization cluster-wide and per ClusterQueue (bin
  averages), pending workloads (time average), and mean / p95 queueing delay of the jobs submitted
  in the bin — the data of the plot (``--plot FILE.svg``);
* ``wallTimeS``: the replay's own wall time (reading, simulating, metrics).

Kueue performance workloads
---------------------------
``replay --kueue-perf baseline|large-scale``: see :mod:`jupyter_gpuqueue.engine.kueue_perf`;
reports mean ClusterQueue usage and mean time to admission per class beside Kueue's published
means, and the wall time.

Estimated start times
---------------------
``replay TRACE --config Q.yaml --eta [--runtime-model history|declared|oracle] [--eta-sample K]``
adds ``report["eta"]``: the accuracy of the start-time estimates made at each sampled waiting
job's submission (and at 25/50/75 % of its wait), beside the ``rate`` and ``oracle`` baselines;
see :mod:`jupyter_gpuqueue.replay.eta`.

Modules, by step: ``trace`` (reading a trace and its queue configuration), ``run`` (the simulated
run, and Kueue's performance workloads), ``metrics`` (what a report measures), ``eta`` (estimated start times, measured), ``summary`` (the text
for people) and ``plot`` (the SVG).
"""

from .trace import (  # noqa: F401
    CATCH_ALL,
    DEFAULT_BINS,
    REQUIRED_COLUMNS,
    ReplayConfig,
    TENANT_CONFIGMAP,
    TENANT_KEY,
    TraceError,
    TraceJob,
    build_jobs,
    load_replay_config,
    pod_sets_for,
    read_trace,
    read_trace_file,
)
from .run import (  # noqa: F401
    ReplayOptions,
    kueue_perf_text,
    make_simulator,
    replay_kueue_perf,
    replay_trace,
)
from .metrics import (  # noqa: F401
    jain_index,
    nice_bin,
    percentile,
    trace_metrics,
)
from .summary import (  # noqa: F401
    fmt_duration,
    summary_text,
)
from .plot import (  # noqa: F401
    eta_plot_svg,
    plot_svg,
)
from .eta import (  # noqa: F401
    EtaOptions,
    eta_report,
)
