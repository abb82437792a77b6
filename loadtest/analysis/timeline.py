"""Token emission times and time-binned figures of a stage (pure).

Output tokens are placed at the arrival of the content chunks that carried them (a
request's usage count spread evenly over its chunks; at the end for a non-streamed
answer), so throughput over a window counts what was actually streamed inside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.analysis.columns import NONE, RecordColumns
from loadtest.analysis.exact_sums import exact_products
from loadtest.analysis.gaps import GapTable, segment_cumsum_blocks
from loadtest.analysis.records import RequestRecord
from loadtest.analysis.stats import percentile
from loadtest.analysis.summary import TimeBin

EPSILON_S = 1e-9  # float slack: a chunk summed from gaps may land an ulp past the end


def chunk_times(record: RequestRecord) -> list[float]:
    """Arrival times (stage clock) of a successful record's content chunks."""
    if record.ttft_s is None:
        return [record.end_s]
    times = [record.start_s + record.ttft_s]
    for gap in record.itl_s:
        times.append(times[-1] + gap)
    return times


def token_emissions(record: RequestRecord) -> Iterator[tuple[float, float]]:
    """(time, tokens) pairs for a successful record with a known output count."""
    if not record.ok or not record.output_tokens:
        return
    times = chunk_times(record)
    weight = record.output_tokens / len(times)
    for t in times:
        yield t, weight


@dataclass(frozen=True)
class Emissions:
    """Every emission of some records (those with output tokens), record after record:
    each record's first chunk time, its gaps, its chunk count and tokens per chunk. The
    chunk times come a block of records at a time (:meth:`blocks`: a simulated hour
    holds tens of millions)."""

    firsts: np.ndarray
    gaps: GapTable
    counts: np.ndarray
    weights: np.ndarray

    def blocks(self) -> Iterator[tuple[slice, np.ndarray]]:
        """``(records, their chunk times)``, a block of records at a time, in order."""
        return segment_cumsum_blocks(self.firsts, self.gaps)


def emissions_of(records: Sequence[RequestRecord] | RecordColumns) -> Emissions:
    """The :class:`Emissions` of ``records`` in the order of :func:`token_emissions`
    record after record (the times summed gap by gap as :func:`chunk_times` does, so they
    are the same floats)."""
    columns = RecordColumns.of(records)
    counted = columns.take(columns.ok & (columns.output_tokens > 0))
    streamed = ~np.isnan(counted.ttft_s)
    firsts = np.where(streamed, counted.start_s + counted.ttft_s, counted.end_s)
    gaps = counted.gaps.blank(~streamed)
    counts = gaps.lengths + 1
    return Emissions(firsts, gaps, counts, counted.output_tokens / counts)


def tokens_between(records: Sequence[RequestRecord] | RecordColumns, start: float, end: float, *,
                   emissions: Emissions | None = None) -> float:
    """Output tokens streamed within ``[start, end]`` (``emissions``: the records'
    :func:`emissions_of`, when already computed). The sum is exactly rounded, as
    :func:`math.fsum` over every chunk's tokens."""
    return scan_emissions(emissions_of(records) if emissions is None else emissions, window=(start, end))[0]


def scan_emissions(e: Emissions, *, window: tuple[float, float] | None = None,
                   bins: tuple[float, int] | None = None) -> tuple[float | None, np.ndarray | None]:
    """In one pass over the chunk times: the tokens streamed within ``window`` (exactly
    rounded, as :func:`math.fsum` over every chunk's tokens) and the tokens of each of
    ``bins`` (width, count: each chunk's tokens added in order, as one
    :func:`numpy.bincount` would; times past the last bin count in it)."""
    inside_counts = np.zeros(len(e.counts), dtype=np.int64) if window is not None else None
    tokens = np.zeros(bins[1]) if bins is not None else None
    for rows, times in e.blocks():
        counts = e.counts[rows]
        if window is not None:
            inside = (times >= window[0] - EPSILON_S) & (times <= window[1] + EPSILON_S)
            inside_counts[rows] = np.add.reduceat(inside, np.cumsum(counts) - counts, dtype=np.int64)
        if bins is not None:
            np.add.at(tokens, bin_index(times, *bins), np.repeat(e.weights[rows], counts))
    within = math.fsum(exact_products(e.weights, inside_counts)) if window is not None else None
    return within, tokens


def bin_index(times: np.ndarray, width_s: float, count: int) -> np.ndarray:
    """The bin of each time (``floor(t / width)``, clipped to the bins; as integers: a
    float clip costs ten times more)."""
    index = np.floor_divide(times, width_s).astype(np.int64)
    return index.clip(0, count - 1, out=index)


def prompt_tokens_between(records: Sequence[RequestRecord] | RecordColumns, start: float, end: float) -> float:
    """Prompt tokens of successful requests whose prefill finished within ``[start, end]``."""
    c = RecordColumns.of(records)
    prefilled = np.where(np.isnan(c.ttft_s), c.end_s, c.start_s + c.ttft_s)
    inside = c.ok & (c.prompt_tokens != NONE) & (prefilled >= start - EPSILON_S) & (prefilled <= end + EPSILON_S)
    return float(int(c.prompt_tokens[inside].sum()))


def bin_width(span_s: float, max_bins: int = 120) -> float:
    """A round bin width giving at most ``max_bins`` bins (at least 1 s)."""
    width = 1.0
    for candidate in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        width = float(candidate)
        if span_s / width <= max_bins:
            break
    return width


def time_bins(records: Sequence[RequestRecord] | RecordColumns, width_s: float, *,
              emissions: Emissions | None = None, tokens: np.ndarray | None = None) -> tuple[TimeBin, ...]:
    """Per-bin counts, streamed output tokens/s and p95 TTFT/E2E of completions
    (``emissions``: the records' :func:`emissions_of`; ``tokens``: the tokens of each
    bin, :func:`scan_emissions`; when already computed)."""
    c = RecordColumns.of(records)
    if not len(c):
        return ()
    ends = c.end_s
    span = float(ends.max())
    count = max(1, math.ceil(span / width_s))

    def index(t: np.ndarray) -> np.ndarray:
        return bin_index(t, width_s, count)

    def per_bin(bins: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(bins, weights=weights, minlength=count)

    def p95s(bins: np.ndarray, values: np.ndarray) -> list[float | None]:
        order = np.argsort(bins, kind="stable")
        groups = np.split(values[order], np.cumsum(per_bin(bins))[:-1])
        return [percentile(g, 95.0) if len(g) else None for g in groups]

    ok = c.ok
    started = per_bin(index(c.start_s))
    end_bin = index(ends)
    done_bin = end_bin[ok]
    e2e, ttft = c.e2e_s[ok], c.ttft_s[ok]
    streamed = ~np.isnan(ttft)
    ttft_p95, e2e_p95 = p95s(done_bin[streamed], ttft[streamed]), p95s(done_bin, e2e)
    completed, failed = per_bin(done_bin), per_bin(end_bin[~ok])
    if tokens is None:
        tokens = scan_emissions(emissions_of(c) if emissions is None else emissions, bins=(width_s, count))[1]
    return tuple(
        TimeBin(
            t=i * width_s,
            started=int(started[i]),
            completed=int(completed[i]),
            failed=int(failed[i]),
            output_tokens_per_s=float(tokens[i]) / width_s,
            ttft_p95=ttft_p95[i],
            e2e_p95=e2e_p95[i],
        )
        for i in range(count)
    )
