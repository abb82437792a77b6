"""What the gateway and an engine replica exchange, and the engine's small protocol.

These types cross the Ray Serve handle boundary (pickled), so they are plain
dataclasses with no engine imports: the gateway never imports vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from serving.config.adapters import AdapterSpec
from serving.errors import ReplicaFailedError


@dataclass(frozen=True)
class GuidedDecoding:
    """Output the engine's grammar constrains (structured outputs): a JSON schema (as
    JSON text), or any JSON object."""

    json_schema: str | None = None
    json_object: bool = False


@dataclass(frozen=True)
class ToolCalling:
    """How the engine reads tool calls out of a choice's text.

    ``auto``: the model family's tool-call parser (named in the model spec) finds them in
    free text; ``required``: the text is a JSON array of ``{"name", "parameters"}``
    (forced by :class:`GuidedDecoding`); ``named``: the text is the arguments of
    ``function``. ``tools_json`` is the request's ``tools`` (OpenAI's shape, as JSON
    text) for the parser; ``stream`` says whether the client reads the answer as a
    stream (a whole answer is parsed once, at its end); ``parallel`` False keeps only
    the first call.
    """

    mode: Literal["auto", "required", "named"]
    function: str | None = None
    tools_json: str = "[]"
    stream: bool = False
    parallel: bool = True


@dataclass(frozen=True)
class SamplingSettings:
    """The OpenAI sampling fields the engine honours."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    top_k: int = -1  # -1 or 0: no top-k cut
    min_p: float = 0.0
    min_tokens: int = 0
    logprobs: int | None = None  # top alternatives per token (0: the chosen token's only); None: none
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias) pairs
    guided: GuidedDecoding | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One generation, already tokenised and validated by the gateway."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingSettings
    session_id: str | None = None
    deadline_s: float | None = None  # absolute time.time() after which the engine aborts it
    trace_id: str | None = None  # the HTTP request's X-Request-Id, for log lines
    tool_calling: ToolCalling | None = None
    adapter: str | None = None  # the LoRA adapter to generate with (None: the base model)
    priority: int = 0  # the request's class rank (0: the highest); vLLM runs lower values first


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of one tool call: the first piece of a call carries its ``id`` and
    ``name``, later ones more of its ``arguments`` (JSON text, in pieces)."""

    index: int  # the call's position in the choice
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability, and its top alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class GenerationDelta:
    """A piece of one choice's output. The last delta of a choice has ``finish_reason``.
    ``text`` is content; tool calls the engine read out of the text come as
    ``tool_calls`` instead (requests with :class:`ToolCalling`)."""

    index: int
    text: str
    num_tokens: int
    finish_reason: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    token_ids: tuple[int, ...] = ()  # the generated tokens (what a resumed stream continues from)


@dataclass(frozen=True)
class GenerationChunk:
    """What the replica streams: deltas from one engine step, plus usage on the last chunk."""

    deltas: tuple[GenerationDelta, ...]
    replica_id: str
    prompt_tokens: int
    completion_tokens: int
    finished: bool = False
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache (set when finished)


@dataclass(frozen=True)
class EngineStats:
    """A replica's engine load and cumulative counters (for routing, scaling, metrics)."""

    replica_id: str
    waiting: int = 0
    running: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    kv_events_endpoint: str = ""  # where the engine publishes its KV cache events ("": it does not)
    adapters: tuple[str, ...] = ()  # LoRA adapters loaded (ready for requests)
    adapter_slots: int = 0  # distinct adapters one engine batch holds (max_loras; 0: no LoRA)
    adapter_loads: int = 0  # adapters loaded since the engine started (cumulative)
    adapter_load_seconds: float = 0.0  # time spent checking and loading them (cumulative)
    adapters_refused: int = 0  # declared adapters this engine refused (now)
    adapters_cached: tuple[str, ...] = ()  # loaded adapters in the engine's host-memory LRU (polled)
    adapters_active: tuple[str, ...] = ()  # adapters with requests in the running batch (in its slots)
    adapter_evictions: int = 0  # loaded adapters seen leaving the host LRU (cumulative)

    @property
    def queue_depth(self) -> int:
        """Requests the engine holds: waiting plus running."""
        return self.waiting + self.running

    @property
    def adapters_loaded(self) -> int:
        """LoRA adapters ready for requests."""
        return len(self.adapters)

    @property
    def adapters_cached_count(self) -> int:
        """Adapters in the engine's host-memory LRU."""
        return len(self.adapters_cached)

    @property
    def adapters_active_count(self) -> int:
        """Adapters in the running batch's slots."""
        return len(self.adapters_active)

    def adapter_residency(self, adapter: str) -> Literal["active", "cached", "absent", "unknown"]:
        """Where ``adapter`` is in this engine: ``active`` (in the running batch's slots),
        ``cached`` (in host memory: no disk read to use it), ``absent`` (a request for it
        reads it from disk inside an engine step, stalling the batch), or ``unknown``
        (the engine reports no host cache: no LoRA, or not polled yet)."""
        if adapter in self.adapters_active:
            return "active"
        if adapter in self.adapters_cached:
            return "cached"
        return "absent" if self.adapters_cached else "unknown"

    def to_dict(self) -> dict[str, float | int | str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "EngineStats":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Engine(Protocol):
    """An inference engine behind one replica: vLLM in production, the null engine
    (no model) to measure the serving path alone."""

    @property
    def dead(self) -> bool:
        """Whether the engine died for good (the replica must be replaced)."""
        ...

    def dead_error(self) -> ReplicaFailedError:
        """The error that requests to a dead engine fail with."""
        ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream chunks; cancelling the iteration aborts the engine request."""
        ...

    def stats(self) -> EngineStats: ...

    async def set_adapters(self, adapters: tuple[AdapterSpec, ...]) -> None:
        """Serve exactly these LoRA adapters from now on."""
        ...

    async def check_health(self) -> None: ...

    def shutdown(self) -> None: ...
