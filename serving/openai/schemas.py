"""OpenAI request bodies the gateway accepts (pydantic) and the response shapes it builds.

Every sampling field that changes the answer is either honoured (passed to the
engine) or refused with a clear 400: nothing is silently ignored. Fields outside the
schema are refused when set to a non-default value, except the few that have no
effect on generation (``NO_EFFECT_FIELDS``). The same models describe the bodies in
``/openapi.json`` (:mod:`serving.openai.openapi`).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_CHOICES = 16
MAX_STOP_SEQUENCES = 4
MAX_TOP_LOGPROBS = 20  # the engine's max_logprobs
MAX_TOOLS = 128
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # function and response-format names, as OpenAI allows
# Accepted and ignored: they do not change what is generated.
NO_EFFECT_FIELDS = frozenset({"metadata", "store", "service_tier"})


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


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="the arguments as JSON text")


class AssistantToolCall(BaseModel):
    """A tool call of an earlier assistant turn, sent back by the client."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    """One chat turn. A field outside these sent with a value is refused by name (sent
    empty, as the SDK echoes an answer's ``refusal: null``, it is ignored)."""

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = Field(None, description="assistant messages only")
    tool_call_id: str | None = Field(None, description="tool messages: the call this answers")

    @model_validator(mode="after")
    def _shape_of_role(self) -> "ChatMessage":
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only assistant messages have tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required (only an assistant message with tool_calls may omit it)")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionDefinition(BaseModel):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of an object")
    strict: bool | None = Field(None, description="accepted; arguments always follow `parameters`")


class ChatTool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class TextFormat(BaseModel):
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    type: Literal["json_object"]


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema", description="the JSON schema the answer follows")
    strict: bool | None = Field(None, description="accepted; the schema is always enforced")


class JsonSchemaFormat(BaseModel):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
LogitBias = dict[str, Annotated[float, Field(ge=-100, le=100)]]


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
    response_format: ResponseFormat | None = None
    tools: Annotated[list[ChatTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = Field(None, description="default: auto with tools, none without")
    parallel_tool_calls: bool | None = Field(None, description="false: at most one tool call")
    logprobs: bool = False
    top_logprobs: Annotated[int | None, Field(ge=0, le=MAX_TOP_LOGPROBS)] = None
    logit_bias: LogitBias | None = Field(None, description="token id (as a string) -> bias, -100..100")

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def top_logprobs_wanted(self) -> int | None:
        """Alternatives per token the engine returns (None: no logprobs)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    prompt: str | Annotated[list[int], Field(min_length=1)]
    max_tokens: Annotated[int | None, Field(ge=1)] = 16  # OpenAI's default for completions
    logprobs: Annotated[int | None, Field(ge=0, le=MAX_TOP_LOGPROBS)] = None
    logit_bias: LogitBias | None = Field(None, description="token id (as a string) -> bias, -100..100")

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs


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


def model_card(name: str, max_model_len: int, created: int, parent: str | None = None) -> dict:
    """One ``/v1/models`` entry, as vLLM shapes it: an adapter's ``parent`` (and ``root``) is
    its base model; a base model has no parent and is its own root (no server path shown)."""
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "serveout",
        "root": parent or name,
        "parent": parent,
        "max_model_len": max_model_len,
    }
