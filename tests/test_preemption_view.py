"""Preemption made visible (issue 15 item 7): a victim's view says how often it was preempted,
by whom, why, and what its lost runs cost; kept across restarts; another team's preemptor is
shown by its team only unless an admin looks. Real QueueService, SQLite ledger, local processes."""

from __future__ import annotations

import sys
import time

import pytest
from servicetools import service_factory, stop_jobs
from test_service import CLUSTER, INVENTORY, state, wait

PY = sys.executable
PREEMPTING = CLUSTER.replace(
    "metadata: {name: cq-one}\nspec:\n",
    "metadata: {name: cq-one}\nspec:\n  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}\n")


@pytest.fixture
def make(tmp_path):
    build = service_factory(tmp_path, PREEMPTING, INVENTORY, default_local_queue="one/q", stop_grace_seconds=0.5,
                            prices={"gpu-a": 3.6})
    yield build
    stop_jobs(build.services, grace=0.2)


def test_a_victim_shows_who_preempted_it_why_and_what_its_lost_run_cost(make):
    svc = make()
    svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(60)"], "flavor": "gpu-a",
                "gpus": 2, "priorityClass": "low"}, user="alice")
    wait(svc, lambda: state(svc, "one", "low") == "Running")
    time.sleep(0.5)  # a run worth something
    assert svc.get_workload("one", "low")["preemptions"] is None
    svc.submit({"name": "high", "command": [PY, "-c", "import time; time.sleep(30)"], "flavor": "gpu-a",
                "priorityClass": "high"}, user="alice")
    wait(svc, lambda: svc.get_workload("one", "low")["evictions"] == 1)
    wait(svc, lambda: state(svc, "one", "high") == "Running")
    low = svc.get_workload("one", "low")
    p = low["preemptions"]
    assert p["count"] == 1 and p["last"]["by"] == "one/high" and p["last"]["reason"] == "InClusterQueue"
    assert p["last"]["words"] == "priority"
    # 2 GPUs × $3.6/h for at least 0.5 s.
    assert p["lostCostUsd"] == pytest.approx(svc.ledger.cost_usd(low["uid"], svc.clock()), abs=1e-6)
    assert p["lostCostUsd"] >= 2 * 3.6 * 0.5 / 3600
    assert p["summary"].startswith("preempted 1× by one/high (priority) · ") and p["summary"].endswith("of runs lost")
    # The reason shown moves on (it waits for quota again); the preemption stays, across a restart.
    svc.ledger.close()
    again = make()
    assert again.get_workload("one", "low")["preemptions"]["last"]["by"] == "one/high"


def test_another_teams_preemptor_is_shown_by_its_team_unless_an_admin_looks(make):
    svc = make()
    # team two borrows cq-one's idle gpu-a; team one reclaims it.
    svc.submit({"name": "borrower", "command": [PY, "-c", "import time; time.sleep(60)"], "flavor": "gpu-a",
                "gpus": 2, "localQueue": "two/q", "priorityClass": "low"}, user="bob")
    wait(svc, lambda: state(svc, "two", "borrower") == "Running")
    svc.submit({"name": "mine", "command": [PY, "-c", "import time; time.sleep(30)"], "flavor": "gpu-a",
                "gpus": 1, "priorityClass": "low"}, user="alice")
    wait(svc, lambda: svc.get_workload("two", "borrower")["evictions"] == 1)
    p = svc.get_workload("two", "borrower")["preemptions"]
    assert p["last"]["by"] is None and p["last"]["byNamespace"] == "one"
    assert "by a one workload" in p["summary"]
    full = svc.views.reveal(svc.get_workload("two", "borrower"))
    assert full["preemptions"]["last"]["by"] == "one/mine"


def test_a_jobs_timeline_has_its_runs_their_cost_and_the_preemption(make):
    svc = make()
    svc.submit({"name": "low", "command": [PY, "-c", "import time; time.sleep(1.5)"], "flavor": "gpu-a",
                "gpus": 2, "priorityClass": "low"}, user="alice")
    wait(svc, lambda: state(svc, "one", "low") == "Running")
    svc.submit({"name": "high", "command": [PY, "-c", "import time; time.sleep(0.3)"], "flavor": "gpu-a",
                "priorityClass": "high"}, user="alice")
    wait(svc, lambda: state(svc, "one", "low") == "Succeeded", timeout=30)
    t = svc.timeline("one", "low")
    types = [e["type"] for e in t["events"]]
    assert types[0] == "Submitted" and types[-1] == "Succeeded"
    assert types.count("Admitted") == 2 and "Preempted" in types
    assert types.index("Preempted") < len(types) - 1 - types[::-1].index("Admitted")  # preempted, then admitted again
    assert [r["outcome"] for r in t["runs"]] == ["preempted", "succeeded"]
    assert t["runs"][0]["flavors"] == ["2 × gpu-a"]
    total = sum(r["costUsd"] for r in t["runs"])
    assert total == pytest.approx(t["workload"]["costUsd"], abs=1e-5)
    assert t["utilization"] == []  # no NVML here: nothing invented
