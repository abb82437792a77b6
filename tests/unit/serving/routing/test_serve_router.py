"""The Ray Serve adapter, driven the way Serve drives it, without starting Ray."""

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from ray.serve._private.common import DeploymentHandleSource, DeploymentID, ReplicaID, RequestMetadata
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest

from serving.config.stack import RoutingSpec
from serving.engine.protocol import EngineStats, GenerationRequest, SamplingSettings
from serving.routing.policy import Ranking, RoutingPolicy
from serving.routing.core import Candidate, RouteTicket
from serving.routing.serve_router import (
    AVOID_REPLICA_KWARG,
    ROUTE_TICKET_KWARG,
    ServeoutRequestRouter,
    request_router_config,
    routing_request,
)
from tests.unit.serving.routing.routing_fakes import prompt

DEPLOYMENT = DeploymentID(name="engine", app_name="serveout")


class FakeRunningReplica:
    """Stands in for Serve's RunningReplica: an id, stats, a capacity, a queue length."""

    def __init__(self, unique_id: str, stats: EngineStats | None = None) -> None:
        self.replica_id = ReplicaID(unique_id, DEPLOYMENT)
        self.routing_stats = stats.to_dict() if stats else {}
        self.max_ongoing_requests = 8

    async def get_queue_len(self, *, deadline_s: float) -> int:
        return 0


class FakeBrokenPolicy(RoutingPolicy):
    name = RoutingSpec().policy

    @classmethod
    def from_spec(cls, spec, *, rng=None):
        return cls()

    def rank(self, request, replicas) -> Ranking:
        raise RuntimeError("bug")


def make_router(policy: str, registry: CollectorRegistry, **spec: Any) -> ServeoutRequestRouter:
    router = ServeoutRequestRouter(
        deployment_id=DEPLOYMENT,
        handle_source=DeploymentHandleSource.UNKNOWN,
        use_replica_queue_len_cache=True,
    )
    router.initialize_state(
        spec=RoutingSpec(policy=policy, **spec).model_dump(mode="json"),
        deployment_label="chat",
        registry=registry,
    )
    return router


def pending(
    request_id: str, tokens=(), *, method="generate", session="", metadata_session="", kwargs=None
) -> PendingRequest:
    """A Serve pending request for ``generate`` (carrying a GenerationRequest) or a control call."""
    sampling = SamplingSettings(max_tokens=8)
    generation = GenerationRequest(request_id, tuple(tokens), sampling, session_id=session or None)
    metadata = RequestMetadata(
        request_id=request_id, internal_request_id=f"internal-{request_id}", call_method=method,
        session_id=metadata_session, is_streaming=True,
    )
    return PendingRequest(
        args=[generation] if method == "generate" else [], kwargs=kwargs or {}, metadata=metadata)


async def settle() -> None:
    for _ in range(5):  # let Serve's background probes and done-callbacks run
        await asyncio.sleep(0)


def routed(registry: CollectorRegistry, replica: str, policy: str) -> float | None:
    return registry.get_sample_value(
        "serveout_routed_requests_total", {"deployment": "chat", "replica": replica, "policy": policy}
    )


def test_prefix_affinity_end_to_end_through_serves_hooks():
    async def scenario():
        registry = CollectorRegistry()
        router = make_router("prefix-affinity", registry, prefix_block_tokens=4, imbalance_threshold=4)
        replicas = [FakeRunningReplica("r1", EngineStats("r1")), FakeRunningReplica("r2", EngineStats("r2"))]
        router.update_replicas(replicas)
        await settle()

        first = pending("a", prompt(1, 2, 3, tail=(9,)))
        ranks = await router.choose_replicas(replicas, first)
        assert [len(rank) for rank in ranks] == [1, 1]  # singleton ranks, the policy's order
        assert {rank[0] for rank in ranks} == set(replicas)
        assert first.routing_context.should_backoff
        chosen = ranks[0][0]
        router.on_request_routed(first, chosen.replica_id, None)

        second = pending("b", prompt(1, 2, 3, tail=(8, 8)))
        assert (await router.choose_replicas(replicas, second))[0][0] is chosen  # the prefix's replica
        router.on_request_routed(second, chosen.replica_id, None)

        uid = chosen.replica_id.unique_id
        assert routed(registry, uid, "prefix-affinity") == 2
        assert registry.get_sample_value("serveout_routing_decisions_total", {
            "deployment": "chat", "policy": "prefix-affinity", "decision": "prefix_hit"}) == 1
        assert router.routing.assigned(uid) == 2
        router.on_request_completed(chosen.replica_id, "internal-a")
        router.on_request_completed(chosen.replica_id, "internal-b")
        assert router.routing.assigned(uid) == 0

    asyncio.run(scenario())


def test_a_retry_naming_the_failed_replica_keeps_every_request_off_it():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        replicas = [FakeRunningReplica("r1"), FakeRunningReplica("r2")]
        router.update_replicas(replicas)
        retry = pending("a-retry", kwargs={AVOID_REPLICA_KWARG: "r1"})
        assert [rank[0].replica_id.unique_id for rank in await router.choose_replicas(replicas, retry)] == ["r2"]
        for i in range(10):  # later requests too, until Serve removes r1
            ranks = await router.choose_replicas(replicas, pending(f"q{i}"))
            assert [rank[0].replica_id.unique_id for rank in ranks] == ["r2"]

    asyncio.run(scenario())


def test_a_request_abandoned_before_it_was_sent_stops_counting():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        replicas = [FakeRunningReplica("r1")]
        router.update_replicas(replicas)
        request = pending("a")
        await router.choose_replicas(replicas, request)
        await router.choose_replicas(replicas, request)  # Serve retried while r1 was full
        assert router.routing.assigned("r1") == 1
        request.future.cancel()
        await settle()
        assert router.routing.assigned("r1") == 0

    asyncio.run(scenario())


def test_engine_stats_from_routing_stats_reach_the_metrics():
    async def scenario():
        registry = CollectorRegistry()
        router = make_router("round-robin", registry)
        router.update_replicas([
            FakeRunningReplica("r1", EngineStats("r1", waiting=3, running=2)), FakeRunningReplica("r2"),
        ])
        assert registry.get_sample_value(
            "serveout_engine_waiting_requests", {"deployment": "chat", "replica": "r1"}) == 3
        assert registry.get_sample_value("serveout_queue_depth", {"deployment": "chat"}) == 5
        assert registry.get_sample_value(
            "serveout_engine_waiting_requests", {"deployment": "chat", "replica": "r2"}) is None

    asyncio.run(scenario())


def test_control_calls_go_least_loaded_and_are_not_counted():
    async def scenario():
        registry = CollectorRegistry()
        router = make_router("round-robin", registry)
        busy, idle = FakeRunningReplica("busy"), FakeRunningReplica("idle")
        router.update_replicas([busy, idle])
        router.replica_queue_len_cache.update(busy.replica_id, 7)
        for i in range(3):
            call = pending(f"s{i}", method="stats")
            ranks = await router.choose_replicas([busy, idle], call)
            assert ranks[0][0] is idle
            router.on_request_routed(call, idle.replica_id, None)
        assert routed(registry, "idle", "least-loaded") is None
        assert routed(registry, "idle", "round-robin") is None

    asyncio.run(scenario())


def test_session_comes_from_the_request_else_from_the_handle_option():
    async def scenario():
        from_request = routing_request(pending("a", (1, 2), session="s-body", metadata_session="s-meta"))
        from_handle = routing_request(pending("b", (1, 2), metadata_session="s-meta"))
        none = routing_request(pending("c", (1, 2)))
        control = routing_request(pending("d", method="check_health", metadata_session="s-meta"))
        sessions = (from_request.session_id, from_handle.session_id, none.session_id)
        assert sessions == ("s-body", "s-meta", None)
        assert from_request.prompt_token_ids == (1, 2) and from_request.request_id == "internal-a"
        assert control.prompt_token_ids == ()

    asyncio.run(scenario())


def test_a_failing_policy_lets_serve_pick_instead_of_stranding_the_request():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        replicas = [FakeRunningReplica("r1"), FakeRunningReplica("r2")]
        router.update_replicas(replicas)
        router.routing.policy = FakeBrokenPolicy()
        assert await router.choose_replicas(replicas, pending("a")) == [replicas]
        assert await router.choose_replicas([], pending("b")) == []

    asyncio.run(scenario())


def test_request_router_config_carries_the_spec_and_the_stats_period():
    spec = RoutingSpec(policy="prefix-affinity", imbalance_threshold=7, stats_period_s=0.5)
    config = request_router_config(spec, deployment_label="chat")
    assert isinstance(config, RequestRouterConfig)
    assert config.request_router_class == "serving.routing.serve_router.ServeoutRequestRouter"
    assert config.request_routing_stats_period_s == 0.5
    assert json.loads(json.dumps(config.request_router_kwargs)) == {
        "spec": spec.model_dump(mode="json"), "deployment_label": "chat", "engine_view": True}


def test_the_pickled_router_class_loads_and_initialises_in_a_fresh_process():
    # Serve pickles the router module by value and unpickles it in the gateway process.
    config = request_router_config(RoutingSpec(policy="session"), deployment_label="chat")
    code = (
        "import sys, pickle\n"
        "from ray.serve._private.common import DeploymentHandleSource, DeploymentID\n"
        "from prometheus_client import CollectorRegistry\n"
        "cls = pickle.loads(sys.stdin.buffer.read())\n"
        "router = cls(deployment_id=DeploymentID(name='engine', app_name='a'),\n"
        "             handle_source=DeploymentHandleSource.UNKNOWN)\n"
        f"router.initialize_state(**{config.request_router_kwargs!r}, registry=CollectorRegistry())\n"
        "print(cls.__name__, type(router.routing.policy).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=config.get_serialized_request_router_cls(),
        capture_output=True, check=False, env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().split() == ["ServeoutRequestRouter", "SessionPolicy"]


def test_using_the_router_before_initialize_state_is_a_clear_error():
    router = ServeoutRequestRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    with pytest.raises(Exception, match="initialize_state"):
        router.routing


def test_a_replica_that_died_is_forgotten_at_once():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        alive, dying = FakeRunningReplica("alive"), FakeRunningReplica("dying")
        router.update_replicas([alive, dying])
        await router.choose_replicas([dying], pending("a"))
        assert router.routing.assigned("dying") == 1
        router.on_replica_actor_died(dying.replica_id)
        assert router.routing.assigned("dying") == 0

    asyncio.run(scenario())


def test_a_request_sent_out_of_band_is_counted_at_once_and_its_ticket_releases_it():
    async def scenario():
        registry = CollectorRegistry()
        router = make_router("prefix-affinity", registry, prefix_block_tokens=4)
        replicas = [FakeRunningReplica("r1", EngineStats("r1")), FakeRunningReplica("r2", EngineStats("r2"))]
        router.update_replicas(replicas)
        ticket = RouteTicket()
        request = pending("a", prompt(1, 2, 3, tail=(9,)), kwargs={ROUTE_TICKET_KWARG: ticket})
        ranks = await router.choose_replicas(replicas, request)
        assert len(ranks) == 1  # Serve takes the first replica without asking it
        chosen = ranks[0][0].replica_id.unique_id
        assert ticket.replica_id == chosen
        assert routed(registry, chosen, "prefix-affinity") == 1  # no on_request_routed will come
        assert router.routing.assigned(chosen) == 1
        same_prefix = pending("b", prompt(1, 2, 3, tail=(8,)), kwargs={ROUTE_TICKET_KWARG: RouteTicket()})
        assert (await router.choose_replicas(replicas, same_prefix))[0][0].replica_id.unique_id == chosen
        ticket.finish()
        ticket.finish()  # twice is harmless
        assert router.routing.assigned(chosen) == 1  # b is still in flight

    asyncio.run(scenario())


def test_a_ticket_reporting_a_dead_engine_keeps_requests_off_its_replica():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        replicas = [FakeRunningReplica("r1"), FakeRunningReplica("r2")]
        router.update_replicas(replicas)
        ticket = RouteTicket()
        first = await router.choose_replicas(replicas, pending("a", kwargs={ROUTE_TICKET_KWARG: ticket}))
        dead = first[0][0].replica_id.unique_id
        ticket.finish(engine_dead=True)
        for i in range(10):
            ranks = await router.choose_replicas(replicas, pending(f"q{i}", kwargs={ROUTE_TICKET_KWARG: RouteTicket()}))
            assert ranks[0][0].replica_id.unique_id != dead

    asyncio.run(scenario())


def test_out_of_band_requests_are_balanced_on_the_routers_own_count_not_on_polled_stats():
    async def scenario():
        router = make_router("least-loaded", CollectorRegistry())
        # Stats polled while "stale" was busy: up to a poll period old, they must not
        # keep it idle now (that herded every request onto the other replica).
        stale = FakeRunningReplica("stale", EngineStats("stale", running=6, waiting=3))
        other = FakeRunningReplica("other", EngineStats("other"))
        router.update_replicas([stale, other])
        chosen = []
        for i in range(4):  # no queue probes out of band: the router's own assignments decide
            ranks = await router.choose_replicas([stale, other], pending(f"q{i}", kwargs={ROUTE_TICKET_KWARG: RouteTicket()}))
            chosen.append(ranks[0][0].replica_id.unique_id)
        assert sorted(chosen) == ["other", "other", "stale", "stale"]

    asyncio.run(scenario())


def test_the_router_follows_the_engines_kv_events_only_while_its_policy_is_cache_aware():
    async def scenario():
        # Endpoints nobody listens on: a ZMQ SUB connects lazily, so following them is
        # harmless; what matters is which replicas the router follows, and when.
        stats = {rid: EngineStats(rid, kv_events_endpoint=f"tcp://127.0.0.1:{port}")
                 for rid, port in (("r1", 1), ("r2", 2))}
        replicas = [FakeRunningReplica(rid, s) for rid, s in stats.items()] + [FakeRunningReplica("r3")]
        router = make_router("cache-aware", CollectorRegistry(), prefix_block_tokens=4)
        router.update_replicas(replicas)
        feed = router._kv_events
        assert feed is not None and feed.view("r1") is not None and feed.view("r2") is not None
        assert feed.view("r3") is None  # it publishes nothing: the policy uses its own record there
        loads = router.routing.loads([Candidate("r1"), Candidate("r3")])
        assert loads[0].cache is feed.view("r1") and loads[1].cache is None

        switch = RouteTicket(RoutingSpec(policy="least-loaded"))
        await router.choose_replicas(replicas, pending("a", kwargs={ROUTE_TICKET_KWARG: switch}))
        assert router._kv_events is None and router.routing.loads([Candidate("r1")])[0].cache is None
        await settle()

        back = RouteTicket(RoutingSpec(policy="cache-aware", prefix_block_tokens=4))
        await router.choose_replicas(replicas, pending("b", kwargs={ROUTE_TICKET_KWARG: back}))
        assert router._kv_events is not None and router._kv_events.view("r2") is not None
        await router._kv_events.close()

    asyncio.run(scenario())
