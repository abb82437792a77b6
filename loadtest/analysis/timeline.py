"""Token emission times and time-binned figures of a stage (pure).

Output tokens are placed at the arrival of the content chunks that carried them (a
request's usage count spread evenly over its chunks; at the end for a non-streamed
answer), so throughput over a window counts what was actually streamed inside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain

import numpy as np

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


def emission_arrays(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Every emission of ``records`` as two arrays, times and tokens, in the order of
    :func:`token_emissions` record after record (the times summed gap by gap as
    :func:`chunk_times` does, so they are the same floats)."""
    counted = [r for r in records if r.ok and r.output_tokens]
    lengths = np.fromiter((1 if r.ttft_s is None else 1 + len(r.itl_s) for r in counted), dtype=np.int64,
                          count=len(counted))
    chunks = (accumulate([r.end_s] if r.ttft_s is None else [r.start_s + r.ttft_s, *r.itl_s]) for r in counted)
    times = np.fromiter(chain.from_iterable(chunks), dtype=float, count=int(lengths.sum()))
    weights = np.fromiter((r.output_tokens / n for r, n in zip(counted, lengths.tolist())), dtype=float,
                          count=len(counted))
    return times, np.repeat(weights, lengths)


def tokens_between(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Output tokens streamed within ``[start, end]``."""
    times, weights = emission_arrays(records)
    inside = (times >= start - EPSILON_S) & (times <= end + EPSILON_S)
    return math.fsum(weights[inside].tolist())


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


def time_bins(records: Sequence[RequestRecord], width_s: float) -> tuple[TimeBin, ...]:
    """Per-bin counts, streamed output tokens/s and p95 TTFT/E2E of completions."""
    if not records:
        return ()
    span = max(r.end_s for r in records)
    count = max(1, math.ceil(span / width_s))

    def index(t: np.ndarray) -> np.ndarray:
        return np.clip(np.floor_divide(t, width_s), 0, count - 1).astype(np.int64)

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
    times, weights = emission_arrays(records)
    tokens = per_bin(index(times), weights)
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
