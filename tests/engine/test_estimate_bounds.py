"""Point, range and waitingFor of a published estimate never contradict each other
(engine/estimate_bounds.py, issue 35): property test over generated queues, run-time histories,
calibrations and admission histories."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuqueue.engine.estimate import RUNNING, estimate_starts
from jupyter_gpuqueue.engine.estimate_bounds import bound_estimate, finish_estimates, stretch_cap
from jupyter_gpuqueue.engine.range_calibration import RangeCalibration
from jupyter_gpuqueue.engine.runtime_model import DeclaredRuntime, HistoryRuntime
from jupyter_gpuqueue.engine.scheduler import Scheduler, SchedulerOptions
from jupyter_gpuqueue.engine.wait_rate import rate_wait

from builders import make_config, make_cq, wl


def _keys(w):
    return (("all",),)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_point_range_and_waiting_for_never_contradict(data):
    n_cq = data.draw(st.integers(1, 3))
    cqs = [make_cq(f"q{i}", [("a100", data.draw(st.integers(1, 4)))], cohort="c") for i in range(n_cq)]
    s = Scheduler(make_config(*cqs, flavors=("a100",)), None, SchedulerOptions())
    n = data.draw(st.integers(1, 14))
    declared = {}
    for i in range(n):
        q = f"q{data.draw(st.integers(0, n_cq - 1))}"
        w = wl(q, f"j{i}", data.draw(st.integers(1, 3)), t=float(i), prio=data.draw(st.integers(0, 1)))
        if data.draw(st.booleans()):
            w.maximum_execution_time_seconds = data.draw(st.integers(5, 300))
        declared[w.key] = w.maximum_execution_time_seconds
        s.add_workload(w)
        s.run_until_stable(float(i))
    now = float(n) + data.draw(st.floats(0, 200))
    model = HistoryRuntime(_keys, fallback=DeclaredRuntime(default_seconds=120.0))
    for _ in range(data.draw(st.integers(0, 30))):
        model.observe(wl("q0", "h", 1), data.draw(st.floats(1, 400)))
    cal = RangeCalibration(min_samples=data.draw(st.sampled_from([1, 5, 20])))
    for i in range(data.draw(st.integers(0, 40))):  # past estimates at submission: started, or still waiting
        at = data.draw(st.floats(0, now))
        cal.submitted(i, at, data.draw(st.floats(0, 500)))
        if data.draw(st.booleans()):
            cal.started(i, at + data.draw(st.floats(0, 500)))
    ranges = cal.ranges(now)
    admissions = {f"q{i}": sorted(data.draw(st.lists(st.floats(0, now), max_size=12))) for i in range(n_cq)}
    results = estimate_starts(s, now, model, ranges=False)
    raw = {k: e.start_at for k, e in results.items()}
    finish_estimates(s, now, results, model=model, calibration=ranges, admissions=admissions,
                     rate_blend=data.draw(st.sampled_from([0.0, 0.2, 0.8])), min_admissions=1,
                     observed_since=data.draw(st.sampled_from([None, 0.0, now - 5.0])))
    for k, e in results.items():
        if e.start_at is None:
            continue
        assert now <= e.early <= e.start_at <= e.late, (k, e)
        if e.waiting_for:
            last = max(w.expected_end for w in e.waiting_for)
            gap = max(0.0, max(raw[k], now) - last)
            assert e.start_at <= max(last, now) + gap + 1e-6, (k, e, raw[k])
            if not ranges.calibrated and all(w.kind == RUNNING and declared.get(w.key) for w in e.waiting_for):
                # Without calibration data: no later than the blockers' declared ends + gap, stretched ×2
                cap = max(s.admit_time[w.key] + declared[w.key] for w in e.waiting_for)
                bound = stretch_cap(now, max(cap, last, now) + gap, ranges.offset_s)
                assert e.late <= bound + 1e-6, (k, e)
        if ranges.calibrated:  # the range holds at least what the calibration says
            _, early, late = ranges.adjust(max(0.0, e.start_at - now))
            assert e.late >= now + late - 1e-6 and e.early <= now + early + 1e-6, (k, e)


def test_late_bound_without_data_is_the_blockers_declared_end_stretched_not_a_factor():
    """"up to 25 min" behind a job that must end within 5 (issue 35): without calibration data,
    the late bound is the running blocker's admission + its declared maximum (plus what comes
    after it), stretched ×2 in offset space — not the fallback's ×4 of the wait."""
    s = Scheduler(make_config(make_cq("a", [("a100", 1)]), flavors=("a100",)), None, SchedulerOptions())
    run = wl("a", "run", 1, t=0.0)
    run.maximum_execution_time_seconds = 300
    s.add_workload(run)
    s.run_until_stable(0.0)
    s.add_workload(wl("a", "wait", 1, t=10.0))
    s.run_until_stable(10.0)
    model = HistoryRuntime(_keys, fallback=DeclaredRuntime())  # no history: it runs its declared 5 min
    results = estimate_starts(s, 10.0, model, ranges=False)
    e = results["ns-a/wait"]
    gap = e.start_at - e.waiting_for[0].expected_end  # what the simulation puts after its end
    finish_estimates(s, 10.0, results, model=model, calibration=RangeCalibration().ranges(10.0), admissions={},
                     rate_blend=0.2)
    assert e.waiting_for[0].key == "ns-a/run"
    assert 0.0 <= gap <= 2.0
    wait = e.start_at - 10.0
    assert wait == pytest.approx(290.0 + gap, abs=1e-6)
    assert e.late - 10.0 <= (300.0 + gap - 10.0 + 60.0) * 2 - 60.0 + 1e-6  # ≈ 11 min: the end, stretched
    assert e.late - 10.0 < (wait + 60.0) * 4 - 60.0  # not the fallback's ×4
    assert 10.0 <= e.early <= e.start_at <= e.late


def test_blending_never_pushes_the_point_past_what_it_waits_for():
    point, early, late = bound_estimate(100.0, 130.0, 400.0, 100.0, 900.0, [120.0])
    assert point == 130.0  # the last blocker's end + the 10 s the simulation put after it
    assert early == 100.0 and late == 900.0
    point, early, late = bound_estimate(100.0, 130.0, 50.0, 20.0, 60.0, [])
    assert (point, early, late) == (100.0, 100.0, 100.0)  # nothing in the past


def test_rate_counted_over_the_time_observed():
    adm = [100.0 + 60.0 * i for i in range(5)]  # five admissions a minute apart
    now = 400.0
    assert rate_wait(0, adm, now, 5) == 3600.0 / 5  # over the whole hour: 12 min for the first
    assert rate_wait(0, adm, now, 5, observed_since=100.0) == 300.0 / 5  # over the 5 min observed
    assert math.isclose(rate_wait(2, adm, now, 5, observed_since=390.0), 3 * 300.0 / 5)  # seeded earlier
