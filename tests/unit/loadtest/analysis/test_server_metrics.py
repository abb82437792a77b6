"""The server timeline extracted from a target's ``/metrics`` text."""

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from loadtest.analysis.server_metrics import counter_delta, extract_server_sample, parse_samples
from loadtest.errors import ParseError

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2-135m-instruct"} 12.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smollm2-135m-instruct"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2-135m-instruct"} 0.25
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="smollm2-135m-instruct"} 1024.0
vllm:generation_tokens_total{engine="0",model_name="smollm2-135m-instruct"} 4096.0
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2-135m-instruct"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2-135m-instruct"} 250.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="smollm2-135m-instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="smollm2-135m-instruct"} 7.0
process_cpu_seconds_total 12.5
"""

SERVEOUT = """\
serveout_queue_depth{model="smollm2-135m-instruct"} 9
serveout_engine_waiting_requests{model="smollm2-135m-instruct",replica="a"} 1
serveout_engine_waiting_requests{model="smollm2-135m-instruct",replica="b"} 2
serveout_engine_running_requests{model="smollm2-135m-instruct",replica="a"} 3
serveout_engine_running_requests{model="smollm2-135m-instruct",replica="b"} 3
serveout_engine_kv_cache_usage{model="smollm2-135m-instruct",replica="a"} 0.2
serveout_engine_kv_cache_usage{model="smollm2-135m-instruct",replica="b"} 0.6
serveout_replicas{model="smollm2-135m-instruct",state="ready"} 2
serveout_replicas{model="smollm2-135m-instruct",state="desired"} 3
serveout_replicas{model="other",state="ready"} 5
serveout_in_flight_requests{model="smollm2-135m-instruct"} 11
serveout_prompt_tokens_total{model="smollm2-135m-instruct"} 100
serveout_generation_tokens_total{model="smollm2-135m-instruct"} 200
serveout_requests_total{model="smollm2-135m-instruct",endpoint="chat",status="200"} 7
"""

MODEL = "smollm2-135m-instruct"


def test_vllm_timeline_sample():
    sample = extract_server_sample(parse_samples(VLLM), t=1.5, model=MODEL)
    assert sample.t == 1.5
    assert (sample.waiting, sample.running, sample.queue_depth) == (3.0, 12.0, 15.0)
    assert sample.kv_cache_usage == 0.25
    assert sample.generation_tokens_total == 4096.0 and sample.prompt_tokens_total == 1024.0
    assert sample.replicas_ready is None and sample.in_flight is None


def test_serveout_timeline_sample_wins_and_filters_model():
    sample = extract_server_sample(parse_samples(SERVEOUT + VLLM), t=0.0, model=MODEL)
    assert sample.queue_depth == 9 and sample.waiting == 3 and sample.running == 6
    assert sample.kv_cache_usage == pytest.approx(0.4) and sample.kv_cache_usage_max == pytest.approx(0.6)
    assert (sample.replicas_ready, sample.replicas_desired) == (2, 3)
    assert sample.in_flight == 11
    assert sample.generation_tokens_total == 200
    # vLLM-only counters still come through
    assert sample.prefix_cache_hits_total == 250.0


def test_other_model_is_ignored():
    sample = extract_server_sample(parse_samples(VLLM), t=0.0, model="other-model")
    assert sample.running is None and sample.generation_tokens_total is None


def test_a_model_mix_counts_every_model_it_sends():
    # serveout counts an adapter's tokens and in-flight requests under the adapter's name;
    # its replicas are the base model's
    adapters = ('serveout_in_flight_requests{model="clinic"} 4\n'
                'serveout_generation_tokens_total{model="clinic"} 50\n'
                'serveout_generation_tokens_total{model="pharmacy"} 7\n')
    samples = parse_samples(SERVEOUT + adapters)
    mixed = extract_server_sample(samples, t=0.0, model=frozenset({MODEL, "clinic"}))
    assert (mixed.in_flight, mixed.generation_tokens_total) == (11 + 4, 200 + 50)  # not pharmacy's: not sent
    assert (mixed.replicas_ready, mixed.queue_depth) == (2, 9)  # not "other"'s replicas
    assert extract_server_sample(samples, t=0.0, model=MODEL).generation_tokens_total == 200


def test_serveout_engine_prefix_cache_counters_are_read():
    text = (
        "serveout_engine_prefix_cache_queries_total{deployment=\"engine\",replica=\"a\"} 100\n"
        "serveout_engine_prefix_cache_queries_total{deployment=\"engine\",replica=\"b\"} 50\n"
        "serveout_engine_prefix_cache_hits_total{deployment=\"engine\",replica=\"a\"} 40\n"
    )
    sample = extract_server_sample(parse_samples(text), t=0.0, model="m")
    assert (sample.prefix_cache_queries_total, sample.prefix_cache_hits_total) == (150, 40)


def test_counters_rendered_by_prometheus_client_are_read():
    # Real exporters (vLLM, the gateway) use prometheus_client: a counter family is named
    # without ``_total`` and its samples carry ``_total`` (plus ``_created``).
    registry = CollectorRegistry()
    Counter("serveout_prompt_tokens", "", ["model"], registry=registry).labels(MODEL).inc(100)
    Counter("vllm:generation_tokens", "", ["model_name"], registry=registry).labels(MODEL).inc(40)
    Gauge("vllm:num_requests_running", "", ["model_name"], registry=registry).labels(MODEL).set(2)
    Histogram("vllm:e2e_request_latency_seconds", "", ["model_name"], registry=registry).labels(MODEL).observe(1)
    sample = extract_server_sample(parse_samples(generate_latest(registry).decode()), t=0.0, model=MODEL)
    assert (sample.prompt_tokens_total, sample.generation_tokens_total, sample.running) == (100, 40, 2)


@pytest.mark.parametrize("line", ["novalue", 'm{a="1" 2', "m{a=1} 2", "m abc", "1m 2", 'm{="x"} 1'])
def test_malformed_text_raises_parse_error(line):
    with pytest.raises(ParseError, match="malformed metrics text"):
        parse_samples(f"ok 1\n{line}\n")


def test_counter_delta():
    samples = [
        extract_server_sample(parse_samples(f"vllm:generation_tokens_total {v}"), t=i, model=MODEL)
        for i, v in enumerate([10, 15, 40])
    ]
    assert counter_delta(samples, "generation_tokens_total") == 30
    assert counter_delta(samples[:1], "generation_tokens_total") is None
    assert counter_delta(samples, "prompt_tokens_total") is None
