"""The gateway's Prometheus metrics (namespace ``serveout_``).

| name | type | labels |
| --- | --- | --- |
| serveout_requests_total | counter | model, endpoint, status |
| serveout_request_latency_seconds | histogram | model, endpoint |
| serveout_time_to_first_token_seconds | histogram | model, endpoint |
| serveout_time_per_output_token_seconds | histogram | model |
| serveout_traffic_split_percent | gauge | model, version (a split model name's versions) |
| serveout_request_prompt_tokens / _generation_tokens | histogram | model |
| serveout_prompt_tokens_total / serveout_generation_tokens_total | counter | model |
| serveout_in_flight_requests | gauge | model |
| serveout_rejected_requests_total | counter | model, reason |
| serveout_retries_total | counter | model, reason (engine_dead / actor_died) |
| serveout_streams_resumed_total | counter | model, reason (engine_dead / actor_died) |
| serveout_replicas | gauge | model, state (ready / starting / desired) |
| serveout_key_requests_total | counter | key, status |
| serveout_key_tokens_total | counter | key, kind (prompt / generation) |
| serveout_key_in_flight_requests | gauge | key |
| serveout_key_rejected_requests_total | counter | key, reason |
| serveout_class_in_flight_requests | gauge | model, priority_class |
| serveout_class_rejected_requests_total | counter | model, priority_class, reason |
| serveout_auth_failures_total | counter | reason (missing / invalid) |
| serveout_keys_reload_failures_total | counter | |
| serveout_planned_requests_total | counter | source (router / replica) |

``reason`` of a refusal: ``overloaded`` (the bound), ``priority`` (a lower class's
ceiling), ``fair_share``, ``concurrency``, ``rpm``, ``tpm``; ``draining`` (503 while
the gateway drains). ``key`` is a key's name from the keys
file, or ``anonymous`` when no keys are configured; ``priority_class`` one of
``gateway.priority.classes`` (a request's class is checked against them before it is
counted): bounded sets, never the key itself nor client input.

The request router adds per-replica engine and routing metrics (see
:mod:`serving.routing.metrics`). When the app can run several gateway replicas, every
series but the shared views also carries ``gateway_replica`` (see
:mod:`serving.gateway.metrics_sharing`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from serving.admission.api_keys import ANONYMOUS

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                   1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
                0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
REPLICAS_FAMILY = "serveout_replicas"


class GatewayMetrics:
    """All gateway metrics, registered on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "serveout_requests_total", "Requests answered, by HTTP status.",
            ["model", "endpoint", "status"], registry=registry)
        self.latency = Histogram(
            "serveout_request_latency_seconds", "Request latency until the last byte.",
            ["model", "endpoint"], buckets=LATENCY_BUCKETS, registry=registry)
        self.ttft = Histogram(
            "serveout_time_to_first_token_seconds", "Time to the first generated token.",
            ["model", "endpoint"], buckets=LATENCY_BUCKETS, registry=registry)
        self.tpot = Histogram(
            "serveout_time_per_output_token_seconds", "Time per output token after the first, per request.",
            ["model"], buckets=TPOT_BUCKETS, registry=registry)
        self.split_percent = Gauge(
            "serveout_traffic_split_percent", "Share of a split model name's sticky keys each version gets.",
            ["model", "version"], registry=registry)
        self.prompt_tokens_hist = Histogram(
            "serveout_request_prompt_tokens", "Prompt tokens per request.",
            ["model"], buckets=TOKEN_BUCKETS, registry=registry)
        self.generation_tokens_hist = Histogram(
            "serveout_request_generation_tokens", "Generated tokens per request.",
            ["model"], buckets=TOKEN_BUCKETS, registry=registry)
        self.prompt_tokens = Counter(
            "serveout_prompt_tokens", "Prompt tokens processed.", ["model"], registry=registry)
        self.generation_tokens = Counter(
            "serveout_generation_tokens", "Tokens generated.", ["model"], registry=registry)
        self.in_flight = Gauge(
            "serveout_in_flight_requests", "Requests admitted and not finished.",
            ["model"], registry=registry)
        self.rejected = Counter(
            "serveout_rejected_requests_total", "Requests refused, by reason.",
            ["model", "reason"], registry=registry)
        self.retries = Counter(
            "serveout_retries", "Requests retried on another replica after theirs died, by cause.",
            ["model", "reason"], registry=registry)
        self.resumed = Counter(
            "serveout_streams_resumed", "Streams resumed on another replica after theirs died mid-answer, by cause.",
            ["model", "reason"], registry=registry)
        self.replicas = Gauge(
            REPLICAS_FAMILY, "Engine replicas by state.", ["model", "state"], registry=registry)
        self.key_requests = Counter(
            "serveout_key_requests", "Requests answered per API key name, by HTTP status.",
            ["key", "status"], registry=registry)
        self.key_tokens = Counter(
            "serveout_key_tokens", "Prompt and generated tokens per API key name.",
            ["key", "kind"], registry=registry)
        self.key_in_flight = Gauge(
            "serveout_key_in_flight_requests", "Requests admitted and not finished, per API key name.",
            ["key"], registry=registry)
        self.key_rejected = Counter(
            "serveout_key_rejected_requests", "Requests refused with 429 per API key name, by reason.",
            ["key", "reason"], registry=registry)
        self.class_in_flight = Gauge(
            "serveout_class_in_flight_requests", "Requests admitted and not finished, per priority class.",
            ["model", "priority_class"], registry=registry)
        self.class_rejected = Counter(
            "serveout_class_rejected_requests", "Requests refused with 429 (503 draining) per priority "
            "class, by reason.", ["model", "priority_class", "reason"], registry=registry)
        self.auth_failures = Counter(
            "serveout_auth_failures", "Requests refused for a missing or wrong API key.",
            ["reason"], registry=registry)
        self.keys_reload_failures = Counter(
            "serveout_keys_reload_failures", "Changed API keys files refused (the old keys stay).",
            registry=registry)
        self.planned = Counter(
            "serveout_planned_requests", "Completion requests by who tokenised them: the router "
            "(its plan reached the replica) or the replica itself (no plan for it).",
            ["source"], registry=registry)

    def declare_model(self, model: str) -> None:
        """Export the per-model counters at 0 before the first request.

        A scraper that diffs counters (the load tester) then sees the first request's
        tokens, instead of a series that appears with them already counted.
        """
        for family in (self.prompt_tokens, self.generation_tokens, self.in_flight):
            family.labels(model)

    def declare_keys(self, keys: tuple[str, ...]) -> None:
        """Export the per-key series at 0 (the label set is exactly these names)."""
        for key in keys:
            self.key_in_flight.labels(key)
            for kind in ("prompt", "generation"):
                self.key_tokens.labels(key, kind)

    def count_request(self, model: str, endpoint: str, status: str, key: str) -> None:
        self.requests.labels(model, endpoint, status).inc()
        self.key_requests.labels(key, status).inc()

    def declare_classes(self, model: str, classes: tuple[str, ...]) -> None:
        """Export the per-class in-flight gauge of ``model`` at 0."""
        for klass in classes:
            self.class_in_flight.labels(model, klass)

    def count_rejected(self, model: str, key: str, reason: str, klass: str | None = None) -> None:
        self.rejected.labels(model, reason).inc()
        self.key_rejected.labels(key, reason).inc()
        if klass is not None:
            self.class_rejected.labels(model, klass, reason).inc()

    def record_tokens(self, model: str, prompt: int, generated: int, key: str = ANONYMOUS) -> None:
        self.prompt_tokens_hist.labels(model).observe(prompt)
        self.generation_tokens_hist.labels(model).observe(generated)
        self.prompt_tokens.labels(model).inc(prompt)
        self.generation_tokens.labels(model).inc(generated)
        self.key_tokens.labels(key, "prompt").inc(prompt)
        self.key_tokens.labels(key, "generation").inc(generated)
