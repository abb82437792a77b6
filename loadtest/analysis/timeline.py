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

from loadtest.analysis.exact_sums import exact_products
from loadtest.analysis.gaps import GapTable, segment_cumsum, segment_cumsum_blocks
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

    @property
    def times(self) -> np.ndarray:
        """Every chunk's time."""
        return segment_cumsum(self.firsts, self.gaps)

    @property
    def chunk_weights(self) -> np.ndarray:
        """Every chunk's tokens (its record's weight)."""
        return np.repeat(self.weights, self.counts)


def emissions_of(records: Sequence[RequestRecord], gaps: GapTable | None = None) -> Emissions:
    """The :class:`Emissions` of ``records`` in the order of :func:`token_emissions`
    record after record (the times summed gap by gap as :func:`chunk_times` does, so they
    are the same floats). ``gaps``: the records' gaps (:class:`GapTable`, one row per
    record; default: each record's ``itl_s``)."""
    mask = np.fromiter((r.ok and bool(r.output_tokens) for r in records), dtype=bool, count=len(records))
    counted = [r for r, keep in zip(records, mask.tolist()) if keep]
    table = GapTable.of_records(counted) if gaps is None else gaps.select(mask)
    n = len(counted)
    streamed = np.fromiter((r.ttft_s is not None for r in counted), dtype=bool, count=n)
    firsts = np.fromiter((r.end_s if r.ttft_s is None else r.start_s + r.ttft_s for r in counted), dtype=float,
                         count=n)
    table = table.blank(~streamed)
    counts = table.lengths + 1
    weights = np.fromiter((r.output_tokens for r in counted), dtype=float, count=n) / counts
    return Emissions(firsts, table, counts, weights)


def emission_arrays(records: Sequence[RequestRecord], gaps: GapTable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every emission of ``records`` as two arrays, times and tokens (:func:`emissions_of`)."""
    emissions = emissions_of(records, gaps)
    return emissions.times, emissions.chunk_weights


def tokens_between(records: Sequence[RequestRecord], start: float, end: float, *,
                   emissions: Emissions | None = None) -> float:
    """Output tokens streamed within ``[start, end]`` (``emissions``: the records'
    :func:`emissions_of`, when already computed). The sum is exactly rounded, as
    :func:`math.fsum` over every chunk's tokens."""
    e = emissions_of(records) if emissions is None else emissions
    inside_counts = np.zeros(len(e.counts), dtype=np.int64)
    for rows, times in e.blocks():
        inside = (times >= start - EPSILON_S) & (times <= end + EPSILON_S)
        counts = e.counts[rows]
        inside_counts[rows] = np.add.reduceat(inside, np.cumsum(counts) - counts, dtype=np.int64)
    return math.fsum(exact_products(e.weights, inside_counts))


def prompt_tokens_between(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Prompt tokens of successful requests whose prefill finished within ``[start, end]``."""
    total = 0
    for r in records:
        if not r.ok or r.prompt_tokens is None:
            continue
        t = r.end_s if r.ttft_s is None else r.start_s + r.ttft_s
        if start - EPSILON_S <= t <= end + EPSILON_S:
            total += r.prompt_tokens
    return float(total)


def bin_width(span_s: float, max_bins: int = 120) -> float:
    """A round bin width giving at most ``max_bins`` bins (at least 1 s)."""
    width = 1.0
    for candidate in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        width = float(candidate)
        if span_s / width <= max_bins:
            break
    return width


def time_bins(records: Sequence[RequestRecord], width_s: float, *,
              emissions: Emissions | None = None) -> tuple[TimeBin, ...]:
    """Per-bin counts, streamed output tokens/s and p95 TTFT/E2E of completions
    (``emissions``: the records' :func:`emissions_of`, when already computed)."""
    if not records:
        return ()
    span = max(r.end_s for r in records)
    count = max(1, math.ceil(span / width_s))

    def index(t: np.ndarray) -> np.ndarray:  # clipped as integers: a float clip costs ten times more
        return np.clip(np.floor_divide(t, width_s).astype(np.int64), 0, count - 1)

    def per_bin(bins: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(bins, weights=weights, minlength=count)

    def p95s(bins: np.ndarray, values: np.ndarray) -> list[float | None]:
        order = np.argsort(bins, kind="stable")
        groups = np.split(values[order], np.cumsum(per_bin(bins))[:-1])
        return [percentile(g, 95.0) if len(g) else None for g in groups]

    n = len(records)
    ok = np.fromiter((r.ok for r in records), dtype=bool, count=n)
    started = per_bin(index(np.fromiter((r.start_s for r in records), dtype=float, count=n)))
    end_bin = index(np.fromiter((r.end_s for r in records), dtype=float, count=n))
    done, done_bin = [r for r in records if r.ok], end_bin[ok]
    e2e = np.fromiter((r.e2e_s for r in done), dtype=float, count=len(done))
    ttft = np.fromiter((math.nan if r.ttft_s is None else r.ttft_s for r in done), dtype=float, count=len(done))
    streamed = ~np.isnan(ttft)
    ttft_p95, e2e_p95 = p95s(done_bin[streamed], ttft[streamed]), p95s(done_bin, e2e)
    completed, failed = per_bin(done_bin), per_bin(end_bin[~ok])
    e = emissions_of(records) if emissions is None else emissions
    tokens = np.zeros(count)
    for rows, times in e.blocks():  # added chunk by chunk in order, as one bincount would
        np.add.at(tokens, index(times), np.repeat(e.weights[rows], e.counts[rows]))
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
