"""``jupyter gpuqueue bench k8s`` runs from the command line as BENCHMARKS.md says, on a control
plane of its own: every workload is admitted, its Job created and run to completion, with two
API requests per workload (the dry run and the create) and no error. Figures are not checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.kube


@pytest.mark.parametrize("backlog", [False, True])
def test_bench_k8s_runs_every_workload(control_plane, tmp_path, backlog):
    out = tmp_path / "k8s.json"
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", "k8s", "--n", "24", "--nodes", "2",
           "--gpus-per-node", "12", "--command", "true", "--json", str(out)] + (
               ["--backlog", "--repeat", "2"] if backlog else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    if backlog:  # --repeat 2: both runs, each on a control plane of its own, then side by side
        assert len(r) == 2 and r[0]["succeeded"] == 24 and "2 runs: admissions/s" in proc.stdout
        r = r[1]
    assert r["cpuSeconds"]["queue service + clients"] > 0 and r["polls"] > 0 and r["loopCpuSeconds"] > 0
    assert r["succeeded"] == 24 and r["states"] == {"Succeeded": 24}
    assert r["errorCount"] == 0 and r["apiRequestsPerWorkload"] == 2.0
    assert r["submitToResumed"]["count"] == 24 and r["admissionsPerSecond"] > 0
    assert r["nodeAgent"]["started"] == 24 and r["backlog"] is backlog
    assert "admissions/s" in proc.stdout
