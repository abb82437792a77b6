"""Client mistakes get OpenAI-style errors with the right status: never a 500, never a hang."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.integration.metrics_reading import samples, settled, wait_until
from tests.integration.settings import MODEL

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"


def post(stack, path, **kwargs):
    return httpx.post(f"{stack.url}{path}", timeout=30, **kwargs)


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    return error


def test_malformed_json_is_400(base_stack):
    error = error_of(post(base_stack, CHAT, content=b'{"model": ', headers={"content-type": "application/json"}), 400)
    assert error["type"] == "invalid_request_error"
    assert "JSON" in error["message"]


def test_wrong_types_are_400_naming_the_field(base_stack):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "lots"}
    assert error_of(post(base_stack, CHAT, json=body), 400)["param"] == "max_tokens"


def test_missing_messages_is_400(base_stack):
    assert error_of(post(base_stack, CHAT, json={"model": MODEL}), 400)["param"] == "messages"


def test_body_that_is_not_an_object_is_400(base_stack):
    error_of(post(base_stack, CHAT, json=[1, 2, 3]), 400)


def test_unknown_model_is_404(base_stack):
    body = {"model": "gpt-17", "messages": [{"role": "user", "content": "hi"}]}
    error = error_of(post(base_stack, CHAT, json=body), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"


def test_over_long_prompt_is_400_before_any_replica(base_stack):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 10}
    error = error_of(post(base_stack, CHAT, json=body), 400)
    assert error["code"] == "context_length_exceeded"
    assert "2048" in error["message"]


def test_prompt_plus_max_tokens_over_context_is_400(base_stack):
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 4096}
    assert error_of(post(base_stack, "/v1/completions", json=body), 400)["code"] == "context_length_exceeded"


def test_body_too_large_is_413(base_stack):
    body = b'{"model": "x", "prompt": "' + b"a" * 2_000_000 + b'"}'
    error = error_of(post(base_stack, "/v1/completions", content=body, headers={"content-type": "application/json"}), 413)
    assert error["code"] == "request_too_large"


def test_unsupported_parameter_is_400(base_stack):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 1}
    assert error_of(post(base_stack, CHAT, json=body), 400)["param"] == "prompt_logprobs"


@pytest.mark.parametrize("raw, param", [
    (b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),  # RecursionError before
    ('{"model": "%s", "messages": [{"role": "user", "content": "\\ud800"}]}' % MODEL, None),  # tokenizer TypeError
    ('{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "seed": 9223372036854775808}' % MODEL, "seed"),
    ('{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "best_of": 2}' % MODEL, "best_of"),
])
def test_hostile_bodies_are_400_not_500(base_stack, raw, param):
    response = post(base_stack, CHAT, content=raw, headers={"content-type": "application/json"})
    assert error_of(response, 400)["param"] == param


def answer(client, prompt: str, **sampling) -> str:
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=24, **sampling)
    return reply.choices[0].message.content


def test_min_tokens_is_honoured(openai_client):
    # The greedy answer stops by itself after k tokens; min_tokens = k + 4 makes it go on.
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    free = openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0)
    assert free.choices[0].finish_reason == "stop"
    k = free.usage.completion_tokens
    forced = openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0,
                                                   extra_body={"min_tokens": k + 4})
    assert forced.usage.completion_tokens >= k + 4


def test_top_k_of_one_samples_the_greedy_answer(openai_client):
    prompt = "Name three colours."
    greedy = answer(openai_client, prompt, temperature=0)
    assert all(answer(openai_client, prompt, temperature=1.5, seed=seed, extra_body={"top_k": 1}) == greedy
               for seed in (1, 2, 3))
    assert any(answer(openai_client, prompt, temperature=1.5, seed=seed) != greedy for seed in (1, 2, 3))


@pytest.mark.parametrize("penalty", [{"presence_penalty": 2.0}, {"frequency_penalty": 2.0},
                                     {"extra_body": {"repetition_penalty": 2.0}}])
def test_penalties_change_a_repetitive_answer(openai_client, penalty):
    prompt = "Write the word cat ten times."
    assert answer(openai_client, prompt, temperature=0, **penalty) != answer(openai_client, prompt, temperature=0)


def test_detokenize_out_of_vocabulary_is_400(base_stack):
    error_of(post(base_stack, "/detokenize", json={"model": MODEL, "tokens": [10**9]}), 400)


def test_unknown_route_is_404_in_openai_shape(base_stack):
    error_of(httpx.get(f"{base_stack.url}/v1/nothing-here"), 404)


def test_openai_client_raises_typed_errors(openai_client):
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5)


def test_errors_are_counted_by_status(base_stack):
    def not_found() -> float:
        return sum(value for key, value in samples(base_stack.url, "serveout_requests_total").items()
                   if dict(key).get("status") == "404" and dict(key).get("endpoint") == "chat")

    before = settled(not_found)
    post(base_stack, CHAT, json={"model": "gpt-17", "messages": [{"role": "user", "content": "hi"}]})
    assert wait_until(lambda: not_found() == before + 1, timeout_s=15), (before, not_found())
