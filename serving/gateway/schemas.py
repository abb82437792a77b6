"""OpenAI request bodies the gateway accepts (pydantic) and the response shapes it builds.

Every sampling field that changes the answer is either honoured (passed to the
engine) or refused with a clear 400: nothing is silently ignored. Fields outside the
schema are refused when set to a non-default value, except the few that have no
effect on generation (``NO_EFFECT_FIELDS``).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_CHOICES = 16
MAX_STOP_SEQUENCES = 4
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Accepted and ignored: they do not change what is generated.
NO_EFFECT_FIELDS = frozenset({"metadata", "store", "service_tier", "parallel_tool_calls"})


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unsupported_fields(self) -> list[str]:
        """Fields outside the schema sent with a non-default value (we would ignore them)."""
        extra = self.model_extra or {}
        return sorted(
            k for k, v in extra.items() if k not in NO_EFFECT_FIELDS and v not in (None, False, 0, [], {})
        )


class StreamOptions(BaseModel):
    include_usage: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class SamplingFields(_Body):
    """Fields shared by chat and text completions."""

    model: str
    max_tokens: Annotated[int | None, Field(ge=1)] = None
    temperature: Annotated[float, Field(ge=0, le=2)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES)] = 1
    stop: str | list[str] | None = None
    seed: Annotated[int | None, Field(ge=INT64_MIN, le=INT64_MAX)] = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] = 0.0
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] = 0.0
    # vLLM extensions (the OpenAI SDK sends them through ``extra_body``).
    repetition_penalty: Annotated[float, Field(gt=0, le=10)] = 1.0
    top_k: Annotated[int, Field(ge=-1, le=INT64_MAX)] = -1  # the engine's transport carries int64
    min_p: Annotated[float, Field(ge=0, le=1)] = 0.0
    min_tokens: Annotated[int, Field(ge=0)] = 0
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = Field(False, description="vLLM extension: generate exactly max_tokens")

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return stops

    def stop_sequences(self) -> tuple[str, ...]:
        return tuple(self.stop or ())


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int | None, Field(ge=1)] = None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | Annotated[list[int], Field(min_length=1)]
    max_tokens: Annotated[int | None, Field(ge=1)] = 16  # OpenAI's default for completions

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class TokenizeRequest(_Body):
    model: str
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(_Body):
    model: str
    tokens: list[Annotated[int, Field(ge=0)]]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def model_card(name: str, max_model_len: int, created: int) -> dict:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "serveout",
        "max_model_len": max_model_len,
    }
