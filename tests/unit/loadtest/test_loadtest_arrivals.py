"""Open-loop arrival schedules: spacing, rates, burstiness, ramps, limits, seeds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.arrivals import ramp_cumulative, schedule, unit_process
from loadtest.errors import ConfigError


def test_constant_rate_is_evenly_spaced_from_zero():
    times = schedule(start_rate=4.0, burstiness=None, seed=0, duration_s=2.0)
    assert times.tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])


def test_count_limit_without_duration():
    times = schedule(start_rate=10.0, burstiness=1.0, seed=1, count=50)
    assert len(times) == 50 and times[0] == 0.0
    assert np.all(np.diff(times) >= 0)


def test_count_and_duration_take_whichever_first():
    assert len(schedule(start_rate=100.0, burstiness=None, seed=0, duration_s=10.0, count=7)) == 7
    assert len(schedule(start_rate=1.0, burstiness=None, seed=0, duration_s=3.0, count=100)) == 3


def test_same_seed_same_schedule_other_seed_differs():
    a = schedule(start_rate=5.0, burstiness=0.5, seed=42, duration_s=30.0)
    b = schedule(start_rate=5.0, burstiness=0.5, seed=42, duration_s=30.0)
    c = schedule(start_rate=5.0, burstiness=0.5, seed=43, duration_s=30.0)
    assert np.array_equal(a, b) and not np.array_equal(a[: len(c)], c[: len(a)])


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_the_requested_mean_and_shape(burstiness):
    rate = 8.0
    times = schedule(start_rate=rate, burstiness=burstiness, seed=7, count=40_001)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=0.03)
    # gamma(k): coefficient of variation 1/sqrt(k); burstiness 1 is Poisson (CV 1)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0 / np.sqrt(burstiness), rel=0.05)


def test_poisson_count_over_duration():
    times = schedule(start_rate=20.0, burstiness=1.0, seed=3, duration_s=500.0)
    # expected 10,000 arrivals, standard deviation 100
    assert abs(len(times) - 10_000) < 500
    assert times.max() < 500.0


def test_linear_ramp_follows_the_cumulative_intensity():
    times = schedule(start_rate=1.0, end_rate=21.0, burstiness=1.0, seed=5, duration_s=200.0)
    expected_total = ramp_cumulative(200.0, 1.0, 21.0, 200.0)  # 2,200
    assert abs(len(times) - expected_total) < 5 * np.sqrt(expected_total)
    first_half = np.sum(times < 100.0)
    expected_half = ramp_cumulative(100.0, 1.0, 21.0, 200.0)  # 600
    assert abs(first_half - expected_half) < 5 * np.sqrt(expected_half)


def test_deterministic_ramp_is_exact():
    times = schedule(start_rate=2.0, end_rate=6.0, burstiness=None, seed=0, duration_s=10.0)
    # arrival k sits where the cumulative intensity reaches k
    assert ramp_cumulative(times, 2.0, 6.0, 10.0) == pytest.approx(np.arange(len(times)))
    assert len(times) == 40  # Lambda(10) = 40, arrivals at Lambda = 0..39


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0.1, 50), st.one_of(st.none(), st.floats(0.1, 5)), st.integers(0, 2**31), st.floats(0.5, 60)
)
def test_schedules_are_sorted_and_inside_the_duration(rate, burstiness, seed, duration):
    times = schedule(start_rate=rate, burstiness=burstiness, seed=seed, duration_s=duration)
    assert len(times) >= 1 and times[0] == 0.0
    assert np.all(np.diff(times) >= 0) and times.max() < duration


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(start_rate=0.0, burstiness=1.0, seed=0, duration_s=1.0),
        dict(start_rate=-1.0, burstiness=1.0, seed=0, duration_s=1.0),
        dict(start_rate=1.0, burstiness=1.0, seed=0),
        dict(start_rate=1.0, end_rate=2.0, burstiness=1.0, seed=0, count=10),
        dict(start_rate=1e9, burstiness=1.0, seed=0, duration_s=100.0),
    ],
)
def test_invalid_schedules(kwargs):
    with pytest.raises(ConfigError):
        schedule(**kwargs)


def test_unit_process_rejects_non_positive_burstiness():
    with pytest.raises(ConfigError):
        unit_process(3, 0.0, np.random.default_rng(0))
