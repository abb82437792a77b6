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


def plan_requests(plan: ReplayPlan, name: str) -> RequestSet:
    """A replay plan's requests with token ids shared exactly as their block hashes are."""
    if plan.block_size is None:
        raise ValueError(f"trace {plan.source} has no block hashes")
    size = plan.block_size
    fresh = FreshIds()
    out = []
    for t, r in zip(plan.arrivals.tolist(), plan.requests):
        ids: list[int] = []
        for h in r.hash_ids:
            ids.extend(range(BLOCK_BASE + h * size, BLOCK_BASE + (h + 1) * size))
        if len(ids) < r.input_tokens:
            ids.extend(fresh.take(r.input_tokens - len(ids)))
        out.append(TimedRequest(t, tuple(ids[:r.input_tokens]), r.output_tokens, r.session, r.turn))
    return RequestSet(name, tuple(out), f"{plan.source} ({len(out)} requests, {plan.sessions} sessions)")


def mooncake_requests(path: Path = EXCERPT, *, speed: float = 1.0) -> RequestSet:
    """The trace at ``path`` (default: the bundled excerpt), sessions inferred from prefixes."""
    plan = replay_plan(TraceSelection(path=path, sessions=SessionSource.PREFIX), speed)
    return plan_requests(plan, "mooncake")
