"""``round-robin``: each request starts one replica further along.

Replicas are taken in id order, so the cycle does not depend on the order Serve
lists them in; the rest of the cycle follows as fallback ranks for when the
first replica is full.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.policy import Ranking, ReplicaLoad, RoutingDecision, RoutingPolicy, RoutingRequest


class RoundRobinPolicy(RoutingPolicy):
    """Cycle through the replicas."""

    name = RoutingPolicyName.ROUND_ROBIN

    def __init__(self, *, start: int = 0) -> None:
        self._next = start

    @classmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        return cls(start=(rng or random.Random()).randrange(1 << 16))

    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        ids = sorted(r.replica_id for r in replicas)
        if not ids:
            return Ranking((), RoutingDecision.ROUND_ROBIN)
        start = self._next % len(ids)
        self._next = start + 1  # stays small; the modulo is recomputed as replicas change
        return Ranking(tuple(ids[start:] + ids[:start]), RoutingDecision.ROUND_ROBIN)
