"""What a timed answer looks like on the wire (pure): the server's settings, request
validation, and the bytes of an answer prepared once per request.

A stream is written as vLLM writes it: the role chunk and the first token in one write,
then one chunk per token; the last token's chunk (finish reason), the usage chunk
(``stream_options.include_usage``) and ``data: [DONE]`` in the last write. ``ignore_eos``
is honoured: without it an answer stops after ``eos_after`` tokens when that is set. There
is no tokenizer: ``prompt_tokens`` counts the prompt's whitespace-separated words.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TOKEN_TEXT = " tok"


class TimedConfig(BaseModel):
    """How the server answers (seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_s: float = Field(0.1, ge=0.0)
    itl_s: float = Field(0.02, ge=0.0)
    model: str = "timed"
    eos_after: int | None = Field(None, ge=1, description="without ignore_eos, stop after this many tokens")
    default_max_tokens: int = Field(16, ge=1)


class BadRequest(Exception):
    """A request the server refuses: (HTTP status, OpenAI error message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Completion:
    """A parsed, validated completion request."""

    chat: bool
    stream: bool
    include_usage: bool
    tokens: int
    finish_reason: str
    prompt_tokens: int


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts, prompt lists, token ids
        return sum(1 if isinstance(v, int) else _words(v.get("text") if isinstance(v, dict) else v) for v in value)
    return 0


def parse_completion(body: bytes, *, chat: bool, config: TimedConfig) -> Completion:
    """Validate a request body (:class:`BadRequest` when the server would refuse it)."""
    try:
        req = json.loads(body)
    except ValueError:
        raise BadRequest(400, "the body is not JSON") from None
    if not isinstance(req, dict):
        raise BadRequest(400, "the body is not a JSON object")
    if req.get("model") != config.model:
        raise BadRequest(404, f"The model `{req.get('model')}` does not exist.")
    if req.get("n", 1) != 1:
        raise BadRequest(400, "only n=1 is supported")
    if chat and not isinstance(req.get("messages"), list):
        raise BadRequest(400, "messages must be a list")
    if not chat and not isinstance(req.get("prompt"), (str, list)):
        raise BadRequest(400, "prompt must be a string or a list")
    limit = req.get("max_completion_tokens", req.get("max_tokens"))
    limit = config.default_max_tokens if limit is None else limit
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise BadRequest(400, "max_tokens must be a positive integer")
    tokens = limit if req.get("ignore_eos") or config.eos_after is None else min(limit, config.eos_after)
    options = req.get("stream_options") or {}
    prompt = [m.get("content") for m in req["messages"] if isinstance(m, dict)] if chat else req["prompt"]
    return Completion(
        chat=chat,
        stream=bool(req.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        tokens=tokens,
        finish_reason="length" if tokens == limit else "stop",
        prompt_tokens=_words(prompt),
    )


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class StreamFrames:
    """The bytes of one answer, prepared once: first, middle and last writes."""

    def __init__(self, req: Completion, trace_id: int, model: str) -> None:
        kind = ("chatcmpl", "chat.completion.chunk") if req.chat else ("cmpl", "text_completion")
        head = {"id": f"{kind[0]}-{trace_id}", "object": kind[1], "created": int(time.time()), "model": model}

        def event(finish: str | None, role: bool = False) -> bytes:
            if req.chat:
                delta = {"role": "assistant", "content": ""} if role else {"content": TOKEN_TEXT}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": TOKEN_TEXT, "logprobs": None, "finish_reason": finish}
            return _event(head | {"choices": [choice]})

        usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.tokens,
                 "completion_tokens": req.tokens}
        tail = event(req.finish_reason)
        if req.include_usage:
            tail += _event(head | {"choices": [], "usage": usage})
        tail += b"data: [DONE]\n\n"
        role = event(None, role=True) if req.chat else b""
        middle = event(None)
        self.first = _chunk(role + (tail if req.tokens == 1 else middle))
        self.middle = _chunk(middle)
        self.last = _chunk(tail) + b"0\r\n\r\n"
        if req.tokens == 1:
            self.first += b"0\r\n\r\n"


def whole_answer(req: Completion, trace_id: int, model: str) -> bytes:
    """The JSON body of a non-streamed answer."""
    text = TOKEN_TEXT * req.tokens
    if req.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": req.finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason}
    return json.dumps({
        "id": f"{'chatcmpl' if req.chat else 'cmpl'}-{trace_id}",
        "object": "chat.completion" if req.chat else "text_completion",
        "created": int(time.time()), "model": model, "choices": [choice],
        "usage": {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.tokens,
                  "total_tokens": req.prompt_tokens + req.tokens},
    }, separators=(",", ":")).encode()  # fmt: skip
