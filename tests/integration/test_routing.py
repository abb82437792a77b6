"""Routing policies on two real engine replicas (per-replica counters, engine prefix-cache
hits, session headers). A policy change reconfigures the running engines and restarts
the routers, never the engines."""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.metrics_reading import by_label, settled, wait_until
from tests.integration.settings import BASE, MODEL

pytestmark = pytest.mark.integration

REPLICA_HEADER = "x-serveout-replica"


def with_policy(policy: str) -> dict:
    return {**BASE, "routing": {"policy": policy}}


def chat(url: str, content: str, *, headers: dict | None = None, max_tokens: int = 4) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers or {}, timeout=120)
    response.raise_for_status()
    return response.headers[REPLICA_HEADER]


def routed(url: str) -> Counter:
    return Counter(by_label(url, "serveout_routed_requests_total", "replica"))


def test_least_loaded_spreads_concurrent_requests(stack):
    stack.ensure(with_policy("least-loaded"))
    before = settled(lambda: routed(stack.url))
    with ThreadPoolExecutor(8) as pool:
        replicas = Counter(pool.map(lambda i: chat(stack.url, f"Count to {i}", max_tokens=24), range(16)))
    assert len(replicas) == 2, replicas
    # Every process publishes its counters within a second or two.
    def all_counted() -> Counter | None:
        now = routed(stack.url)
        return now if sum((now - before).values()) >= 16 else None

    after = wait_until(all_counted, timeout_s=15)
    assert after is not None and sum((after - before).values()) == 16, (before, routed(stack.url))
    assert all(after[r] > before[r] for r in replicas)


def test_round_robin_splits_requests_evenly(stack):
    stack.ensure(with_policy("round-robin"))
    replicas = Counter(chat(stack.url, f"Hello {i}") for i in range(8))
    # HAProxy alternates between the two routers, and each alternates the replicas.
    assert sorted(replicas.values()) == [4, 4], replicas


def prefix_hit_rate(url: str, seed: int) -> float:
    """Engine prefix-cache hit rate (tokens) over 16 requests sharing 4 long prefixes."""
    rng = random.Random(seed)
    words = ["alpha", "river", "market", "signal", "garden", "metal", "cloud", "paper", "orbit", "stone"]
    prefixes = [" ".join(rng.choice(words) for _ in range(500)) for _ in range(4)]

    def totals():
        return (sum(by_label(url, "serveout_engine_prefix_cache_hits_total", "replica").values()),
                sum(by_label(url, "serveout_engine_prefix_cache_queries_total", "replica").values()))

    order = [p for p in range(4) for _ in range(4)]
    rng.shuffle(order)  # not i % 4: with 2 replicas, round-robin would be affine by accident
    hits0, queries0 = settled(totals)
    for i, p in enumerate(order):
        chat(url, f"{prefixes[p]}\nQuestion {i}: which word comes first?")
    # Replica stats reach the gateway about one period later.
    wait_until(lambda: totals()[1] - queries0 >= 16 * 500, timeout_s=15)
    hits1, queries1 = totals()
    return (hits1 - hits0) / (queries1 - queries0)


def prefix_decisions(url: str) -> dict[str, float]:
    decisions = by_label(url, "serveout_routing_decisions_total", "decision")
    return {k: v for k, v in decisions.items() if k.startswith("prefix_")}


def test_prefix_affinity_has_a_higher_engine_hit_rate_than_round_robin(stack):
    stack.ensure(with_policy("round-robin"))
    round_robin = prefix_hit_rate(stack.url, seed=1)
    stack.ensure(with_policy("prefix-affinity"))
    decisions_before = settled(lambda: prefix_decisions(stack.url))
    affinity = prefix_hit_rate(stack.url, seed=2)
    print(f"engine prefix-cache hit rate: round-robin {round_robin:.3f}, prefix-affinity {affinity:.3f}")
    assert affinity > round_robin + 0.1
    # Each of the 16 requests was decided once, by one of the node's router replicas
    # (each learns the prefixes it routed): past the first request of each prefix on each
    # router, the prefix decides.
    wait_until(lambda: sum(prefix_decisions(stack.url).values()) - sum(decisions_before.values()) >= 16,
               timeout_s=20)
    decisions = settled(lambda: prefix_decisions(stack.url))
    made = {k: decisions.get(k, 0) - decisions_before.get(k, 0) for k in decisions}
    print(f"routing decisions of the 16 requests: {made}")
    assert sum(made.values()) == 16
    assert made.get("prefix_hit", 0) >= 4


def test_prefix_affinity_sends_a_shared_prefix_to_one_replica(stack):
    stack.ensure(with_policy("prefix-affinity"))
    prefix = " ".join(["lighthouse"] * 400)
    replicas = {chat(stack.url, f"{prefix}\nQ{i}") for i in range(6)}
    assert len(replicas) == 1


def test_session_header_keeps_a_session_on_one_replica(stack):
    stack.ensure(with_policy("session"))
    # Requests without a session go least-loaded: wait until the router knows both replicas.
    live = set()
    for i in range(40):
        live.add(chat(stack.url, f"warm {i}"))
        if len(live) == 2:
            break
    assert len(live) == 2, live
    seen: dict[str, set[str]] = {}
    for i in range(32):  # two turns per session
        session = f"user-{i % 16}"
        seen.setdefault(session, set()).add(chat(stack.url, f"turn {i}", headers={"x-session-id": session}))
    assert all(len(replicas) == 1 for replicas in seen.values()), seen
    # 16 sessions hashed over 2 replicas all land on one with probability 2^-15.
    assert set().union(*seen.values()) == live
