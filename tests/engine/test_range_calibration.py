"""The range calibrated on the service's own estimates at submission (engine/range_calibration.py):
split-conformal levels, censored scores of the workloads still waiting."""

from __future__ import annotations

import math

import pytest

from jupyter_gpuqueue.engine.range_calibration import RangeCalibration, conformal_levels, km_quantiles


def test_kaplan_meier_quantiles_without_censoring_are_the_empirical_ones():
    xs = [float(i) for i in range(1, 21)]
    assert km_quantiles(xs, [], (0.05, 0.5, 0.95, 1.0)) == [1.0, 10.0, 19.0, 20.0]
    # Censored values above every exact one leave the CDF short: the largest value seen answers
    # the upper level, and they still count in the risk set below it.
    assert km_quantiles([1.0, 2.0], [5.0, 6.0], (0.05, 0.9)) == [1.0, 6.0]
    with pytest.raises(ValueError):
        km_quantiles([], [], (0.5,))


def test_conformal_levels_take_the_extremes_on_few_scores():
    assert conformal_levels(10, 0.9) == (0.0, 1.0)  # ⌈11 · 0.95⌉ = 11 > 10: the largest score
    lo, hi = conformal_levels(99, 0.9)
    assert hi == pytest.approx(95 / 99) and lo == pytest.approx(5 / 99)


def test_a_workload_still_waiting_past_its_estimate_widens_the_range_before_it_starts():
    """The late bound must not wait for the late ones to start: 30 workloads estimated right
    (started on time) and 10 that have been waiting three times their estimate (censored)."""
    cal = RangeCalibration(offset_s=10.0, min_samples=20)
    assert not cal.ranges(0.0).calibrated
    assert cal.ranges(0.0).adjust(20.0) == (20.0, 0.0, 30.0 * 4 - 10.0)  # ×/÷ 4 in offset space
    for i in range(30):
        cal.submitted(f"ok{i}", float(i), 20.0)
        cal.started(f"ok{i}", float(i) + 20.0 + (i % 5 - 2))
    only_started = cal.ranges(100.0)
    assert only_started.calibrated and only_started.adjust(20.0)[2] < 25.0  # ~ their spread
    for i in range(10):
        cal.submitted(f"late{i}", 40.0 + i, 20.0)
    now = 40.0 + 10 + 60.0  # each has waited ≥ 60 s of its 20
    _, early, late = cal.ranges(now).adjust(20.0)
    assert late >= 60.0 - 1e-6  # at least as late as they have waited already
    assert early <= 20.0 <= late
    cal.started("late0", now + 100.0)
    assert cal.samples() == 31 and cal.pending() == 9
    cal.gone("late1")  # cancelled: forgotten, neither exact nor censored any more
    cal.started("late1", now + 200.0)
    assert cal.samples() == 31 and cal.pending() == 8


def test_bad_settings_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="coverage"):
        RangeCalibration(coverage=1.0)
    with pytest.raises(ValueError, match="offset_s"):
        RangeCalibration(offset_s=0.0)
    assert math.isfinite(RangeCalibration().ranges(0.0).adjust(0.0)[2])
