"""Token emission times and time-binned figures of a stage (pure).

Output tokens are placed at the arrival of the content chunks that carried them (a
request's usage count spread evenly over its chunks; at the end for a non-streamed
answer), so throughput over a window counts what was actually streamed inside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

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


def tokens_between(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Output tokens streamed within ``[start, end]``."""
    lo, hi = start - EPSILON_S, end + EPSILON_S
    return math.fsum(w for r in records for t, w in token_emissions(r) if lo <= t <= hi)


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
    started = [0] * count
    completed = [0] * count
    failed = [0] * count
    tokens = [0.0] * count
    ttfts: list[list[float]] = [[] for _ in range(count)]
    e2es: list[list[float]] = [[] for _ in range(count)]

    def index(t: float) -> int:
        return min(max(int(t // width_s), 0), count - 1)

    for r in records:
        started[index(r.start_s)] += 1
        end_bin = index(r.end_s)
        if r.ok:
            completed[end_bin] += 1
            e2es[end_bin].append(r.e2e_s)
            if r.ttft_s is not None:
                ttfts[end_bin].append(r.ttft_s)
            for t, w in token_emissions(r):
                tokens[index(t)] += w
        else:
            failed[end_bin] += 1
    return tuple(
        TimeBin(
            t=i * width_s,
            started=started[i],
            completed=completed[i],
            failed=failed[i],
            output_tokens_per_s=tokens[i] / width_s,
            ttft_p95=percentile(sorted(ttfts[i]), 95.0) if ttfts[i] else None,
            e2e_p95=percentile(sorted(e2es[i]), 95.0) if e2es[i] else None,
        )
        for i in range(count)
    )
