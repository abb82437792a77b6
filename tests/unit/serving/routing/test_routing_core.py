import random
from collections import Counter

from serving.config.stack import RoutingPolicyName
from serving.engine.protocol import EngineStats
from serving.routing.core import Candidate, RoutingCore
from serving.routing.least_loaded import LeastLoadedPolicy
from serving.routing.metrics import RoutingMetrics
from serving.routing.policy import RoutingDecision, RoutingRequest
from serving.routing.prefix_affinity import PrefixAffinityPolicy
from serving.routing.prefix_index import block_hashes
from serving.routing.round_robin import RoundRobinPolicy
from tests.unit.serving.routing.routing_fakes import prompt

CANDIDATES = [Candidate("a"), Candidate("b")]


def prefix_core(threshold: int = 2) -> RoutingCore:
    policy = PrefixAffinityPolicy(
        block_tokens=4, imbalance_threshold=threshold, max_blocks=100, rng=random.Random(0)
    )
    core = RoutingCore(policy, RoutingMetrics("engine"), rng=random.Random(0))
    core.update_replicas({"a": EngineStats("a"), "b": EngineStats("b")})
    return core


def choose(core: RoutingCore, request: RoutingRequest, candidates=CANDIDATES, **kw) -> tuple[str, ...]:
    return core.choose(request, candidates, **kw)


def test_concurrent_first_requests_sharing_a_prefix_do_not_herd_onto_one_replica():
    # 20 requests arrive before any completes and before stats move (all engines idle).
    core = prefix_core(threshold=2)
    shared = prompt(1, 2, 3)
    firsts = Counter(choose(core, RoutingRequest(f"q{i}", shared + (i,)))[0] for i in range(20))
    assert set(firsts) == {"a", "b"}
    assert abs(firsts["a"] - firsts["b"]) <= 3  # threshold + 1
    assert core.assigned("a") + core.assigned("b") == 20


def test_a_chosen_request_counts_as_load_until_it_finishes():
    core = RoutingCore(LeastLoadedPolicy(rng=random.Random(0)), RoutingMetrics("engine"))
    core.update_replicas({"a": None, "b": None})
    first = choose(core, RoutingRequest("q1"))[0]
    other = "b" if first == "a" else "a"
    assert core.assigned(first) == 1
    assert choose(core, RoutingRequest("q2"))[0] == other
    core.on_finished("q1")
    core.on_finished("q2")
    assert core.assigned("a") == core.assigned("b") == 0


def test_load_comes_from_live_assignments_and_serve_queue_not_stale_stats():
    core = RoutingCore(LeastLoadedPolicy(), RoutingMetrics("engine"))
    core.update_replicas({"a": EngineStats("a", waiting=4), "b": None})
    choose(core, RoutingRequest("q1"), [Candidate("b")])
    by_id = {r.replica_id: r for r in core.loads([Candidate("a"), Candidate("b", serve_queue_len=6)])}
    assert (by_id["a"].load, by_id["b"].load) == (0, 6)
    assert by_id["b"].assigned == 1 and by_id["a"].engine.waiting == 4


def test_routed_generation_requests_are_counted_where_serve_sent_them():
    metrics = RoutingMetrics("engine")
    core = RoutingCore(RoundRobinPolicy(), metrics)
    core.update_replicas({"a": None, "b": None})
    request = RoutingRequest("q1")
    assert choose(core, request)[0] == "a"
    core.on_routed(request, "b")  # "a" was full
    snap = metrics.snapshot()
    assert snap.routed == {("b", RoutingPolicyName.ROUND_ROBIN): 1}
    assert snap.decisions == {(RoutingPolicyName.ROUND_ROBIN, RoutingDecision.ROUND_ROBIN): 1}
    assert (core.assigned("a"), core.assigned("b")) == (0, 1)


def test_control_calls_go_least_loaded_and_are_not_counted():
    metrics = RoutingMetrics("engine")
    core = RoutingCore(RoundRobinPolicy(), metrics, rng=random.Random(0))
    core.update_replicas({"a": EngineStats("a"), "b": EngineStats("b")})
    busy = [Candidate("a", serve_queue_len=5), Candidate("b")]
    for i in range(5):
        request = RoutingRequest(f"stats{i}")
        assert choose(core, request, busy, generation=False)[0] == "b"
        core.on_routed(request, "b")
        core.on_finished(request.request_id)
    assert metrics.snapshot().routed == {}


def test_replicas_leaving_drop_their_assignments_and_their_prefixes():
    core = prefix_core()
    request = RoutingRequest("q1", prompt(1, 2))
    first = choose(core, request)[0]
    other = "b" if first == "a" else "a"
    core.update_replicas({other: None})
    assert core.assigned(first) == 0
    head = block_hashes(request.prompt_token_ids, 4)[0]
    assert head not in core.policy.index
    assert choose(core, RoutingRequest("q2", prompt(1, 2)), [Candidate(other)]) == (other,)


def test_no_candidates_assign_nothing():
    core = prefix_core()
    assert choose(core, RoutingRequest("q1", prompt(1)), []) == ()
    assert not core.is_tracking("q1")


def least_loaded_core() -> RoutingCore:
    core = RoutingCore(LeastLoadedPolicy(rng=random.Random(0)), RoutingMetrics("engine"), rng=random.Random(0))
    core.update_replicas({"a": EngineStats("a"), "b": EngineStats("b")})
    return core


def test_least_loaded_skips_a_replica_marked_failed_though_it_looks_idlest():
    # "a" fails every request at once, so it shows no load; "b" is busy.
    core = least_loaded_core()
    core.mark_failed("a")
    candidates = [Candidate("a", serve_queue_len=0), Candidate("b", serve_queue_len=5)]
    orders = [choose(core, RoutingRequest(f"q{i}"), candidates) for i in range(20)]
    assert all(order == ("b",) for order in orders)
    assert core.assigned("a") == 0 and core.metrics.snapshot().failed == {"a"}


def test_a_failed_mark_lasts_until_serve_removes_the_replica():
    core = least_loaded_core()
    core.mark_failed("a")
    core.mark_failed("gone")  # not live: ignored
    assert core.metrics.snapshot().failed == {"a"}
    core.update_replicas({"b": EngineStats("b"), "c": EngineStats("c")})  # "a" replaced by "c"
    assert core.metrics.snapshot().failed == frozenset()
    assert set(choose(core, RoutingRequest("q"), [Candidate("b"), Candidate("c")])) == {"b", "c"}


def test_when_every_candidate_failed_they_are_still_ranked():
    # The request then fails fast with a clear error instead of waiting in Serve's queue.
    core = least_loaded_core()
    core.mark_failed("a")
    core.mark_failed("b")
    assert set(choose(core, RoutingRequest("q"))) == {"a", "b"}


def test_prefix_affinity_skips_a_failed_replica_that_holds_the_prefix():
    core = prefix_core()
    shared = prompt(1, 2, 3)
    holder = choose(core, RoutingRequest("warm", shared))[0]
    core.on_routed(RoutingRequest("warm", shared), holder)
    core.on_finished("warm")
    core.mark_failed(holder)
    other = ({"a", "b"} - {holder}).pop()
    assert choose(core, RoutingRequest("next", shared)) == (other,)
