"""Cost reports from the ledger's usage intervals, to the cent, on constructed histories
(real SQLite files): month boundaries, preemption and resumption, MIG slices, open intervals,
idle capacity, utilization, CSV."""

from __future__ import annotations

import calendar
import csv
import io

import pytest

from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.ledger import Ledger, Prices
from jupyter_gpuqueue.ledger import reports

HOUR = 3600.0
PRICES = Prices()  # A100 2.21, H100 3.75, L4 0.81, default 2.00 USD per GPU-hour; MIG by 1/7 slices


def t(y, mo, d, h=0, mi=0):
    """UTC wall time → seconds since the epoch."""
    return float(calendar.timegm((y, mo, d, h, mi, 0)))


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/reports.db")
    yield led
    led.close()


def job(ledger, uid, *, ns="team-a", owner="alice", created=None, state="Succeeded"):
    ledger.add_workload({
        "uid": uid, "namespace": ns, "name": uid, "owner": owner, "local_queue": f"{ns}-queue",
        "cluster_queue": f"{ns}-cq", "state": state, "spec": {"podSets": []},
        "created_at": created if created is not None else t(2026, 10, 1),
    })


def use(ledger, uid, flavor, resource, qty, start, end=None):
    """An admission of ``uid``: one interval of ``qty`` × ``resource`` in ``flavor``, priced as the
    service prices it (Prices.gpu_equivalent / usd_per_hour), closed at ``end`` unless None."""
    ledger.open_interval(uid, flavor, resource, qty, PRICES.gpu_equivalent(resource, qty),
                         PRICES.usd_per_hour(flavor, resource, qty), start)
    if end is not None:
        ledger.close_intervals(uid, end)


def cents(x):
    return round(x + 1e-12, 2)


# ----------------------------------------------------------------------------------------- periods


def test_months_and_periods_are_utc_and_bad_input_names_the_field():
    assert reports.parse_month("2026-11") == (t(2026, 11, 1), t(2026, 12, 1))
    assert reports.parse_month("2026-12") == (t(2026, 12, 1), t(2027, 1, 1))
    assert reports.parse_period(None, None, None, t(2026, 11, 22, 17)) == (t(2026, 11, 1), t(2026, 12, 1), "2026-11")
    assert reports.parse_period(None, "2026-11-03", "2026-11-05", 0)[:2] == (t(2026, 11, 3), t(2026, 11, 5))
    for args, field in [(("2026-13", None, None), "month"), (("26-11", None, None), "month"),
                        (("2026-11", "2026-11-01", None), "month"), ((None, "2026-02-30", None), "from"),
                        ((None, None, "2026-11-05"), "from"), ((None, "2026-11-05", "2026-11-05"), "to")]:
        with pytest.raises(ValidationError) as e:
            reports.parse_period(*args, now=t(2026, 11, 22))
        assert e.value.field == field, (args, e.value)


# ----------------------------------------------------------------------------------------- arithmetic


def test_a_job_spanning_a_month_boundary_is_split_at_midnight_utc(ledger):
    # 2 × A100 (2 × 2.21 = 4.42 USD/h) from Oct 31 22:00 to Nov 1 03:00: 2 h in October, 3 h in November.
    job(ledger, "span")
    use(ledger, "span", "nvidia-a100", "nvidia.com/gpu", 2, t(2026, 10, 31, 22), t(2026, 11, 1, 3))
    now = t(2026, 11, 22)
    ivs = ledger.report_intervals(now)
    oct_, nov = reports.parse_month("2026-10"), reports.parse_month("2026-11")
    (j_oct,) = reports.job_report(ivs, *oct_)
    (j_nov,) = reports.job_report(ivs, *nov)
    assert (cents(j_oct["costUsd"]), j_oct["gpuHours"]) == (8.84, pytest.approx(4.0))
    assert (cents(j_nov["costUsd"]), j_nov["gpuHours"]) == (13.26, pytest.approx(6.0))
    assert j_oct["costUsd"] + j_nov["costUsd"] == pytest.approx(22.10, abs=1e-9)
    months = reports.month_report(ivs, t(2026, 1, 1), now)
    assert [(m["month"], cents(m["costUsd"]), m["jobs"]) for m in months] == [("2026-10", 8.84, 1), ("2026-11", 13.26, 1)]
    # The ledger's own SQL-side summary agrees with the report module.
    (summary,) = ledger.usage_summary(now, since=nov[0], until=nov[1])
    assert summary["costUsd"] == pytest.approx(j_nov["costUsd"], abs=1e-9)


def test_preempted_and_resumed_job_pays_for_its_admissions_not_the_gap(ledger):
    # H100 3.75 USD/h: admitted 10:00, preempted 11:30, requeued, admitted again 12:00, done 13:00 → 2.5 h.
    job(ledger, "resumed", ns="team-b", owner="bob")
    use(ledger, "resumed", "nvidia-h100", "nvidia.com/gpu", 1, t(2026, 11, 3, 10), t(2026, 11, 3, 11, 30))
    use(ledger, "resumed", "nvidia-h100", "nvidia.com/gpu", 1, t(2026, 11, 3, 12), t(2026, 11, 3, 13))
    (j,) = reports.job_report(ledger.report_intervals(t(2026, 11, 22)), *reports.parse_month("2026-11"))
    assert j["costUsd"] == pytest.approx(9.375, abs=1e-9) and cents(j["costUsd"]) == 9.38
    assert j["gpuHours"] == pytest.approx(2.5)
    assert (j["firstStart"], j["lastEnd"]) == (t(2026, 11, 3, 10), t(2026, 11, 3, 13))
    assert j["flavors"] == ["nvidia-h100"] and j["running"] is False


def test_mig_slices_cost_their_share_of_the_gpus_compute_slices(ledger):
    # A 1g.10gb slice is 1/7 of an A100 (2.21/7 USD/h): 7 hours of it cost one A100-hour, 2.21.
    assert PRICES.usd_per_hour("nvidia-a100-mig", "nvidia.com/mig-1g.10gb", 1) == pytest.approx(2.21 / 7)
    assert PRICES.gpu_equivalent("nvidia.com/mig-3g.40gb", 1) == pytest.approx(3 / 7)
    job(ledger, "slice")
    use(ledger, "slice", "nvidia-a100-mig", "nvidia.com/mig-1g.10gb", 1, t(2026, 11, 2, 0), t(2026, 11, 2, 7))
    job(ledger, "big-slice")
    use(ledger, "big-slice", "nvidia-a100-mig", "nvidia.com/mig-3g.40gb", 1, t(2026, 11, 2, 0), t(2026, 11, 2, 2))
    rows = {j["uid"]: j for j in reports.job_report(ledger.report_intervals(t(2026, 11, 22)),
                                                    *reports.parse_month("2026-11"))}
    assert rows["slice"]["costUsd"] == pytest.approx(2.21, abs=1e-9) and rows["slice"]["gpuHours"] == pytest.approx(1.0)
    assert rows["big-slice"]["costUsd"] == pytest.approx(2 * 3 / 7 * 2.21, abs=1e-9)
    assert cents(rows["big-slice"]["costUsd"]) == 1.89
    (flavor,) = [f for f in reports.flavor_report(ledger.report_intervals(t(2026, 11, 22)),
                                                  *reports.parse_month("2026-11"), {}, PRICES.price)]
    assert flavor["flavor"] == "nvidia-a100-mig" and cents(flavor["costUsd"]) == cents(2.21 + 6 / 7 * 2.21)


def test_running_work_counts_as_it_accrues(ledger):
    job(ledger, "live", state="Running")
    use(ledger, "live", "nvidia-l4", "nvidia.com/gpu", 4, t(2026, 11, 22, 9))  # 4 × 0.81 = 3.24 USD/h, open
    now = t(2026, 11, 22, 10, 15)
    (j,) = reports.job_report(ledger.report_intervals(now), t(2026, 11, 1), now)
    assert cents(j["costUsd"]) == 4.05 and j["running"] is True  # 1.25 h × 3.24
    assert ledger.cost_usd("live", now) == pytest.approx(j["costUsd"], abs=1e-9)


def test_team_report_has_totals_jobs_top_five_and_utilization_only_where_sampled(ledger):
    nov = reports.parse_month("2026-11")
    for i in range(6):  # six jobs of team-a, 1..6 hours of one A100
        job(ledger, f"a{i}", owner="alice" if i % 2 else "carol")
        use(ledger, f"a{i}", "nvidia-a100", "nvidia.com/gpu", 1, t(2026, 11, 5), t(2026, 11, 5, i + 1))
    job(ledger, "b0", ns="team-b", owner="bob")
    use(ledger, "b0", "nvidia-h100", "nvidia.com/gpu", 2, t(2026, 11, 6), t(2026, 11, 6, 1))  # 7.50
    ivs = ledger.report_intervals(t(2026, 11, 22))
    a, b, c = reports.team_report(ivs, *nov, ledger.utilization(*nov), namespaces=["team-c"])
    assert a["namespace"] == "team-a" and a["jobs"] == 6 and a["gpuHours"] == pytest.approx(21.0)
    assert cents(a["costUsd"]) == cents(21 * 2.21) == 46.41
    assert [j["uid"] for j in a["topJobs"]] == ["a5", "a4", "a3", "a2", "a1"]
    assert cents(a["topJobs"][0]["costUsd"]) == 13.26
    assert a["avgGpuUtilization"] is None  # no NVML here: absent, never invented
    assert (b["namespace"], cents(b["costUsd"]), b["jobs"]) == ("team-b", 7.5, 1)
    assert (c["namespace"], c["costUsd"], c["jobs"], c["topJobs"]) == ("team-c", 0.0, 0, [])
    # NVML samples (as the service records them where NVML answers): a sample-weighted mean.
    ledger.add_utilization_samples([("a5", "GPU-1", t(2026, 11, 5, 1), 90.0), ("a5", "GPU-1", t(2026, 11, 5, 2), 70.0),
                                    ("a4", "GPU-2", t(2026, 11, 5, 1), 20.0),
                                    ("a4", "GPU-2", t(2026, 10, 5, 1), 0.0)])  # October: not in this report
    a, _b, _c = reports.team_report(ivs, *nov, ledger.utilization(*nov), namespaces=["team-c"])
    assert a["avgGpuUtilization"] == pytest.approx(60.0)
    assert reports.job_report(ivs, *nov, ledger.utilization(*nov))[0]["avgGpuUtilization"] == pytest.approx(80.0)
    with pytest.raises(ValidationError) as e:
        ledger.add_utilization_samples([("a5", "GPU-1", t(2026, 11, 5), 101.0)])
    assert e.value.field == "percent"
    users = reports.user_report(ivs, *nov)
    assert [(u["owner"], u["jobs"]) for u in users] == [("alice", 3), ("carol", 3), ("bob", 1)]
    assert {(u["owner"], u["namespace"]): cents(u["costUsd"]) for u in users} == {
        ("alice", "team-a"): cents((2 + 4 + 6) * 2.21), ("carol", "team-a"): cents((1 + 3 + 5) * 2.21),
        ("bob", "team-b"): 7.5}


def test_idle_capacity_is_capacity_times_time_minus_use(ledger):
    # 6 whole A100s for November (720 h = 4320 GPU-hours); one job used 2 GPUs for 10 h.
    job(ledger, "x")
    use(ledger, "x", "nvidia-a100", "nvidia.com/gpu", 2, t(2026, 11, 10), t(2026, 11, 10, 10))
    nov = reports.parse_month("2026-11")
    rows = reports.idle_capacity(ledger.report_intervals(t(2026, 12, 5)), *nov,
                                 {"nvidia-a100": 6.0, "nvidia-l4": 4.0}, PRICES.price)
    a100, l4 = rows
    assert (a100["capacityGpuHours"], a100["usedGpuHours"], a100["idleGpuHours"]) == (4320.0, 20.0, 4300.0)
    assert cents(a100["idleCostUsd"]) == cents(4300 * 2.21) == 9503.0
    assert (l4["idleGpuHours"], cents(l4["idleCostUsd"])) == (2880.0, cents(2880 * 0.81))


def test_daily_spend_splits_at_midnight_and_lists_every_day(ledger):
    job(ledger, "night")
    use(ledger, "night", "nvidia-h100", "nvidia.com/gpu", 1, t(2026, 11, 1, 23), t(2026, 11, 2, 2))
    days = reports.daily_spend(ledger.report_intervals(t(2026, 11, 4)), t(2026, 11, 1), t(2026, 11, 4))
    assert [(d["date"], cents(d["costUsd"])) for d in days] == [("2026-11-01", 3.75), ("2026-11-02", 7.5),
                                                                ("2026-11-03", 0.0)]
    assert days[1]["byNamespace"] == {"team-a": pytest.approx(7.5)}


def test_csv_export_has_a_header_and_money_to_the_cent(ledger):
    job(ledger, "resumed", ns="team-b", owner="bob")
    use(ledger, "resumed", "nvidia-h100", "nvidia.com/gpu", 1, t(2026, 11, 3, 10), t(2026, 11, 3, 12, 30))
    nov = reports.parse_month("2026-11")
    text = reports.to_csv(reports.job_report(ledger.report_intervals(t(2026, 11, 22)), *nov),
                          reports.CSV_COLUMNS["jobs"])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows == [{"namespace": "team-b", "name": "resumed", "owner": "bob", "state": "Succeeded",
                     "flavors": "nvidia-h100", "gpuHours": "2.5000", "costUsd": "9.38",
                     "firstStart": "2026-11-03T10:00:00Z", "lastEnd": "2026-11-03T12:30:00Z",
                     "avgGpuUtilization": "", "uid": "resumed"}]


# ------------------------------------------------------------------- idle capacity of a live service


def test_idle_capacity_counts_from_when_the_inventory_was_first_known_even_after_a_restart(tmp_path):
    """A queue started on the 22nd reports its capacity idle for the 15 minutes it has existed,
    not since the 1st of the month; restarted an hour later it still counts from its first start
    (stored in the ledger), and a month before it existed has no idle capacity at all."""
    from servicetools import service_factory, stop_jobs

    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    demo = __import__("jupyter_gpuqueue.demo", fromlist=["x"]).__path__[0]
    cluster = open(f"{demo}/cluster.yaml", encoding="utf-8").read()
    inventory = open(DEMO_INVENTORY_PATH, encoding="utf-8").read()
    make = service_factory(tmp_path, cluster, inventory)
    clock = [t(2026, 11, 22, 17)]
    first_start = clock[0]
    try:
        svc = make()
        svc.conf.clock = lambda: clock[0]
        svc.tick()  # the loop's first tick: the inventory is known from now on
        capacity = svc.costs.capacity_by_flavor()
        assert capacity and svc.costs.capacity_since() == first_start

        def idle(service, **period):
            rows = service.report("idle", **period)["items"]
            return {r["flavor"]: r for r in rows}

        clock[0] += 15 * 60
        rows = idle(svc)
        assert set(rows) == set(capacity)
        for flavor, cap in capacity.items():
            assert rows[flavor]["capacityGpuHours"] == pytest.approx(cap * 0.25)
            assert rows[flavor]["idleGpuHours"] == pytest.approx(cap * 0.25)
            assert rows[flavor]["idleCostUsd"] == pytest.approx(cap * 0.25 * rows[flavor]["pricePerGpuHourUsd"])
        total = sum(r["idleCostUsd"] for r in rows.values())
        assert total < 50  # 15 minutes of the demo's GPUs, not three weeks (the issue's $20,807.87)
        flavors = {r["flavor"]: r for r in svc.report("flavors")["items"]}
        assert {f: r["idleGpuHours"] for f, r in flavors.items()} == pytest.approx(
            {f: r["idleGpuHours"] for f, r in rows.items()})

        # A restart an hour later: still counted from the first start.
        svc.ledger.close()
        clock[0] += 3600
        svc = make()
        svc.conf.clock = lambda: clock[0]
        assert svc.costs.capacity_since() == first_start  # read from the ledger, before any tick
        svc.tick()
        rows = idle(svc)
        for flavor, cap in capacity.items():
            assert rows[flavor]["capacityGpuHours"] == pytest.approx(cap * 1.25)
        assert svc.ledger.setting("inventory.firstKnownAt") == first_start

        # Before the queue existed nothing was idle.
        assert all(r["capacityGpuHours"] == 0 for r in idle(svc, month="2026-10").values())
    finally:
        stop_jobs(make.services)
        for s in make.services:
            s.ledger.close()


def test_ledger_settings_keep_the_first_value_and_name_bad_input(ledger):
    assert ledger.setting("inventory.firstKnownAt") is None
    assert ledger.setting_default("inventory.firstKnownAt", 100.0, at=100.0) == 100.0
    assert ledger.setting_default("inventory.firstKnownAt", 200.0, at=200.0) == 100.0  # the first wins
    assert ledger.setting("inventory.firstKnownAt") == 100.0
    for key, value, field in [("", 1, "key"), ("k" * 129, 1, "key"), ("k", float("nan"), "value"), ("k", object(), "value")]:
        with pytest.raises(ValidationError) as e:
            ledger.setting_default(key, value, at=1.0)
        assert e.value.field == field
    assert ledger.setting("k") is None
