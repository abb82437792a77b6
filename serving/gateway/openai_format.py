"""Engine output -> OpenAI JSON responses and SSE chunks (pure; no I/O).

Two formats share one shape: :class:`ChatFormat` (``chat.completion``) and
:class:`CompletionFormat` (``text_completion``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from serving.engine.protocol import GenerationChunk
from serving.gateway.schemas import now, usage

SSE_DONE = "data: [DONE]\n\n"
ERROR_FINISH = "error"  # the answer was cut by a failure: never disguised as "stop"


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n"


def finish_reason(reason: str | None) -> str | None:
    """vLLM's finish reason, honestly: ``stop`` and ``length`` as OpenAI spells them;
    ``abort`` and ``error`` (the answer was cut short) are passed through, as vLLM's
    own server does, never shown as ``stop``."""
    return None if reason is None else str(reason)


@dataclass
class ResponseHeader:
    id: str
    model: str
    created: int = field(default_factory=now)


class ChatFormat:
    object_full = "chat.completion"
    object_chunk = "chat.completion.chunk"

    def choice(self, index: int, text: str, reason: str | None) -> dict:
        message = {"role": "assistant", "content": text}
        return {"index": index, "message": message, "logprobs": None, "finish_reason": reason}

    def chunk_choice(self, index: int, text: str | None, reason: str | None, first: bool) -> dict:
        delta: dict = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}


class CompletionFormat:
    object_full = "text_completion"
    object_chunk = "text_completion"

    def choice(self, index: int, text: str, reason: str | None) -> dict:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": reason}

    def chunk_choice(self, index: int, text: str | None, reason: str | None, first: bool) -> dict:
        return self.choice(index, text or "", reason)


Format = ChatFormat | CompletionFormat


class ResponseAssembler:
    """Collects a whole (non-streamed) response from engine chunks."""

    def __init__(self, fmt: Format, header: ResponseHeader, n: int) -> None:
        self._fmt, self._header = fmt, header
        self._texts = [""] * n
        self._reasons: list[str | None] = [None] * n
        self.prompt_tokens = self.completion_tokens = 0

    def add(self, chunk: GenerationChunk) -> None:
        for d in chunk.deltas:
            self._texts[d.index] += d.text
            if d.finish_reason is not None:
                self._reasons[d.index] = finish_reason(d.finish_reason)
        self.prompt_tokens, self.completion_tokens = chunk.prompt_tokens, chunk.completion_tokens

    def response(self) -> dict:
        h = self._header
        return {
            "id": h.id,
            "object": self._fmt.object_full,
            "created": h.created,
            "model": h.model,
            "choices": [
                self._fmt.choice(i, text, self._reasons[i] or ERROR_FINISH)
                for i, text in enumerate(self._texts)
            ],
            "usage": usage(self.prompt_tokens, self.completion_tokens),
        }


class StreamEncoder:
    """Turns engine chunks into SSE events: role first, text deltas, finish, usage, [DONE]."""

    def __init__(self, fmt: Format, header: ResponseHeader, n: int, include_usage: bool) -> None:
        self._fmt, self._header, self._include_usage = fmt, header, include_usage
        self._started = [False] * n
        self._finished = [False] * n
        self.prompt_tokens = self.completion_tokens = 0

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
            reason = finish_reason(d.finish_reason)
            if not d.text and reason is None and not first:
                continue
            self._started[d.index] = True
            self._finished[d.index] |= reason is not None
            events.append(self._event([self._fmt.chunk_choice(d.index, d.text, reason, first)]))
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
