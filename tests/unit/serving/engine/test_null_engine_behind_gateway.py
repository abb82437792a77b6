"""The real gateway app (in-process, httpx.ASGITransport, no Ray) over the real null
engine: a client counts the streamed words, and usage agrees with them and with the
gateway's own token count of the prompt."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.config.model_spec import EngineSettings
from serving.config.stack import NullBackend
from serving.engine.null_engine import NullEngine
from serving.admission.bound import AdmissionController
from serving.api.app import build_http_app
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.service import GatewayService, ServedModel

MODEL = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "Count the words."}]


class DirectEngineClient:
    """The engine client seam without a Serve handle: calls the engine in this process."""

    def __init__(self, engine: NullEngine) -> None:
        self.engine = engine

    retries_elsewhere = True

    async def stream(self, request, *, avoid_replica=None):
        async for chunk in self.engine.generate(request):
            yield chunk


async def exchange(tokenizer, calls):
    engine = NullEngine(NullBackend(), EngineSettings(max_num_seqs=4, stream_interval=3), "null-1")
    registry = CollectorRegistry()
    served = ServedModel(MODEL, 2048, tokenizer, DirectEngineClient(engine), AdmissionController(8))
    service = GatewayService([served], GatewayMetrics(registry), request_timeout_s=30)
    app = build_http_app(service, registry=registry, max_body_bytes=65_536, status=lambda: {})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        return [await asyncio.wait_for(call(client), 30) for call in calls], engine.stats()


def sse_events(text: str) -> list[dict]:
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_client_counts_the_null_engines_words_and_usage_agrees(tokenizer):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 20}

    async def streamed(client):
        return await client.post("/v1/chat/completions", json={
            **body, "stream": True, "stream_options": {"include_usage": True}})

    async def whole(client):
        return await client.post("/v1/chat/completions", json={**body, "n": 2, "temperature": 1})

    async def tokenized(client):
        return await client.post("/tokenize", json={"model": MODEL, "messages": MESSAGES})

    (stream, answer, count), stats = asyncio.run(exchange(tokenizer, [streamed, whole, tokenized]))
    events = sse_events(stream.text)
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert text == " tok" * 20
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["length"]
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 20
    assert usage["prompt_tokens"] == count.json()["count"]
    choices = answer.json()["choices"]
    assert [(c["message"]["content"], c["finish_reason"]) for c in choices] == [(" tok" * 20, "length")] * 2
    assert answer.json()["usage"]["completion_tokens"] == 40
    assert stats.generation_tokens == 60 and stats.queue_depth == 0
    assert stream.headers["x-serveout-replica"] == "null-1"


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_the_shortest_answers_still_end_with_length(tokenizer, max_tokens):
    async def whole(client):
        return await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": max_tokens})

    (answer,), _ = asyncio.run(exchange(tokenizer, [whole]))
    assert answer.json()["choices"][0]["text"] == " tok" * max_tokens
    assert answer.json()["choices"][0]["finish_reason"] == "length"
