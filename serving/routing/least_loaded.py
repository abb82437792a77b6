"""``least-loaded``: power of two choices on replica load.

Two replicas are sampled at random and the less loaded goes first; the rest
follow by load, so Serve still has somewhere to go when both are full. Sampling
two instead of taking the global minimum keeps several routers (one per gateway
replica, each with a slightly stale view) from all piling onto the same replica.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.policy import Ranking, ReplicaLoad, RoutingDecision, RoutingPolicy, RoutingRequest


def power_of_two_order(replicas: Sequence[ReplicaLoad], rng: random.Random) -> tuple[str, ...]:
    """Replica ids: the lighter of two random picks, the other pick, then the rest by load."""
    if len(replicas) <= 2:
        sampled = rng.sample(list(replicas), len(replicas))
        rest: list[ReplicaLoad] = []
    else:
        first, second = rng.sample(range(len(replicas)), 2)
        sampled = [replicas[first], replicas[second]]
        rest = [r for i, r in enumerate(replicas) if i not in (first, second)]
    # sorted() is stable: equal loads keep the random sampling order.
    ordered = sorted(sampled, key=lambda r: r.load) + sorted(rest, key=lambda r: r.load)
    return tuple(r.replica_id for r in ordered)


def min_load(replicas: Sequence[ReplicaLoad]) -> int:
    """The lowest load among ``replicas`` (0 when there are none)."""
    return min((r.load for r in replicas), default=0)


class LeastLoadedPolicy(RoutingPolicy):
    """Power of two choices on :attr:`ReplicaLoad.load`."""

    name = RoutingPolicyName.LEAST_LOADED

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    @classmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        return cls(rng=rng)

    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        return Ranking(power_of_two_order(replicas, self._rng), RoutingDecision.LEAST_LOADED)
