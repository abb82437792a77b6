"""Prometheus text parsing and the server timeline extracted from it."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.errors import ParseError
from loadtest.client.prometheus import MetricSample, parse_prometheus_text, select
from loadtest.analysis.server_metrics import counter_delta, extract_server_sample

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2-135m-instruct"} 12.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smollm2-135m-instruct"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2-135m-instruct"} 0.25
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


def test_parse_vllm_exposition():
    samples = parse_prometheus_text(VLLM)
    assert len(samples) == 10
    running = select(samples, "vllm:num_requests_running")[0]
    assert running.value == 12.0 and running.label("engine") == "0"
    inf_bucket = select(samples, "vllm:time_to_first_token_seconds_bucket", le="+Inf")
    assert inf_bucket[0].value == 7.0
    assert select(samples, "process_cpu_seconds_total")[0].labels == ()


def test_escapes_special_values_and_timestamps():
    text = (
        'm{path="C:\\\\tmp",msg="say \\"hi\\"\\nbye",x="a,b=c}"} NaN\n'
        "n +Inf 1712345678000\n"
        "o{} -Inf\n"
        'p{a="1",} 2.5e-3\n'
        "# EOF\n"
    )
    m, n, o, p = parse_prometheus_text(text)
    assert m.label("path") == "C:\\tmp"
    assert m.label("msg") == 'say "hi"\nbye'
    assert m.label("x") == "a,b=c}"
    assert math.isnan(m.value)
    assert n.value == math.inf and o.value == -math.inf
    assert p.value == pytest.approx(0.0025) and p.labels == (("a", "1"),)


@pytest.mark.parametrize(
    "line", ["novalue", 'm{a="1" 2', 'm{a=1} 2', "m abc", "m 1 2 3", "1m 2", 'm{="x"} 1']
)
def test_bad_lines_raise_with_line_number(line):
    with pytest.raises(ParseError, match="line 2"):
        parse_prometheus_text(f"ok 1\n{line}\n")


label_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
sample_strategy = st.builds(
    lambda name, labels, value: MetricSample(name, tuple(sorted(labels.items())), value),
    st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,15}", fullmatch=True),
    st.dictionaries(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True), label_text, max_size=4),
    st.floats(allow_nan=False, width=64),
)


def render(sample):
    def esc(v):
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    labels = ",".join(f'{k}="{esc(v)}"' for k, v in sample.labels)
    value = repr(sample.value) if math.isfinite(sample.value) else ("+Inf" if sample.value > 0 else "-Inf")
    return f"{sample.name}{{{labels}}} {value}" if labels else f"{sample.name} {value}"


@settings(max_examples=200, deadline=None)
@given(st.lists(sample_strategy, max_size=20))
def test_render_then_parse_round_trips(samples):
    text = "# HELP x y\n" + "\n".join(render(s) for s in samples)
    assert parse_prometheus_text(text) == samples


def test_vllm_timeline_sample():
    sample = extract_server_sample(parse_prometheus_text(VLLM), t=1.5, model=MODEL)
    assert sample.t == 1.5
    assert (sample.waiting, sample.running, sample.queue_depth) == (3.0, 12.0, 15.0)
    assert sample.kv_cache_usage == 0.25
    assert sample.generation_tokens_total == 4096.0 and sample.prompt_tokens_total == 1024.0
    assert sample.replicas_ready is None and sample.in_flight is None


def test_serveout_timeline_sample_wins_and_filters_model():
    samples = parse_prometheus_text(SERVEOUT + VLLM)
    sample = extract_server_sample(samples, t=0.0, model=MODEL)
    assert sample.queue_depth == 9 and sample.waiting == 3 and sample.running == 6
    assert sample.kv_cache_usage == pytest.approx(0.4) and sample.kv_cache_usage_max == pytest.approx(0.6)
    assert (sample.replicas_ready, sample.replicas_desired) == (2, 3)
    assert sample.in_flight == 11
    assert sample.generation_tokens_total == 200
    # vLLM-only counters still come through
    assert sample.prefix_cache_hits_total == 250.0


def test_other_model_is_ignored():
    sample = extract_server_sample(parse_prometheus_text(VLLM), t=0.0, model="other-model")
    assert sample.running is None and sample.generation_tokens_total is None


def test_counter_delta():
    samples = [
        extract_server_sample(parse_prometheus_text(f"vllm:generation_tokens_total {v}"), t=i, model=MODEL)
        for i, v in enumerate([10, 15, 40])
    ]
    assert counter_delta(samples, "generation_tokens_total") == 30
    assert counter_delta(samples[:1], "generation_tokens_total") is None
    assert counter_delta(samples, "prompt_tokens_total") is None
