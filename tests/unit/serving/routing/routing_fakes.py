"""Helpers shared by the routing unit tests (fakes are named as fakes)."""

from __future__ import annotations

from collections.abc import Sequence

from serving.routing.policy import Ranking, ReplicaLoad, RoutingPolicy, RoutingRequest


def loads(**load_by_replica: int) -> list[ReplicaLoad]:
    """``loads(a=0, b=3)``: replicas whose load (Serve's live queue length) is given."""
    return [
        ReplicaLoad(replica_id, serve_queue_len=load)
        for replica_id, load in load_by_replica.items()
    ]


def rank(policy: RoutingPolicy, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
    """``policy.rank`` (kept as a helper: the tests read as ``rank(policy, ...)``)."""
    return policy.rank(request, replicas)


def prompt(*blocks: int, block_tokens: int = 4, tail: Sequence[int] = ()) -> tuple[int, ...]:
    """Token ids made of whole blocks, block ``b`` being ``block_tokens`` copies of ``b``."""
    return tuple(token for b in blocks for token in [b] * block_tokens) + tuple(tail)
