"""``prefix-affinity``: send a prompt to the replica that already holds its longest prefix.

For each request:

1. hash the prompt's full blocks (:func:`~serving.routing.prefix_index.block_hashes`);
2. find the live replicas holding the longest indexed prefix, and the least
   loaded of them;
3. if its load exceeds the lowest load of any replica by more than
   ``imbalance_threshold``, fall back to least-loaded (``prefix_fallback_imbalance``);
   otherwise it goes first (``prefix_hit``);
3b. with no match at all (``prefix_miss``) and ``prefix_home`` on (the app builder turns
   it on when the app runs several gateway replicas), the prompt's *home* goes first: the owner
   of its first block on a consistent-hash ring of the live replicas
   (:mod:`~serving.routing.hash_ring`), unless its load exceeds the lowest by more
   than the threshold (then least-loaded); with it off, least-loaded;
4. record the first-ranked replica for every block of the prompt *now*, at
   decision time, not when the response comes back.

Step 4 plus the router counting chosen-but-unfinished requests in
:attr:`ReplicaLoad.assigned` is what defuses the cold-start herd: of many
concurrent first requests sharing a prefix, the first records the prefix, the
next ones follow it while the load gap stays within the threshold, and past it
they spill to another replica, which then also holds the prefix. A hot prefix so
ends up on several replicas instead of flooding one.

Step 3b is what keeps several gateway replicas consistent: each gateway's router
has its own index, but a prefix it has never seen goes where every other gateway
sent it first, its home, which the ring computes the same in every process (block
hashes of int tokens are process-independent). It costs a single gateway some
balance: homes split the prefixes by hash, not by load, and on a tight KV cache the
fuller replica evicts more (``benchmarks/routing_policies``), so it is off then.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.hash_ring import HashRing
from serving.routing.least_loaded import min_load, power_of_two_order
from serving.routing.policy import Ranking, ReplicaLoad, RoutingDecision, RoutingPolicy, RoutingRequest
from serving.routing.prefix_index import PrefixIndex, block_hashes


class PrefixAffinityPolicy(RoutingPolicy):
    """Longest-prefix affinity on KV-block hashes, bounded by a load threshold."""

    name = RoutingPolicyName.PREFIX_AFFINITY

    def __init__(
        self,
        *,
        block_tokens: int,
        imbalance_threshold: int,
        max_blocks: int,
        home: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self._block_tokens = block_tokens
        self._imbalance_threshold = imbalance_threshold
        self._index = PrefixIndex(max_blocks)
        self._rng = rng or random.Random()
        self._home = home
        self._ring = HashRing(())

    @classmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        return cls(
            block_tokens=spec.prefix_block_tokens,
            imbalance_threshold=spec.imbalance_threshold,
            max_blocks=spec.max_prefix_blocks,
            home=spec.prefix_home is not False,
            rng=rng,
        )

    @property
    def index(self) -> PrefixIndex:
        """The block index (read it; record through routing)."""
        return self._index

    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        if not replicas:
            return Ranking((), RoutingDecision.PREFIX_MISS)
        hashes = block_hashes(request.prompt_token_ids, self._block_tokens, request.adapter)
        by_id = {r.replica_id: r for r in replicas}
        match = self._index.longest_match(hashes, by_id)
        fallback = power_of_two_order(replicas, self._rng)
        if not match.holders:
            ranking = Ranking(self._home_first(hashes, by_id, fallback), RoutingDecision.PREFIX_MISS)
        else:
            holder = min(sorted(match.holders), key=lambda replica_id: by_id[replica_id].load)
            if by_id[holder].load - min_load(replicas) > self._imbalance_threshold:
                ranking = Ranking(fallback, RoutingDecision.PREFIX_FALLBACK_IMBALANCE)
            else:
                rest = tuple(replica_id for replica_id in fallback if replica_id != holder)
                ranking = Ranking((holder,) + rest, RoutingDecision.PREFIX_HIT)
        self._index.record(hashes, ranking.order[0])
        return ranking

    def _home_first(self, hashes: Sequence[int], by_id: dict[str, ReplicaLoad],
                    fallback: tuple[str, ...]) -> tuple[str, ...]:
        """``fallback`` with the prompt's home replica first, when it has one and its
        load is within the threshold of the lightest."""
        if not hashes or not self._home:
            return fallback
        if self._ring.replica_ids != by_id.keys():
            self._ring = HashRing(by_id)
        home = self._ring.walk(str(hashes[0]))[0]
        if by_id[home].load - min(r.load for r in by_id.values()) > self._imbalance_threshold:
            return fallback
        return (home,) + tuple(replica_id for replica_id in fallback if replica_id != home)

    def on_routed(self, request: RoutingRequest, replica_id: str) -> None:
        # Serve may have sent it past the first rank (that replica was full).
        self._index.record(block_hashes(request.prompt_token_ids, self._block_tokens, request.adapter), replica_id)

    def on_replicas_changed(self, replica_ids: frozenset[str]) -> None:
        self._index.retain(replica_ids)
