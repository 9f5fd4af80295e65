"""``jupyter gpuqueue bench k8s`` runs from the command line as BENCHMARKS.md says, on a control
plane of its own: every workload is admitted, its Job created and run to completion, with two
API requests per workload (the dry run and the create) and no error. Figures are not checked.

Each run boots a control plane of its own (~11 CPU s here), so ``--repeat``'s side-by-side table
is checked on the two runs below rather than with a third and fourth control plane."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_gpuqueue.bench.k8s import format_k8s_runs

pytestmark = pytest.mark.kube


def _bench(tmp_path, backlog: bool) -> tuple[dict, str]:
    out = tmp_path / f"k8s-{backlog}.json"
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", "k8s", "--n", "24", "--nodes", "2",
           "--gpus-per-node", "12", "--command", "true", "--json", str(out)] + (["--backlog"] if backlog else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_bench_k8s_runs_every_workload_with_and_without_a_backlog(control_plane, tmp_path):
    runs = []
    for backlog in (False, True):
        r, stdout = _bench(tmp_path, backlog)
        assert r["cpuSeconds"]["queue service + clients"] > 0 and r["polls"] > 0 and r["loopCpuSeconds"] > 0
        assert r["succeeded"] == 24 and r["states"] == {"Succeeded": 24}
        assert r["errorCount"] == 0 and r["apiRequestsPerWorkload"] == 2.0
        assert r["submitToResumed"]["count"] == 24 and r["admissionsPerSecond"] > 0
        assert r["nodeAgent"]["started"] == 24 and r["backlog"] is backlog
        assert "admissions/s" in stdout
        runs.append(r)
    table = format_k8s_runs(runs)  # what --repeat prints after its runs
    assert table.startswith("2 runs: admissions/s") and "run 2:" in table and "median" in table
    assert "queue service + clients" in table
