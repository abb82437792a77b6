"""GatewayService logic with a FAKE engine client (no vLLM, no Ray): admission,
deadlines, cleanup. The real engine path is covered by tests/integration."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from serving.config.gateway import KeyLimits
from serving.errors import (
    DeadlineExceededError,
    InvalidRequestError,
    NoReplicaError,
    OverloadedError,
    RateLimitedError,
)
from serving.admission.bound import AdmissionController
from serving.admission.api_keys import Caller
from serving.admission.key_limits import KeyRateLimiter
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.replica_status import ReplicaCounts
from serving.openai.schemas import ChatCompletionRequest
from serving.gateway.service import EventStream, GatewayService, ServedModel
from tests.fakes import FakeEngineClient

MODEL = "smollm2-135m-instruct"


def service(tokenizer, engine, *, limit=4, timeout_s=5.0, replicas=ReplicaCounts(ready=1), from_zero=False,
            rate_limiter=None, registry=None):
    served = ServedModel(MODEL, 2048, tokenizer, engine, AdmissionController(limit),
                         replicas=lambda: replicas, scales_from_zero=from_zero)
    metrics = GatewayMetrics(registry or CollectorRegistry())
    return GatewayService([served], metrics, request_timeout_s=timeout_s, rate_limiter=rate_limiter)


def body(**fields):
    return ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields})


def test_whole_response_and_slot_released(tokenizer):
    engine = FakeEngineClient()
    svc = service(tokenizer, engine)
    result = asyncio.run(svc.complete(body()))
    assert result.body["choices"][0]["message"]["content"] == "abc"
    assert result.body["usage"]["completion_tokens"] == 3
    assert result.replica_id == "fake"
    assert svc.models[MODEL].admission.in_flight == 0 and engine.closed == 1


def test_stream_releases_the_slot_when_closed_before_it_started(tokenizer):
    engine = FakeEngineClient()
    svc = service(tokenizer, engine)

    async def run():
        stream = await svc.complete(body(stream=True))
        assert isinstance(stream, EventStream)
        assert svc.models[MODEL].admission.in_flight == 1
        await stream.close()  # the client left before the first byte was sent

    asyncio.run(run())
    assert svc.models[MODEL].admission.in_flight == 0 and engine.closed == 1


def test_admission_limit_gives_overloaded(tokenizer):
    svc = service(tokenizer, FakeEngineClient(delay_s=0.2), limit=1)

    async def run():
        first = asyncio.create_task(svc.complete(body()))
        await asyncio.sleep(0.05)
        with pytest.raises(OverloadedError):
            await svc.complete(body())
        await first

    asyncio.run(run())


def test_deadline_cancels_the_engine_stream(tokenizer):
    engine = FakeEngineClient(delay_s=1.0)
    svc = service(tokenizer, engine, timeout_s=0.1)
    with pytest.raises(DeadlineExceededError):
        asyncio.run(svc.complete(body()))
    assert engine.closed == 1 and svc.models[MODEL].admission.in_flight == 0


def test_no_replica_and_none_starting_is_503_unless_scaling_from_zero(tokenizer):
    none = ReplicaCounts(ready=0, starting=0)
    with pytest.raises(NoReplicaError):
        asyncio.run(service(tokenizer, FakeEngineClient(), replicas=none).complete(body()))
    result = asyncio.run(service(tokenizer, FakeEngineClient(), replicas=none, from_zero=True).complete(body()))
    assert result.body["choices"][0]["message"]["content"] == "abc"


class SlowTokenizerFake:
    """Wraps the real tokenizer; every chat encode waits on ``gate`` (a threading.Event)."""

    def __init__(self, tokenizer, gate):
        self._tok, self.gate = tokenizer, gate

    def encode_chat(self, messages, tools=None):
        assert self.gate.wait(5)
        return self._tok.encode_chat(messages)

    def encode_text(self, text, *, add_special_tokens=True):
        return self._tok.encode_text(text, add_special_tokens=add_special_tokens)

    def check_ids(self, token_ids, *, param):
        return self._tok.check_ids(token_ids, param=param)


def test_a_burst_is_admitted_before_tokenising_and_the_loop_stays_free(tokenizer):
    # Before: tokenising ran on the event loop before admission, so a burst waited in a
    # backlog the bound did not count. Now the bound counts a request from its start.
    import threading

    gate = threading.Event()
    svc = service(SlowTokenizerFake(tokenizer, gate), FakeEngineClient(), limit=2)

    async def run():
        burst = [asyncio.create_task(svc.complete(body())) for _ in range(5)]
        await asyncio.sleep(0.05)  # the loop runs while both admitted requests tokenise
        refused = [t for t in burst if t.done() and isinstance(t.exception(), OverloadedError)]
        assert len(refused) == 3 and svc.models[MODEL].admission.in_flight == 2
        gate.set()
        return await asyncio.gather(*(t for t in burst if t not in refused))

    answers = asyncio.run(run())
    assert [a.body["choices"][0]["message"]["content"] for a in answers] == ["abc", "abc"]
    assert svc.models[MODEL].admission.in_flight == 0


def test_a_refused_request_after_admission_frees_its_slot(tokenizer):
    svc = service(tokenizer, FakeEngineClient(), limit=1)
    with pytest.raises(Exception, match="context length"):
        asyncio.run(svc.complete(body(max_tokens=4096)))
    assert svc.models[MODEL].admission.in_flight == 0


# --- per API key (a FROZEN clock: budgets never refill during a test) ---------------


def frozen_limiter():
    return KeyRateLimiter(clock=lambda: 0.0)


def prompt_tokens(tokenizer):
    return len(tokenizer.encode_chat(body().messages))


def test_a_keys_tokens_are_reserved_then_charged_the_real_usage(tokenizer):
    limiter, registry = frozen_limiter(), CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), rate_limiter=limiter, registry=registry)
    alice = Caller("alice", KeyLimits(tpm=1000))
    result = asyncio.run(svc.complete(body(), caller=alice))
    used = result.body["usage"]["total_tokens"]
    assert used == prompt_tokens(tokenizer) + 3  # 3 generated of the 8 reserved
    assert limiter.bucket(alice, "tpm").level == 1000 - used
    text = generate_latest(registry).decode()
    assert 'serveout_key_requests_total{key="alice",status="200"} 1.0' in text
    assert 'serveout_key_tokens_total{key="alice",kind="generation"} 3.0' in text


def test_a_key_short_of_tokens_gets_429_after_tokenising_and_frees_its_slot(tokenizer):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(delay_s=0.2), rate_limiter=frozen_limiter(), registry=registry)
    need = prompt_tokens(tokenizer) + 8
    alice = Caller("alice", KeyLimits(tpm=need + need // 2))

    async def run():
        first = asyncio.create_task(svc.complete(body(), caller=alice))
        await asyncio.sleep(0.05)
        with pytest.raises(RateLimitedError) as err:
            await svc.complete(body(), caller=alice)
        assert err.value.reason == "tpm" and err.value.retry_after_s >= 1
        assert svc.models[MODEL].admission.in_flight == 1  # only the first holds a slot
        await first

    asyncio.run(run())
    text = generate_latest(registry).decode()
    assert 'serveout_key_rejected_requests_total{key="alice",reason="tpm"} 1.0' in text
    assert 'serveout_key_requests_total{key="alice",status="429"} 1.0' in text


def test_a_request_the_keys_budget_can_never_cover_is_400(tokenizer):
    svc = service(tokenizer, FakeEngineClient(), rate_limiter=frozen_limiter())
    with pytest.raises(InvalidRequestError, match="lower max_tokens"):
        asyncio.run(svc.complete(body(max_tokens=100), caller=Caller("alice", KeyLimits(tpm=50))))
    assert svc.models[MODEL].admission.in_flight == 0


def test_rpm_refusal_releases_the_admission_slot(tokenizer):
    svc = service(tokenizer, FakeEngineClient(), limit=1, rate_limiter=frozen_limiter())
    alice = Caller("alice", KeyLimits(rpm=1))
    asyncio.run(svc.complete(body(), caller=alice))
    with pytest.raises(RateLimitedError):
        asyncio.run(svc.complete(body(), caller=alice))
    assert svc.models[MODEL].admission.in_flight == 0
    asyncio.run(svc.complete(body(), caller=Caller("bob")))  # the bound of 1 is free for bob


def test_a_split_name_sends_each_session_to_its_version_and_answers_with_the_public_name(tokenizer):
    from serving.config.rollout import TrafficSplit

    engine = FakeEngineClient()
    registry = CollectorRegistry()
    svc = service(tokenizer, engine, registry=registry)
    base = svc.models[MODEL]
    svc.set_models([base, base.with_adapter("clinic"), base.with_adapter("clinic-v2")],
                   (TrafficSplit(name="clinic", stable="clinic", canary="clinic-v2", canary_percent=50),))
    seen = {}
    for session in range(40):
        for _ in range(2):
            answer = asyncio.run(svc.complete(body(model="clinic"), session_id=f"s{session}"))
            assert answer.body["model"] == "clinic"
            seen.setdefault(session, set()).add(engine.last.adapter)
    assert all(len(versions) == 1 for versions in seen.values())  # sticky per session
    assert {v for versions in seen.values() for v in versions} == {"clinic", "clinic-v2"}
    text = generate_latest(registry).decode()
    assert 'serveout_requests_total{endpoint="chat",model="clinic-v2",status="200"}' in text  # per version
    assert 'serveout_traffic_split_percent{model="clinic",version="clinic-v2"} 50.0' in text
    assert 'serveout_time_per_output_token_seconds_count{model="clinic-v2"}' in text
