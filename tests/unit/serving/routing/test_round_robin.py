from serving.routing.policy import RoutingDecision, RoutingRequest
from serving.routing.round_robin import RoundRobinPolicy
from tests.unit.serving.routing.routing_fakes import loads, rank

REQUEST = RoutingRequest("r")


def test_cycles_through_every_replica_in_turn():
    policy = RoundRobinPolicy()
    replicas = loads(a=0, b=0, c=0)
    orders = [rank(policy, REQUEST, replicas).order for _ in range(6)]
    assert [o[0] for o in orders] == ["a", "b", "c", "a", "b", "c"]
    assert orders[1] == ("b", "c", "a")  # the rest of the cycle follows as fallbacks


def test_ignores_load_and_the_order_serve_lists_replicas_in():
    policy = RoundRobinPolicy()
    firsts = [rank(policy, REQUEST, loads(c=9, a=0, b=5)).order[0] for _ in range(3)]
    firsts += [rank(policy, REQUEST, loads(b=0, c=0, a=9)).order[0] for _ in range(3)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    assert rank(policy, REQUEST, loads(a=0)).decision is RoutingDecision.ROUND_ROBIN


def test_keeps_cycling_when_replicas_come_and_go():
    policy = RoundRobinPolicy()
    assert rank(policy, REQUEST, loads(a=0, b=0)).order == ("a", "b")
    assert sorted(rank(policy, REQUEST, loads(a=0, b=0, c=0)).order) == ["a", "b", "c"]
    assert rank(policy, REQUEST, loads(c=0)).order == ("c",)
    assert rank(policy, REQUEST, []).order == ()
