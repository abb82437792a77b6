"""Everything a router does per request, without Ray.

:class:`RoutingCore` holds the configured policy, a least-loaded policy for
control calls, the live assignment count, the latest engine stats and the
router's metrics. The Ray Serve adapter calls it from Serve's hooks:

====================================  =========================================
Serve hook (adapter)                  core
====================================  =========================================
``update_replicas``                   :meth:`RoutingCore.update_replicas`
``choose_replicas``                   :meth:`RoutingCore.choose`
``on_request_routed``                 :meth:`RoutingCore.on_routed`
``on_request_completed``              :meth:`RoutingCore.on_finished`
pending request cancelled             :meth:`RoutingCore.on_finished`
a retry names the replica that failed :meth:`RoutingCore.mark_failed`
====================================  =========================================

A replica marked failed (its engine or actor died under a request) is skipped while
any other candidate is live, until it leaves the live set: its requests fail at
once, so by load it would look like the idlest replica and draw the most traffic.

LoRA adapter slots: vLLM batches at most ``max_loras`` distinct adapters per engine
step, and a waiting request whose adapter would make one more is skipped until every
request of some adapter there has finished (under steady traffic, for a long time:
the thrash adapter-heavy deployments report). So a request for an adapter is ranked
first among the replicas where it *fits*: its adapter already has requests there, or
fewer adapters than the replica's slots do (counted from this router's own
assignments; slots from the replica's stats, unknown before its first poll: then it
fits). The policy ranks those; the others follow by load, and when none fits the
policy ranks them all and the wait is counted (``serveout_adapter_slot_waits_total``).
A hot adapter still spreads by load: every replica running it fits. Of the replicas
where it fits, those whose engine holds it in host memory come first (the others would
read it from disk inside an engine step, stalling their batch: see
``EngineStats.adapter_residency``), unless they are busier than the idlest of the others
by more than :data:`COLD_LOAD_MARGIN` requests; the others then follow by load.

All calls come from the router's event loop: no locks here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from serving.config.stack import RoutingSpec
from serving.engine.protocol import EngineStats
from serving.routing.assignments import Assignment, AssignmentTracker
from serving.routing.engine_cache import CacheView
from serving.routing.least_loaded import LeastLoadedPolicy
from serving.routing.metrics import RoutingMetrics
from serving.routing.policy import ReplicaLoad, RoutingPolicy, RoutingRequest


COLD_LOAD_MARGIN = 4
"""Requests more in flight on every replica that caches an adapter than on the idlest one
that would read it from disk, beyond which the cold replicas rank alongside the warm ones."""


@dataclass(frozen=True)
class Candidate:
    """A live replica as the adapter sees it: its id and Serve's cached queue length."""

    replica_id: str
    serve_queue_len: int | None = None


class RoutingCore:
    """One router's policy, live load view and metrics."""

    def __init__(
        self,
        policy: RoutingPolicy,
        metrics: RoutingMetrics,
        *,
        tracker: AssignmentTracker | None = None,
        rng: random.Random | None = None,
        cache_views: Callable[[str], CacheView | None] | None = None,
        adapter_slots: bool = True,
    ) -> None:
        """``cache_views(replica_id)``: what that replica's engine caches (its KV cache
        events followed: :mod:`serving.routing.engine_cache`), or ``None``;
        ``adapter_slots``: rank the replicas where a LoRA request fits first."""
        self.policy = policy
        self.adapter_slots = adapter_slots
        self._cache_views = cache_views
        self.metrics = metrics
        self._control_policy = LeastLoadedPolicy(rng=rng)
        self._assignments = tracker or AssignmentTracker()
        self._engine: dict[str, EngineStats | None] = {}
        self._replica_ids: frozenset[str] = frozenset()
        self._failed: set[str] = set()

    def use_policy(self, policy: RoutingPolicy, *, adapter_slots: bool = True) -> None:
        """Route with ``policy`` from now on (requests in flight keep their assignments)."""
        self.policy = policy
        self.adapter_slots = adapter_slots
        policy.on_replicas_changed(self._replica_ids)

    def update_replicas(self, engine_stats: Mapping[str, EngineStats | None]) -> None:
        """The live replicas (Serve's latest broadcast) and their polled stats."""
        self._engine = dict(engine_stats)
        replica_ids = frozenset(engine_stats)
        if replica_ids != self._replica_ids:
            self._replica_ids = replica_ids
            self.policy.on_replicas_changed(replica_ids)
            self._assignments.retain(replica_ids)
            self._failed &= replica_ids
            self.metrics.set_failed(frozenset(self._failed))
        self.metrics.set_replicas(engine_stats)

    def loads(self, candidates: Sequence[Candidate]) -> list[ReplicaLoad]:
        """What the policy sees of each candidate."""
        return [
            ReplicaLoad(
                replica_id=c.replica_id,
                engine=self._engine.get(c.replica_id),
                assigned=self._assignments.count(c.replica_id),
                serve_queue_len=c.serve_queue_len,
                cache=self._cache_views(c.replica_id) if self._cache_views is not None else None,
            )
            for c in candidates
        ]

    def choose(
        self, request: RoutingRequest, candidates: Sequence[Candidate], *, generation: bool = True
    ) -> tuple[str, ...]:
        """Rank ``candidates`` for a request and assign it to the first; a retry re-ranks.

        ``generation`` requests use the configured policy, control calls least-loaded.
        """
        policy = self.policy if generation else self._control_policy
        healthy = [c for c in candidates if c.replica_id not in self._failed]
        # Every candidate failed: rank them anyway, so the request fails fast (and says
        # why) instead of waiting in Serve's queue for a replacement.
        pool = healthy or candidates
        adapter = request.adapter if generation else None
        fitting = [c for c in pool if not self.adapter_slots or self._fits(adapter, c.replica_id)]
        if adapter is not None and self.adapter_slots:
            fitting = self._cached_first(adapter, fitting)
        ranking = policy.rank(request, self.loads(fitting or pool))
        order = ranking.order
        if fitting and len(fitting) < len(pool):
            others = self._control_policy.rank(request, self.loads([c for c in pool if c not in fitting]))
            order += others.order
        elif not fitting and adapter is not None and pool:
            self.metrics.count_slot_wait(adapter)
        if order:
            assignment = Assignment(order[0], policy.name, ranking.decision, generation, adapter)
            self._assignments.assign(request.request_id, assignment)
        return order

    def _fits(self, adapter: str | None, replica_id: str) -> bool:
        """Whether ``replica_id``'s engine can batch a request for ``adapter`` now."""
        if adapter is None:
            return True
        stats = self._engine.get(replica_id)
        running = self._assignments.adapters(replica_id)
        return stats is None or stats.adapter_slots <= 0 or adapter in running or len(running) < stats.adapter_slots

    def _cached_first(self, adapter: str, fitting: list[Candidate]) -> list[Candidate]:
        """The replicas of ``fitting`` that need no disk read for ``adapter``, unless
        they are all busier than the idlest cold one by more than :data:`COLD_LOAD_MARGIN`."""
        def absent(c: Candidate) -> bool:
            stats = self._engine.get(c.replica_id)
            return stats is not None and stats.adapter_residency(adapter) == "absent"

        warm, cold = [], []
        for c in fitting:
            (cold if absent(c) else warm).append(c)
        if not cold or not warm:
            return fitting

        def load(c: Candidate) -> int:  # what the policy sees as the replica's load
            return ReplicaLoad(c.replica_id, assigned=self._assignments.count(c.replica_id),
                               serve_queue_len=c.serve_queue_len).load

        return fitting if min(map(load, warm)) > min(map(load, cold)) + COLD_LOAD_MARGIN else warm

    def mark_failed(self, replica_id: str) -> None:
        """A request to ``replica_id`` failed because the replica died: skip it until
        Serve removes it from the live replicas."""
        if replica_id in self._replica_ids:
            self._failed.add(replica_id)
            self.metrics.set_failed(frozenset(self._failed))

    def on_routed(self, request: RoutingRequest, replica_id: str) -> None:
        """Serve sent the request to ``replica_id`` and the replica accepted it."""
        assignment = self._assignments.move(request.request_id, replica_id)
        if assignment is None or not assignment.generation:
            return
        self.policy.on_routed(request, replica_id)
        self.metrics.count_routed(replica_id, assignment.policy, assignment.decision)

    def on_finished(self, request_id: str) -> None:
        """The request completed, failed, or was cancelled before Serve sent it."""
        self._assignments.release(request_id)
        self.policy.on_finished(request_id)

    def assigned(self, replica_id: str) -> int:
        """Requests currently assigned to ``replica_id`` by this router."""
        return self._assignments.count(replica_id)

    def is_tracking(self, request_id: str) -> bool:
        return request_id in self._assignments


class RouteTicket:
    """What a caller that sends the request itself (the direct mode's router: HAProxy
    carries the request) gets back from a routing decision, to report the request's end.

    The Serve adapter :meth:`bind` s it when it ranks the request; :meth:`finish` later
    releases the request from the core's load view (and, when the replica's engine
    died, marks the replica failed), on the event loop the core runs on, whichever
    thread calls it. Finishing twice, or an unbound ticket, does nothing. ``spec`` is the
    routing the caller wants (its settings can change without a restart): the adapter
    switches its policy to it when it differs."""

    def __init__(self, spec: RoutingSpec | None = None) -> None:
        self.spec = spec  # the policy the caller routes with now (None: the router's own)
        self.replica_id: str | None = None
        self._core: RoutingCore | None = None
        self._request_id: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, core: RoutingCore, request_id: str, replica_id: str) -> None:
        self._core, self._request_id, self.replica_id = core, request_id, replica_id
        self._loop = asyncio.get_running_loop()

    def finish(self, *, engine_dead: bool = False) -> None:
        core, self._core = self._core, None
        if core is None or self._loop is None:
            return
        request_id, replica_id = self._request_id, self.replica_id

        def release() -> None:
            core.on_finished(request_id)
            if engine_dead and replica_id is not None:
                core.mark_failed(replica_id)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            release()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(release)
