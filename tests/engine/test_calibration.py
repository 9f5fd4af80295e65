"""Online calibration of estimated waits (engine/calibration.py)."""

from __future__ import annotations

import math
import random

import pytest

from jupyter_gpuqueue.engine.calibration import ALL, WaitCalibration


def test_without_data_the_estimate_passes_through_with_a_wide_range():
    c = WaitCalibration(min_samples=5, fallback_factor=4.0)
    p, lo, hi = c.adjust("cq", 600.0)
    assert p == 600.0 and lo < 600.0 < hi
    assert c.adjust("cq", 0.0)[0] == 0.0 and c.adjust("cq", 0.0)[1] == 0.0


def test_a_biased_estimator_is_corrected_and_the_range_covers_the_chosen_share():
    """The estimator says a third of the true wait, with log-normal noise: after learning, the
    corrected point is close to the truth and [early, late] holds about 80 % of new actual waits."""
    rng = random.Random(7)
    c = WaitCalibration(window=400, min_samples=30, coverage=0.8, offset_s=1.0, similar=None, correct_point=True)

    def draw():
        actual = rng.uniform(600, 20000)
        est = actual / 3.0 * math.exp(rng.gauss(0, 0.5))
        return est, actual

    for i in range(400):
        est, actual = draw()
        c.observe("cq-a", est, actual, at=float(i))
    raw_err, cal_err, inside = [], [], 0
    n = 2000
    for _ in range(n):
        est, actual = draw()
        p, lo, hi = c.adjust("cq-a", est)
        assert 0 <= lo <= p <= hi
        raw_err.append(abs(est - actual))
        cal_err.append(abs(p - actual))
        inside += lo <= actual <= hi
    raw_err.sort()
    cal_err.sort()
    assert cal_err[n // 2] < 0.6 * raw_err[n // 2]
    assert 0.72 <= inside / n <= 0.88
    # by default the point is left as estimated; the range is the same
    plain = WaitCalibration(window=400, min_samples=30, coverage=0.8, offset_s=1.0, similar=None)
    for i in range(400):
        est, actual = draw()
        plain.observe("cq-a", est, actual, at=float(i))
    p, lo, hi = plain.adjust("cq-a", 1000.0)
    assert p == 1000.0 and lo <= 1000.0 and hi > 2000.0  # the actual waits are ~3x the estimates
    # an unbiased estimator is left (nearly) alone
    u = WaitCalibration(min_samples=30, offset_s=1.0, similar=None, correct_point=True)
    for i in range(400):
        a = rng.uniform(600, 20000)
        u.observe("x", a * math.exp(rng.gauss(0, 0.1)), a, at=float(i))
    assert u.adjust("x", 5000.0)[0] == pytest.approx(5000.0, rel=0.05)


def test_keys_fall_back_to_the_pool_of_all_and_similar_estimates_only():
    c = WaitCalibration(min_samples=10, offset_s=1.0, similar=2.0, correct_point=True)
    # cq-a: short estimates are 4x too short, long ones exact
    for i in range(50):
        c.observe("cq-a", 100.0, 400.0, at=i)
        c.observe("cq-a", 10000.0, 10000.0, at=i)
    assert c.samples("cq-a") == 100 and c.samples() == 100
    assert c.adjust("cq-a", 100.0)[0] == pytest.approx(400.0, rel=0.02)
    assert c.adjust("cq-a", 10000.0)[0] == pytest.approx(10000.0, rel=0.02)
    # an unknown key uses everything observed
    assert c.adjust("cq-b", 100.0)[0] == pytest.approx(400.0, rel=0.02)
    # nothing observed near 1,000,000 s: passes through
    assert c.adjust("cq-a", 1e6)[0] == 1e6
    assert c.samples(ALL) == 100


def test_window_and_age_bound_what_is_remembered():
    c = WaitCalibration(window=20, min_samples=5, offset_s=1.0, similar=None, correct_point=True)
    for i in range(20):
        c.observe("k", 100.0, 300.0, at=i)
    for i in range(20):  # the estimator got better: the old errors are forgotten
        c.observe("k", 100.0, 100.0, at=100 + i)
    assert c.samples("k") == 20
    assert c.adjust("k", 100.0)[0] == pytest.approx(100.0)
    d = WaitCalibration(window=1000, min_samples=1, offset_s=1.0, similar=None, max_age_s=50.0,
                        correct_point=True)
    d.observe("k", 100.0, 300.0, at=0.0)
    d.observe("k", 100.0, 100.0, at=100.0)
    assert d.samples("k") == 1 and d.adjust("k", 100.0)[0] == pytest.approx(100.0)


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        WaitCalibration(coverage=1.0)
    with pytest.raises(ValueError):
        WaitCalibration(offset_s=0)
    with pytest.raises(ValueError):
        WaitCalibration(similar=0.5)


def test_recent_wait_is_the_median_wait_of_the_recent_starts_past_only():
    from jupyter_gpuqueue.engine.wait_rate import recent_wait

    starts = [100.0, 4000.0, 5000.0, 6000.0, 7000.0]
    waits = [9000.0, 60.0, 600.0, 1200.0, 50000.0]
    # the last hour before 7,000 s: the starts at 4,000, 5,000, 6,000 (7,000 is not past yet)
    assert recent_wait(starts, waits, 7000.0) == 600.0
    # an hour with none: the first longer window that has some (6 h: all five)
    assert recent_wait(starts, waits, 7000.0 + 3 * 3600.0) == 1200.0
    assert recent_wait(starts, waits, 100.0) is None  # nothing started before
    assert recent_wait(starts, waits, 200.0) == 9000.0
    # a workload that has already waited 300 s: only the longer waits, and the time still to wait
    assert recent_wait(starts, waits, 7000.0, elapsed=300.0) == (600.0 + 1200.0) / 2 - 300.0
