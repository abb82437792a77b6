"""``cache-aware``: the engine's cache decides, the prefill queue and the load bound
stop a hit from costing the tail, bursts spread, and the router core feeds it."""

from __future__ import annotations

import random
from collections.abc import Sequence

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.cache_aware import CacheAwarePolicy
from serving.routing.core import Candidate, RoutingCore
from serving.routing.metrics import RoutingMetrics
from serving.routing.policy import ReplicaLoad, RoutingDecision, RoutingRequest
from serving.routing.prefix_index import block_hashes
from serving.routing.registry import build_policy, policy_names
from tests.unit.serving.routing.routing_fakes import prompt, rank

BLOCK = 4


class FakeCacheView:
    """An engine cache holding exactly the given block hashes (a fake of the KV event index)."""

    def __init__(self, *prompts: Sequence[int]) -> None:
        self.held: set[int] = set()
        for p in prompts:
            self.add(p)

    def add(self, tokens: Sequence[int]) -> None:
        self.held.update(block_hashes(tokens, BLOCK))

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.held:
                break
            n += 1
        return n


def policy(**kw) -> CacheAwarePolicy:
    return CacheAwarePolicy(block_tokens=BLOCK, rng=random.Random(0), **kw)


def replica(name: str, load: int = 0, cache: FakeCacheView | None = None) -> ReplicaLoad:
    return ReplicaLoad(name, serve_queue_len=load, cache=cache)


def request(i: int, tokens: tuple[int, ...]) -> RoutingRequest:
    return RoutingRequest(str(i), tokens)


DOC = prompt(1, 2, 3, 4, 5, 6, block_tokens=BLOCK)


def test_the_replica_whose_engine_holds_the_prefix_goes_first():
    replicas = [replica("a", 1, FakeCacheView()), replica("b", 1, FakeCacheView(DOC)), replica("c", 1, FakeCacheView())]
    ranking = rank(policy(), request(0, DOC + (9,)), replicas)
    assert ranking.order[0] == "b" and ranking.decision is RoutingDecision.CACHE_HIT
    assert set(ranking.order) == {"a", "b", "c"}


def test_a_holder_past_the_load_bound_is_skipped():
    replicas = [replica("a", 1, FakeCacheView()), replica("b", 9, FakeCacheView(DOC)), replica("c", 1, FakeCacheView())]
    ranking = rank(policy(load_bound=2.0), request(0, DOC + (9,)), replicas)
    assert ranking.order[0] != "b" and ranking.decision is RoutingDecision.CACHE_SPILL
    # within the bound the hit wins
    assert rank(policy(load_bound=3.0, queue_weight=0.0), request(1, DOC + (9,)), replicas).order[0] == "b"


def test_a_holder_with_a_long_prefill_queue_loses_a_small_hit():
    cached = FakeCacheView(prompt(1, block_tokens=BLOCK))
    p = policy(miss_weight=1.0, queue_weight=0.0)
    queue_views = {"a": cached, "b": FakeCacheView()}
    # Queue a long prompt on "a" whose blocks its engine has not scheduled yet.
    long = prompt(*range(50, 70), block_tokens=BLOCK)
    assert rank(p, request(0, long), [replica("a", 0, queue_views["a"])]).order == ("a",)
    ranking = rank(p, request(1, prompt(1, 2, block_tokens=BLOCK)),
                   [replica("a", 1, queue_views["a"]), replica("b", 1, queue_views["b"])])
    assert ranking.order[0] == "b"
    # Once "a"'s engine has scheduled that prompt (its blocks are cached), the hit wins again.
    queue_views["a"].add(long)
    assert rank(p, request(2, prompt(1, 2, block_tokens=BLOCK)),
                [replica("a", 1, queue_views["a"]), replica("b", 1, queue_views["b"])]).order[0] == "a"


def test_a_burst_sharing_a_new_prefix_follows_the_first_in_flight():
    p = policy()
    views = {name: FakeCacheView() for name in "abc"}
    first = rank(p, request(0, DOC + (7,)), [replica(n, 0, v) for n, v in views.items()]).order[0]
    loads = {n: int(n == first) for n in views}
    second = rank(p, request(1, DOC + (8,)), [replica(n, loads[n], v) for n, v in views.items()])
    assert second.order[0] == first and second.decision is RoutingDecision.CACHE_HIT
    p.on_finished("0")
    p.on_finished("1")  # finished and not in the engine's cache (a fake that learnt nothing): forgotten
    third = rank(p, request(2, DOC + (9,)), [replica(n, 0, v) for n, v in views.items()])
    assert third.decision is RoutingDecision.CACHE_MISS


def test_requests_at_equal_cost_spread_like_round_robin():
    # No engine view (nothing to prefill is known) and equal loads: a burst of 8 on 4 replicas.
    p = policy()
    chosen = [rank(p, request(i, prompt(100 + i, block_tokens=BLOCK)), [replica(n) for n in "abcd"]).order[0]
              for i in range(8)]
    assert sorted(chosen[:4]) == ["a", "b", "c", "d"] and sorted(chosen[4:]) == ["a", "b", "c", "d"]


def test_without_engine_events_it_follows_where_it_sent_the_prefix():
    p = policy()
    first = rank(p, request(0, DOC + (7,)), [replica("a"), replica("b")])
    p.on_routed(request(0, DOC + (7,)), first.order[0])
    p.on_finished("0")
    assert rank(p, request(1, DOC + (8,)), [replica("a"), replica("b")]).order[0] == first.order[0]


def test_it_is_registered_and_configured_from_the_spec():
    assert "cache-aware" in policy_names()
    spec = RoutingSpec(policy=RoutingPolicyName.CACHE_AWARE, prefix_block_tokens=16, load_bound=1.5,
                       miss_weight=2.0, queue_weight=0.5)
    built = build_policy(spec)
    assert isinstance(built, CacheAwarePolicy)
    assert (built.block_tokens, built.load_bound, built.miss_weight, built.queue_weight) == (16, 1.5, 2.0, 0.5)


def test_the_core_hands_each_replica_its_cache_view_and_reports_finishes():
    views = {"a": FakeCacheView(), "b": FakeCacheView(DOC)}
    core = RoutingCore(policy(), RoutingMetrics("engine"), rng=random.Random(0), cache_views=views.get)
    core.update_replicas({"a": None, "b": None})
    candidates = [Candidate("a", 0), Candidate("b", 0)]
    assert core.loads(candidates)[1].cache is views["b"]
    order = core.choose(request(0, DOC + (5,)), candidates)
    assert order[0] == "b"
    core.on_finished("0")
    assert not core.policy._flights  # the policy heard the request end
