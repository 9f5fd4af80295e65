"""Scenarios in the format ``jupyter gpuqueue simulate`` reads: ``scenarios/<name>.yaml`` (plus the
shared ``_base.yaml``) and the expected fields of some workloads in ``<name>.expected.yaml``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jupyter_gpuqueue.engine.simulate import simulate_text

HERE = Path(__file__).parent / "scenarios"
SCENARIOS = sorted(p.stem for p in HERE.glob("*.yaml") if not p.stem.startswith("_") and not p.stem.endswith(".expected"))


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario(name):
    texts = [("_base.yaml", (HERE / "_base.yaml").read_text()), (f"{name}.yaml", (HERE / f"{name}.yaml").read_text())]
    out = simulate_text(texts)
    expected = yaml.safe_load((HERE / f"{name}.expected.yaml").read_text())
    for key, fields in expected.items():
        got = out["workloads"][key]
        for field, value in fields.items():
            assert got[field] == value, (key, field, got)
    assert out["cycles"] >= 1


def test_demo_cluster_simulates():
    demo = Path(__file__).resolve().parents[2] / "jupyter_gpuqueue" / "demo" / "cluster.yaml"
    jobs = """
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: team-a-queue}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""
    out = simulate_text([("cluster.yaml", demo.read_text()), ("jobs.yaml", jobs)])
    w = out["workloads"]["team-a/train"]
    assert w == {"state": "admitted", "clusterQueue": "team-a-cq",
                 "podSets": {"main": {"count": 1, "flavors": {"nvidia.com/gpu": "nvidia-a100"}}},
                 "evictions": 0, "positionInClusterQueue": None, "positionInLocalQueue": None, "reason": None}
