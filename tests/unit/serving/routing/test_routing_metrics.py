import dataclasses
import gc

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from serving.config.stack import RoutingPolicyName
from serving.engine.protocol import EngineStats
from serving.routing.metrics import (
    _ENGINE_FAMILIES,
    RoutingMetrics,
    RoutingMetricsCollector,
    routing_collector,
)
from serving.routing.policy import RoutingDecision

PREFIX = RoutingPolicyName.PREFIX_AFFINITY


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    families = [f.name for f in text_string_to_metric_families(text)]
    assert len(families) == len(set(families)), "a metric family appears twice"
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def sample(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def routed(deployment: str, replica: str, policy: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample("serveout_routed_requests_total", deployment=deployment, replica=replica, policy=policy)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_routers_of_several_deployments_share_one_collector_per_registry(registry):
    collector = routing_collector(registry)
    assert routing_collector(registry) is collector  # registering again never raises
    assert routing_collector(CollectorRegistry()) is not collector
    chat, code = RoutingMetrics("chat"), RoutingMetrics("code")
    collector.attach(chat)
    routing_collector(registry).attach(code)
    chat.count_routed("r1", PREFIX, RoutingDecision.PREFIX_HIT)
    chat.count_routed("r1", PREFIX, RoutingDecision.PREFIX_MISS)
    code.count_routed("r9", RoutingPolicyName.SESSION, RoutingDecision.SESSION_NEW)
    samples = scrape(registry)
    assert samples[routed("chat", "r1", "prefix-affinity")] == 2
    assert samples[routed("code", "r9", "session")] == 1
    assert samples[sample("serveout_routing_decisions_total", deployment="chat", policy="prefix-affinity",
                          decision="prefix_hit")] == 1
    assert samples[sample("serveout_routing_decisions_total", deployment="code", policy="session",
                          decision="session_new")] == 1


def test_two_routers_of_one_deployment_add_up(registry):
    first, second = RoutingMetrics("chat"), RoutingMetrics("chat")
    routing_collector(registry).attach(first)
    routing_collector(registry).attach(second)
    first.count_routed("r1", PREFIX, RoutingDecision.PREFIX_HIT)
    second.count_routed("r1", PREFIX, RoutingDecision.PREFIX_HIT)
    assert scrape(registry)[routed("chat", "r1", "prefix-affinity")] == 2


def test_engine_stats_and_queue_depth_per_replica(registry):
    metrics = RoutingMetrics("chat")
    routing_collector(registry).attach(metrics)
    metrics.set_replicas({
        "r1": EngineStats("r1", waiting=2, running=3, kv_cache_usage=0.25, prefix_cache_queries=1024,
                          prefix_cache_hits=512, prompt_tokens=2000, generation_tokens=300),
        "r2": EngineStats("r2", waiting=1, running=1),
        "r3": None,  # not polled yet: no engine series
    })
    samples = scrape(registry)
    r1 = {"deployment": "chat", "replica": "r1"}
    assert samples[sample("serveout_engine_waiting_requests", **r1)] == 2
    assert samples[sample("serveout_engine_running_requests", **r1)] == 3
    assert samples[sample("serveout_engine_kv_cache_usage", **r1)] == 0.25
    assert samples[sample("serveout_engine_prefix_cache_queries_total", **r1)] == 1024
    assert samples[sample("serveout_engine_prefix_cache_hits_total", **r1)] == 512
    assert samples[sample("serveout_engine_prompt_tokens_total", **r1)] == 2000
    assert samples[sample("serveout_engine_generation_tokens_total", **r1)] == 300
    assert samples[sample("serveout_queue_depth", deployment="chat")] == 7
    assert sample("serveout_engine_waiting_requests", deployment="chat", replica="r3") not in samples


def test_series_of_replicas_that_left_are_dropped(registry):
    metrics = RoutingMetrics("chat")
    routing_collector(registry).attach(metrics)
    metrics.set_replicas({"r1": EngineStats("r1", waiting=4), "r2": EngineStats("r2")})
    metrics.count_routed("r1", PREFIX, RoutingDecision.PREFIX_HIT)
    metrics.count_routed("r2", PREFIX, RoutingDecision.PREFIX_HIT)
    metrics.set_replicas({"r2": EngineStats("r2")})
    replicas = {dict(labels).get("replica") for (_, labels) in scrape(registry)}
    assert "r1" not in replicas and "r2" in replicas
    assert scrape(registry)[sample("serveout_queue_depth", deployment="chat")] == 0


def test_a_routers_series_go_away_with_the_router(registry):
    metrics = RoutingMetrics("gone")
    routing_collector(registry).attach(metrics)
    metrics.count_routed("r1", PREFIX, RoutingDecision.PREFIX_MISS)
    assert any(dict(labels).get("deployment") == "gone" for (_, labels) in scrape(registry))
    del metrics
    gc.collect()
    assert not any(dict(labels).get("deployment") == "gone" for (_, labels) in scrape(registry))


def test_the_openmetrics_output_is_valid_too(registry):
    metrics = RoutingMetrics("chat")
    routing_collector(registry).attach(metrics)
    metrics.set_replicas({"r1": EngineStats("r1", waiting=1)})
    metrics.count_routed("r1", PREFIX, RoutingDecision.PREFIX_HIT)
    families = list(parse_openmetrics(generate_openmetrics(registry).decode()))
    assert len({f.name for f in families}) == len(families)


def test_someone_else_registering_our_names_is_caught(registry):
    routing_collector(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(RoutingMetricsCollector())


def test_every_engine_family_reads_an_engine_stats_field():
    fields = {f.name for f in dataclasses.fields(EngineStats)}
    fields |= {name for name, value in vars(EngineStats).items() if isinstance(value, property)}
    assert {spec.stat for spec in _ENGINE_FAMILIES} <= fields


def test_failed_replicas_of_every_router_are_listed_for_status(registry):
    collector = routing_collector(registry)
    first, second = RoutingMetrics("chat"), RoutingMetrics("code")
    collector.attach(first)
    collector.attach(second)
    assert collector.failed_replicas() == []
    first.set_failed(frozenset({"r2"}))
    second.set_failed(frozenset({"r9", "r2"}))
    assert collector.failed_replicas() == ["r2", "r9"]
    first.set_failed(frozenset())
    assert collector.failed_replicas() == ["r2", "r9"]
    second.set_failed(frozenset({"r9"}))
    assert collector.failed_replicas() == ["r9"]


def test_adapter_residency_is_one_series_per_replica_and_loaded_adapter(registry):
    metrics = RoutingMetrics("engine")
    routing_collector(registry).attach(metrics)
    metrics.set_replicas({
        "r1": EngineStats("r1", adapters=("clinic", "pharmacy", "admin"), adapters_cached=("clinic", "pharmacy"),
                          adapters_active=("clinic",), adapter_evictions=3),
        "r2": EngineStats("r2", adapters=("clinic",)),  # its cache not polled yet: no residency series
    })
    samples = scrape(registry)
    residency = {labels: v for (name, labels), v in samples.items() if name == "serveout_engine_adapter_residency"}
    assert residency == {
        sample("x", adapter="clinic", deployment="engine", replica="r1", state="active")[1]: 1,
        sample("x", adapter="pharmacy", deployment="engine", replica="r1", state="cached")[1]: 1,
        sample("x", adapter="admin", deployment="engine", replica="r1", state="absent")[1]: 1,
    }
    assert samples[sample("serveout_engine_adapter_evictions_total", deployment="engine", replica="r1")] == 3
    assert samples[sample("serveout_engine_adapters_cached", deployment="engine", replica="r1")] == 2
    assert samples[sample("serveout_engine_adapters_active", deployment="engine", replica="r2")] == 0
