"""`jupyter gpuqueue list`'s STARTS column: the estimated start of a Pending workload (issue 14)."""

from __future__ import annotations

from jupyter_gpuqueue.cli.text import starts, workloads_table

NOW = 1_800_000_000.0


def view(**kw):
    base = {"namespace": "team-a", "name": "train", "state": "Pending", "createdAt": NOW - 60,
            "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": "2"}}],
            "positionInClusterQueue": 0, "costUsd": 0.0, "estimatedCostUsd": 1.0}
    base.update(kw)
    return base


def test_starts_column():
    assert starts(view(estimatedStartAt=NOW + 720, estimatedStartRange={"early": NOW + 300, "late": NOW + 1800}),
                  NOW) == "~12m (5m-30m)"
    assert starts(view(estimatedStartAt=NOW + 5), NOW) == "now"
    assert starts(view(estimatedStartAt=None, estimateReason="BudgetExceeded"), NOW) == "BudgetExceeded"
    assert starts(view(state="Running", estimatedStartAt=None), NOW) == "-"
    table = workloads_table([view(estimatedStartAt=NOW + 7200)], now=NOW)
    header, row = table.splitlines()[:2]
    assert "STARTS" in header and "~2h00m" in row
