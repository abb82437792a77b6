"""The gateway's real metrics registry, rendered, read back per version."""

from prometheus_client import CollectorRegistry, generate_latest

from serving.gateway.metrics import GatewayMetrics
from serving.rollout.scrape import version_counts


def test_requests_errors_histograms_and_in_flight_per_version():
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    for status in ("200", "200", "499", "500"):
        metrics.count_request("clinic-v2", "chat", status, "anonymous")
    metrics.count_request("clinic", "chat", "200", "anonymous")
    metrics.count_request("clinic", "completions", "503", "anonymous")
    metrics.ttft.labels("clinic-v2", "chat").observe(0.04)
    metrics.ttft.labels("clinic-v2", "completions").observe(0.6)
    metrics.tpot.labels("clinic-v2").observe(0.02)
    metrics.in_flight.labels("clinic").inc()
    counts = version_counts(generate_latest(registry).decode(), ("clinic", "clinic-v2", "pharmacy"))
    canary, stable = counts["clinic-v2"], counts["clinic"]
    assert (canary.requests, canary.errors, canary.in_flight) == (4, 1, 0)
    assert (stable.requests, stable.errors, stable.in_flight) == (2, 1, 1)
    assert dict(canary.ttft)[0.05] == 1 and dict(canary.ttft)[float("inf")] == 2  # both endpoints summed
    assert dict(canary.tpot)[float("inf")] == 1 and stable.ttft == ()
    assert counts["pharmacy"].requests == 0
