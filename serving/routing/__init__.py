"""Routing: which engine replica serves each request.

Policies (pure, no Ray; one synchronous signature, see :class:`RoutingPolicy`):

- ``cache-aware`` (:mod:`.cache_aware`, the default): what each engine actually caches,
  from its KV cache events (:mod:`.engine_cache`, :mod:`.kv_event_feed`), weighed
  against its queue;
- ``least-loaded`` (:mod:`.least_loaded`): power of two choices on replica load;
- ``prefix-affinity`` (:mod:`.prefix_affinity`): longest prefix of KV-block hashes,
  bounded by a load threshold, in a bounded LRU index (:mod:`.prefix_index`);
- ``session`` (:mod:`.session`): consistent hashing of the session id (:mod:`.hash_ring`);
- ``round-robin`` (:mod:`.round_robin`).

:class:`~serving.routing.core.RoutingCore` runs a policy once per request (the
simulator runs the same core). The Ray Serve side lives in :mod:`serving.routing.serve_router` (imported on its
own, so the policies import without Ray): ``request_router_config(spec,
deployment_label=...)`` is the app builder's one call. Metric names are listed
in :mod:`serving.routing.metrics`.
"""

from serving.routing.policy import (
    Ranking,
    ReplicaLoad,
    RoutingDecision,
    RoutingPolicy,
    RoutingRequest,
)
from serving.routing.registry import POLICIES, build_policy, parse_policy_name, policy_names

__all__ = [
    "POLICIES",
    "Ranking",
    "ReplicaLoad",
    "RoutingDecision",
    "RoutingPolicy",
    "RoutingRequest",
    "build_policy",
    "parse_policy_name",
    "policy_names",
]
