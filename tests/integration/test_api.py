"""The OpenAI API through the real stack, with the official openai client."""

from __future__ import annotations

import time

import httpx

from tests.integration.metrics_reading import samples, settled, wait_until
import pytest

from tests.integration.settings import MODEL

pytestmark = pytest.mark.integration


def test_greedy_chat_knows_the_capital_of_france(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0, max_tokens=32)
    choice = reply.choices[0]
    assert "Paris" in choice.message.content
    assert choice.finish_reason == "stop"
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_streamed_chat_arrives_incrementally_and_usage_matches(openai_client, base_stack):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a short poem about the sea."}],
        max_tokens=48, temperature=0, stream=True, stream_options={"include_usage": True})
    arrivals, pieces, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                arrivals.append(time.monotonic())
                pieces.append(choice.delta.content)
    assert len(pieces) > 5
    assert arrivals[-1] - arrivals[0] > 0.05  # spread over time, not one burst
    text = "".join(pieces)
    counted = httpx.post(f"{base_stack.url}/tokenize",
                         json={"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["count"]
    assert usage is not None and usage.completion_tokens == 48
    # The final usage matches the tokens generated (re-tokenising text may merge a token or two).
    assert abs(counted - usage.completion_tokens) <= 2


def test_text_completion(openai_client):
    reply = openai_client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert reply.object == "text_completion"
    assert "Paris" in reply.choices[0].text  # the model's own continuation, greedy
    assert reply.usage.completion_tokens <= 8


def test_streamed_text_completion(openai_client):
    chunks = list(openai_client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_models_list(openai_client):
    models = openai_client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_tokenize_detokenize_round_trip(base_stack):
    text = "Serve-out scaling with vLLM, Ray Serve và tiếng Việt."
    tokens = httpx.post(f"{base_stack.url}/tokenize", json={"model": MODEL, "prompt": text}).json()
    assert tokens["count"] == len(tokens["tokens"]) > 5
    assert tokens["max_model_len"] == 2048
    back = httpx.post(f"{base_stack.url}/detokenize", json={"model": MODEL, "tokens": tokens["tokens"]}).json()
    assert back["prompt"] == text


def test_tokenize_chat_messages_counts_the_template(base_stack):
    messages = [{"role": "user", "content": "Hi"}]
    chat = httpx.post(f"{base_stack.url}/tokenize", json={"model": MODEL, "messages": messages}).json()
    plain = httpx.post(f"{base_stack.url}/tokenize", json={"model": MODEL, "prompt": "Hi"}).json()
    assert chat["count"] > plain["count"]


def test_stop_strings_are_honoured(openai_client):
    free = openai_client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0)
    assert " 6" in free.choices[0].text  # without a stop string the count goes on
    stopped = openai_client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[" 6"])
    assert " 6" not in stopped.choices[0].text
    assert free.choices[0].text.startswith(stopped.choices[0].text)
    assert stopped.choices[0].finish_reason == "stop"


def test_max_tokens_gives_length_finish(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a long story."}], max_tokens=5)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_n_choices_and_seed(openai_client):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8,
                  temperature=1.0, seed=7, n=3)
    first = openai_client.chat.completions.create(**kwargs)
    second = openai_client.chat.completions.create(**kwargs)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.message.content for c in first.choices] == [c.message.content for c in second.choices]
    assert all(c.message.content for c in first.choices)
    assert 3 <= first.usage.completion_tokens <= 3 * 8  # usage sums every choice


def test_health_and_metrics_count_each_request(base_stack, openai_client):
    assert httpx.get(f"{base_stack.url}/health").status_code == 200

    def figures() -> dict[str, float]:
        return {
            "ok": samples_sum(base_stack.url, "serveout_requests_total", status="200", endpoint="chat"),
            "generated": samples_sum(base_stack.url, "serveout_generation_tokens_total"),
            "prompt": samples_sum(base_stack.url, "serveout_prompt_tokens_total"),
            "ttft": samples_sum(base_stack.url, "serveout_time_to_first_token_seconds_count", endpoint="chat"),
            "latency": samples_sum(base_stack.url, "serveout_request_latency_seconds_count", endpoint="chat"),
        }

    before = settled(figures)  # every process publishes its series about once a second
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0)
    # /metrics merges every process's series; each replica publishes within a second.
    after = wait_until(lambda: (f := figures())["ok"] > before["ok"] and f, timeout_s=15)
    assert after, "the request never showed in /metrics"
    assert after["ok"] - before["ok"] == 1
    assert after["generated"] - before["generated"] == reply.usage.completion_tokens
    assert after["prompt"] - before["prompt"] == reply.usage.prompt_tokens
    assert after["ttft"] - before["ttft"] == 1 and after["latency"] - before["latency"] == 1
    text = base_stack.metrics_text()
    assert samples_sum(base_stack.url, "serveout_replicas", state="ready") == 2  # shown once
    assert 'le="0.05"' in text  # sub-second buckets
    assert "vllm:" not in text  # our own namespace


def test_request_id_is_returned_and_generated(openai_client):
    given = openai_client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        extra_headers={"X-Request-Id": "trace-test-1"})
    assert given.headers["x-request-id"] == "trace-test-1"
    made = openai_client.models.with_raw_response.list()
    assert made.headers["x-request-id"] and "," not in made.headers["x-request-id"]


def samples_sum(url: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(value for key, value in samples(url, name).items() if labels.items() <= dict(key).items())
