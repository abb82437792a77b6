"""What the router decides for one completion request, and how it travels (pure).

In the direct mode the router (:mod:`serving.direct.router`) validates and
tokenises a request once, picks a replica, and hands that replica a :class:`Handoff`
over a side channel; HAProxy then forwards the client's HTTP request with the plan's
key in a trusted header (``x-serve-router-*`` headers from clients are stripped by
HAProxy). The replica answers from the plan without parsing or tokenising the body
again. A plan is an optimisation, never a requirement: a replica that finds no plan
for its key plans the request itself from the body, the same way
(:func:`validate_completion` runs on both sides).

Plans travel as msgpack (``msgspec``), never pickle: the side channel listens on the
node's network.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from serving.openai.validation import ValidatedRequest

HANDOFF_KEY_HEADER = "x-serve-router-plan"
"""The request header that carries the key of the request's plan (set by the router,
stripped by HAProxy from what clients send)."""

HANDOFF_ENDPOINT_STAT = "plan_endpoint"
"""The routing stat in which an engine replica publishes its handoff inbox's address."""


@dataclass(frozen=True)
class Handoff:
    """A validated request on its way to the replica the router picked. ``done_to`` is
    where the replica reports that the request ended (the router's completion inbox),
    so the router's view of the replica's load stays exact."""

    key: str
    request: ValidatedRequest
    done_to: str


@dataclass(frozen=True)
class Done:
    """A replica's report that the request of plan ``key`` ended (or was never claimed),
    and whether the replica's engine has died (the router then stops choosing it)."""

    key: str
    replica_id: str
    engine_dead: bool = False


class HandoffCodec:
    """msgpack encoding of :class:`Handoff` and :class:`Done` (one instance per process)."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._plan = msgspec.msgpack.Decoder(Handoff)
        self._done = msgspec.msgpack.Decoder(Done)

    def encode(self, message: Handoff | Done) -> bytes:
        return self._encoder.encode(message)

    def plan(self, data: bytes) -> Handoff:
        """Decode a plan; raises ``msgspec.ValidationError`` on anything else."""
        return self._plan.decode(data)

    def done(self, data: bytes) -> Done:
        return self._done.decode(data)
