"""The bodies the gateway answers with, as pydantic models (for ``/openapi.json``).

:mod:`serving.openai.frames` builds these as plain dicts (the token path cannot
afford a model per chunk); unit tests validate what it builds against these models
(``extra="forbid"``), so the document says what the gateway really sends.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length", "tool_calls", "abort", "error"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Answer):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(_Answer):
    """Every error (``error_mapping``); a stream that fails after its start sends it as
    its last event before ``[DONE]``."""

    error: ErrorDetail


class Usage(_Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CalledFunction(_Answer):
    name: str
    arguments: str = Field(description="JSON text (valid JSON when the choice finished by itself)")


class ToolCall(_Answer):
    id: str
    type: Literal["function"]
    function: CalledFunction


class TopLogprob(_Answer):
    token: str
    logprob: float
    bytes: list[int]


class ContentLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Answer):
    content: list[ContentLogprob]


class AssistantMessage(_Answer):
    role: Literal["assistant"]
    content: str | None = Field(description="null when the answer is tool calls only")
    tool_calls: list[ToolCall] | None = None


class ChatChoice(_Answer):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason


class ChatCompletion(_Answer):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(_Answer):
    name: str | None = None
    arguments: str


class ToolCallChunk(_Answer):
    index: int
    id: str | None = Field(None, description="on a call's first delta, with type and name")
    type: Literal["function"] | None = None
    function: FunctionDelta


class ChatDelta(_Answer):
    role: Literal["assistant"] | None = Field(None, description="on a choice's first delta")
    content: str | None = None
    tool_calls: list[ToolCallChunk] | None = None


class ChatChunkChoice(_Answer):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class ChatCompletionChunk(_Answer):
    """One ``data:`` event of a streamed chat answer (the stream ends with ``data: [DONE]``)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = Field(None, description="present when stream_options.include_usage; "
                                "set on the last event only (whose choices are empty)")


class CompletionLogprobs(_Answer):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(_Answer):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: FinishReason | None


class Completion(_Answer):
    """A text completion; each event of a streamed one has the same shape (``usage``
    only when asked for, on the last event)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(_Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    parent: str | None
    max_model_len: int


class ModelList(_Answer):
    object: Literal["list"]
    data: list[ModelCard]


class TokenizeResponse(_Answer):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeResponse(_Answer):
    prompt: str


class HealthResponse(_Answer):
    status: Literal["ok", "starting", "draining"]
    not_ready: list[str] | None = None


class StatusResponse(BaseModel):
    """What ``serving status`` shows (replicas, policy, admission, draining)."""

    model_config = ConfigDict(extra="allow")

    app: str
    model: str
    replicas: dict[str, Any]
    routing_policy: str
    draining: bool
    in_flight: int
    admission_limit: int
