"""``session``: requests of one session go to one replica while it lives.

The session id (the gateway's session header, carried as
``GenerationRequest.session_id``) is placed on a consistent-hash ring of the
live replicas; its owner goes first and the ring's next replicas follow as
fallbacks for when it is full. The placement is stateless, so every gateway
replica's router agrees on it, and scaling moves only about 1/N of the sessions.
Requests without a session id go least-loaded.

A bounded LRU of recently seen sessions serves only the decision metric
(``session_hit`` / ``session_new`` / ``session_moved``); forgetting a session
changes a label, never a placement.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from typing import Self

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.routing.hash_ring import HashRing
from serving.routing.least_loaded import power_of_two_order
from serving.routing.policy import Ranking, ReplicaLoad, RoutingDecision, RoutingPolicy, RoutingRequest

DEFAULT_VIRTUAL_NODES = 100
DEFAULT_REMEMBERED_SESSIONS = 16_384


class SessionPolicy(RoutingPolicy):
    """Consistent hashing on the session id; least-loaded without one."""

    name = RoutingPolicyName.SESSION

    def __init__(
        self,
        *,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        remembered_sessions: int = DEFAULT_REMEMBERED_SESSIONS,
        rng: random.Random | None = None,
    ) -> None:
        self._virtual_nodes = virtual_nodes
        self._ring = HashRing((), virtual_nodes=virtual_nodes)
        self._last_replica: OrderedDict[str, str] = OrderedDict()
        self._remembered_sessions = remembered_sessions
        self._rng = rng or random.Random()

    @classmethod
    def from_spec(cls, spec: RoutingSpec, *, rng: random.Random | None = None) -> Self:
        return cls(rng=rng)

    def rank(self, request: RoutingRequest, replicas: Sequence[ReplicaLoad]) -> Ranking:
        if not request.session_id:
            return Ranking(power_of_two_order(replicas, self._rng), RoutingDecision.LEAST_LOADED)
        order = self._ring_of(replicas).walk(request.session_id)
        if not order:
            return Ranking((), RoutingDecision.SESSION_NEW)
        return Ranking(order, self._note(request.session_id, order[0]))

    def on_replicas_changed(self, replica_ids: frozenset[str]) -> None:
        self._ring_of_ids(replica_ids)

    def _ring_of(self, replicas: Sequence[ReplicaLoad]) -> HashRing:
        return self._ring_of_ids(frozenset(r.replica_id for r in replicas))

    def _ring_of_ids(self, replica_ids: frozenset[str]) -> HashRing:
        if replica_ids != self._ring.replica_ids:
            self._ring = HashRing(replica_ids, virtual_nodes=self._virtual_nodes)
        return self._ring

    def _note(self, session_id: str, replica_id: str) -> RoutingDecision:
        previous = self._last_replica.pop(session_id, None)
        self._last_replica[session_id] = replica_id
        if len(self._last_replica) > self._remembered_sessions:
            self._last_replica.popitem(last=False)
        if previous is None:
            return RoutingDecision.SESSION_NEW
        return RoutingDecision.SESSION_HIT if previous == replica_id else RoutingDecision.SESSION_MOVED
