"""The pure logic of resuming a stream (serving/gateway/resume.py): what was sent, what a
continuation asks the next replica, how its chunks are counted, and when it is refused."""

import asyncio
import dataclasses

import pytest

from serving.engine.protocol import (GenerationChunk, GenerationDelta, GenerationRequest, GuidedDecoding,
                                     SamplingSettings)
from serving.gateway.resume import SentTokens, continuation, counted_on, why_not_resumable

REQUEST = GenerationRequest("chatcmpl-1", (1, 2, 3), SamplingSettings(max_tokens=10, min_tokens=4, temperature=0))


def chunk(*ids: int, completion: int, prompt: int = 3, cached: int | None = None) -> GenerationChunk:
    return GenerationChunk((GenerationDelta(0, "x" * len(ids), len(ids), token_ids=ids),), "r1", prompt, completion,
                           cached_tokens=cached)


def sent_of(*chunks: GenerationChunk) -> SentTokens:
    sent = SentTokens()
    for c in chunks:
        sent.add(c)
    return sent


def test_a_continuation_asks_for_the_rest_after_the_prompt_and_the_tokens_sent():
    sent = sent_of(chunk(7, completion=1), chunk(8, 9, completion=3))
    nxt = continuation(REQUEST, sent)
    assert nxt.prompt_token_ids == (1, 2, 3, 7, 8, 9)
    assert nxt.sampling.max_tokens == 7 and nxt.sampling.min_tokens == 1 and nxt.sampling.temperature == 0
    assert nxt.request_id == "chatcmpl-1-resume" and REQUEST.prompt_token_ids == (1, 2, 3)
    many = sent_of(chunk(*range(5), completion=5))
    assert continuation(REQUEST, many).sampling.min_tokens == 0


def test_the_continuations_chunks_count_on_from_the_original_request():
    async def engine():
        yield chunk(10, completion=1, prompt=6, cached=6)
        yield chunk(11, completion=2, prompt=6)

    async def read():
        return [c async for c in counted_on(engine(), prompt_tokens=3, already_sent=3)]

    first, second = asyncio.run(read())
    assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens) == (3, 4, 3)
    assert (second.prompt_tokens, second.completion_tokens, second.cached_tokens) == (3, 5, None)


@pytest.mark.parametrize("change, why", [
    ({"n": 2}, "n > 1"),
    ({"guided": GuidedDecoding(json_object=True)}, "guided decoding"),
    ({"stop": ("END",)}, "stop strings"),
    ({"frequency_penalty": 0.1}, "frequency penalty"),
    ({"max_tokens": 1}, "already complete"),
])
def test_what_cannot_be_resumed_says_why(change, why):
    request = dataclasses.replace(REQUEST, sampling=dataclasses.replace(REQUEST.sampling, **change))
    assert why in why_not_resumable(request, sent_of(chunk(7, completion=1)))


def test_an_engine_that_sent_no_token_ids_cannot_be_resumed_and_a_plain_stream_can():
    blind = GenerationChunk((GenerationDelta(0, "xy", 2),), "r1", 3, 2)
    assert why_not_resumable(REQUEST, sent_of(blind)) == "the engine did not send token ids"
    assert why_not_resumable(REQUEST, sent_of(chunk(7, completion=1))) is None
    assert why_not_resumable(REQUEST, SentTokens()) is None  # nothing sent yet: a continuation from the prompt
