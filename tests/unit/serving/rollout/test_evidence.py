"""Wilson intervals, the p95 interval read off a histogram, and scrape windows."""

import random

import pytest

from serving.rollout.evidence import VersionCounts, quantile, wilson

EDGES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, float("inf"))


def histogram(values):
    return tuple((edge, float(sum(v <= edge for v in values))) for edge in EDGES)


def test_wilson_matches_the_textbook_values():
    interval = wilson(8, 10)  # Wilson 95%: [0.490, 0.943]
    assert interval.value == 0.8
    assert interval.low == pytest.approx(0.4902, abs=1e-3) and interval.high == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 20).low == 0.0 and wilson(0, 20).high == pytest.approx(0.1611, abs=1e-3)
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)  # no evidence: anything


def test_the_p95_interval_holds_the_true_p95_and_narrows_with_more_requests():
    rng = random.Random(7)
    few, many = ([rng.expovariate(20) for _ in range(n)] for n in (30, 3000))
    for values in (few, many):
        true_p95 = sorted(values)[int(0.95 * len(values))]
        interval = quantile(histogram(values))
        assert interval.low <= true_p95 <= interval.high
        assert interval.low <= interval.value <= interval.high
    assert quantile(histogram(many)).high - quantile(histogram(many)).low <= \
        quantile(histogram(few)).high - quantile(histogram(few)).low


def test_no_observations_has_no_quantile():
    assert quantile(()) is None
    assert quantile(tuple((edge, 0.0) for edge in EDGES)) is None


def test_a_window_is_the_difference_of_two_scrapes_and_a_restart_starts_from_zero():
    before = VersionCounts(10, 1, histogram([0.01] * 10), (), 2)
    after = VersionCounts(15, 3, histogram([0.01] * 10 + [0.3] * 5), (), 0)
    window = after.since(before)
    assert (window.requests, window.errors, window.in_flight) == (5, 2, 0)
    assert dict(window.ttft)[0.2] == 0 and dict(window.ttft)[0.5] == 5
    restarted = VersionCounts(3, 0)
    assert restarted.since(before) == restarted
