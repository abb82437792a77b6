"""The one protocol every routing policy speaks, and the plain values it speaks in.

A policy is pure: it never imports Ray. It receives a :class:`RoutingRequest`
and the live replicas as :class:`ReplicaLoad` values, and answers with a
:class:`Ranking` (replica ids, most preferred first, plus the decision it took,
for metrics). The Ray Serve adapter (:mod:`serving.routing.serve_router`) turns
Serve's objects into these values and the ranking back into Serve ranks.
"""

from __future__ import annotations

import abc
import enum
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.engine.protocol import EngineStats
from serving.routing.engine_cache import CacheView


class RoutingDecision(enum.StrEnum):
    """Why a policy ranked the replicas as it did (the ``decision`` metric label)."""

    PREFIX_HIT = "prefix_hit"
    """A replica holds a prefix of the prompt and is not overloaded: it goes first."""
    PREFIX_FALLBACK_IMBALANCE = "prefix_fallback_imbalance"
    """A replica holds the prefix but is too loaded: least-loaded instead."""
    PREFIX_MISS = "prefix_miss"
    """No replica is known to hold a full block of the prompt: least-loaded."""
    SESSION_HIT = "session_hit"
    """The session goes to the replica it went to last time."""
    SESSION_NEW = "session_new"
    """A session this router has not seen (or has forgotten)."""
    SESSION_MOVED = "session_moved"
    """A known session whose replica changed (its replica left, or one joined)."""
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"
    CACHE_HIT = "cache_hit"
    """The replica holding the prompt's longest prefix (engine cache, or in flight) goes first."""
    CACHE_SPILL = "cache_spill"
    """A replica holds a longer prefix but is past the load bound or its queue outweighs the hit."""
    CACHE_MISS = "cache_miss"
    """No replica holds a block of the prompt: the least loaded goes first."""


@dataclass(frozen=True)
class RoutingRequest:
    """What a policy may look at in a request."""

    request_id: str
    prompt_token_ids: tuple[int, ...] = ()
    session_id: str | None = None
    adapter: str | None = None  # the LoRA adapter it runs under (None: the base model)


@dataclass(frozen=True)
class ReplicaLoad:
    """One live replica and what is known about its load.

    :attr:`load` is the replica's ongoing requests (for an engine replica, its engine's
    waiting + running) from the two *live* sources: ``assigned`` (requests this router
    has assigned to the replica and not seen finish, counting requests chosen but not
    yet sent, which closes the cold-start herd window) and ``serve_queue_len``
    (Serve's cached ongoing-request count for the replica, refreshed on every send,
    completion and probe, covering every gateway's requests; ``None`` for the requests
    HAProxy carries, which Serve never probes for: each router then balances its own).
    ``engine`` (the
    replica's polled stats) is kept for metrics only: it arrives about one poll
    period late, and using it as load was measured to pile requests on whichever
    replica had *just finished* work (least-loaded then ran at half the throughput
    of round-robin on two replicas; see docs/serving.md). ``cache`` is what the
    replica's engine holds in its prefix cache when the router follows its KV cache
    events (:mod:`serving.routing.engine_cache`), else ``None``.
    """

    replica_id: str
    engine: EngineStats | None = None
    assigned: int = 0
    serve_queue_len: int | None = None
    cache: CacheView | None = None

    @property
    def load(self) -> int:
        return max(self.assigned, self.serve_queue_len or 0)


@dataclass(frozen=True)
class Ranking:
    """A policy's answer: every replica id it would use, most preferred first."""

    order: tuple[str, ...]
    decision: RoutingDecision


class RoutingPolicy(abc.ABC):
    """Base of every routing policy: one synchronous ``rank`` plus two optional hooks.

    Policies are driven from a single event loop (the router's); they need no
    locks. Subclasses set :attr:`name` and are registered in
    :mod:`serving.routing.registry`.
    """

    name: ClassVar[RoutingPolicyName]

    @classmethod
    @abc.abstractmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        """The policy configured from ``spec`` (``rng`` seeds random choices, for tests)."""

    @abc.abstractmethod
    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        """Order ``replicas`` for ``request`` (an empty ``replicas`` gives an empty order)."""

    def on_routed(self, request: RoutingRequest, replica_id: str) -> None:
        """Serve sent ``request`` to ``replica_id`` (not always the first ranked)."""

    def on_replicas_changed(self, replica_ids: frozenset[str]) -> None:
        """The set of live replicas changed; forget state about replicas that left."""

    def on_finished(self, request_id: str) -> None:
        """A request this policy ranked completed, failed or was abandoned."""


def engine_stats_from_routing_stats(routing_stats: Mapping[str, object]) -> EngineStats | None:
    """Convert a replica's ``routing_stats`` (``EngineStats.to_dict()``) at the boundary.

    ``None`` before the first poll (``{}``) or when the dict is not engine stats.
    """
    if not routing_stats:
        return None
    try:
        return EngineStats.from_dict(dict(routing_stats))
    except (TypeError, ValueError):
        return None
