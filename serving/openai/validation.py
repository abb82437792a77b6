"""From a parsed OpenAI body to a :class:`ValidatedRequest`: tokenised, sized, with its
:class:`GenerationRequest` (pure apart from the tokenizer, which is passed in).
Everything a client can get wrong about a request's *meaning* is refused here, before
any replica sees it; the router and the engine replica both call
:func:`validate_completion`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from serving.engine.protocol import GenerationRequest, SamplingSettings
from serving.errors import ContextLengthExceededError, InvalidRequestError, ModelNotFoundError
from serving.openai.output_shape import OutputShape, output_shape_of
from serving.openai.schemas import ChatCompletionRequest, ChatMessage, CompletionRequest

# Below this temperature the engine (vLLM) samples greedily, and refuses n > 1.
GREEDY_TEMPERATURE = 1e-5


class Tokenizer(Protocol):
    def encode_chat(self, messages: list[ChatMessage], tools: list[dict] | None = None) -> list[int]: ...
    def encode_text(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...
    def check_ids(self, token_ids: list[int], *, param: str) -> list[int]: ...


def check_model(requested: str, served: str, adapters: Collection[str] = ()) -> str | None:
    """The adapter ``requested`` names (None: the base model ``served``); raises
    :class:`ModelNotFoundError` listing what is served when it names neither."""
    if requested == served:
        return None
    if requested in adapters:
        return requested
    raise ModelNotFoundError(
        f"The model `{requested}` does not exist. Served models: {', '.join((served, *adapters))}",
        param="model")


def resolve_max_tokens(
    prompt_tokens: int, requested: int | None, max_model_len: int, *, prompt_param: str
) -> int:
    """The completion budget: ``requested``, or what is left of the context when None.

    Raises :class:`ContextLengthExceededError` when prompt plus completion cannot fit.
    """
    if requested is None:
        if prompt_tokens >= max_model_len:
            raise _too_long(prompt_tokens, 1, max_model_len, prompt_param)
        return max_model_len - prompt_tokens
    if prompt_tokens + requested > max_model_len:
        raise _too_long(prompt_tokens, requested, max_model_len, prompt_param)
    return requested


def _too_long(prompt: int, completion: int, limit: int, param: str) -> ContextLengthExceededError:
    return ContextLengthExceededError(
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the {param}, {completion} in the "
        f"completion). Please reduce the length of the {param} or completion.",
        param=param,
    )


def generation_request(
    body: ChatCompletionRequest | CompletionRequest,
    *,
    tokenizer: Tokenizer,
    served_model: str,
    max_model_len: int,
    request_id: str,
    session_id: str | None = None,
    deadline_s: float | None = None,
    trace_id: str | None = None,
    supports_tools: bool = False,
    adapters: Collection[str] = (),
) -> GenerationRequest:
    """Validate meaning, tokenise and size the request (tools, when the model
    ``supports_tools``, are rendered into the prompt and tokenised with it); ``model``
    names the base ``served_model`` or one of its ``adapters``."""
    adapter = check_model(body.model, served_model, adapters)
    unsupported = body.unsupported_fields()
    if unsupported:
        raise InvalidRequestError(
            f"unsupported parameter(s): {', '.join(unsupported)} (serveout refuses what it "
            "would otherwise ignore)", param=unsupported[0]
        )
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )
    if body.temperature < GREEDY_TEMPERATURE and body.n > 1:
        raise InvalidRequestError(
            f"n must be 1 when temperature is {body.temperature:g}: greedy sampling gives one answer",
            param="n",
        )
    output = OutputShape()
    if isinstance(body, ChatCompletionRequest):
        for i, message in enumerate(body.messages):
            unknown = message.unsupported_fields()
            if unknown:
                raise InvalidRequestError(f"unsupported field(s) in messages[{i}]: {', '.join(unknown)}",
                                          param=f"messages.{i}.{unknown[0]}")
        if body.top_logprobs is not None and not body.logprobs:
            raise InvalidRequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        output = output_shape_of(body, supports_tools=supports_tools, model=served_model)
        if output.guided is not None and body.ignore_eos:
            raise InvalidRequestError(
                "ignore_eos cannot be combined with response_format or a forced tool call: the "
                "grammar ends the answer, and past its end the text would be unconstrained",
                param="ignore_eos")
        prompt_ids, param = tokenizer.encode_chat(body.messages, output.tools), "messages"
    elif isinstance(body.prompt, str):
        prompt_ids, param = tokenizer.encode_text(body.prompt), "prompt"
    else:
        prompt_ids, param = tokenizer.check_ids(list(body.prompt), param="prompt"), "prompt"
    if not prompt_ids:
        raise InvalidRequestError("the prompt is empty", param=param)
    max_tokens = resolve_max_tokens(
        len(prompt_ids), body.requested_max_tokens(), max_model_len, prompt_param=param
    )
    if body.min_tokens > max_tokens:
        raise InvalidRequestError(
            f"min_tokens ({body.min_tokens}) is larger than max_tokens ({max_tokens})", param="min_tokens"
        )
    sampling = SamplingSettings(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        n=body.n,
        stop=body.stop_sequences(),
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        repetition_penalty=body.repetition_penalty,
        top_k=body.top_k,
        min_p=body.min_p,
        min_tokens=body.min_tokens,
        logprobs=body.top_logprobs_wanted(),
        logit_bias=_logit_bias(body.logit_bias, tokenizer),
        guided=output.guided,
    )
    return GenerationRequest(
        request_id=request_id,
        prompt_token_ids=tuple(prompt_ids),
        sampling=sampling,
        session_id=session_id,
        deadline_s=deadline_s,
        trace_id=trace_id,
        tool_calling=output.tool_calling,
        adapter=adapter,
    )


def _logit_bias(bias: dict[str, float] | None, tokenizer: Tokenizer) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as (token id, bias) pairs; keys must be token ids of the vocabulary."""
    if not bias:
        return ()
    try:
        ids = [int(key) for key in bias]
    except ValueError:
        raise InvalidRequestError("logit_bias keys must be token ids (integers as strings)",
                                  param="logit_bias") from None
    tokenizer.check_ids(ids, param="logit_bias")
    return tuple(zip(ids, bias.values()))


@dataclass(frozen=True)
class ValidatedRequest:
    """A validated, tokenised completion request and the shape of its answer."""

    generation: GenerationRequest
    chat: bool
    stream: bool
    include_usage: bool
    model: str  # the model id the request named: the base model or an adapter

    @property
    def n(self) -> int:
        return self.generation.sampling.n


def validate_completion(
    body: ChatCompletionRequest | CompletionRequest,
    *,
    tokenizer: Tokenizer,
    served_model: str,
    max_model_len: int,
    request_id: str,
    session_id: str | None,
    deadline_s: float,
    trace_id: str | None,
    supports_tools: bool = False,
    adapters: Collection[str] = (),
) -> ValidatedRequest:
    """Validate, tokenise and size ``body`` (raises the client's 4xx errors)."""
    generation = generation_request(
        body, tokenizer=tokenizer, served_model=served_model, max_model_len=max_model_len,
        request_id=request_id, session_id=session_id, deadline_s=deadline_s, trace_id=trace_id,
        supports_tools=supports_tools, adapters=adapters,
    )
    return ValidatedRequest(
        generation=generation,
        chat=isinstance(body, ChatCompletionRequest),
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        model=body.model,
    )
