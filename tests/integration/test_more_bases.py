"""Two base models behind one endpoint, for real: the default model with its clinic
adapter and a second base (the random-weight test model at tensor parallel 1), each its
own vLLM CPU engine deployment behind the separate mode's gateway, called by name with
the official OpenAI SDK."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI
from ray import serve

from tests.integration.settings import MODEL, PORT, replicas

pytestmark = pytest.mark.integration

OTHER = "tiny-llama-tp2-test"
TWO_BASES = {"replicas": replicas(1), "adapters": ["clinic"],
             "gateway": {"mode": "separate", "max_in_flight": 24, "port": PORT},
             "more_bases": [{"model": OTHER, "tensor_parallel_size": 1, "replicas": replicas(1)}]}


@pytest.fixture(scope="module")
def two_bases(stack):
    stack.store.prepare(OTHER)  # seeded random weights (cached after the first build)
    stack.ensure(TWO_BASES)
    return stack


@pytest.fixture(scope="module")
def client(two_bases) -> OpenAI:
    return OpenAI(base_url=f"{two_bases.url}/v1", api_key="unused", timeout=120, max_retries=0)


def ask(client: OpenAI, model: str):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                          temperature=0, max_tokens=8)


def test_models_lists_both_bases_and_the_adapter_with_its_parent(client):
    cards = {m.id: m for m in client.models.list().data}
    assert set(cards) == {MODEL, "clinic", OTHER}
    assert cards[OTHER].parent is None and cards["clinic"].parent == MODEL


def test_each_base_answers_from_its_own_engine_deployment(client, two_bases):
    answers = {model: ask(client, model) for model in (MODEL, "clinic", OTHER)}
    assert {model: a.model for model, a in answers.items()} == {m: m for m in answers}
    assert all(a.usage.completion_tokens > 0 for a in answers.values())
    # The random-weight model's answer differs from the real model's.
    assert answers[OTHER].choices[0].message.content != answers[MODEL].choices[0].message.content
    deployments = serve.status().applications[two_bases.config.app_name].deployments
    assert {"engine", f"engine-{OTHER}", "gateway"} <= set(deployments)
    assert all(deployments[d].status == "HEALTHY" for d in ("engine", f"engine-{OTHER}"))


def test_the_second_base_streams(client):
    stream = client.chat.completions.create(model=OTHER, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=8, stream=True, temperature=0)
    chunks = [c for c in stream if c.choices and c.choices[0].delta.content]
    assert chunks and all(c.model == OTHER for c in chunks)


def test_an_unknown_model_is_a_404_that_lists_every_base_and_adapter(client):
    with pytest.raises(openai.NotFoundError) as caught:
        ask(client, "no-such-model")
    message = caught.value.body["message"]
    assert all(name in message for name in (MODEL, "clinic", OTHER)), message


def test_status_reports_each_base(two_bases):
    status = httpx.get(f"{two_bases.url}/status", timeout=10).json()
    assert [b["model"] for b in status["bases"]] == [MODEL, OTHER]
