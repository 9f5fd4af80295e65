"""``jupyter gpuqueue replay``: trace reading (errors by line and column), the tenant mapping, the
metrics on small traces with hand-computed figures, the Philly example configuration and the CLI.
Fast: no long replay runs here (those are in benchmarks/)."""

from __future__ import annotations

import io
import json
import os

import pytest

from jupyter_gpuqueue import replay as rp
from jupyter_gpuqueue.cli import run as cli_run
from jupyter_gpuqueue.engine.errors import ManifestError
from jupyter_gpuqueue.engine.model import GPU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHILLY_CONFIG = os.path.join(ROOT, "examples", "philly", "queues.yaml")
PHILLY_TRACE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "philly.csv")

HEADER = "job_id,tenant,submit_time_s,duration_s,num_gpus,gpu_type,status,gpu_time_s,submit_timestamp,src_row\n"


def cq_yaml(name, nominal, cohort="co", reclaim="Never"):
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohort: {cohort}
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: {reclaim}}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: {nominal}}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: jobs, namespace: {name}}}
spec: {{clusterQueue: {name}}}
"""


FLAVOR = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
"""

MAPPING = """---
apiVersion: v1
kind: ConfigMap
metadata: {name: gpuqueue-replay-tenants}
data:
  tenants.yaml: |
    "aa": team-a/jobs
    "bb": team-b/jobs
    "*": other/jobs
"""

CONFIG = FLAVOR + cq_yaml("team-a", 2) + cq_yaml("team-b", 2) + cq_yaml("other", 0) + MAPPING


def trace(rows: str, header: str = HEADER) -> list[rp.TraceJob]:
    return rp.read_trace(io.StringIO(header + rows), "t.csv")


def config(text: str = CONFIG) -> rp.ReplayConfig:
    return rp.load_replay_config([("q.yaml", text)])


# -- reading the trace ---------------------------------------------------------------------------


def test_read_trace_philly_columns():
    jobs = trace("j0,aa,0,100,8,,,800,2017-09-04 10:30:41,1\nj1,bb,5.5,0,1,,,0,x,2\n\n")
    assert [(j.job_id, j.tenant, j.submit_time, j.duration, j.gpus, j.priority, j.line) for j in jobs] == [
        ("j0", "aa", 0.0, 100.0, 8, 0, 2), ("j1", "bb", 5.5, 0.0, 1, 0, 3)]
    with_prio = trace("j0,aa,0,1,1,7\n", header="job_id,tenant,submit_time_s,duration_s,num_gpus,priority\n")
    assert with_prio[0].priority == 7
    assert len(trace("j0,aa,0,1,1\nj1,aa,0,1,1\nj2,aa,0,1,1\n", header="job_id,tenant,submit_time_s,duration_s,num_gpus\n")) == 3


@pytest.mark.parametrize(
    "header,rows,line,column,fragment",
    [
        ("job_id,tenant,submit_time_s,duration_s\n", "", 1, "num_gpus", "missing required column"),
        (HEADER, "j0,aa,0,10,1,,,,,\nj1,aa,x,10,1,,,,,\n", 3, "submit_time_s", "not a number: 'x'"),
        (HEADER, "j0,aa,0,-1,1,,,,,\n", 2, "duration_s", "must be >= 0"),
        (HEADER, "j0,aa,0,1,0,,,,,\n", 2, "num_gpus", "integer >= 1"),
        (HEADER, "j0,aa,0,1,1.5,,,,,\n", 2, "num_gpus", "not an integer"),
        (HEADER, "j0,aa,0,1,1,,,,,\nj0,aa,0,1,1,,,,,\n", 3, "job_id", "repeats line 2"),
        (HEADER, "j0,,0,1,1,,,,,\n", 2, "tenant", "tenant is empty"),
        (HEADER, "j0,aa,0\n", 2, "duration_s", "3 cells"),
        (HEADER, "j0,aa,nan,1,1,,,,,\n", 2, "submit_time_s", "finite"),
        (HEADER, "j0,aa,0,,1,,,,,\n", 2, "duration_s", "empty cell"),
    ],
)
def test_read_trace_errors_name_line_and_column(header, rows, line, column, fragment):
    with pytest.raises(rp.TraceError) as e:
        trace(rows, header)
    assert (e.value.line, e.value.column) == (line, column)
    assert str(e.value).startswith(f"t.csv: line {line}, column {column}: ")
    assert fragment in str(e.value)
    assert e.value.field == column


def test_read_trace_file_missing(tmp_path):
    with pytest.raises(rp.TraceError, match="cannot read trace"):
        rp.read_trace_file(str(tmp_path / "nope.csv"))
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(rp.TraceError, match="line 1: empty trace"):
        rp.read_trace_file(str(tmp_path / "e.csv"))


def test_pod_sets_for_large_jobs():
    shape = lambda n: [(p.name, p.count, p.requests[GPU]) for p in rp.pod_sets_for(n)]  # noqa: E731
    assert shape(1) == [("main", 1, 1)]
    assert shape(8) == [("main", 1, 8)]
    assert shape(16) == [("main", 2, 8)]
    assert shape(12) == [("main", 2, 6)]
    assert shape(128) == [("main", 16, 8)]
    assert shape(20) == [("main", 1, 6), ("main-extra", 2, 7)]  # 3 pods: 6 + 7 + 7
    assert sum(c * g for _, c, g in shape(20)) == 20


# -- the tenant mapping --------------------------------------------------------------------------


def test_mapping_configmap_and_catch_all():
    rc = config()
    assert rc.local_queue_for("aa") == "team-a/jobs"
    assert rc.local_queue_for("zz") == "other/jobs"
    jobs = rp.build_jobs(trace("j0,aa,0,1,16,,,,,\nj1,zz,1,1,1,,,,,\n"), rc)
    wl = jobs[0].workload
    assert (wl.namespace, wl.queue_name, wl.name, wl.creation_time) == ("team-a", "jobs", "j0", 0.0)
    assert [(p.count, p.requests) for p in wl.pod_sets] == [(2, {GPU: 8})]
    assert jobs[1].workload.key == "other/j1" and jobs[1].tag == "zz"


def test_config_in_several_files():
    rc = rp.load_replay_config([("queues.yaml", FLAVOR + cq_yaml("team-a", 2) + cq_yaml("team-b", 2)),
                                ("more.yaml", cq_yaml("other", 0) + MAPPING)])
    assert len(rc.config.cluster_queues) == 3 and rc.local_queue_for("zz") == "other/jobs"
    with pytest.raises(ManifestError, match="more.yaml: document 0: ConfigMap/gpuqueue-replay-tenants: "
                                            "metadata.name: ConfigMap gpuqueue-replay-tenants is given more"):
        rp.load_replay_config([("q.yaml", CONFIG), ("more.yaml", MAPPING + MAPPING)])


def test_mapping_without_configmap_uses_namespace_named_after_tenant():
    rc = config(FLAVOR + cq_yaml("aa", 1))
    assert rc.local_queue_for("aa") == "aa/jobs"
    with pytest.raises(rp.TraceError, match=r"line 3, column tenant: tenant 'bb' has no LocalQueue"):
        rp.build_jobs(trace("j0,aa,0,1,1,,,,,\nj1,bb,0,1,1,,,,,\n"), rc)


def test_mapping_errors():
    with pytest.raises(ManifestError, match=r"q.yaml: document 5: ConfigMap/gpuqueue-replay-tenants: "
                                            r"data\[tenants.yaml\]\[aa\]: Not found: LocalQueue nope/jobs"):
        config(FLAVOR + cq_yaml("team-a", 2) + cq_yaml("other", 0)
               + MAPPING.replace("team-a/jobs", "nope/jobs").replace('    "bb": team-b/jobs\n', ""))
    with pytest.raises(ManifestError, match="a LocalQueue as \"namespace/name\" is required"):
        config(FLAVOR + cq_yaml("team-a", 2) + MAPPING.replace('"aa": team-a/jobs', '"aa": team-a'))
    with pytest.raises(ManifestError, match="Required value: key 'tenants.yaml'"):
        config(FLAVOR + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: gpuqueue-replay-tenants}\ndata: {}\n")
    # Kueue objects are validated as `simulate` does.
    with pytest.raises(ManifestError, match="nominalQuota"):
        config(FLAVOR + cq_yaml("team-a", "-3"))


# -- metrics, hand-computed ----------------------------------------------------------------------


def test_fair_shares_water_filling():
    from jupyter_gpuqueue.replay.metrics import fair_shares

    assert fair_shares(10, {"a": 8, "b": 8}, {"a": 1, "b": 1}) == {"a": 5, "b": 5}
    assert fair_shares(10, {"a": 8, "b": 8}, {"a": 3, "b": 1}) == pytest.approx({"a": 7.5, "b": 2.5})
    assert fair_shares(10, {"a": 2, "b": 20}, {"a": 1, "b": 1}) == {"a": 2, "b": 8}
    # weight 0 (no quota of its own): what the others leave
    assert fair_shares(10, {"a": 4, "z": 20}, {"a": 1, "z": 0}) == {"a": 4, "z": 6}


def test_replay_metrics_hand_computed():
    """team-a and team-b have 2 GPUs each in one cohort; no reclaim.
    aa: j0 (t=0, 2 GPUs, 100 s) → 0–100; j1 (t=0, 2 GPUs, 100 s) borrows b's 2 → 0–100.
    bb: j2 (t=10, 1 GPU, 50 s) waits for quota until 100 (a holds all 4) → 100–150.
    Window 0–150, capacity 4 GPUs.
    team-a: 400 GPU-s used on nominal 2 → 400 / (2 × 150) = 133.3 %; borrowed 2 × 100 s.
    team-b: 50 / 300 = 16.7 %. Cluster: 450 / (4 × 150) = 75 %.
    Delays: 0, 0, 90 → mean 30, median 0, p95 81. Completion: 100, 100, 140.
    Dominant shares (of 4 GPUs), time-averaged over 150 s: aa 400/(4·150) = 2/3, bb 50/600 = 1/12;
    Jain = (2/3 + 1/12)² / (2 · ((2/3)² + (1/12)²)) = 0.5625 / 0.90278 = 0.6231.
    Quota-weighted (both have half the quota): 4/3 and 1/6: the same index."""
    rc = config()
    report = rp.replay_trace(trace("j0,aa,0,100,2,,,,,\nj1,aa,0,100,2,,,,,\nj2,bb,10,50,1,,,,,\n"), rc,
                             options=rp.ReplayOptions(bin_seconds=50, requeue_batch_seconds=0), source="t.csv")
    ov = report["overall"]
    assert (ov["jobs"], ov["admitted"], ov["finished"]) == (3, 3, 3)
    assert ov["queueingDelayS"] == pytest.approx({"mean": 30.0, "median": 0.0, "p95": 81.0})
    assert ov["completionTimeS"]["mean"] == pytest.approx(340 / 3)
    assert ov["gpuUtilization"] == pytest.approx(0.75)
    assert ov["borrowedGpuHours"] == pytest.approx(200 / 3600)
    assert ov["gpuHours"] == pytest.approx(450 / 3600)
    assert ov["jainIndexOfMeanDominantShares"] == pytest.approx(0.5625 / (2 * ((2 / 3) ** 2 + (1 / 12) ** 2)))
    assert ov["jainIndexOfMeanDominantSharesWeighted"] == pytest.approx(ov["jainIndexOfMeanDominantShares"])
    # Contended 10–100 (j2 pending): demand a 4, b 1; fair shares of 4 GPUs, weights 2 and 2:
    # b 1 (its demand), a 3; x = 4/3 and 0 → Jain (4/3)² / (2 · 16/9) = 0.5.
    cf = ov["contendedFairness"]
    assert cf["jainIndexMean"] == pytest.approx(0.5)
    assert cf["contendedHours"] == pytest.approx(90 / 3600)
    assert report["timeline"]["contendedJainIndex"] == [0.5, 0.5, None]
    assert ov["preemptionLossShare"] == 0.0
    a, b = report["clusterQueues"]["team-a"], report["clusterQueues"]["team-b"]
    assert a["gpuUtilization"] == pytest.approx(400 / 300) and b["gpuUtilization"] == pytest.approx(50 / 300)
    assert (a["nominalGpus"], a["admissions"], b["borrowedGpuHours"]) == (2, 2, 0)
    assert report["clusterQueues"]["other"]["gpuUtilization"] is None  # no quota of its own
    ta = report["teams"]["aa"]
    assert (ta["localQueue"], ta["clusterQueue"], ta["jobs"]) == ("team-a/jobs", "team-a", 2)
    assert ta["dominantShare"] == pytest.approx(2 / 3)
    assert report["teams"]["bb"]["queueingDelayS"]["mean"] == 90
    # Timeline, bins of 50 s: cluster 4, 4, 1 GPUs in use of 4; pending: bb waits 10–100.
    tl = report["timeline"]
    assert tl["t"] == [0, 50, 100]
    assert tl["clusterGpuUtilization"] == [1.0, 1.0, 0.25]
    assert tl["clusterQueueGpuUtilization"]["team-a"] == [2.0, 2.0, None] or \
        tl["clusterQueueGpuUtilization"]["team-a"] == [2.0, 2.0, 0.0]
    assert tl["pendingWorkloads"] == [0.8, 1.0, 0.0]
    assert tl["meanQueueingDelayS"] == [30.0, None, None]
    assert report["trace"] == {"source": "t.csv", "jobs": 3, "tenants": 2, "gpuHoursDemanded": 450 / 3600}
    assert report["simulation"]["preemptions"] == 0
    assert set(report["wallTimeS"]) >= {"build", "simulate", "metrics", "total"}
    text = rp.summary_text(report)
    assert "team-a/jobs" in text and "75.0%" in text and "Jain" in text
    svg = rp.plot_svg(report)
    assert svg.startswith("<svg") and "polyline" in svg and "queueing delay" in svg


def test_replay_with_reclaim_counts_preemptions():
    """As above, with reclaimWithinCohort: Any: bb's job (t=10, 1 GPU) reclaims its quota from
    aa's borrowing job j1 (2 GPUs, preempted at 10 after 10 s). j1 needs 2 GPUs: 1 is free until
    bb's job ends at 60; then it borrows again and runs 60–160 from the beginning."""
    text = FLAVOR + cq_yaml("team-a", 2, reclaim="Any") + cq_yaml("team-b", 2, reclaim="Any") + cq_yaml("other", 0) + MAPPING
    report = rp.replay_trace(trace("j0,aa,0,100,2,,,,,\nj1,aa,0,100,2,,,,,\nj2,bb,10,50,1,,,,,\n"), config(text),
                             options=rp.ReplayOptions(requeue_batch_seconds=0))
    assert report["overall"]["preemptions"] == 1
    assert report["teams"]["aa"]["preemptions"] == 1
    assert report["clusterQueues"]["team-a"]["preemptions"] == 1
    assert report["teams"]["bb"]["queueingDelayS"]["mean"] == 0
    assert report["simulation"]["lostGpuHoursToPreemption"] == pytest.approx(2 * 10 / 3600)
    assert report["windowS"]["end"] == 160
    assert report["teams"]["aa"]["completionTimeS"]["mean"] == 130  # (100 + 160) / 2


def test_replay_with_inventory_places_pods():
    """Quota alone would admit everything at once (4 + 4 + 16 GPUs of cohort quota 24); the
    inventory has two nodes of 8 GPUs. j0 (16 GPUs = 2 pods × 8) takes both nodes 0–100; j1 (t=1,
    1 GPU) fits the quota but no device is free: PlacementFailed until 100, then runs 100–110."""
    from jupyter_gpuqueue.inventory import parse_inventory

    inv = parse_inventory({"nodes": [
        {"name": f"n{i}", "gpus": [{"index": g, "uuid": f"GPU-{i}-{g}"} for g in range(8)]} for i in range(2)]})
    text = FLAVOR + cq_yaml("team-a", 4) + cq_yaml("team-b", 4) + cq_yaml("other", 16) + MAPPING
    report = rp.replay_trace(trace("j0,zz,0,100,16,,,,,\nj1,aa,1,10,1,,,,,\n"), config(text), inventory=inv,
                             options=rp.ReplayOptions(requeue_batch_seconds=0))
    assert report["teams"]["zz"]["queueingDelayS"]["mean"] == 0
    assert report["teams"]["aa"]["queueingDelayS"]["mean"] == 99
    assert report["windowS"]["end"] == 110 and report["options"]["inventory"] is True


def test_percentile_and_jain():
    assert rp.percentile([], 50) is None
    assert rp.percentile([5], 95) == 5
    assert rp.percentile([0, 10], 95) == pytest.approx(9.5)
    assert rp.percentile([1, 2, 3, 4], 50) == 2.5
    assert rp.jain_index([1, 1, 1]) == 1.0
    assert rp.jain_index([1, 0, 0, 0]) == 0.25
    assert rp.jain_index([0, 0]) == 1.0 and rp.jain_index([]) is None
    assert rp.nice_bin(109 * 86400) == 43200 and rp.nice_bin(100) == 0.5


# -- the Philly example --------------------------------------------------------------------------


def test_philly_example_config():
    with open(PHILLY_CONFIG, encoding="utf-8") as f:
        rc = rp.load_replay_config([("queues.yaml", f.read())])
    cqs = rc.config.cluster_queues
    assert len(cqs) == 12 and {cq.cohort for cq in cqs.values()} == {"philly"}
    nominal = {n: cq.resource_groups[0].flavors[0].resources[0].nominal_quota for n, cq in cqs.items()}
    assert nominal["philly-6214e9"] == 512 and nominal["philly-ed69ec"] == 64 and nominal["philly-other"] == 0
    assert sum(nominal.values()) == 2816
    assert all(cq.preemption.reclaim_within_cohort == "Any" for cq in cqs.values())
    assert len(rc.tenants) == 11 and rc.default == "philly-other/jobs"
    assert rc.local_queue_for("0e4a51") == "philly-0e4a51/jobs"
    assert rc.local_queue_for("103959") == "philly-103959/jobs"
    assert rc.local_queue_for("23dbec") == "philly-other/jobs"


def test_philly_quarter_config_is_a_quarter():
    with open(PHILLY_CONFIG.replace("queues.yaml", "queues-quarter.yaml"), encoding="utf-8") as f:
        rc = rp.load_replay_config([("queues-quarter.yaml", f.read())])
    nominal = {n: cq.resource_groups[0].flavors[0].resources[0].nominal_quota
               for n, cq in rc.config.cluster_queues.items()}
    assert sum(nominal.values()) == 704 and nominal["philly-6214e9"] == 128
    assert len(rc.tenants) == 11 and rc.default == "philly-other/jobs"


@pytest.mark.skipif(not os.path.exists(PHILLY_TRACE), reason="shared Philly trace not present")
def test_philly_first_jobs_replay():
    with open(PHILLY_CONFIG, encoding="utf-8") as f:
        rc = rp.load_replay_config([("queues.yaml", f.read())])
    jobs = rp.read_trace_file(PHILLY_TRACE, limit=2000)
    report = rp.replay_trace(jobs, rc, source="philly.csv")
    assert report["overall"]["jobs"] == 2000 and report["overall"]["finished"] == 2000
    assert 0 < report["overall"]["gpuUtilization"] < 1
    assert report["overall"]["gpuHours"] == pytest.approx(report["trace"]["gpuHoursDemanded"])


# -- the CLI -------------------------------------------------------------------------------------


def _cli(args):
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(args, out=out, err=err, stdin=io.StringIO())
    return code, out.getvalue(), err.getvalue()


def test_cli_replay_tiny_trace(tmp_path):
    (tmp_path / "t.csv").write_text(HEADER + "j0,aa,0,100,2,,,,,\nj1,aa,0,100,2,,,,,\nj2,bb,10,50,1,,,,,\n")
    (tmp_path / "q.yaml").write_text(CONFIG)
    code, out, err = _cli(["replay", str(tmp_path / "t.csv"), "--config", str(tmp_path / "q.yaml"),
                           "--requeue-batch-seconds", "0"])
    assert code == 0, err
    report = json.loads(out)
    assert report["overall"]["gpuUtilization"] == pytest.approx(0.75)
    assert "Replay of" in err and "cluster-wide GPU utilization 75.0%" in err

    code, out, err = _cli(["replay", str(tmp_path / "t.csv"), "--config", str(tmp_path / "q.yaml"),
                           "-o", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.svg"), "--bin-seconds", "50"])
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["timeline"]["binSeconds"] == 50
    assert (tmp_path / "r.svg").read_text().startswith("<svg")
    assert "Replay of" in out


def test_cli_replay_errors(tmp_path):
    (tmp_path / "bad.csv").write_text(HEADER + "j0,aa,0,100,two,,,,,\n")
    (tmp_path / "q.yaml").write_text(CONFIG)
    code, out, err = _cli(["replay", str(tmp_path / "bad.csv"), "--config", str(tmp_path / "q.yaml")])
    assert code == 2 and "line 2, column num_gpus: not an integer: 'two'" in err and out == ""
    code, _, err = _cli(["replay", str(tmp_path / "bad.csv")])
    assert code == 2 and "--config" in err
    code, _, err = _cli(["replay"])
    assert code == 2 and "TRACE" in err
    code, _, err = _cli(["replay", str(tmp_path / "bad.csv"), "--kueue-perf", "baseline"])
    assert code == 2 and "--kueue-perf takes no TRACE" in err
    code, _, err = _cli(["replay", "--kueue-perf", "nope"])
    assert code == 2 and "invalid choice" in err
    (tmp_path / "bad.yaml").write_text(FLAVOR + "---\nkind: ClusterQueue\n")
    code, _, err = _cli(["replay", str(tmp_path / "bad.csv"), "--config", str(tmp_path / "bad.yaml")])
    assert code == 2 and "bad.yaml" in err


def test_cli_kueue_perf_reports_beside_kueue(monkeypatch, tmp_path):
    """The CLI path of --kueue-perf on a tiny stand-in scenario (the real runs are benchmarks)."""
    from jupyter_gpuqueue.engine import kueue_perf

    base = kueue_perf.BASELINE
    tiny = kueue_perf.Scenario(
        name="baseline", cohorts=2, queues_per_cohort=2, nominal_quota=20, borrowing_limit=100,
        reclaim_within_cohort="Any", within_cluster_queue="LowerPriority",
        classes=(kueue_perf.WorkloadClass("small", 30, 100, 200, 50, 1),
                 kueue_perf.WorkloadClass("medium", 10, 500, 500, 100, 5),
                 kueue_perf.WorkloadClass("large", 5, 1200, 1000, 200, 20)),
        published=base.published, source=base.source,
    )
    monkeypatch.setitem(kueue_perf.SCENARIOS, "baseline", tiny)
    code, out, err = _cli(["replay", "--kueue-perf", "baseline", "-o", str(tmp_path / "k.json")])
    assert code == 0, err
    report = json.loads((tmp_path / "k.json").read_text())
    assert report["workloads"] == 4 * 45 and report["clusterQueues"] == 4
    ours = report["ours"]
    assert ours["workloads"] == {"small": 120, "medium": 40, "large": 20} and ours["unadmitted"] == 0
    assert 0 < ours["clusterQueueUsagePercent"] <= 100
    assert set(ours["timeToAdmissionS"]) == {"small", "medium", "large"}
    assert report["kueue"]["timeToAdmissionS"] == {"large": 16.5, "medium": 76.8, "small": 215.5}
    assert report["simulation"]["completions"] == 180
    assert "ClusterQueue usage" in out and "55.9%" in out and "time to admission small" in out


# -- estimated start times (--eta) -----------------------------------------------------------------

ETA_TRACE = "".join(f"j{i},{'aa' if i % 3 else 'bb'},{i * 5},{100 + 37 * (i % 4)},{1 + i % 2},,,,,\n" for i in range(24))


def test_replay_eta_block_shape_and_oracle_exact_without_later_arrivals():
    rc = config()
    eta = rp.EtaOptions(runtime_model="oracle", sample=1, details=True)
    report = rp.replay_trace(trace(ETA_TRACE), rc, options=rp.ReplayOptions(requeue_batch_seconds=0), eta=eta)
    b = report["eta"]
    assert b["runtimeModel"] == "oracle" and b["sampled"] == 1
    assert b["jobsWaited"] > 5 and b["jobsSampled"] == b["jobsWaited"]
    assert b["coverage"] == 1.0
    for k in ("medianAbsErrorSeconds", "p90AbsErrorSeconds", "withinFactor2", "rangeCoverage", "byPoint",
              "baselines", "errorsSeconds", "wallTimeS"):
        assert k in b
    assert set(b["byPoint"]) == {"submission", "25%", "50%", "75%"}
    assert set(b["baselines"]) == {"rate", "oracle"}
    assert b["baselines"]["rate"]["coverage"] is not None
    # with the oracle model the model is the oracle baseline
    assert b["medianAbsErrorSeconds"] == b["baselines"]["oracle"]["medianAbsErrorSeconds"]
    # the last job's estimates come after every arrival: exact
    last = max(b["estimates"], key=lambda d: d["t"])
    assert last["model"] == pytest.approx(last["actual"])
    assert len(b["estimates"]) == 4 * b["jobsSampled"]


def test_replay_eta_sampling_and_history():
    rc = config()
    eta = rp.EtaOptions(runtime_model="history", sample=3)
    report = rp.replay_trace(trace(ETA_TRACE), rc, eta=eta)
    b = report["eta"]
    assert b["sampled"] == 3 and b["jobsSampled"] == len(range(0, b["jobsWaited"], 3))
    assert b["coverage"] == 1.0 and b["baselines"]["oracle"]["coverage"] == 1.0


def test_replay_eta_calibrated_range_and_blend():
    rc = config()
    eta = rp.EtaOptions(runtime_model="history", sample=1, details=True, calibration={"min_samples": 3})
    b = rp.replay_trace(trace(ETA_TRACE), rc, eta=eta)["eta"]
    assert b["coverage"] == 1.0 and 0.0 <= b["rangeCoverage"] <= 1.0
    assert b["calibration"]["observed"] > 0 and b["calibration"]["rateBlend"] == 0.2
    assert b["simulationOnly"]["coverage"] == 1.0
    for d in b["estimates"]:
        assert d["early"] <= d["model"] <= d["late"]
        assert d["t"] <= d["early"]  # a wait is never negative
    # calibration off: the simulation's start and the three-draw range, as before
    b0 = rp.replay_trace(trace(ETA_TRACE), rc, eta=rp.EtaOptions(runtime_model="history", sample=1, details=True,
                                                                 calibrate=False))["eta"]
    assert "calibration" not in b0 and "simulationOnly" not in b0
    assert [d["raw"] for d in b0["estimates"]] == [d["raw"] for d in b["estimates"]]
    assert all(d["model"] == d["raw"] for d in b0["estimates"])


def test_median_ratio_pairs_each_jobs_errors_and_says_how_sure_it_is():
    """replay/metrics.median_ratio: the ratio of the medians, a paired bootstrap interval, the
    share of resamples at most the target; deterministic."""
    from jupyter_gpuqueue.replay.metrics import median_ratio

    exact = median_ratio([(0.4 * x, x) for x in range(1, 101)], target=0.5)
    assert exact["ratio"] == pytest.approx(0.4) and exact["jobs"] == 100
    assert exact["interval90"] == [pytest.approx(0.4), pytest.approx(0.4)]  # paired: every resample says 0.4
    assert exact["atMostTarget"] == 1.0
    # unpaired noise: the model's errors a shuffled copy of 0.5 x the rate's -- the ratio 0.5, a wide interval
    rates = [float(x) for x in range(1, 121)]
    model = [0.5 * rates[(7 * i) % 120] for i in range(120)]
    r = median_ratio(list(zip(model, rates)), target=0.5)
    assert r["ratio"] == pytest.approx(0.5)
    lo, hi = r["interval90"]
    assert lo < 0.45 and hi > 0.55 and 0.2 < r["atMostTarget"] < 0.8
    assert median_ratio(list(zip(model, rates)), target=0.5) == r  # a fixed seed: the same figures
    assert median_ratio([]) is None and median_ratio([(1.0, 0.0)]) is None


def test_cli_replay_eta(tmp_path):
    (tmp_path / "t.csv").write_text(HEADER + ETA_TRACE)
    (tmp_path / "q.yaml").write_text(CONFIG)
    code, out, err = _cli(["replay", str(tmp_path / "t.csv"), "--config", str(tmp_path / "q.yaml"), "--eta",
                           "--runtime-model", "declared", "--eta-sample", "2", "--eta-plot", str(tmp_path / "e.svg")])
    assert code == 0, err
    assert (tmp_path / "e.svg").read_text().startswith("<svg")
    b = json.loads(out)["eta"]
    assert b["runtimeModel"] == "declared" and b["sampled"] == 2
    assert "estimated start times" in err and "baseline rate" in err
    vs = b["vsRate"]  # the model against the rate baseline, with how sure that is
    assert vs["jobs"] == b["jobsSampled"] and vs["target"] == 0.5
    assert vs["interval90"][0] <= vs["ratio"] <= vs["interval90"][1]
    assert "model / rate median error" in err
    code, _, err = _cli(["replay", str(tmp_path / "t.csv"), "--config", str(tmp_path / "q.yaml"),
                         "--runtime-model", "oracle"])
    assert code == 2 and "--eta" in err


def test_sweep_history_a_new_sweep_runs_like_the_teams_last_one_and_at_least_as_long_as_its_siblings():
    """SweepHistoryRuntime (replay/eta.py): a job whose burst has too few finished runs answers from
    the team's previous sweep (from its 5th job in the burst on), conditioned on its
    longest-running sibling; a burst's first jobs and single jobs answer from the team's mix;
    the share of a burst still running answers from the previous sweep too."""
    from jupyter_gpuqueue.engine.model import PodSet, Workload
    from jupyter_gpuqueue.replay.eta import BURST_LABEL, RANK_LABEL, SweepHistoryRuntime, make_model

    def job(name, burst, rank):
        w = Workload(namespace="team", name=name, queue_name="q", pod_sets=[PodSet("main", 1, {GPU: 1})])
        w.labels = {BURST_LABEL: burst, RANK_LABEL: str(rank)}
        return w

    m = make_model("history", {}, 86400.0, sweeps=True)
    assert isinstance(m, SweepHistoryRuntime) and m.sibling_floor
    assert not isinstance(make_model("history", {}, 86400.0), SweepHistoryRuntime)
    for i in range(40):  # the team's mix: a quarter fail within a minute, the rest 1-11 h
        m.observe(job(f"mix{i}", f"single{i}", 1), 30.0 if i % 4 == 0 else 3600.0 * (1 + i % 11))
    for i in range(25):  # the team's last sweep: 25 jobs of 50-62 min
        m.observe(job(f"old{i}", "sweep1", i + 1), 3000.0 + 30.0 * (i % 25))
    m.set_running([])
    new = job("new7", "sweep2", 7)
    # the 7th job of a new sweep with no finished run: the last sweep's runs (50-62 min)
    for u in (0.05, 0.5, 0.95):
        assert 3000.0 <= m.quantile(new, 0.0, u) <= 3720.0
    # its 1st job, and a single job: the team's mix (a quarter under a minute)
    assert m.quantile(job("new1", "sweep2", 1), 0.0, 0.1) == 30.0
    # a running sibling at 55 min: the others run at least that long
    m.set_running([(job("new2", "sweep2", 2), 3300.0)])
    assert m.quantile(new, 0.0, 0.05) >= 3300.0
    assert m.quantile(job("new3", "sweep2", 3), 600.0, 0.05) >= 3300.0  # running 10 min: floored too
    # floor_quantile 0.5: the median of the running siblings' elapsed times, so that one
    # long-running job of a burst (here 40 h) does not floor the others
    running = [(job(f"new{r}", "sweep2", r), el) for r, el in ((2, 600.0), (3, 3300.0), (4, 144000.0))]
    m.sibling_floor_quantile = 0.5
    m.set_running(running)
    assert 3300.0 <= m.quantile(new, 0.0, 0.05) <= 3720.0
    m.sibling_floor_quantile = 1.0  # the default: the longest-running
    m.set_running(running)
    assert m.quantile(new, 0.0, 0.05) >= 144000.0
    # once the new sweep has 5 finished runs of its own, they answer
    for i in range(5):
        m.observe(job(f"new-done{i}", "sweep2", 10 + i), 600.0)
    m.set_running([])
    assert m.quantile(new, 0.0, 0.5) == 600.0
    # a sweep whose first 5 finished runs failed at once (30 s) while 20 run on (50 min so far):
    # up to its share of finished runs (5 of 25) the failures answer; beyond it, the share still
    # running, the previous sweep's runs longer than 50 min — not a Pareto tail at 30 s
    third = [job(f"third{i}", "sweep3", i + 1) for i in range(30)]
    for w in third[:5]:
        m.observe(w, 30.0)
    m.set_running([(w, 3000.0) for w in third[5:25]])
    m.failures = False  # (the failure runs, below, would read the 20 running jobs as a run of successes)
    assert m.quantile(third[29], 0.0, 0.1) == 30.0
    for u in (0.3, 0.5, 0.9):
        assert 3000.0 < m.quantile(third[29], 0.0, u) <= 3720.0
    assert 3000.0 < m.quantile(third[10], 3000.0, 0.5) <= 3720.0  # a running one: the same, conditioned


def test_sweep_history_a_sweeps_failures_come_in_runs():
    """SweepHistoryRuntime's failure runs (replay/eta.py): a pending job fails at once as often as
    the last 10 lower-ranked jobs of its burst whose outcome is known did (with one
    pseudo-observation at the model's own share): after a run of failures it is drawn as one for
    most quantiles, after a run of successes — finished, or running past 5 min — for few; a job
    with no known lower-ranked outcome, or a model with no failures to draw, answers as before."""
    from jupyter_gpuqueue.engine.model import PodSet, Workload
    from jupyter_gpuqueue.replay.eta import BURST_LABEL, RANK_LABEL, make_model

    def job(burst, rank):
        w = Workload(namespace="team", name=f"{burst}-{rank}", queue_name="q", pod_sets=[PodSet("main", 1, {GPU: 1})])
        w.labels = {BURST_LABEL: burst, RANK_LABEL: str(rank)}
        return w

    def model(failures=True):
        m = make_model("history", {}, 86400.0, sweeps=True, sweep_failures=failures)
        for i in range(40):  # the team's mix: a quarter fail within a minute, the rest 1-11 h
            m.observe(job(f"single{i}", 1), 30.0 if i % 4 == 0 else 3600.0 * (1 + i % 11))
        return m

    def quantiles(m, w):
        return [m.quantile(w, 0.0, u) for u in (0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95)]

    # ranks 1-10 ran 50 min, then 11-20 failed within 30 s: the model says half fail; the runs say
    # the next one fails too (p = (10 + 0.5) / 11)
    on, off = model(), model(False)
    for m in (on, off):
        for r in range(1, 21):
            m.observe(job("sweep", r), 3000.0 if r <= 10 else 30.0)
        m.set_running([])
    nxt = job("sweep", 30)
    assert off.quantile(nxt, 0.0, 0.9) == 3000.0 and off.quantile(nxt, 0.0, 0.3) == 30.0
    assert on.quantile(nxt, 0.0, 0.9) == 30.0 and on.quantile(nxt, 0.0, 0.3) == 30.0
    assert on.quantile(nxt, 0.0, 0.97) == 3000.0  # a success stays possible
    qs = quantiles(on, nxt)
    assert qs == sorted(qs)
    # ranks 1-10 failed, then 11-20 ran: the next one runs (p = 0.5 / 11)
    on, off = model(), model(False)
    for m in (on, off):
        for r in range(1, 21):
            m.observe(job("sweep", r), 30.0 if r <= 10 else 3000.0)
        m.set_running([])
    assert off.quantile(nxt, 0.0, 0.1) == 30.0
    assert on.quantile(nxt, 0.0, 0.1) > 300.0 and on.quantile(nxt, 0.0, 0.03) == 30.0
    # a job ranked among the failures reads the outcomes below it only: job 15 follows ranks 5-14
    # (6 failures, 4 runs): more failures than job 30 sees
    assert on.quantile(job("sweep", 15), 0.0, 0.3) == 30.0 and on.quantile(nxt, 0.0, 0.3) > 300.0
    # running jobs past 5 min count as runs; younger ones say nothing yet
    on = model()
    for r in range(1, 11):
        on.observe(job("sweep", r), 30.0)
    on.set_running([(job("sweep", r), 1000.0) for r in range(11, 21)])
    assert on.quantile(nxt, 0.0, 0.2) > 300.0
    on.set_running([(job("sweep", r), 100.0) for r in range(11, 21)])
    assert on.quantile(nxt, 0.0, 0.2) == 30.0
    # the first job of a burst (nothing known below it) and a running job: as without
    on, off = model(), model(False)
    for m in (on, off):
        m.set_running([(job("fresh", 1), 600.0)])
    assert quantiles(on, job("fresh", 1)) == quantiles(off, job("fresh", 1))
    assert on.quantile(job("fresh", 1), 600.0, 0.5) == off.quantile(job("fresh", 1), 600.0, 0.5)


def test_sweep_history_a_running_sweeps_level_is_fitted_to_its_running_jobs():
    """SweepHistoryRuntime's level (replay/eta.py): a running job of a sweep with too few finished
    runs draws from the sweep's level — the previous sweep's a priori, moved by how long its jobs
    have run and by its first finished runs — so one long-running sibling no longer makes the
    others run as long (the floor did), a sweep whose jobs all outran the previous one's is read as
    a longer one, and a pending job, a sweep's first jobs and one job far beyond its sweep answer
    as before."""
    from jupyter_gpuqueue.engine.model import PodSet, Workload
    from jupyter_gpuqueue.replay.eta import BURST_LABEL, RANK_LABEL, make_model

    def job(name, burst, rank):
        w = Workload(namespace="team", name=name, queue_name="q", pod_sets=[PodSet("main", 1, {GPU: 1})])
        w.labels = {BURST_LABEL: burst, RANK_LABEL: str(rank)}
        return w

    def models(median=True):
        out = []
        for level in (True, False):
            m = make_model("history", {}, 86400.0, sweeps=True, sweep_level=level, sweep_level_median=median)
            for i in range(40):  # the team's mix: a quarter fail within a minute, the rest 1-11 h
                m.observe(job(f"mix{i}", f"single{i}", 1), 30.0 if i % 4 == 0 else 3600.0 * (1 + i % 11))
            for i in range(25):  # the team's last sweep: 25 jobs of 50-62 min
                m.observe(job(f"old{i}", "sweep1", i + 1), 3000.0 + 30.0 * (i % 25))
            out.append(m)
        return out

    fitted, floored = models()
    sweep = [job(f"new{r}", "sweep2", r) for r in range(1, 31)]
    # 19 jobs running 5-20 min, none finished, and its 2nd job for 40 h already
    running = [(sweep[i], 300.0 + 50.0 * i) for i in range(2, 21)] + [(sweep[1], 144000.0)]
    for m in (fitted, floored):
        m.set_running(running)
    young = sweep[9]  # rank 10, running 13 min 20 s
    assert 3000.0 <= fitted.quantile(young, 800.0, 0.5) <= 4500.0  # the last sweep's level
    assert floored.quantile(young, 800.0, 0.5) >= 144000.0  # floored by its 40-h sibling
    # the sweep's running jobs end together: each at its median given the level and what it has run,
    # whatever its quantile (sweep_level_median, the default) ...
    qs = [fitted.quantile(young, 800.0, u) for u in (0.05, 0.5, 0.95)]
    assert qs[0] == qs[1] == qs[2]
    # ... or drawn: every quantile a run time no shorter than what it has run, rising with u
    drawn, _ = models(median=False)
    drawn.set_running(running)
    qs = [drawn.quantile(young, 800.0, u) for u in (0.05, 0.5, 0.95)]
    assert 800.0 <= qs[0] < qs[1] < qs[2] < 3 * 3600.0
    assert qs[1] == fitted.quantile(young, 800.0, 0.5)
    # a pending job of the sweep, its first jobs (rank < 5) and the 40-h one (beyond 2 spreads
    # above the level) answer as before
    assert fitted.quantile(sweep[25], 0.0, 0.5) == floored.quantile(sweep[25], 0.0, 0.5)
    assert fitted.quantile(sweep[2], 1000.0, 0.5) == floored.quantile(sweep[2], 1000.0, 0.5)
    assert fitted.quantile(sweep[1], 144000.0, 0.5) == floored.quantile(sweep[1], 144000.0, 0.5)

    # a sweep whose 20 running jobs have all run 70-80 min, past the last sweep's 62: a longer one
    fitted, _ = models()
    fitted.set_running([(sweep[i], 4200.0 + 30.0 * i) for i in range(20)])
    assert 4800.0 < fitted.quantile(sweep[10], 4500.0, 0.5) < 3 * 3600.0
    # its first finished runs over 5 min say where the level is: 100 min
    for i in range(3):
        fitted.observe(job(f"new-done{i}", "sweep2", 40 + i), 6000.0)
    fitted.set_running([(sweep[i], 4200.0 + 30.0 * i) for i in range(20)])
    assert 5400.0 < fitted.quantile(sweep[10], 4500.0, 0.5) < 7200.0
    with pytest.raises(ValueError):
        make_model("history", {}, 86400.0, sweeps=True, sweep_spread=0.0)
