"""The direct mode's plans: what the router hands a replica, the replica's store of them,
the side channel they travel on (real ZMQ sockets on loopback), and a validated request
served without tokenising again (a FAKE engine client and a FAKE tokenizer that counts
its calls: pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from serving.engine.protocol import GenerationRequest, GuidedDecoding, SamplingSettings, ToolCalling
from serving.direct.handoff_store import HandoffStore
from serving.direct.handoff import Done, Handoff, HandoffCodec
from serving.openai.validation import ValidatedRequest, validate_completion
from serving.direct.side_channel import Inbox, Outbox
from tests.fakes import FakeClock, FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, body, service


def plan(key: str, *, tokens=(1, 2, 3)) -> Handoff:
    generation = GenerationRequest(f"chatcmpl-{key}", tokens, SamplingSettings(max_tokens=8, stop=("x",)),
                                   session_id="s", deadline_s=12.5, trace_id="t")
    return Handoff(key=key, request=ValidatedRequest(generation, chat=True, stream=False, include_usage=False,
                                                model=MODEL), done_to="tcp://127.0.0.1:1")


def test_a_plan_and_a_report_survive_the_wire():
    codec = HandoffCodec()
    assert codec.plan(codec.encode(plan("k"))) == plan("k")
    done = Done(key="k", replica_id="r1", engine_dead=True)
    assert codec.done(codec.encode(done)) == done


def test_a_plan_with_guided_decoding_tool_calling_and_logprobs_survives_the_wire():
    sampling = SamplingSettings(max_tokens=8, logprobs=3, logit_bias=((5, -100.0), (7, 2.5)),
                                guided=GuidedDecoding(json_schema='{"type": "object"}'))
    calling = ToolCalling(mode="auto", tools_json="[]", stream=True, parallel=False)
    generation = GenerationRequest("chatcmpl-g", (1, 2), sampling, tool_calling=calling)
    message = Handoff(key="g", request=ValidatedRequest(generation, chat=True, stream=True, include_usage=True,
                                                   model=MODEL), done_to="tcp://127.0.0.1:1")
    codec = HandoffCodec()
    assert codec.plan(codec.encode(message)) == message


def test_anything_else_on_the_wire_is_refused():
    import msgspec

    codec = HandoffCodec()
    with pytest.raises(msgspec.ValidationError):
        codec.plan(codec.encode(Done(key="k", replica_id="r")))


def test_a_plan_is_claimed_once_and_ends_once():
    async def scenario():
        ended: list[str] = []
        store = HandoffStore(lambda p: ended.append(p.key))
        store.put(plan("a"))
        claimed = await store.claim("a")
        assert claimed == plan("a") and await store.claim("a") is None
        store.finish(claimed)
        assert ended == ["a"]

    asyncio.run(scenario())


def test_a_claim_waits_for_a_plan_still_on_its_way():
    async def scenario():
        store = HandoffStore(lambda p: None, wait_s=1.0)
        waiting = asyncio.create_task(store.claim("late"))
        await asyncio.sleep(0.01)
        store.put(plan("late"))
        assert await waiting == plan("late")

    asyncio.run(scenario())


def test_a_plan_arriving_after_its_request_gave_up_ends_at_once():
    async def scenario():
        ended: list[str] = []
        store = HandoffStore(lambda p: ended.append(p.key), wait_s=0.01)
        assert await store.claim("slow") is None  # the request planned itself meanwhile
        store.put(plan("slow"))
        assert ended == ["slow"] and len(store) == 0

    asyncio.run(scenario())


def test_unclaimed_plans_expire_and_the_store_is_bounded():
    ended: list[str] = []
    clock = FakeClock()
    store = HandoffStore(lambda p: ended.append(p.key), ttl_s=10, max_entries=2, clock=clock)
    store.put(plan("a"))
    clock.now = 5
    store.put(plan("b"))
    clock.now = 8
    store.put(plan("c"))  # over the bound: the oldest goes
    assert ended == ["a"]
    clock.now = 16
    store.expire()
    assert ended == ["a", "b"] and len(store) == 1


def test_the_side_channel_delivers_to_a_bound_inbox():
    async def scenario():
        got: list[bytes] = []
        inbox = Inbox("127.0.0.1", got.append)
        inbox.start()
        outbox = Outbox()
        try:
            assert outbox.send(inbox.endpoint, b"first")  # queued until connected, not dropped
            assert outbox.send(inbox.endpoint, b"second")
            for _ in range(200):
                if len(got) == 2:
                    break
                await asyncio.sleep(0.01)
            assert got == [b"first", b"second"]
        finally:
            outbox.close()
            await inbox.close()

    asyncio.run(scenario())


def test_a_closed_outbox_drops_instead_of_raising():
    outbox = Outbox()
    outbox.close()  # its own context ends with it
    assert outbox.send("tcp://127.0.0.1:1", b"late") is False


class CountingTokenizer:
    """A FAKE tokenizer: one token per character, and a count of its calls."""

    vocab_size = 1000

    def __init__(self) -> None:
        self.calls = 0

    def encode_chat(self, messages, tools=None):
        self.calls += 1
        return [ord(c) % 1000 for m in messages for c in m.text()]

    def encode_text(self, text, *, add_special_tokens=True):
        self.calls += 1
        return [ord(c) % 1000 for c in text]

    def check_ids(self, token_ids, *, param):
        return token_ids


def test_a_planned_request_is_answered_without_tokenising_it_again():
    tokenizer = CountingTokenizer()
    planned = validate_completion(body(), tokenizer=tokenizer, served_model=MODEL, max_model_len=2048,
                              request_id="chatcmpl-1", session_id=None, deadline_s=1e12, trace_id=None)
    assert tokenizer.calls == 1  # the router's
    svc = service(tokenizer, FakeEngineClient())
    answer = asyncio.run(svc.complete_validated(planned))
    assert tokenizer.calls == 1  # the replica did not tokenise it again
    assert answer.body["id"] == "chatcmpl-1" and answer.body["choices"][0]["message"]["content"] == "abc"
    assert svc.models[MODEL].admission.in_flight == 0
