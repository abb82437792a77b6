"""Merging gateway replicas' registries into one exposition (pure: plain registries)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from serving.gateway.metrics import GatewayMetrics
from serving.gateway.metrics_board import (
    GATEWAY_REPLICA_LABEL,
    MetricsBoard,
    Snapshot,
    merged_families,
    render,
    split_shared,
)
from tests.fakes import FakeClock


def gateway(requests: int, *, engines_ready: int = 2) -> CollectorRegistry:
    """A registry holding one gateway replica's metrics after ``requests`` answered."""
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    metrics.declare_model("m")
    for _ in range(requests):
        metrics.count_request("m", "chat", "200", "anonymous")
        metrics.latency.labels("m", "chat").observe(0.2)
    metrics.replicas.labels("m", "ready").set(engines_ready)
    return registry


def snapshot(replica: str, registry: CollectorRegistry, seq: int = 0, shared=frozenset()) -> Snapshot:
    own, _ = split_shared(registry.collect(), shared)
    return Snapshot.of(replica, seq, own)


def parse(text: bytes) -> dict[str, list]:
    """``{sample name: [(labels, value), ...]}`` of an exposition."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def by_replica(samples: list, **labels: str) -> dict[str, float]:
    return {lab[GATEWAY_REPLICA_LABEL]: value for lab, value in samples
            if all(lab.get(k) == v for k, v in labels.items())}


def test_every_replicas_series_is_labelled_with_its_replica_and_they_sum():
    text = render(merged_families([snapshot("a", gateway(3)), snapshot("b", gateway(5))]))
    samples = parse(text)
    assert by_replica(samples["serveout_requests_total"], status="200") == {"a": 3.0, "b": 5.0}
    assert by_replica(samples["serveout_request_latency_seconds_count"]) == {"a": 3.0, "b": 5.0}
    assert by_replica(samples["serveout_request_latency_seconds_bucket"], le="+Inf") == {"a": 3.0, "b": 5.0}
    assert by_replica(samples["serveout_in_flight_requests"], model="m") == {"a": 0.0, "b": 0.0}
    # the exposition format allows a family once: one TYPE line per name
    types = [line for line in text.decode().splitlines() if line.startswith("# TYPE serveout_requests_total")]
    assert len(types) == 1


def test_shared_views_come_once_unlabelled_from_the_answering_replica():
    answering = gateway(1, engines_ready=2)
    own, views = split_shared(answering.collect(), frozenset({"serveout_replicas"}))
    assert [f.name for f in views] == ["serveout_replicas"]
    other = gateway(1, engines_ready=7)  # a snapshot that holds the view anyway is not trusted for it
    text = render(merged_families([Snapshot.of("a", 0, own), snapshot("b", other)], shared=views))
    assert parse(text)["serveout_replicas"] == [({"model": "m", "state": "ready"}, 2.0)]
    assert by_replica(parse(text)["serveout_requests_total"]) == {"a": 1.0, "b": 1.0}


def test_a_single_replica_renders_its_registry_plus_the_label():
    registry = gateway(2)
    merged = parse(render(merged_families([snapshot("only", registry)])))
    plain = parse(generate_latest(registry))
    assert merged.keys() == plain.keys()
    for name, samples in plain.items():
        assert merged[name] == [({**labels, GATEWAY_REPLICA_LABEL: "only"}, v) for labels, v in samples]


def test_a_family_of_another_type_under_the_same_name_is_left_out_for_that_replica():
    as_counter, as_gauge = CollectorRegistry(), CollectorRegistry()
    Counter("thing", "a counter", registry=as_counter).inc(2)
    Gauge("thing", "a gauge", registry=as_gauge).set(9)
    samples = parse(render(merged_families([snapshot("a", as_counter), snapshot("b", as_gauge)])))
    assert by_replica(samples["thing_total"]) == {"a": 2.0}
    assert "thing" not in samples


def test_the_board_keeps_each_replicas_newest_snapshot():
    board = MetricsBoard(clock=FakeClock())
    board.publish(snapshot("a", gateway(2), seq=2))
    board.publish(snapshot("a", gateway(1), seq=1))  # late: older than what the board holds
    board.publish(snapshot("b", gateway(4), seq=0))
    assert [(s.replica, s.seq) for s in board.snapshots()] == [("a", 2), ("b", 0)]
    assert by_replica(parse(render(merged_families(board.snapshots())))["serveout_requests_total"]) == {
        "a": 2.0, "b": 4.0}


def test_the_board_forgets_a_replica_that_stopped_publishing_or_withdrew():
    clock = FakeClock()
    board = MetricsBoard(stale_after_s=5.0, clock=clock)
    board.publish(snapshot("a", gateway(1)))
    board.publish(snapshot("b", gateway(1)))
    board.publish(snapshot("c", gateway(1)))
    clock.now = 4.0
    board.publish(snapshot("a", gateway(2), seq=1))
    clock.now = 6.0
    assert [s.replica for s in board.snapshots()] == ["a"]
    board.withdraw("a")
    assert [s.replica for s in board.exchange(snapshot("d", gateway(1)))] == ["d"]
