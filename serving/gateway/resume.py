"""Resuming a stream whose engine replica died mid-answer (pure logic, no Ray).

While a stream is under way the gateway keeps the token ids it has sent the client
(:class:`SentTokens`). When the replica dies, the same request goes on on another
replica from there, as NVIDIA Dynamo migrates a request: the prompt plus the tokens
already sent, ``max_tokens`` and ``min_tokens`` reduced by them
(:func:`continuation`). The continuation's chunks are counted on from the tokens
already sent (:func:`counted_on`), so the client reads one answer, one id and one
usage, on the same connection.

A greedy answer resumed this way is the answer the dead replica would have given (the
same tokens, neither lost nor repeated). A sampled one goes on as a fresh sample from
the same distribution. Not resumed (:func:`why_not_resumable`; the stream ends with an
error event, as before): several choices (``n > 1``), guided decoding and tool calls
(the grammar's and the parser's state died with the engine), stop strings (the engine
holds back text that could start one, so the client may not have it), presence or
frequency penalties (they count the answer's tokens, which a continuation sees as
prompt), and an engine that did not send its token ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from serving.engine.protocol import GenerationChunk, GenerationRequest


class SentTokens:
    """The token ids of the one choice a stream has sent so far."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.complete = True  # every delta so far carried its token ids

    def add(self, chunk: GenerationChunk) -> None:
        for delta in chunk.deltas:
            if len(delta.token_ids) != delta.num_tokens:
                self.complete = False
            self.token_ids.extend(delta.token_ids)


def why_not_resumable(request: GenerationRequest, sent: SentTokens) -> str | None:
    """Why ``request`` cannot go on on another replica from ``sent`` (None: it can)."""
    sampling = request.sampling
    if sampling.n != 1:
        return "n > 1"
    if sampling.guided is not None or request.tool_calling is not None:
        return "guided decoding or tool calls"
    if sampling.stop:
        return "stop strings"
    if sampling.presence_penalty or sampling.frequency_penalty:
        return "presence or frequency penalty"
    if not sent.complete:
        return "the engine did not send token ids"
    if len(sent.token_ids) >= sampling.max_tokens:
        return "the answer was already complete"
    return None


def continuation(request: GenerationRequest, sent: SentTokens) -> GenerationRequest:
    """``request`` going on from ``sent``: its prompt followed by the tokens already sent,
    as many fewer tokens left to generate, a new engine request id."""
    done = len(sent.token_ids)
    sampling = dataclasses.replace(request.sampling, max_tokens=request.sampling.max_tokens - done,
                                   min_tokens=max(request.sampling.min_tokens - done, 0))
    return dataclasses.replace(request, request_id=f"{request.request_id}-resume",
                               prompt_token_ids=(*request.prompt_token_ids, *sent.token_ids), sampling=sampling)


async def counted_on(chunks: AsyncIterator[GenerationChunk], prompt_tokens: int,
                     already_sent: int) -> AsyncIterator[GenerationChunk]:
    """A continuation's ``chunks`` as the original request's: its prompt is the original
    ``prompt_tokens`` long and its answer starts with the ``already_sent`` tokens."""
    try:
        async for chunk in chunks:
            cached = None if chunk.cached_tokens is None else min(chunk.cached_tokens, prompt_tokens)
            yield dataclasses.replace(chunk, prompt_tokens=prompt_tokens, cached_tokens=cached,
                                      completion_tokens=chunk.completion_tokens + already_sent)
    finally:
        await chunks.aclose()
