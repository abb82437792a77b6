import random

from serving.routing.policy import RoutingDecision, RoutingRequest
from serving.routing.prefix_affinity import PrefixAffinityPolicy
from serving.routing.prefix_index import block_hashes
from tests.unit.serving.routing.routing_fakes import loads, prompt, rank

BLOCK = 4


def make_policy(threshold: int = 2, max_blocks: int = 1000) -> PrefixAffinityPolicy:
    return PrefixAffinityPolicy(
        block_tokens=BLOCK, imbalance_threshold=threshold, max_blocks=max_blocks, rng=random.Random(0)
    )


def request(*blocks: int, tail=(7, 7), session=None) -> RoutingRequest:
    return RoutingRequest("r", prompt(*blocks, block_tokens=BLOCK, tail=tail), session)


def test_a_new_prefix_is_a_miss_routed_least_loaded_and_recorded_at_once():
    policy = make_policy()
    ranking = rank(policy, request(1, 2, 3), loads(a=3, b=0))
    assert ranking.decision is RoutingDecision.PREFIX_MISS
    assert ranking.order[0] == "b"
    hashes = block_hashes(request(1, 2, 3).prompt_token_ids, BLOCK)
    assert all(policy.index.holders(h) == ("b",) for h in hashes)  # before any response


def test_sticks_to_the_replica_holding_the_prefix_within_the_threshold():
    policy = make_policy(threshold=2)
    first = rank(policy, request(1, 2, 3, tail=(5,)), loads(a=0, b=0)).order[0]
    other = "b" if first == "a" else "a"
    later = rank(policy, request(1, 2, 3, tail=(6, 6, 6)), loads(**{first: 2, other: 0}))
    assert later.decision is RoutingDecision.PREFIX_HIT
    assert later.order == (first, other)


def test_falls_back_to_least_loaded_past_the_threshold():
    policy = make_policy(threshold=2)
    first = rank(policy, request(1, 2), loads(a=0, b=0)).order[0]
    other = "b" if first == "a" else "a"
    later = rank(policy, request(1, 2), loads(**{first: 3, other: 0}))
    assert later.decision is RoutingDecision.PREFIX_FALLBACK_IMBALANCE
    assert later.order[0] == other
    # the prefix now lives on both: either is a hit once the load evens out
    again = rank(policy, request(1, 2), loads(**{first: 3, other: 3}))
    assert again.decision is RoutingDecision.PREFIX_HIT


def test_prefers_the_longest_match():
    policy = make_policy(threshold=10)
    policy.index.record(block_hashes(prompt(1, 2, 3, block_tokens=BLOCK), BLOCK), "deep")
    policy.index.record(block_hashes(prompt(1, block_tokens=BLOCK), BLOCK), "shallow")
    ranking = rank(policy, request(1, 2, 3), loads(shallow=0, deep=4, idle=0))
    assert ranking.order[0] == "deep"
    assert ranking.decision is RoutingDecision.PREFIX_HIT


def test_prompts_shorter_than_a_block_are_misses():
    policy = make_policy()
    ranking = rank(policy, RoutingRequest("r", (1, 2, 3)), loads(a=1, b=0))
    assert ranking.decision is RoutingDecision.PREFIX_MISS
    assert ranking.order[0] == "b"
    assert len(policy.index) == 0


def test_a_replica_that_left_is_never_chosen_for_its_prefixes():
    policy = make_policy()
    policy.index.record(block_hashes(prompt(1, 2, block_tokens=BLOCK), BLOCK), "gone")
    ranking = rank(policy, request(1, 2), loads(a=0))
    assert ranking.order == ("a",)
    assert ranking.decision is RoutingDecision.PREFIX_MISS
    policy.on_replicas_changed(frozenset({"a"}))
    hashes = block_hashes(request(1, 2).prompt_token_ids, BLOCK)
    assert all("gone" not in policy.index.holders(h) for h in hashes)


def test_where_serve_actually_sent_a_request_is_recorded_too():
    policy = make_policy()
    first = rank(policy, request(4, 5), loads(a=0, b=0)).order[0]
    other = "b" if first == "a" else "a"
    policy.on_routed(request(4, 5), other)  # Serve found the first full and moved on
    head = block_hashes(request(4, 5).prompt_token_ids, BLOCK)[0]
    assert set(policy.index.holders(head)) == {"a", "b"}


def test_the_index_stays_within_max_prefix_blocks():
    policy = make_policy(max_blocks=5)
    for i in range(20):
        rank(policy, request(i, i + 100, i + 200), loads(a=0, b=0))
        assert len(policy.index) <= 5


def test_without_live_load_concurrent_first_requests_herd_onto_one_replica():
    # The hazard the router's assignment count exists for (see test_routing_core):
    # with every load stale at zero, a shared prefix pulls every request to one replica.
    policy = make_policy(threshold=2)
    firsts = {rank(policy, request(1, 2, 3), loads(a=0, b=0)).order[0] for _ in range(20)}
    assert len(firsts) == 1


def test_two_gateways_send_a_new_prefix_to_the_same_home_replica():
    """Each gateway replica has its own router and index: a prefix neither has seen
    must still land on one replica, or every gateway would warm a different cache."""
    replicas = loads(a=0, b=0, c=0, d=0)
    for first_block in range(20):
        gateway_1 = PrefixAffinityPolicy(block_tokens=BLOCK, imbalance_threshold=2, max_blocks=100,
                                         rng=random.Random(1))
        gateway_2 = PrefixAffinityPolicy(block_tokens=BLOCK, imbalance_threshold=2, max_blocks=100,
                                         rng=random.Random(2))
        one = rank(gateway_1, request(first_block, 9), replicas)
        two = rank(gateway_2, request(first_block, 8), replicas)
        assert one.decision is two.decision is RoutingDecision.PREFIX_MISS
        assert one.order[0] == two.order[0]


def test_new_prefixes_spread_over_the_replicas_by_their_home():
    homes = {rank(make_policy(), request(first_block), loads(a=0, b=0, c=0)).order[0]
             for first_block in range(30)}
    assert homes == {"a", "b", "c"}


def test_an_overloaded_home_is_passed_over_for_the_least_loaded():
    policy = make_policy(threshold=2)
    home = rank(make_policy(threshold=2), request(5), loads(a=0, b=0)).order[0]
    other = "b" if home == "a" else "a"
    ranking = rank(policy, request(5), loads(**{home: 3, other: 0}))
    assert ranking.decision is RoutingDecision.PREFIX_MISS
    assert ranking.order[0] == other


def test_without_homes_a_new_prefix_goes_least_loaded():
    policy = PrefixAffinityPolicy(block_tokens=BLOCK, imbalance_threshold=2, max_blocks=100, home=False,
                                  rng=random.Random(0))
    assert rank(policy, request(5), loads(a=1, b=0)).order[0] == "b"
