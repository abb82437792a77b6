"""Token emission times and time bins."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.stats import percentile
from loadtest.analysis.summary import TimeBin
from loadtest.analysis.timeline import (
    EPSILON_S,
    bin_width,
    chunk_times,
    time_bins,
    token_emissions,
    tokens_between,
)
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


# The reference: the straightforward per-token loops the vectorised code replaced.

def reference_emissions(record):
    if not record.ok or not record.output_tokens:
        return []
    if record.ttft_s is None:
        times = [record.end_s]
    else:
        times = [record.start_s + record.ttft_s]
        for gap in record.itl_s:
            times.append(times[-1] + gap)
    return [(t, record.output_tokens / len(times)) for t in times]


def reference_tokens_between(records, start, end):
    lo, hi = start - EPSILON_S, end + EPSILON_S
    return math.fsum(w for r in records for t, w in reference_emissions(r) if lo <= t <= hi)


def reference_time_bins(records, width_s):
    if not records:
        return ()
    count = max(1, math.ceil(max(r.end_s for r in records) / width_s))
    started, completed, failed, tokens = [0] * count, [0] * count, [0] * count, [0.0] * count
    ttfts, e2es = [[] for _ in range(count)], [[] for _ in range(count)]

    def index(t):
        return min(max(int(t // width_s), 0), count - 1)

    for r in records:
        started[index(r.start_s)] += 1
        end_bin = index(r.end_s)
        if r.ok:
            completed[end_bin] += 1
            e2es[end_bin].append(r.e2e_s)
            if r.ttft_s is not None:
                ttfts[end_bin].append(r.ttft_s)
            for t, w in reference_emissions(r):
                tokens[index(t)] += w
        else:
            failed[end_bin] += 1
    return tuple(
        TimeBin(t=i * width_s, started=started[i], completed=completed[i], failed=failed[i],
                output_tokens_per_s=tokens[i] / width_s,
                ttft_p95=percentile(sorted(ttfts[i]), 95.0) if ttfts[i] else None,
                e2e_p95=percentile(sorted(e2es[i]), 95.0) if e2es[i] else None)
        for i in range(count)
    )


# quarter seconds land chunks exactly on bin edges; uniform floats anywhere
instants = st.one_of(st.integers(0, 40).map(lambda q: q / 4), st.floats(0.001, 10))


@st.composite
def random_record(draw):
    start = draw(instants)
    if draw(st.integers(0, 5)) == 0:
        return failed_record(start, ErrorKind.CONNECTION, elapsed=draw(instants))
    record = ok_record(start, draw(instants), draw(st.lists(instants, max_size=30)),
                       output_tokens=draw(st.one_of(st.none(), st.integers(0, 500))))
    if draw(st.integers(0, 5)) == 0:  # not streamed: the tokens arrive at the end
        record = record.model_copy(update={"ttft_s": None, "itl_s": []})
    return record


@settings(max_examples=300, deadline=None)
@given(st.lists(random_record(), max_size=40), st.sampled_from([0.25, 1.0, 2.5]), instants, instants)
def test_vectorised_figures_equal_the_reference(records, width, a, b):
    assert time_bins(records, width) == reference_time_bins(records, width)
    start, end = min(a, b), max(a, b)
    assert tokens_between(records, start, end) == reference_tokens_between(records, start, end)
