import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from serving.engine.protocol import EngineStats
from serving.routing.least_loaded import LeastLoadedPolicy, power_of_two_order
from serving.routing.policy import (
    ReplicaLoad,
    RoutingDecision,
    RoutingRequest,
    engine_stats_from_routing_stats,
)
from tests.unit.serving.routing.routing_fakes import loads, rank

REQUEST = RoutingRequest("r")


def test_of_two_replicas_the_less_loaded_always_goes_first():
    policy = LeastLoadedPolicy(rng=random.Random(0))
    for _ in range(50):
        ranking = rank(policy, REQUEST, loads(busy=5, idle=0))
        assert ranking.order == ("idle", "busy")
        assert ranking.decision is RoutingDecision.LEAST_LOADED


def test_samples_two_rather_than_taking_the_global_minimum():
    # The idle replica wins whenever it is one of the two sampled: 2 times in 3.
    rng = random.Random(1)
    replicas = loads(idle=0, b=10, c=10)
    firsts = Counter(power_of_two_order(replicas, rng)[0] for _ in range(3000))
    assert 0.6 < firsts["idle"] / 3000 < 0.73
    assert firsts["b"] > 0 and firsts["c"] > 0


@given(
    st.lists(st.integers(0, 20), min_size=1, max_size=8),
    st.integers(0, 2**32),
)
def test_order_is_a_permutation_led_by_the_lighter_of_the_sampled_pair(load_values, seed):
    replicas = [
        ReplicaLoad(f"r{i}", engine=EngineStats(f"r{i}", running=v)) for i, v in enumerate(load_values)
    ]
    order = power_of_two_order(replicas, random.Random(seed))
    by_id = {r.replica_id: r.load for r in replicas}
    assert sorted(order) == sorted(by_id)
    if len(order) >= 2:
        assert by_id[order[0]] <= by_id[order[1]]
        heaviest = max(by_id.values())
        if list(by_id.values()).count(heaviest) == 1:  # a unique heaviest replica never goes first
            assert by_id[order[0]] < heaviest
        assert sorted(by_id[r] for r in order[2:]) == [by_id[r] for r in order[2:]]


def test_empty_replicas_give_an_empty_order():
    assert rank(LeastLoadedPolicy(), REQUEST, []).order == ()


def test_load_is_live_assignments_or_serve_queue_never_stale_stats():
    stale = EngineStats("a", waiting=2, running=5)  # polled a period ago: ignored
    assert ReplicaLoad("a").load == 0
    assert ReplicaLoad("a", engine=stale).load == 0
    assert ReplicaLoad("a", engine=stale, assigned=9).load == 9
    assert ReplicaLoad("a", engine=stale, assigned=1, serve_queue_len=11).load == 11
    assert ReplicaLoad("a", engine=None, assigned=3).load == 3


def test_fresh_assignments_outweigh_stale_idle_stats():
    policy = LeastLoadedPolicy(rng=random.Random(0))
    replicas = [
        ReplicaLoad("a", engine=EngineStats("a"), assigned=4),
        ReplicaLoad("b", engine=EngineStats("b"), assigned=0),
    ]
    assert rank(policy, REQUEST, replicas).order[0] == "b"


def test_routing_stats_become_engine_stats_at_the_boundary():
    stats = EngineStats("a", waiting=1, running=2, kv_cache_usage=0.5, prefix_cache_hits=128)
    assert engine_stats_from_routing_stats(stats.to_dict()) == stats
    assert engine_stats_from_routing_stats({}) is None
    assert engine_stats_from_routing_stats({"waiting": 3}) is None  # not EngineStats: no replica_id
