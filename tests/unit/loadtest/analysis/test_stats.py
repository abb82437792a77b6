"""Exact percentiles and distributions, checked against numpy and by hand; counted samples as their repetition."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.stats import (
    MAX_MEAN_BOOTSTRAP,
    Counted,
    Distribution,
    bootstrap,
    bootstrap_proportion,
    interval,
    mean,
    percentile,
)

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        # rank (4 - 1) * 0.25 = 0.75 -> 1 + 0.75 * (2 - 1); nearest-rank gives 1 or 2,
        # Hazen (type 5) 1.5, Weibull (type 6) 1.25
        ([1.0, 2.0, 3.0, 4.0], 25, 1.75),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        # rank (4 - 1) * 0.9 = 2.7 -> 3 + 0.7 * (4 - 3); Hazen and Weibull clip to 4
        ([1.0, 2.0, 3.0, 4.0], 90, 3.7),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([40.0, 10.0, 30.0, 20.0, 50.0], 95, 48.0),  # unsorted: rank 3.8 -> 40 + 0.8 * 10
        ([7.0], 99, 7.0),
    ],
)
def test_hand_worked_percentiles(values, q, expected):
    # Linear interpolation between closest ranks (Hyndman & Fan type 7).
    assert percentile(values, q) == pytest.approx(expected, rel=1e-12)


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=200))
def test_distribution_matches_numpy(values):
    dist = Distribution.of(values)
    arr = np.array(values)
    assert dist.count == len(values)
    assert dist.min == arr.min() and dist.max == arr.max()
    assert dist.mean == pytest.approx(float(arr.mean()), rel=1e-9, abs=1e-6)
    for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert dist.stat(name) == pytest.approx(float(np.percentile(arr, q)), rel=1e-9, abs=1e-6)
    assert dist.min <= dist.p50 <= dist.p90 <= dist.p95 <= dist.p99 <= dist.max


def test_empty_distribution_has_no_figures():
    dist = Distribution.of([])
    assert dist.count == 0
    assert dist.p95 is None and dist.mean is None


def test_nan_samples_are_rejected():
    with pytest.raises(ValueError):
        Distribution.of([1.0, math.nan])


def test_unknown_stat_name():
    with pytest.raises(KeyError):
        Distribution.of([1.0]).stat("p42")


def test_mean_is_compensated():
    assert mean([1e16, 1.0, -1e16]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("stat, q", [("p50", 50), ("p95", 95), ("p99", 99), ("max", 100), ("min", 0)])
def test_bootstrap_matches_resampling_by_brute_force(stat, q):
    # The order-statistic shortcut must have the distribution of the plain bootstrap.
    data = np.random.default_rng(5).lognormal(0.0, 1.0, 300)
    fast = bootstrap(data, stat, resamples=20_000, seed=1)
    resamples = data[np.random.default_rng(2).integers(0, len(data), size=(20_000, len(data)))]
    brute = np.percentile(resamples, q, axis=1)
    for level in (0.025, 0.5, 0.975):
        low, high = np.quantile(brute, [level - 0.01, level + 0.01])
        assert low <= np.quantile(fast, level) <= high
    assert fast.mean() == pytest.approx(brute.mean(), rel=0.01)


def test_mean_bootstrap_and_its_size_limit():
    data = np.random.default_rng(3).normal(10.0, 2.0, 2_000)
    low, high = interval(bootstrap(data, "mean"))
    half = 1.96 * data.std() / math.sqrt(len(data))  # the textbook interval of a mean
    assert low == pytest.approx(data.mean() - half, rel=0.01) and high == pytest.approx(data.mean() + half, rel=0.01)
    assert bootstrap(np.zeros(MAX_MEAN_BOOTSTRAP + 1), "mean") is None
    assert bootstrap([], "p95") is None


def test_bootstrap_is_seeded():
    data = np.random.default_rng(4).exponential(1.0, 500)
    assert np.array_equal(bootstrap(data, "p95"), bootstrap(data, "p95"))
    assert not np.array_equal(bootstrap(data, "p95", seed=1), bootstrap(data, "p95", seed=2))
    rates = bootstrap_proportion(30, 1000)
    assert np.array_equal(rates, bootstrap_proportion(30, 1000)) and rates.mean() == pytest.approx(0.03, rel=0.05)
    assert bootstrap_proportion(0, 0) is None


def test_distribution_intervals_only_when_asked():
    values = np.random.default_rng(6).gamma(2.0, 0.1, 400)
    dist = Distribution.of(values, intervals=True)
    for name in ("p50", "p90", "p95", "p99", "mean"):
        low, high = dist.ci95[name]
        assert low <= dist.stat(name) <= high and low < high
    assert Distribution.of(values).ci95 == {}
    assert Distribution.model_validate_json(dist.model_dump_json()) == dist


counted_pairs = st.lists(st.tuples(st.floats(0, 10, allow_nan=False), st.integers(0, 30)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(counted_pairs)
def test_counted_samples_summarise_as_their_repetition(pairs):
    values = np.array([v for v, _ in pairs], dtype=float)
    counts = np.array([c for _, c in pairs], dtype=np.int64)
    repeated = np.repeat(values, counts)
    assert Distribution.of(Counted(values, counts), intervals=True) == Distribution.of(repeated, intervals=True)
    for stat in ("p50", "p99", "min", "max", "mean"):
        counted, plain = bootstrap(Counted(values, counts), stat), bootstrap(np.sort(repeated), stat)
        assert (counted is None and plain is None) or counted.tolist() == plain.tolist()


def test_many_counted_samples_summarise_as_their_repetition():
    rng = np.random.default_rng(3)
    values = np.round(rng.gamma(2.0, 0.02, size=3000), 4)  # repeated values too
    counts = rng.integers(0, 40, size=3000)
    repeated = np.repeat(values, counts)
    assert len(repeated) > MAX_MEAN_BOOTSTRAP
    assert Distribution.of(Counted(values, counts), intervals=True) == Distribution.of(repeated, intervals=True)
