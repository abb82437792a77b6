"""The Mooncake conversation trace excerpt as timed token-id requests.

The requests, arrivals and sessions are :func:`loadtest.workloads.replay.replay_plan`'s
(the load tester's own replay), so the simulator replays exactly what ``loadtest run
--profile replay:...`` sends. Each hashed block of the trace (512 tokens) becomes 512
token ids of its own, so two requests sharing their first ``k`` hash ids share their
first ``k`` x 512 prompt tokens exactly, as ``loadtest``'s ``trace`` workload builds
its text; a request's tokens past its blocks are its own.
"""

from __future__ import annotations

from pathlib import Path

from loadtest.workloads.replay import ReplayPlan, SessionSource, TraceSelection, replay_plan
from simulator.workloads.requests import FreshIds, RequestSet, TimedRequest

REPO = Path(__file__).resolve().parents[2]
EXCERPT = REPO / "loadtest" / "data" / "traces" / "mooncake-conversation-400.jsonl"
BLOCK_BASE = 1_000_000_000  # block h's ids: BLOCK_BASE + h x block size ... (never a fresh id)


def plan_requests(plan: ReplayPlan, name: str, *, copies: int = 1, common_share: float = 0.1) -> RequestSet:
    """A replay plan's requests with token ids shared exactly as their block hashes are.

    ``copies`` > 1 tiles the trace for a larger cluster: copy ``j`` is the same requests
    with blocks of their own (but for those held by at least ``common_share`` of the
    requests, such as a common system prompt, which stay shared) and its own sessions,
    its arrivals shifted by ``j / copies`` of the trace's span, all merged in time order.
    """
    if plan.block_size is None:
        raise ValueError(f"trace {plan.source} has no block hashes")
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    size = plan.block_size
    counts: dict[int, int] = {}
    for r in plan.requests:
        for h in r.hash_ids:
            counts[h] = counts.get(h, 0) + 1
    common = {h for h, n in counts.items() if n >= common_share * len(plan.requests)}
    stride = max(counts, default=0) + 1
    fresh = FreshIds()
    out = []
    for j in range(copies):
        shift = j * plan.span_s / copies
        for t, r in zip(plan.arrivals.tolist(), plan.requests):
            ids: list[int] = []
            for h in r.hash_ids:
                b = h if h in common else h + j * stride
                ids.extend(range(BLOCK_BASE + b * size, BLOCK_BASE + (b + 1) * size))
            if len(ids) < r.input_tokens:
                ids.extend(fresh.take(r.input_tokens - len(ids)))
            out.append(TimedRequest(t + shift, tuple(ids[:r.input_tokens]), r.output_tokens,
                                    r.session + j * plan.sessions, r.turn))
    out.sort(key=lambda r: r.t_s)
    tiled = f", tiled x{copies} (blocks shared by >= {common_share:.0%} of requests stay shared)" if copies > 1 else ""
    return RequestSet(name, tuple(out), f"{plan.source} ({len(plan.requests)} requests, {plan.sessions} "
                      f"sessions{tiled})")


def mooncake_requests(path: Path = EXCERPT, *, speed: float = 1.0, copies: int = 1) -> RequestSet:
    """The trace at ``path`` (default: the bundled excerpt), sessions inferred from prefixes."""
    plan = replay_plan(TraceSelection(path=path, sessions=SessionSource.PREFIX), speed)
    return plan_requests(plan, "mooncake" if copies == 1 else f"mooncake x{copies}", copies=copies)
