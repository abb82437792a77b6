"""The truth of a load-test run, from the timed server's recorded times (pure).

Each figure is computed with the definitions of the tool it is compared with, so a
difference is that tool's measurement error, not a difference of definitions:
vLLM's ``bench serve`` counts the role-only chunk as the first chunk (TTFT) and the gap
from it to the first token as an ITL; loadtest counts content chunks only. Both take
E2E to the end of the stream (the server's last write holds the last token, the usage
and ``[DONE]``) and TPOT as (E2E - TTFT) / (usage tokens - 1). Also here: the goal's
tolerances, and where a tool's error goes (sending, delivery of each chunk).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from benchmarks.common.timed_server import Trace
from loadtest.analysis.stats import Distribution, mean

ABS_TOLERANCE_S = 0.002  # the goal: within max(2 ms, 2 %) of the truth
REL_TOLERANCE = 0.02
NOISE_S, NOISE_REL = 0.0001, 0.001  # "not worse than vLLM" ignores differences below these
LATENCIES = ("ttft", "itl", "tpot", "e2e")
STATS = ("p50", "p95")
KEYS = tuple(f"{m}_{s}" for m in LATENCIES for s in STATS) + ("tok_s",)


@dataclass(frozen=True)
class Definition:
    """Which chunks of a stream a tool counts."""

    role_chunk_counts: bool  # vLLM's bench: the role-only chunk is the first chunk


LOADTEST_DEF = Definition(role_chunk_counts=False)
VLLM_DEF = Definition(role_chunk_counts=True)


def chunk_times(trace: Trace, definition: Definition) -> list[float]:
    """Write times of the chunks a tool counts (the role chunk shares token 1's write)."""
    times = trace.token_times
    return [times[0], *times] if definition.role_chunk_counts and times else list(times)


def latencies(traces: Sequence[Trace], definition: Definition) -> dict[str, Distribution]:
    """TTFT, ITL, TPOT and E2E distributions (seconds) of complete streamed traces."""
    ttft, itl, tpot, e2e = [], [], [], []
    for trace in traces:
        chunks = chunk_times(trace, definition)
        if not trace.complete or not chunks:
            continue
        first, total = chunks[0] - trace.received, trace.end - trace.received
        ttft.append(first)
        e2e.append(total)
        itl.extend(b - a for a, b in zip(chunks, chunks[1:]))
        if trace.output_tokens > 1:
            tpot.append((total - first) / (trace.output_tokens - 1))
    return {"ttft": Distribution.of(ttft), "itl": Distribution.of(itl), "tpot": Distribution.of(tpot),
            "e2e": Distribution.of(e2e)}


def tokens_written_between(traces: Sequence[Trace], lo: float, hi: float) -> int:
    """Tokens of complete traces written within ``[lo, hi]``."""
    return sum(1 for t in traces if t.complete for w in t.token_times if lo <= w <= hi)


def truth_figures(traces: Sequence[Trace], definition: Definition, window: tuple[float, float] | None = None,
                  *, every_trace: Sequence[Trace] | None = None) -> dict:
    """p50/p95 (seconds) of the measured ``traces`` and the output tok/s the server really
    delivered. With a ``window`` (server clock), loadtest's rate: tokens of ``every_trace``
    (default ``traces``; warm-up requests' tokens count too) written inside it / its length;
    without, vLLM's: every token / (last end - first receipt)."""
    figures = {f"{m}_{s}": getattr(d, s) for m, d in latencies(traces, definition).items() for s in STATS}
    done = [t for t in traces if t.complete]
    figures["tok_s"] = None
    if window is not None and window[1] > window[0]:
        everything = traces if every_trace is None else every_trace
        figures["tok_s"] = tokens_written_between(everything, *window) / (window[1] - window[0])
    elif window is None and done:
        span = max(t.end for t in done) - min(t.received for t in done)
        figures["tok_s"] = sum(t.output_tokens for t in done) / span if span > 0 else None
    return figures


def in_tolerance(key: str, measured: float | None, truth: float | None) -> bool:
    """The goal: within max(2 ms, 2 %) of the truth (2 % for tok/s)."""
    if measured is None or truth is None:
        return False
    bound = REL_TOLERANCE * truth if key == "tok_s" else max(ABS_TOLERANCE_S, REL_TOLERANCE * truth)
    return abs(measured - truth) <= bound


def not_worse(key: str, ours: float, our_truth: float, theirs: float, their_truth: float) -> bool:
    """loadtest's error no larger than vLLM's (each against the truth of its own run)."""
    if key == "tok_s":
        return abs(ours / our_truth - 1) <= abs(theirs / their_truth - 1) + NOISE_REL
    return abs(ours - our_truth) <= abs(theirs - their_truth) + NOISE_S


def schedule_lateness(traces: Sequence[Trace], ttft_s: float, itl_s: float) -> Distribution:
    """How late the server wrote each token compared with its schedule (seconds)."""
    return Distribution.of(w - (t.received + ttft_s + k * itl_s) for t in traces for k, w in enumerate(t.token_times))


def time_budget(starts: Sequence[float], traces: Sequence[Trace], definition: Definition,
                client_ttft_mean: float, client_e2e_mean: float) -> dict:
    """Where a tool's mean TTFT and E2E errors go (seconds; ``starts`` on the server's
    clock): sending (client start -> server receipt), first-chunk and end delivery (server
    write -> the client's reading). Means, so exact whatever the pairing of requests."""
    truth = latencies(traces, definition)
    received = [t.received for t in traces if t.complete]
    if not starts or not received:
        return {}
    send = mean(received) - mean(starts)
    return {"send": send, "first_chunk_delivery": client_ttft_mean - send - truth["ttft"].mean,
            "end_delivery": client_e2e_mean - send - truth["e2e"].mean}


@dataclass(frozen=True)
class ClientStream:
    """One request as a client saw it, on the server's clock: its start and the arrival
    of every chunk it counted."""

    start: float
    chunks: list[float]

    @classmethod
    def of(cls, start: float, ttft: float, gaps: Sequence[float]) -> ClientStream:
        return cls(start, list(accumulate(gaps, initial=start + ttft)))


def pair_in_order(clients: Sequence[ClientStream], traces: Sequence[Trace]) -> list[tuple[ClientStream, Trace]]:
    """Client requests paired with server traces by start order (for a client that sends
    no id; requests started within a few microseconds of each other may swap, which
    moves little since their schedules are the same)."""
    done = sorted((t for t in traces if t.complete), key=lambda t: t.received)
    return list(zip(sorted(clients, key=lambda c: c.start), done))


def send_delay(pairs: Sequence[tuple[ClientStream, Trace]]) -> Distribution:
    """From each request's start at the client to its receipt by the server (seconds)."""
    return Distribution.of(trace.received - client.start for client, trace in pairs)


def delivery_lag(pairs: Sequence[tuple[ClientStream, Trace]], definition: Definition) -> Distribution:
    """How long after the server wrote each chunk the client read it (seconds)."""
    return Distribution.of(c - s for client, trace in pairs
                           for c, s in zip(client.chunks, chunk_times(trace, definition)))
