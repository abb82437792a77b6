"""LoRA slots in routing (RoutingCore): an adapter request goes first to a replica
whose engine can batch it now; a hot adapter still spreads by load."""

import random
from collections import Counter

from prometheus_client import CollectorRegistry

from serving.engine.protocol import EngineStats
from serving.routing.assignments import Assignment, AssignmentTracker
from serving.routing.cache_aware import CacheAwarePolicy
from serving.routing.core import COLD_LOAD_MARGIN, Candidate, RoutingCore
from serving.routing.least_loaded import LeastLoadedPolicy
from serving.routing.metrics import RoutingMetrics, RoutingMetricsCollector
from serving.routing.policy import RoutingDecision, RoutingRequest
from serving.config.stack import RoutingPolicyName
from tests.unit.serving.routing.routing_fakes import prompt

CANDIDATES = [Candidate("a"), Candidate("b")]


def core_with_slots(slots: int = 1, policy=None) -> RoutingCore:
    core = RoutingCore(policy or LeastLoadedPolicy(rng=random.Random(0)), RoutingMetrics("engine"),
                       rng=random.Random(0))
    core.update_replicas({r: EngineStats(r, adapter_slots=slots) for r in ("a", "b")})
    return core


def send(core: RoutingCore, request_id: str, adapter: str | None, candidates=CANDIDATES) -> str:
    return core.choose(RoutingRequest(request_id, prompt(1, 2), adapter=adapter), candidates)[0]


def test_an_adapter_goes_where_it_already_runs_when_the_other_replica_slots_are_full():
    core = core_with_slots(slots=1)
    first = send(core, "q1", "clinic")
    other = "b" if first == "a" else "a"
    assert send(core, "q2", "pharmacy") == other  # a free slot beats a full one
    # Both replicas' one slot is taken: clinic goes back to its own replica, though loads are equal.
    assert send(core, "q3", "clinic") == first
    assert send(core, "q4", "pharmacy") == other


def test_replicas_that_must_wait_for_a_slot_are_ranked_after_the_fitting_ones():
    core = core_with_slots(slots=1)
    core.choose(RoutingRequest("q1", adapter="clinic"), [Candidate("a")])
    for i in range(3):  # b is busier, but runs pharmacy
        core.choose(RoutingRequest(f"p{i}", adapter="pharmacy"), [Candidate("b")])
    assert core.choose(RoutingRequest("q2", adapter="pharmacy"), CANDIDATES) == ("b", "a")


def test_base_model_requests_need_no_slot():
    core = core_with_slots(slots=1)
    core.choose(RoutingRequest("q1", adapter="clinic"), [Candidate("a")])
    core.choose(RoutingRequest("q2", adapter="clinic"), [Candidate("a")])
    core.choose(RoutingRequest("q3", adapter="pharmacy"), [Candidate("b")])
    assert send(core, "base", None) == "b"  # plain least-loaded


def test_a_hot_adapter_spreads_over_every_replica_running_it():
    core = core_with_slots(slots=2)
    chosen = Counter(send(core, f"q{i}", "clinic") for i in range(20))
    assert chosen == Counter(a=10, b=10)


def test_when_no_replica_fits_the_policy_ranks_them_all_and_the_wait_is_counted():
    core = core_with_slots(slots=1)
    core.choose(RoutingRequest("q1", adapter="clinic"), [Candidate("a")])
    core.choose(RoutingRequest("q2", adapter="pharmacy"), [Candidate("b")])
    assert set(core.choose(RoutingRequest("q3", adapter="admin"), CANDIDATES)) == {"a", "b"}
    assert core.metrics.snapshot().slot_waits == {"admin": 1}


def test_a_slot_frees_when_its_adapter_last_request_finishes():
    core = core_with_slots(slots=1)
    core.choose(RoutingRequest("q1", adapter="clinic"), [Candidate("a")])
    for i in range(3):  # base-model requests: load on a, but no slot
        core.choose(RoutingRequest(f"base{i}"), [Candidate("a")])
    core.choose(RoutingRequest("q2", adapter="pharmacy"), [Candidate("b")])
    assert send(core, "q3", "admin") == "b"  # nowhere fits: by load
    core.on_finished("q3")
    core.on_finished("q1")
    assert send(core, "q4", "admin") == "a"  # a's slot is free: it fits there only


def test_unknown_slots_before_the_first_stats_poll_fit_everywhere():
    core = RoutingCore(LeastLoadedPolicy(rng=random.Random(0)), RoutingMetrics("engine"))
    core.update_replicas({"a": None, "b": EngineStats("b")})  # b: started without LoRA (0 slots)
    firsts = Counter(send(core, f"q{i}", f"adapter{i}") for i in range(4))
    assert firsts == Counter(a=2, b=2)
    assert core.metrics.snapshot().slot_waits == {}


def test_cache_aware_ranks_only_the_fitting_replicas_first():
    policy = CacheAwarePolicy(block_tokens=4, rng=random.Random(0))
    core = core_with_slots(slots=1, policy=policy)
    core.choose(RoutingRequest("q1", prompt(7, 8), adapter="clinic"), [Candidate("a")])
    core.on_routed(RoutingRequest("q1", prompt(7, 8), adapter="clinic"), "a")
    core.choose(RoutingRequest("q2", prompt(1, 2), adapter="pharmacy"), [Candidate("b")])
    # The prompt's blocks are in flight on b under pharmacy, not clinic: no hit anywhere for clinic.
    assert core.choose(RoutingRequest("q3", prompt(1, 2), adapter="clinic"), CANDIDATES) == ("a", "b")


def test_the_tracker_counts_requests_per_adapter_per_replica_through_moves_and_releases():
    tracker = AssignmentTracker()
    least = RoutingPolicyName.LEAST_LOADED
    tracker.assign("q1", Assignment("a", least, RoutingDecision.LEAST_LOADED, adapter="clinic"))
    tracker.assign("q2", Assignment("a", least, RoutingDecision.LEAST_LOADED, adapter="clinic"))
    tracker.assign("q3", Assignment("a", least, RoutingDecision.LEAST_LOADED))
    assert tracker.adapters("a") == Counter(clinic=2)
    tracker.move("q2", "b")
    assert (tracker.adapters("a"), tracker.adapters("b")) == (Counter(clinic=1), Counter(clinic=1))
    tracker.release("q1")
    tracker.retain({"a"})
    assert (tracker.adapters("a"), tracker.adapters("b"), tracker.count("a")) == (Counter(), Counter(), 1)


def test_slot_waits_are_exported_per_adapter():
    metrics = RoutingMetrics("engine")
    metrics.count_slot_wait("clinic")
    metrics.count_slot_wait("clinic")
    collector = RoutingMetricsCollector()
    collector.attach(metrics)
    registry = CollectorRegistry()
    registry.register(collector)
    assert registry.get_sample_value("serveout_adapter_slot_waits_total",
                                     {"deployment": "engine", "adapter": "clinic"}) == 2


def test_with_adapter_slots_off_the_policy_alone_ranks():
    core = core_with_slots(slots=1)
    core.adapter_slots = False
    core.choose(RoutingRequest("q1", adapter="clinic"), [Candidate("a")])
    for i in range(3):
        core.choose(RoutingRequest(f"p{i}", adapter="pharmacy"), [Candidate("b")])
    assert core.choose(RoutingRequest("q2", adapter="pharmacy"), CANDIDATES)[0] == "a"  # least loaded
    assert core.metrics.snapshot().slot_waits == {}


def core_with_cache(cached: dict[str, tuple[str, ...]], slots: int = 4) -> RoutingCore:
    """Replicas whose engines report ``cached`` adapters in host memory (the others evicted)."""
    core = RoutingCore(LeastLoadedPolicy(rng=random.Random(0)), RoutingMetrics("engine"), rng=random.Random(0))
    core.update_replicas({r: EngineStats(r, adapter_slots=slots, adapters=("clinic", "pharmacy", "admin"),
                                         adapters_cached=held) for r, held in cached.items()})
    return core


def test_an_adapter_goes_first_where_its_engine_caches_it_in_host_memory():
    core = core_with_cache({"a": ("pharmacy",), "b": ("clinic",)})
    for i in range(3):  # b is busier with clinic, which a evicted: a would read it from disk
        send(core, f"c{i}", "clinic")
    assert [send(core, f"p{i}", "pharmacy") for i in range(3)] == ["a", "a", "a"]
    assert core.choose(RoutingRequest("c9", adapter="clinic"), CANDIDATES) == ("b", "a")


def test_a_busy_cached_replica_shares_a_hot_adapter_with_a_cold_one_past_the_margin():
    core = core_with_cache({"a": ("pharmacy",), "b": ("clinic",)})
    chosen = [send(core, f"c{i}", "clinic") for i in range(COLD_LOAD_MARGIN + 4)]
    assert chosen[:COLD_LOAD_MARGIN + 1] == ["b"] * (COLD_LOAD_MARGIN + 1)
    assert "a" in chosen[COLD_LOAD_MARGIN + 1:]  # b is more than the margin busier: a takes some


def test_residency_unknown_before_the_first_cache_poll_prefers_no_replica():
    core = core_with_cache({"a": (), "b": ("clinic",)})  # a reports no cache yet
    assert Counter(send(core, f"c{i}", "clinic") for i in range(4)) == Counter(a=2, b=2)


def test_engine_stats_say_where_an_adapter_is():
    stats = EngineStats("a", adapters=("clinic", "pharmacy", "admin"), adapters_cached=("clinic", "pharmacy"),
                        adapters_active=("clinic",))
    assert [stats.adapter_residency(n) for n in ("clinic", "pharmacy", "admin")] == ["active", "cached", "absent"]
    assert EngineStats("b", adapters=("clinic",)).adapter_residency("clinic") == "unknown"
    assert (stats.adapters_cached_count, stats.adapters_active_count) == (2, 1)
