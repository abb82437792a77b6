"""Engine output -> OpenAI JSON responses and SSE chunks (pure; no I/O).

Two formats share one shape: :class:`ChatFormat` (``chat.completion``, with tool calls
and ``logprobs.content``) and :class:`CompletionFormat` (``text_completion``, with the
legacy ``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset`` logprobs).
The shapes are declared in :mod:`serving.openai.response_schemas`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from serving.engine.protocol import GenerationChunk, GenerationDelta, TokenLogprob, ToolCallDelta
from serving.openai.schemas import now, usage

SSE_DONE = "data: [DONE]\n\n"
ERROR_FINISH = "error"  # the answer was cut by a failure: never disguised as "stop"
MIN_LOGPROB = -9999.0  # for -inf, which JSON cannot carry (as vLLM's server does)


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(payload: dict) -> str:
    return f"data: {compact(payload)}\n\n"


def finish_reason(reason: str | None) -> str | None:
    """vLLM's finish reason, honestly: ``stop`` and ``length`` as OpenAI spells them;
    ``abort`` and ``error`` (the answer was cut short) are passed through, as vLLM's
    own server does, never shown as ``stop``."""
    return None if reason is None else str(reason)


def _logprob(value: float) -> float:
    return max(value, MIN_LOGPROB)


@dataclass
class ResponseHeader:
    id: str
    model: str
    created: int = field(default_factory=now)


def tool_call_json(delta: ToolCallDelta) -> dict:
    """One tool-call delta as OpenAI streams it: id, type and name on a call's first."""
    if delta.id is None and delta.name is None:
        return {"index": delta.index, "function": {"arguments": delta.arguments}}
    return {"index": delta.index, "id": delta.id, "type": "function",
            "function": {"name": delta.name, "arguments": delta.arguments}}


class ChatFormat:
    object_full = "chat.completion"
    object_chunk = "chat.completion.chunk"

    def choice(self, index: int, text: str, reason: str | None, tool_calls: list[dict] | None = None,
               logprobs: list[TokenLogprob] | None = None) -> dict:
        message: dict = {"role": "assistant", "content": text if text or not tool_calls else None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {"index": index, "message": message, "logprobs": self.logprobs(logprobs, 0),
                "finish_reason": reason}

    def chunk_choice(self, index: int, text: str | None, reason: str | None, first: bool,
                     delta: GenerationDelta | None = None, offset: int = 0) -> dict:
        message: dict = {}
        if first:
            message["role"] = "assistant"
        calls = delta.tool_calls if delta is not None else ()
        if text is not None and (text or not calls):
            message["content"] = text
        if calls:
            message["tool_calls"] = [tool_call_json(c) for c in calls]
        logprobs = self.logprobs(delta.logprobs, offset) if delta is not None else None
        return {"index": index, "delta": message, "logprobs": logprobs, "finish_reason": reason}

    def text_choice_json(self, index: int, text: str) -> str:
        """``chunk_choice(index, text, None, False)`` as JSON, without building it."""
        return f'{{"index":{index},"delta":{{"content":{compact(text)}}},"logprobs":null,"finish_reason":null}}'

    def logprobs(self, entries, offset: int) -> dict | None:
        if not entries:
            return None
        return {"content": [
            {"token": e.token, "logprob": _logprob(e.logprob), "bytes": list(e.token.encode()),
             "top_logprobs": [{"token": t, "logprob": _logprob(lp), "bytes": list(t.encode())} for t, lp in e.top]}
            for e in entries]}


class CompletionFormat:
    object_full = "text_completion"
    object_chunk = "text_completion"

    def choice(self, index: int, text: str, reason: str | None, tool_calls: list[dict] | None = None,
               logprobs: list[TokenLogprob] | None = None) -> dict:
        return {"index": index, "text": text, "logprobs": self.logprobs(logprobs, 0), "finish_reason": reason}

    def chunk_choice(self, index: int, text: str | None, reason: str | None, first: bool,
                     delta: GenerationDelta | None = None, offset: int = 0) -> dict:
        logprobs = self.logprobs(delta.logprobs, offset) if delta is not None else None
        return {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": reason}

    def text_choice_json(self, index: int, text: str) -> str:
        """``chunk_choice(index, text, None, False)`` as JSON, without building it."""
        return f'{{"index":{index},"text":{compact(text)},"logprobs":null,"finish_reason":null}}'

    def logprobs(self, entries, offset: int) -> dict | None:
        """``text_offset`` counts characters of the completion from ``offset``."""
        if not entries:
            return None
        offsets = []
        for e in entries:
            offsets.append(offset)
            offset += len(e.token)
        return {"tokens": [e.token for e in entries],
                "token_logprobs": [_logprob(e.logprob) for e in entries],
                "top_logprobs": [{t: _logprob(lp) for t, lp in e.top} for e in entries],
                "text_offset": offsets}


Format = ChatFormat | CompletionFormat


class _ToolCalls:
    """One choice's tool calls, merged from their deltas."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def add(self, delta: ToolCallDelta) -> None:
        if delta.index == len(self.calls):
            self.calls.append({"id": delta.id, "type": "function",
                               "function": {"name": delta.name, "arguments": delta.arguments}})
        elif delta.index < len(self.calls):
            self.calls[delta.index]["function"]["arguments"] += delta.arguments


class ResponseAssembler:
    """Collects a whole (non-streamed) response from engine chunks."""

    def __init__(self, fmt: Format, header: ResponseHeader, n: int) -> None:
        self._fmt, self._header = fmt, header
        self._pieces: list[list[str]] = [[] for _ in range(n)]  # joined once, in response()
        self._reasons: list[str | None] = [None] * n
        self._calls = [_ToolCalls() for _ in range(n)]
        self._logprobs: list[list[TokenLogprob]] = [[] for _ in range(n)]
        self.prompt_tokens = self.completion_tokens = 0

    def add(self, chunk: GenerationChunk) -> None:
        for d in chunk.deltas:
            self._pieces[d.index].append(d.text)
            if d.finish_reason is not None:
                self._reasons[d.index] = finish_reason(d.finish_reason)
            for call in d.tool_calls:
                self._calls[d.index].add(call)
            self._logprobs[d.index].extend(d.logprobs)
        self.prompt_tokens, self.completion_tokens = chunk.prompt_tokens, chunk.completion_tokens

    def response(self) -> dict:
        h = self._header
        return {
            "id": h.id,
            "object": self._fmt.object_full,
            "created": h.created,
            "model": h.model,
            "choices": [
                self._fmt.choice(i, "".join(pieces), self._reasons[i] or ERROR_FINISH,
                                 self._calls[i].calls, self._logprobs[i])
                for i, pieces in enumerate(self._pieces)
            ],
            "usage": usage(self.prompt_tokens, self.completion_tokens),
        }


class StreamEncoder:
    """Turns engine chunks into SSE events: role first, text deltas, finish, usage, [DONE].

    A plain text delta (the event of nearly every token) is written from a frame
    prefix and suffix built once per stream around the JSON of the text alone; the
    rarer events (a choice's first, its finish, tool calls, logprobs, usage, errors)
    are built as dicts. Both give the same bytes."""

    def __init__(self, fmt: Format, header: ResponseHeader, n: int, include_usage: bool) -> None:
        self._fmt, self._header, self._include_usage = fmt, header, include_usage
        self._started = [False] * n
        self._finished = [False] * n
        self._offsets = [0] * n  # characters streamed per choice (completions' text_offset)
        self.prompt_tokens = self.completion_tokens = 0
        head = compact({"id": header.id, "object": fmt.object_chunk, "created": header.created,
                        "model": header.model})
        self._prefix = f'data: {head[:-1]},"choices":['
        self._suffix = ']' + (',"usage":null' if include_usage else "") + "}\n\n"

    def _event(self, choices: list[dict], with_usage: dict | None = None) -> str:
        h = self._header
        payload = {
            "id": h.id,
            "object": self._fmt.object_chunk,
            "created": h.created,
            "model": h.model,
            "choices": choices,
        }
        if self._include_usage:
            payload["usage"] = with_usage
        return sse(payload)

    def encode(self, chunk: GenerationChunk) -> list[str]:
        events = []
        for d in chunk.deltas:
            first = not self._started[d.index]
            plain = not d.tool_calls and not d.logprobs
            if d.finish_reason is None and not first and plain:
                if d.text:  # the common case: a text delta, from the pre-built frame
                    events.append(self._prefix + self._fmt.text_choice_json(d.index, d.text) + self._suffix)
                continue
            reason = finish_reason(d.finish_reason)
            self._started[d.index] = True
            self._finished[d.index] |= reason is not None
            offset = self._offsets[d.index]
            self._offsets[d.index] += sum(len(e.token) for e in d.logprobs)
            events.append(self._event([self._fmt.chunk_choice(d.index, d.text, reason, first, d, offset)]))
        self.prompt_tokens, self.completion_tokens = chunk.prompt_tokens, chunk.completion_tokens
        return events

    def finish(self) -> list[str]:
        events = []
        if self._include_usage:
            events.append(self._event([], usage(self.prompt_tokens, self.completion_tokens)))
        events.append(SSE_DONE)
        return events

    def error(self, body: dict) -> list[str]:
        """An error after the stream started: ``finish_reason: "error"`` for every choice
        still open, then one SSE ``data`` event with the error body, then ``[DONE]``."""
        open_choices = [
            self._fmt.chunk_choice(i, None, ERROR_FINISH, not self._started[i])
            for i, done in enumerate(self._finished) if not done
        ]
        events = [self._event([c]) for c in open_choices]
        return [*events, sse(body), SSE_DONE]
