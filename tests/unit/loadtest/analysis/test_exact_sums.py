"""Exactly rounded sums with numpy equal math.fsum, float for float."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis import exact_sums
from loadtest.analysis.exact_sums import exact_products, exact_sum

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
small = st.floats(-1e6, 1e6, allow_nan=False)
tiny = st.floats(-1e-300, 1e-300, allow_nan=False)  # subnormals too


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(small, tiny, st.just(0.0), st.floats(0.001, 0.2)), max_size=60))
def test_exact_sum_is_fsum(values):
    assert exact_sum(np.array(values, dtype=float)) == math.fsum(values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e300, 1e300, allow_nan=False), max_size=20))
def test_huge_values_and_cancellation(values):
    values = values + [-v for v in values[::2]]
    assert exact_sum(np.array(values, dtype=float)) == math.fsum(values)


def test_blocks_and_many_values(monkeypatch):
    monkeypatch.setattr(exact_sums, "_BLOCK", 1000)
    values = np.random.default_rng(1).gamma(2.0, 0.02, size=25_000)
    values[::7] *= -1.0
    assert exact_sum(values) == math.fsum(values.tolist())


def test_non_finite_values_sum_as_fsum_does():
    assert exact_sum(np.array([1.0, math.inf])) == math.inf
    assert exact_sum(np.array([])) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 1e6), st.integers(0, 5000)), max_size=30))
def test_exact_products_sum_as_the_repeated_values(pairs):
    values = np.array([v for v, _ in pairs], dtype=float)
    counts = np.array([c for _, c in pairs], dtype=np.int64)
    repeated = [v for v, c in pairs for _ in range(c)]
    assert math.fsum(exact_products(values, counts)) == math.fsum(repeated)
