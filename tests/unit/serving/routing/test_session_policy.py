import random
from collections import Counter

from serving.routing.policy import RoutingDecision, RoutingRequest
from serving.routing.session import SessionPolicy
from tests.unit.serving.routing.routing_fakes import loads, rank


def session(session_id: str | None) -> RoutingRequest:
    return RoutingRequest("r", (1, 2, 3), session_id)


def test_a_session_returns_to_its_replica_whatever_the_load():
    policy = SessionPolicy()
    first = rank(policy, session("alice"), loads(a=0, b=0, c=0))
    assert first.decision is RoutingDecision.SESSION_NEW
    for load in ({"a": 9, "b": 0, "c": 0}, {"a": 0, "b": 9, "c": 9}):
        again = rank(policy, session("alice"), loads(**load))
        assert again.order == first.order
        assert again.decision is RoutingDecision.SESSION_HIT


def test_sessions_spread_over_replicas():
    policy = SessionPolicy()
    owners = Counter(rank(policy, session(f"s{i}"), loads(a=0, b=0, c=0)).order[0] for i in range(600))
    assert set(owners) == {"a", "b", "c"}
    assert min(owners.values()) > 100


def test_without_a_session_id_it_goes_least_loaded():
    policy = SessionPolicy(rng=random.Random(0))
    for session_id in (None, ""):
        ranking = rank(policy, session(session_id), loads(a=5, b=0))
        assert ranking.decision is RoutingDecision.LEAST_LOADED
        assert ranking.order[0] == "b"


def test_when_a_replica_leaves_only_its_sessions_move():
    policy = SessionPolicy()
    everyone = loads(a=0, b=0, c=0)
    owner = {f"s{i}": rank(policy, session(f"s{i}"), everyone).order[0] for i in range(200)}
    policy.on_replicas_changed(frozenset({"a", "b"}))
    for session_id, replica in owner.items():
        ranking = rank(policy, session(session_id), loads(a=0, b=0))
        if replica == "c":
            assert ranking.decision is RoutingDecision.SESSION_MOVED
        else:
            assert ranking.order[0] == replica
            assert ranking.decision is RoutingDecision.SESSION_HIT


def test_the_ring_follows_the_replicas_ranked_even_without_the_hook():
    policy = SessionPolicy()
    ranking = rank(policy, session("bob"), loads(x=0))
    assert ranking.order == ("x",)
    assert rank(policy, session("bob"), []).order == ()


def test_remembers_a_bounded_number_of_sessions_for_the_decision_label():
    policy = SessionPolicy(remembered_sessions=2)
    replicas = loads(a=0, b=0)
    for session_id in ("s1", "s2", "s3"):
        rank(policy, session(session_id), replicas)
    assert rank(policy, session("s3"), replicas).decision is RoutingDecision.SESSION_HIT
    assert rank(policy, session("s1"), replicas).decision is RoutingDecision.SESSION_NEW  # forgotten
