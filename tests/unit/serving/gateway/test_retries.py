"""Retry of a request whose engine replica died, with a FAKE engine client (no Ray, no
vLLM): once, from the start while nothing reached the client, and a stream under way
resumed once on another replica from the tokens it had sent."""

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry
from ray.exceptions import ActorDiedError, RayTaskError

from serving.engine.protocol import GenerationChunk, GenerationDelta
from serving.errors import EngineError, ReplicaFailedError
from serving.admission.bound import AdmissionController
from serving.gateway.engine_client import engine_error
from serving.openai.error_mapping import map_error
from serving.gateway.metrics import GatewayMetrics
from serving.openai.schemas import ChatCompletionRequest
from serving.gateway.service import EventStream, GatewayService, ServedModel

MODEL = "smollm2-135m-instruct"
WORDS = ("a", "b", "c")


WORD_IDS = {word: 9000 + i for i, word in enumerate(WORDS)}  # the fake's token id of each word


class FakeDyingEngineClient:
    """Plays one script per call: ``("ok",)`` yields WORDS; ``("die", k)`` yields the
    first ``k`` words then fails as a dead replica ``r<call number>``; ``("error", k)``
    the same with a plain engine error. A call whose prompt ends with the ids of the
    first words (a resumed stream) yields the words after them. Records each call's
    request, ``avoid_replica``, and how many streams were closed."""

    def __init__(self, *scripts: tuple):
        self.scripts = list(scripts)
        self.calls: list[tuple[str, str | None]] = []
        self.requests: list = []
        self.closed = 0

    retries_elsewhere = True

    async def stream(self, request, *, avoid_replica=None):
        self.calls.append((request.request_id, avoid_replica))
        self.requests.append(request)
        replica = f"r{len(self.calls)}"
        kind, *rest = self.scripts[len(self.calls) - 1]
        ids = list(WORD_IDS.values())
        start = next((k for k in range(len(WORDS), 0, -1) if list(request.prompt_token_ids[-k:]) == ids[:k]), 0)
        stop = len(WORDS) if kind == "ok" else start + rest[0]
        try:
            for i, word in enumerate(WORDS[start:stop], start=start):
                await asyncio.sleep(0)
                last = kind == "ok" and i == len(WORDS) - 1
                yield GenerationChunk((GenerationDelta(0, word, 1, "stop" if last else None,
                                                       token_ids=(WORD_IDS[word],)),),
                                      replica, len(request.prompt_token_ids), i + 1 - start, last)
            if kind == "die":
                raise ReplicaFailedError(f"the engine of replica {replica} died", replica_id=replica,
                                         reason="engine_dead")
            if kind == "error":
                raise EngineError("engine replica failed: boom")
        finally:
            self.closed += 1


def service(tokenizer, engine, registry):
    served = ServedModel(MODEL, 2048, tokenizer, engine, AdmissionController(4))
    return GatewayService([served], GatewayMetrics(registry), request_timeout_s=5.0)


def body(**fields):
    return ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields})


def retries(registry, reason="engine_dead"):
    return registry.get_sample_value("serveout_retries_total", {"model": MODEL, "reason": reason}) or 0


def answered(registry, status):
    return registry.get_sample_value(
        "serveout_requests_total", {"model": MODEL, "endpoint": "chat", "status": status}) or 0


def stream_events(svc, request_body) -> list:
    async def run():
        stream = await svc.complete(request_body)
        assert isinstance(stream, EventStream)
        try:
            return [event async for event in stream.events]
        finally:
            await stream.close()

    lines = [line[len("data: "):] for e in asyncio.run(run()) for line in e.splitlines() if line]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


@pytest.mark.parametrize("dies_after", [0, 2], ids=["before-first-chunk", "mid-answer"])
def test_a_whole_answer_whose_replica_dies_is_retried_once_on_another(tokenizer, dies_after):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", dies_after), ("ok",))
    svc = service(tokenizer, engine, registry)
    answer = asyncio.run(svc.complete(body()))
    assert answer.body["choices"][0]["message"]["content"] == "abc"  # the retry's text alone
    assert answer.body["usage"]["completion_tokens"] == 3
    assert answer.replica_id == "r2"
    (first_id, _), (retry_id, avoid) = engine.calls
    assert retry_id != first_id and avoid == "r1"
    assert answer.body["id"] == first_id  # the client sees one response id
    assert retries(registry) == 1 and answered(registry, "200") == 1
    assert svc.models[MODEL].admission.in_flight == 0 and engine.closed == 2


def test_a_stream_whose_replica_dies_before_its_first_chunk_is_retried(tokenizer):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", 0), ("ok",))
    events = stream_events(service(tokenizer, engine, registry), body(stream=True))
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert text == "abc" and events[-2]["choices"][0]["finish_reason"] == "stop"
    assert len(engine.calls) == 2 and retries(registry) == 1


def text_of(events) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e.get("choices"))


def test_a_stream_under_way_is_resumed_on_another_replica_from_the_tokens_sent(tokenizer):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", 2), ("ok",))
    events = stream_events(service(tokenizer, engine, registry), body(stream=True, stream_options={
        "include_usage": True}))
    assert text_of(events) == "abc" and events[-1] == "[DONE]"  # nothing lost, nothing twice
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    first, resumed = engine.requests
    assert resumed.prompt_token_ids == (*first.prompt_token_ids, WORD_IDS["a"], WORD_IDS["b"])
    assert resumed.sampling.max_tokens == first.sampling.max_tokens - 2
    assert engine.calls[1][1] == "r1" and resumed.request_id != first.request_id
    assert {e["id"] for e in events[:-1]} == {first.request_id}  # one answer to the client
    usage = events[-2]["usage"]
    assert usage["prompt_tokens"] == len(first.prompt_token_ids) and usage["completion_tokens"] == 3
    assert registry.get_sample_value("serveout_streams_resumed_total",
                                     {"model": MODEL, "reason": "engine_dead"}) == 1
    assert retries(registry) == 0 and answered(registry, "200") == 1 and engine.closed == 2


@pytest.mark.parametrize("fields, why", [({"stop": ["zz"]}, "stop strings"), ({"n": 2}, "n > 1"),
                                         ({"presence_penalty": 0.5}, "presence or frequency penalty")])
def test_a_stream_that_cannot_be_resumed_ends_with_finish_reason_error(tokenizer, fields, why):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", 1), ("ok",))
    events = stream_events(service(tokenizer, engine, registry), body(stream=True, **fields))
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "replica_failed" and why in events[-2]["error"]["message"]
    assert events[-3]["choices"][0]["finish_reason"] == "error"
    assert len(engine.calls) == 1 and retries(registry) == 0
    assert answered(registry, "503") == 1


def test_a_stream_is_resumed_once_a_second_death_ends_it_with_an_error(tokenizer):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", 1), ("die", 1), ("ok",))
    events = stream_events(service(tokenizer, engine, registry), body(stream=True))
    assert text_of(events) == "ab"  # what was sent stays sent: never an answer that looks complete
    assert "already been resumed once" in events[-2]["error"]["message"]
    assert len(engine.calls) == 2 and answered(registry, "503") == 1


def test_a_second_failure_is_not_retried_again_and_is_a_503(tokenizer):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("die", 0), ("die", 1), ("ok",))
    svc = service(tokenizer, engine, registry)
    with pytest.raises(ReplicaFailedError, match="already been retried") as caught:
        asyncio.run(svc.complete(body()))
    assert map_error(caught.value).status == 503
    assert len(engine.calls) == 2 and retries(registry) == 1
    assert answered(registry, "503") == 1 and svc.models[MODEL].admission.in_flight == 0


def test_an_engine_error_that_is_not_a_dead_replica_is_not_retried(tokenizer):
    registry = CollectorRegistry()
    engine = FakeDyingEngineClient(("error", 0), ("ok",))
    with pytest.raises(EngineError) as caught:
        asyncio.run(service(tokenizer, engine, registry).complete(body()))
    assert not isinstance(caught.value, ReplicaFailedError)
    assert len(engine.calls) == 1 and retries(registry) == 0


def test_a_dead_actor_or_a_dead_engine_maps_to_a_replica_failure():
    died = engine_error(ActorDiedError())
    assert isinstance(died, ReplicaFailedError) and died.reason == "actor_died"
    sent = ReplicaFailedError("the engine of replica r1 died", replica_id="r1", reason="engine_dead")
    assert engine_error(RayTaskError("generate", "traceback", sent)) is sent
    other = engine_error(RayTaskError("generate", "traceback", ValueError("bug")))
    assert type(other) is EngineError
