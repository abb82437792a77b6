"""What the router decides for one completion request, and how it travels (pure).

In the direct mode the router (:mod:`serving.gateway.router_ingress`) validates and
tokenises a request once, picks a replica, and hands that replica a :class:`Plan`
over a side channel; HAProxy then forwards the client's HTTP request with the plan's
key in a trusted header (``x-serve-router-*`` headers from clients are stripped by
HAProxy). The replica answers from the plan without parsing or tokenising the body
again. A plan is an optimisation, never a requirement: a replica that finds no plan
for its key plans the request itself from the body, the same way
(:func:`plan_completion` runs on both sides).

Plans travel as msgpack (``msgspec``), never pickle: the side channel listens on the
node's network.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from serving.engine.protocol import GenerationRequest
from serving.gateway.request_planning import Tokenizer, plan_request
from serving.gateway.schemas import ChatCompletionRequest, CompletionRequest

PLAN_KEY_HEADER = "x-serve-router-plan"
"""The request header that carries the key of the request's plan (set by the router,
stripped by HAProxy from what clients send)."""


@dataclass(frozen=True)
class PlannedRequest:
    """A validated, tokenised completion request and the shape of its answer."""

    generation: GenerationRequest
    chat: bool
    stream: bool
    include_usage: bool
    model: str

    @property
    def n(self) -> int:
        return self.generation.sampling.n


@dataclass(frozen=True)
class Plan:
    """A planned request on its way to the replica the router picked. ``done_to`` is
    where the replica reports that the request ended (the router's completion inbox),
    so the router's view of the replica's load stays exact."""

    key: str
    planned: PlannedRequest
    done_to: str


@dataclass(frozen=True)
class Done:
    """A replica's report that the request of plan ``key`` ended (or was never claimed),
    and whether the replica's engine has died (the router then stops choosing it)."""

    key: str
    replica_id: str
    engine_dead: bool = False


def plan_completion(
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
) -> PlannedRequest:
    """Validate, tokenise and size ``body`` (raises the client's 4xx errors)."""
    generation = plan_request(
        body, tokenizer=tokenizer, served_model=served_model, max_model_len=max_model_len,
        request_id=request_id, session_id=session_id, deadline_s=deadline_s, trace_id=trace_id,
        supports_tools=supports_tools,
    )
    return PlannedRequest(
        generation=generation,
        chat=isinstance(body, ChatCompletionRequest),
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        model=served_model,
    )


class PlanCodec:
    """msgpack encoding of :class:`Plan` and :class:`Done` (one instance per process)."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._plan = msgspec.msgpack.Decoder(Plan)
        self._done = msgspec.msgpack.Decoder(Done)

    def encode(self, message: Plan | Done) -> bytes:
        return self._encoder.encode(message)

    def plan(self, data: bytes) -> Plan:
        """Decode a plan; raises ``msgspec.ValidationError`` on anything else."""
        return self._plan.decode(data)

    def done(self, data: bytes) -> Done:
        return self._done.decode(data)
