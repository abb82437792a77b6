"""Open-loop arrival schedules (spacing, rates, burstiness, ramps, limits, seeds,
normalisation) and how a stage kept them (due, dropped, slot waits)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.arrivals import arrival_count, arrivals_of, ramp_cumulative, schedule, slot_waits, unit_process
from loadtest.analysis.summary import Arrivals
from loadtest.errors import ConfigError
from loadtest.profiles import OpenLoad
from tests.unit.loadtest.loadtest_factories import ok_record


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


@pytest.mark.parametrize("rate", [0.4, 0.8, 3.3])
def test_every_point_sends_its_rate_times_duration(rate):
    # Before: a raw Poisson sample, e.g. 18 arrivals where 24 (0.8 req/s x 30 s) were due.
    for seed in range(40):
        times = schedule(start_rate=rate, burstiness=1.0, seed=seed, duration_s=30.0)
        assert len(times) == arrival_count(rate, rate, 30.0) == round(rate * 30.0)
        assert times.max() < 30.0


def test_normalisation_keeps_the_spacing_random_and_the_mean_gap_exact():
    a = schedule(start_rate=5.0, burstiness=1.0, seed=1, duration_s=20.0)
    b = schedule(start_rate=5.0, burstiness=1.0, seed=2, duration_s=20.0)
    assert len(a) == len(b) == 100 and not np.allclose(a, b)
    # count-only schedules: the arrival after the last would land at count / rate
    times = schedule(start_rate=4.0, burstiness=0.5, seed=3, count=200)
    assert len(times) == 200 and times[-1] < 200 / 4.0
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(np.sqrt(2.0), rel=0.25)  # still bursty (gamma k=0.5)


def test_arrival_count_rounds_half_up_and_is_never_zero():
    assert arrival_count(0.5, 0.5, 5.0) == 3  # 2.5
    assert arrival_count(0.25, 0.25, 5.0) == 1  # 1.25
    assert arrival_count(0.01, 0.01, 5.0) == 1
    assert arrival_count(2.0, 6.0, 10.0) == 40  # ramp: the cumulative intensity


def _arrival(user, scheduled, start, e2e=0.1):
    return ok_record(start, e2e / 2, [e2e / 2], scheduled=scheduled, user=user)


def test_slot_waits_are_arrivals_taken_by_a_user_still_busy():
    records = [
        _arrival(0, 0.0, 0.0, e2e=2.0),  # user 0 busy until 2.0
        _arrival(1, 0.5, 0.5, e2e=0.1),  # user 1 free at 0.6
        _arrival(1, 1.0, 1.0, e2e=3.0),  # user 1 busy until 4.0
        _arrival(0, 1.5, 2.0),  # every slot busy at 1.5: waited for user 0 (free at 2.0)
        _arrival(0, 3.0, 3.0),  # on time
    ]
    assert slot_waits(records) == 1
    assert slot_waits([r.model_copy(update={"scheduled_s": None}) for r in records]) == 0  # closed loop


def test_arrivals_due_dropped_and_achieved_rate():
    load = OpenLoad(start_rate=0.8, end_rate=0.8, max_concurrency=4)
    sent = [_arrival(0, t, t) for t in np.linspace(0.0, 20.0, 18)]
    a = arrivals_of(sent, load, duration_s=30.0)
    assert (a.due, a.scheduled, a.dropped) == (24, 18, 6)
    assert a.achieved_rate == pytest.approx(18 / 30.0) and a.max_concurrency == 4
    # the request budget, not the clock, ended the stage: nothing was dropped
    assert arrivals_of(sent, load, duration_s=30.0, max_requests=18).dropped == 0
    # no duration given: nothing is known to be due
    unknown = arrivals_of(sent, load)
    assert unknown.due is None and unknown.dropped == 0
    assert unknown.achieved_rate == pytest.approx(17 / 20.0)
    assert arrivals_of([ok_record(0.0, 0.1, [0.1])]) == Arrivals()  # closed loop
