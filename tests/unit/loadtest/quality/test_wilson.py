"""The Wilson score interval against published values."""

import math

import pytest

from loadtest.quality.wilson import Z_95, wilson_interval


@pytest.mark.parametrize(("successes", "trials", "low", "high"), [
    # the textbook values (e.g. statsmodels' proportion_confint(k, n, method="wilson"))
    (50, 100, 0.403832, 0.596168),
    (20, 20, 0.838875, 1.0),
    (0, 10, 0.0, 0.277533),
])
def test_known_values(successes, trials, low, high):
    interval = wilson_interval(successes, trials)
    assert interval.score == pytest.approx(successes / trials)
    assert interval.low == pytest.approx(low, abs=1e-6)
    assert interval.high == pytest.approx(high, abs=1e-6)


@pytest.mark.parametrize(("successes", "trials"), [(9, 10), (1, 1), (240, 250), (3, 7), (263, 263)])
def test_each_bound_solves_the_score_equation(successes, trials):
    """Wilson's bounds are the p where |p_hat - p| = z * sqrt(p (1 - p) / n)."""
    interval = wilson_interval(successes, trials)
    p_hat = successes / trials
    for p in (interval.low, interval.high):
        if p in (0.0, 1.0) and p == p_hat:
            continue  # the bound at an all-or-nothing score is the score itself
        assert abs(p_hat - p) == pytest.approx(Z_95 * math.sqrt(p * (1 - p) / trials), abs=1e-12)


def test_the_interval_holds_the_score_and_narrows_with_more_items():
    small, large = wilson_interval(8, 10), wilson_interval(80, 100)
    assert small.low < 0.8 < small.high and large.low < 0.8 < large.high
    assert large.high - large.low < small.high - small.low


@pytest.mark.parametrize(("successes", "trials"), [(0, 0), (3, 2), (-1, 5)])
def test_impossible_counts_are_refused(successes, trials):
    with pytest.raises(ValueError):
        wilson_interval(successes, trials)
