"""``cache-aware``: route on what the engines actually cache, weighed against their queues.

For each request, over the live replicas:

1. **What each replica holds of the prompt** (leading blocks of
   :func:`~serving.routing.prefix_index.block_hashes`): the more of what its engine
   caches (:attr:`ReplicaLoad.cache`, from the engine's KV cache events) and of what is
   in flight to it (requests this router sent there and has not seen finish: the
   engine computes those blocks soon, which covers a burst sharing a new prefix). A
   replica whose engine events the router does not follow falls back to the router's
   own record of where it sent each prefix (a bounded LRU, as ``prefix-affinity``).
2. **What it has yet to prefill**: the prompt blocks of the requests in flight to it
   that its engine has not yet scheduled (an engine caches a block as it schedules
   it, so its cache events show how far each prefill got). Time to first token is
   mostly this queue plus the request's own uncached tokens; the count of requests
   in flight says little (most of them are decoding), and routing a burst by that
   count was measured to pile its prefills on one replica (docs/serving.md).
3. **Bounded load**: a replica is eligible only while its load is within
   ``load_bound`` x the mean load after this request (the least loaded always is), so a hot prefix spills to more replicas (which then cache it too) instead of
   queueing on one.
4. **The cost**, in prompt tokens: tokens yet to prefill there, plus ``miss_weight`` x
   the prompt's uncached tokens there (above 1: computing them also takes GPU time
   from the replica's other requests, and leaves the prefix on one more replica),
   plus ``queue_weight`` x the mean prompt length (a running mean) per request in
   flight above the least loaded replica. The cheapest goes first
   (ties: the one chosen least recently, which spreads a burst as round-robin does);
   the rest follow by load, for when Serve finds the first full.

Decisions: ``cache_hit`` (the replica holding the longest prefix won), ``cache_spill``
(one held more but was past the bound or cost more), ``cache_miss`` (no replica holds
a block of the prompt).
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.policy import Ranking, ReplicaLoad, RoutingDecision, RoutingPolicy, RoutingRequest
from serving.routing.prefix_index import PrefixIndex, block_hashes

MAX_IN_FLIGHT_TRACKED = 65_536
MEAN_PROMPT_HALF_LIFE = 256  # requests: how fast the running mean prompt length follows the traffic


class _Flight:
    """A request in flight: where, its prompt's blocks, and how many its engine has scheduled."""

    __slots__ = ("replica_id", "hashes", "scheduled")

    def __init__(self, replica_id: str, hashes: tuple[int, ...]) -> None:
        self.replica_id, self.hashes, self.scheduled = replica_id, hashes, 0


class CacheAwarePolicy(RoutingPolicy):
    """Cheapest replica in prefill tokens (engine cache truth), within a load bound."""

    name = RoutingPolicyName.CACHE_AWARE

    def __init__(self, *, block_tokens: int, load_bound: float = 2.0, miss_weight: float = 3.0,
                 queue_weight: float = 0.3, max_blocks: int = 65_536, rng: random.Random | None = None) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        if load_bound < 1.0 or miss_weight < 1.0 or queue_weight < 0:
            raise ValueError("load_bound and miss_weight must be >= 1, queue_weight >= 0")
        self.block_tokens = block_tokens
        self.load_bound = load_bound
        self.miss_weight = miss_weight
        self.queue_weight = queue_weight
        self._rng = rng or random.Random()
        self._routed = PrefixIndex(max_blocks)  # where this router sent prefixes (replicas without events)
        self._flights: OrderedDict[str, _Flight] = OrderedDict()
        self._in_flight: dict[int, Counter[str]] = {}  # block hash -> replicas with it in flight
        self._prefilling: dict[str, dict[str, _Flight]] = {}  # replica -> flights not yet all scheduled
        self._mean_prompt = 0.0
        self._decay = 0.5 ** (1 / MEAN_PROMPT_HALF_LIFE)
        self._decisions = 0
        self._last_chosen: dict[str, int] = {}

    @classmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        return cls(block_tokens=spec.prefix_block_tokens, load_bound=spec.load_bound,
                   miss_weight=spec.miss_weight, queue_weight=spec.queue_weight,
                   max_blocks=spec.max_prefix_blocks, rng=rng)

    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        if not replicas:
            return Ranking((), RoutingDecision.CACHE_MISS)
        tokens = len(request.prompt_token_ids)
        self._mean_prompt = tokens if not self._mean_prompt else (
            self._decay * self._mean_prompt + (1 - self._decay) * tokens)
        hashes = block_hashes(request.prompt_token_ids, self.block_tokens, request.adapter)
        held = {r.replica_id: self._held(r, hashes) for r in replicas}
        lowest = min(r.load for r in replicas)
        # Eligible: load <= bound x the mean load after this request (the lightest always is).
        bound = max(self.load_bound * (sum(r.load for r in replicas) + 1) / len(replicas), lowest)
        queue_cost = self.queue_weight * self._mean_prompt
        block = self.block_tokens

        def cost(r: ReplicaLoad) -> tuple[float, int]:
            return (self._to_prefill(r) * block + self.miss_weight * (tokens - held[r.replica_id] * block)
                    + queue_cost * (r.load - lowest), self._last_chosen.get(r.replica_id, -1))

        shuffled = self._rng.sample(list(replicas), len(replicas))  # equal costs and recency: at random
        best = min((r for r in shuffled if r.load <= bound + 1e-9), key=cost)
        most = max(held.values())
        if most == 0:
            decision = RoutingDecision.CACHE_MISS
        elif held[best.replica_id] == most:
            decision = RoutingDecision.CACHE_HIT
        else:
            decision = RoutingDecision.CACHE_SPILL
        self._decisions += 1
        self._last_chosen[best.replica_id] = self._decisions
        rest = sorted((r for r in shuffled if r is not best), key=lambda r: r.load)
        self._track(request.request_id, best.replica_id, hashes)
        return Ranking((best.replica_id, *(r.replica_id for r in rest)), decision)

    def _held(self, replica: ReplicaLoad, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` the replica holds or has in flight."""
        if not hashes:
            return 0
        if replica.cache is not None:
            cached = replica.cache.cached_blocks(hashes)
        else:
            cached = self._routed.longest_match(hashes, (replica.replica_id,)).blocks
        flying = 0
        for h in hashes:
            holders = self._in_flight.get(h)
            if holders is None or replica.replica_id not in holders:
                break
            flying += 1
        return max(cached, flying)

    def _to_prefill(self, replica: ReplicaLoad) -> int:
        """Blocks of the requests in flight to ``replica`` its engine has not scheduled yet
        (0 without its cache events: then only the load counts)."""
        flights = self._prefilling.get(replica.replica_id)
        view = replica.cache
        if not flights or view is None:
            return 0
        left = 0
        for request_id, flight in list(flights.items()):
            flight.scheduled += view.cached_blocks(flight.hashes[flight.scheduled:])
            if flight.scheduled >= len(flight.hashes):
                del flights[request_id]
            else:
                left += len(flight.hashes) - flight.scheduled
        return left

    def _track(self, request_id: str, replica_id: str, hashes: tuple[int, ...]) -> None:
        self._untrack(request_id)
        flight = self._flights[request_id] = _Flight(replica_id, hashes)
        self._prefilling.setdefault(replica_id, {})[request_id] = flight
        for h in hashes:
            holders = self._in_flight.get(h)
            if holders is None:
                holders = self._in_flight[h] = Counter()
            holders[replica_id] += 1
        while len(self._flights) > MAX_IN_FLIGHT_TRACKED:
            self._untrack(next(iter(self._flights)))

    def _untrack(self, request_id: str) -> None:
        flight = self._flights.pop(request_id, None)
        if flight is None:
            return
        self._prefilling.get(flight.replica_id, {}).pop(request_id, None)
        for h in flight.hashes:
            holders = self._in_flight.get(h)
            if holders is None:
                continue
            holders[flight.replica_id] -= 1
            if holders[flight.replica_id] <= 0:
                del holders[flight.replica_id]
                if not holders:
                    del self._in_flight[h]

    def on_routed(self, request: RoutingRequest, replica_id: str) -> None:
        flight = self._flights.get(request.request_id)
        if flight is not None and flight.replica_id != replica_id:  # Serve sent it past the first rank
            self._track(request.request_id, replica_id, flight.hashes)
        hashes = flight.hashes if flight is not None else block_hashes(request.prompt_token_ids, self.block_tokens, request.adapter)
        self._routed.record(hashes, replica_id)

    def on_finished(self, request_id: str) -> None:
        self._untrack(request_id)

    def on_replicas_changed(self, replica_ids: frozenset[str]) -> None:
        self._routed.retain(replica_ids)
        for request_id, flight in list(self._flights.items()):
            if flight.replica_id not in replica_ids:
                self._untrack(request_id)
        for replica_id in list(self._prefilling):
            if replica_id not in replica_ids:
                del self._prefilling[replica_id]
        self._last_chosen = {k: v for k, v in self._last_chosen.items() if k in replica_ids}
