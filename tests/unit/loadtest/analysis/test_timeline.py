"""Token emission times and time bins."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.timeline import bin_width, chunk_times, time_bins, token_emissions, tokens_between
from tests.unit.loadtest.loadtest_factories import ErrorKind, failed_record, ok_record


def test_chunk_times_follow_ttft_and_gaps():
    record = ok_record(2.0, 0.5, [0.1, 0.2])
    assert chunk_times(record) == pytest.approx([2.5, 2.6, 2.8])


def test_non_streamed_tokens_arrive_at_the_end():
    record = ok_record(1.0, 0.5, [0.5]).model_copy(update={"ttft_s": None, "itl_s": []})
    assert list(token_emissions(record)) == [(pytest.approx(2.0), 2.0)]


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 100), st.floats(0.01, 2), st.lists(st.floats(0.001, 1), max_size=20), st.integers(1, 500))
def test_emissions_sum_to_the_output_count(start, ttft, gaps, tokens):
    record = ok_record(start, ttft, gaps, output_tokens=tokens)
    assert sum(w for _, w in token_emissions(record)) == pytest.approx(tokens)
    assert tokens_between([record], 0, 1e9) == pytest.approx(tokens)


def test_bins():
    records = [
        ok_record(0.2, 0.3, [0.25] * 3),  # ends 1.25
        ok_record(0.5, 1.0, [0.1]),  # ends 1.6
        failed_record(2.5, ErrorKind.CONNECTION),
    ]
    bins = time_bins(records, 1.0)
    assert [b.started for b in bins] == [2, 0, 1]
    assert [b.completed for b in bins] == [0, 2, 0]
    assert [b.failed for b in bins] == [0, 0, 1]
    assert sum(b.output_tokens_per_s for b in bins) == pytest.approx(6.0)
    assert bins[1].ttft_p95 == pytest.approx(0.3 + 0.95 * 0.7)


def test_bin_width():
    assert bin_width(30) == 1.0
    assert bin_width(600) == 5.0
    assert bin_width(100_000) == 600.0
