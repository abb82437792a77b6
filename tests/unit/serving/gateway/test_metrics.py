"""Gateway metrics: per-model series exist from the start."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from serving.gateway.metrics import GatewayMetrics


def test_declared_model_counters_start_at_zero():
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    metrics.declare_model("m")
    text = generate_latest(registry).decode()
    assert 'serveout_generation_tokens_total{model="m"} 0.0' in text
    assert 'serveout_prompt_tokens_total{model="m"} 0.0' in text
    assert 'serveout_in_flight_requests{model="m"} 0.0' in text
    metrics.record_tokens("m", prompt=5, generated=7)
    assert 'serveout_generation_tokens_total{model="m"} 7.0' in generate_latest(registry).decode()
