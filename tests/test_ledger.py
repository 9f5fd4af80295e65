"""The ledger and the price list. The ``ledger`` fixture runs each test on a SQLite file and on a
PostgreSQL database (``tests/pgtools.py``; skipped where PostgreSQL is absent)."""

from __future__ import annotations

import sqlite3

import pytest

from jupyter_gpuqueue.errors import Conflict, NotFound, ValidationError
from jupyter_gpuqueue.ledger import DEFAULT_PRICES, Ledger, Prices

HOUR = 3600.0


def wl(uid="u1", namespace="team-a", name="train-1", **kw):
    rec = {
        "uid": uid,
        "namespace": namespace,
        "name": name,
        "owner": "alice",
        "local_queue": "team-a-queue",
        "cluster_queue": "team-a-cq",
        "priority_class": "experiment-normal",
        "priority": 10000,
        "state": "Pending",
        "reason": "Pending",
        "spec": {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
                 "command": ["python", "train.py", "--epochs", "5"], "env": {"SEED": "1"},
                 "maxRuntimeSeconds": 600},
        "created_at": 1_700_000_000.5,
    }
    rec.update(kw)
    return rec


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        led = Ledger(f"sqlite:///{tmp_path}/sub/dir/gpuqueue.db")
    else:
        led = Ledger(request.getfixturevalue("postgres_url"))
    yield led
    led.close()


def test_round_trip_decodes_json_and_defaults(ledger):
    ledger.add_workload(wl())
    row = ledger.get_workload("u1")
    assert row["spec"]["command"] == ["python", "train.py", "--epochs", "5"]
    assert row["spec"]["podSets"][0]["requests"] == {"nvidia.com/gpu": 1}
    assert row["created_at"] == 1_700_000_000.5
    assert row["admission"] is None and row["run"] is None and row["exit_code"] is None
    assert row["evictions"] == 0 and row["priority"] == 10000
    assert ledger.find_workload("team-a", "train-1") == row
    assert ledger.find_workload("team-a", "nope") is None
    assert ledger.get_workload("nope") is None

    adm = {"clusterQueue": "team-a-cq", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "nvidia-a100"}}]}
    ledger.update_workload("u1", state="Admitted", admission=adm, admitted_at=1_700_000_010.0, reason="Admitted")
    row = ledger.get_workload("u1")
    assert row["state"] == "Admitted" and row["admission"] == adm and row["admitted_at"] == 1_700_000_010.0
    ledger.update_workload("u1", admission=None)
    assert ledger.get_workload("u1")["admission"] is None


def test_list_workloads_filters_by_state_and_orders_by_creation(ledger):
    ledger.add_workload(wl("u2", name="b", created_at=20.0, state="Running"))
    ledger.add_workload(wl("u1", name="a", created_at=10.0))
    ledger.add_workload(wl("u3", name="c", created_at=30.0, state="Succeeded"))
    assert [r["uid"] for r in ledger.list_workloads()] == ["u1", "u2", "u3"]
    assert [r["uid"] for r in ledger.list_workloads(["Pending", "Running"])] == ["u1", "u2"]
    assert ledger.list_workloads(states=[]) == []
    with pytest.raises(ValidationError) as e:
        ledger.list_workloads(["Queued"])
    assert e.value.field == "state"


def test_duplicate_name_in_namespace_is_conflict_and_changes_nothing(ledger):
    ledger.add_workload(wl())
    with pytest.raises(Conflict) as e:
        ledger.add_workload(wl(uid="u2", owner="bob"))
    assert e.value.field == "name" and e.value.status == 409
    assert [r["uid"] for r in ledger.list_workloads()] == ["u1"]
    # the same name in another namespace is a different workload
    ledger.add_workload(wl(uid="u3", namespace="team-b"))
    with pytest.raises(Conflict) as e:
        ledger.add_workload(wl(uid="u1", name="other"))
    assert e.value.field == "uid"


def test_bad_fields_name_the_field(ledger):
    with pytest.raises(ValidationError) as e:
        ledger.add_workload({k: v for k, v in wl().items() if k != "owner"})
    assert e.value.field == "owner"
    with pytest.raises(ValidationError) as e:
        ledger.add_workload(wl(state="Queued"))
    assert e.value.field == "state"
    with pytest.raises(ValidationError) as e:
        ledger.add_workload(wl(colour="red"))
    assert e.value.field == "colour"
    assert ledger.list_workloads() == []
    ledger.add_workload(wl())
    with pytest.raises(ValidationError) as e:
        ledger.update_workload("u1", exit_code="3")
    assert e.value.field == "exit_code"
    with pytest.raises(NotFound):
        ledger.update_workload("missing", state="Running")
    assert ledger.get_workload("u1")["exit_code"] is None


def test_cost_of_one_gpu_hour_and_open_interval(ledger):
    prices = Prices()
    ledger.add_workload(wl())
    t0 = 1_700_000_000.0
    ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 2, prices.gpu_equivalent("nvidia.com/gpu", 2),
                         prices.usd_per_hour("nvidia-a100", "nvidia.com/gpu", 2), t0)
    # open: counts up to now; 90 minutes of 2 × A100 at 2.21 = 6.63 USD, 3 GPU-hours
    assert ledger.cost_usd("u1", t0 + 1.5 * HOUR) == pytest.approx(6.63, abs=0.005)
    assert ledger.gpu_hours("u1", t0 + 1.5 * HOUR) == pytest.approx(3.0)
    assert len(ledger.open_intervals()) == 1
    ledger.close_intervals("u1", t0 + HOUR)
    assert ledger.open_intervals() == []
    # closed: "now" no longer matters
    assert ledger.cost_usd("u1", t0 + 10 * HOUR) == pytest.approx(4.42, abs=0.005)
    assert ledger.gpu_hours("u1", t0 + 10 * HOUR) == pytest.approx(2.0)


def test_mig_slice_costs_a_seventh(ledger):
    prices = Prices()
    ledger.add_workload(wl())
    res = "nvidia.com/mig-1g.10gb"
    eq = prices.gpu_equivalent(res, 1)
    usd = prices.usd_per_hour("nvidia-a100-mig", res, 1)
    assert eq == pytest.approx(1 / 7)
    assert usd == pytest.approx(2.21 / 7)
    ledger.open_interval("u1", "nvidia-a100-mig", res, 1, eq, usd, 0.0)
    ledger.close_intervals("u1", 7 * HOUR)
    # 7 hours of a 1g slice = 1 GPU-hour = 2.21 USD
    assert ledger.cost_usd("u1", 7 * HOUR) == pytest.approx(2.21, abs=0.005)
    assert ledger.gpu_hours("u1", 7 * HOUR) == pytest.approx(1.0)


def test_preempted_and_resumed_job_pays_both_intervals_only(ledger):
    ledger.add_workload(wl())
    ledger.add_workload(wl("u2", name="other"))
    # first run: 30 min on an H100, preempted
    ledger.open_interval("u1", "nvidia-h100", "nvidia.com/gpu", 1, 1.0, 3.75, 0.0)
    ledger.open_interval("u2", "nvidia-l4", "nvidia.com/gpu", 1, 1.0, 0.81, 0.0)
    ledger.close_intervals("u1", 0.5 * HOUR)
    # requeued; resumed 2 h later on an L4 for 45 min (still running)
    ledger.open_interval("u1", "nvidia-l4", "nvidia.com/gpu", 1, 1.0, 0.81, 2.5 * HOUR)
    now = 3.25 * HOUR
    expected = 3.75 * 0.5 + 0.81 * 0.75  # 1.875 + 0.6075 = 2.4825
    assert round(ledger.cost_usd("u1", now), 2) == round(expected, 2) == 2.48
    assert ledger.gpu_hours("u1", now) == pytest.approx(1.25)
    assert [i["end"] for i in ledger.intervals("u1")] == [0.5 * HOUR, None]
    costs = ledger.costs_usd(["u1", "u2", "never-ran"], now)
    assert costs == pytest.approx({"u1": expected, "u2": 0.81 * 3.25, "never-ran": 0.0})
    ledger.close_intervals("u1", now)
    ledger.close_intervals("u1", now + HOUR)  # nothing left open: no change
    assert ledger.cost_usd("u1", now + 5 * HOUR) == pytest.approx(expected)


def test_usage_summary_per_team_and_flavor_in_a_window(ledger):
    ledger.add_workload(wl())
    ledger.add_workload(wl("u2", namespace="team-b", name="x"))
    ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, 2.21, 0.0)
    ledger.close_intervals("u1", 2 * HOUR)
    ledger.open_interval("u2", "nvidia-l4", "nvidia.com/gpu", 2, 2.0, 1.62, HOUR)
    rows = ledger.usage_summary(now=3 * HOUR, group_by=["namespace"], since=HOUR, until=3 * HOUR)
    assert rows == [
        {"namespace": "team-a", "gpuHours": pytest.approx(1.0), "costUsd": pytest.approx(2.21)},
        {"namespace": "team-b", "gpuHours": pytest.approx(4.0), "costUsd": pytest.approx(3.24)},
    ]
    with pytest.raises(ValidationError) as e:
        ledger.usage_summary(now=0, group_by=["colour"])
    assert e.value.field == "group_by"


def test_transaction_is_atomic(ledger):
    ledger.add_workload(wl())
    with pytest.raises(RuntimeError):
        with ledger.transaction():
            ledger.update_workload("u1", state="Admitted", admitted_at=5.0)
            ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, 2.21, 5.0)
            # inside, the transaction sees its own writes
            assert ledger.get_workload("u1")["state"] == "Admitted"
            raise RuntimeError("backend failed to start")
    assert ledger.get_workload("u1")["state"] == "Pending"
    assert ledger.intervals() == []

    with ledger.transaction():
        ledger.update_workload("u1", state="Admitted", admitted_at=5.0)
        iid = ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, 2.21, 5.0)
        # a Conflict inside a transaction leaves the transaction usable
        with pytest.raises(Conflict):
            ledger.add_workload(wl("u9"))
        ledger.add_workload(wl("u2", name="second"))
    assert ledger.get_workload("u1")["state"] == "Admitted"
    assert [i["id"] for i in ledger.intervals("u1")] == [iid]
    assert ledger.get_workload("u2") is not None and ledger.get_workload("u9") is None


def test_reopening_the_file_keeps_everything_and_wal_is_on(tmp_path):
    path = tmp_path / "data" / "gpuqueue.db"
    led = Ledger(f"sqlite:///{path}")
    assert led.journal_mode() == "wal"
    led.add_workload(wl())
    led.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, 2.21, 0.0)
    # a second process reading the same file while the first is open sees the acknowledged write
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT name FROM workloads").fetchall() == [("train-1",)]
    finally:
        con.close()
    led.close()
    led2 = Ledger(str(path))  # a plain path works too
    try:
        assert led2.get_workload("u1")["spec"]["env"] == {"SEED": "1"}
        assert led2.cost_usd("u1", HOUR) == pytest.approx(2.21)
        with led2.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
    finally:
        led2.close()


def test_interval_arguments_are_checked(ledger):
    with pytest.raises(NotFound):
        ledger.open_interval("nope", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, 2.21, 0.0)
    ledger.add_workload(wl())
    with pytest.raises(ValidationError) as e:
        ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", -1, 1.0, 2.21, 0.0)
    assert e.value.field == "quantity"
    with pytest.raises(ValidationError) as e:
        ledger.open_interval("u1", "nvidia-a100", "nvidia.com/gpu", 1, 1.0, float("nan"), 0.0)
    assert e.value.field == "usd_per_hour"
    assert ledger.intervals() == []


def test_prices():
    p = Prices()
    assert p.per_flavor == DEFAULT_PRICES
    assert p.price("nvidia-a100") == 2.21 and p.price("a100-40gb") == 1.65
    assert p.price("nvidia-h100") == 3.75 and p.price("l4") == 0.81
    assert p.price("nvidia-a100-mig") == 2.21  # a MIG flavor is priced like its base flavor
    assert p.price("tpu-v5") == 2.0 and p.price("unknown-mig") == 2.0
    assert p.gpu_equivalent("nvidia.com/gpu", 3) == 3
    assert p.gpu_equivalent("nvidia.com/mig-3g.40gb", 2) == pytest.approx(6 / 7)
    assert p.gpu_equivalent("cpu", 4000) == 0 and p.gpu_equivalent("memory", 2**30) == 0
    assert p.usd_per_hour("nvidia-h100", "nvidia.com/gpu", 2) == pytest.approx(7.5)
    assert p.usd_per_hour("nvidia-a100", "cpu", 8000) == 0
    assert p.to_json() == {"currency": "USD", "flavors": DEFAULT_PRICES, "default": 2.0, "migSlicesPerGpu": 7}
    assert Prices.from_json(p.to_json()).to_json() == p.to_json()
    custom = Prices({"gold": 10.0}, default=1.0)
    assert custom.price("gold") == 10.0 and custom.price("nvidia-a100") == 1.0
    with pytest.raises(ValidationError) as e:
        Prices({"gold": -1})
    assert e.value.field == "flavors.gold"
    with pytest.raises(ValidationError) as e:
        p.gpu_equivalent("nvidia.com/mig-big", 1)
    assert e.value.field == "resource"


def test_acknowledged_write_survives_a_crashed_process(tmp_path):
    import os
    import subprocess
    import sys
    import textwrap

    import jupyter_gpuqueue

    root = os.path.dirname(os.path.dirname(os.path.abspath(jupyter_gpuqueue.__file__)))
    db = tmp_path / "crash.db"
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {root!r})
        from jupyter_gpuqueue.ledger import Ledger
        led = Ledger({str(db)!r})
        led.add_workload({wl()!r})
        print("acknowledged", flush=True)
        os._exit(9)  # no close(), no cleanup: as if the server crashed
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 9 and "acknowledged" in out.stdout, out.stderr
    led = Ledger(str(db))
    try:
        assert led.find_workload("team-a", "train-1")["owner"] == "alice"
    finally:
        led.close()
