"""The engine replica that serves HTTP itself (``gateway.mode: direct``, the default).

Each engine replica is the app's ingress: Serve's HAProxy forwards a client's request
straight to the replica's own HTTP server, after asking the router
(:mod:`serving.direct.router`) which replica it goes to. The replica runs the
whole gateway (:class:`~serving.gateway.core.GatewayCore`: API keys, admission, the
OpenAI app) in its own process and calls its engine directly, so a streamed token
crosses no other Python process on its way to the client.

The router has usually validated and tokenised the request already: its plan arrives
on the replica's plan inbox (ZMQ) keyed by the ``x-serve-router-plan`` header, and the
replica serves it without parsing or tokenising the body again; without a plan (the
body was too large for the router to read, the side channel dropped it) the replica
plans the request itself. When a validated request ends the replica tells the router, so
its load view stays exact.

A replica whose engine died sends each request that has had no byte yet to another
replica through the engine deployment's handle (the one hop a token takes only on this
path), tells the routers (which stop choosing it), and exits once those requests end.
Its ``/metrics`` shows its own engine's stats (the ``serveout_engine_*`` series),
refreshed every ``stats_period_s``.

Gateway settings arrive as the deployment's ``user_config`` (the whole
:class:`StackConfig`); changing them calls :meth:`EngineIngress.reconfigure`, never a
restart: only the engine's own config (the constructor argument) restarts replicas.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import msgspec
import ray
from ray import serve

from serving.config.stack import EngineReplicaConfig, StackConfig
from serving.engine.protocol import GenerationChunk, GenerationRequest
from serving.engine.replica import EngineReplica
from serving.errors import EngineError, RequestError
from serving.gateway.core import GatewayCore
from serving.gateway.engine_client import EngineClient, ServeHandleEngineClient
from serving.direct.handoff_store import HandoffStore
from serving.direct.handoff import HANDOFF_ENDPOINT_STAT, Done, Handoff, HandoffCodec
from serving.direct.side_channel import Inbox, Outbox
from serving.routing.metrics import RoutingMetrics, routing_collector

log = logging.getLogger("serveout.gateway")

PLAN_EXPIRY_PERIOD_S = 5.0
RETRIED_GRACE_S = 60.0
"""How long a replica whose engine died keeps serving the requests it retried elsewhere."""


class LocalEngineClient:
    """The :class:`~serving.gateway.engine_client.EngineClient` of a gateway that runs in
    the engine's own process: it iterates the replica's ``generate``. With ``elsewhere``
    (the engine deployment's handle), a retry (``avoid_replica`` set: this replica's
    engine died before the request's first byte) goes to another replica through it, the
    way the separate mode's gateway retries; without, a retry cannot happen here."""

    def __init__(self, generate: Callable[[GenerationRequest], AsyncIterator[GenerationChunk]],
                 elsewhere: EngineClient | None = None) -> None:
        self._generate = generate
        self._elsewhere = elsewhere
        self.retries_elsewhere = elsewhere is not None

    async def stream(
        self, request: GenerationRequest, *, avoid_replica: str | None = None
    ) -> AsyncIterator[GenerationChunk]:
        if avoid_replica is not None and self._elsewhere is not None:
            async for chunk in self._elsewhere.stream(request, avoid_replica=avoid_replica):
                yield chunk
            return
        chunks = self._generate(request)
        try:
            async for chunk in chunks:
                yield chunk
        except RequestError:
            raise
        except Exception as exc:  # the engine's own failure: a 500 with an OpenAI body
            raise EngineError(f"engine failed: {type(exc).__name__}") from exc
        finally:
            await chunks.aclose()  # a client that left aborts the engine request


async def _not_ready(scope, receive, send) -> None:
    """Requests before the first ``reconfigure`` (Serve sends none: it calls it first)."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"status": "starting"}'})


@serve.ingress()
class EngineIngress(EngineReplica):
    """An engine replica that is also a gateway replica (Serve deployment ``engine``)."""

    async def __init__(self, engine_config: EngineReplicaConfig, app_name: str, deployment: str) -> None:
        super().__init__(engine_config)
        self._deployment = deployment
        self._codec = HandoffCodec()
        self._outbox = Outbox()
        self._plans = HandoffStore(self._report_done)
        self._inbox = Inbox(ray.util.get_node_ip_address(), self._on_plan)
        self._inbox.start()
        self._gateway: GatewayCore | None = None
        self._app = _not_ready
        self._engine_metrics = RoutingMetrics(f"{app_name}:{deployment}")
        routing_collector().attach(self._engine_metrics)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._expire_plans()), loop.create_task(self._publish_engine_stats())]
        self._stats_period_s = 1.0

    async def reconfigure(self, user_config: dict) -> None:
        """Serve's hook for the app's settings (the deployment's ``user_config``; async,
        so it runs on the replica's event loop)."""
        config = StackConfig.model_validate(user_config)
        await self.apply_adapters(config)
        self._stats_period_s = config.routing.stats_period_s
        if self._gateway is None:
            elsewhere = ServeHandleEngineClient(serve.get_deployment_handle(self._deployment, config.app_name))
            self._gateway = GatewayCore(config, {self._deployment: LocalEngineClient(self.generate, elsewhere)},
                                        plans=self._plans)
            self._app = self._gateway.http_app()
        else:
            self._gateway.reconfigure(config)

    def __serve_build_asgi_app__(self):
        async def app(scope, receive, send) -> None:
            await self._app(scope, receive, send)

        return app

    def _on_plan(self, data: bytes) -> None:
        try:
            plan = self._codec.plan(data)
        except msgspec.ValidationError:
            log.warning("a message on the plan inbox was not a plan; dropped")
            return
        self._plans.put(plan)

    def _report_done(self, plan: Handoff) -> None:
        done = Done(key=plan.key, replica_id=self.replica_id, engine_dead=self._engine.dead)
        self._outbox.send(plan.done_to, self._codec.encode(done))

    async def _expire_plans(self) -> None:
        while True:
            await asyncio.sleep(PLAN_EXPIRY_PERIOD_S)
            self._plans.expire()

    async def _publish_engine_stats(self) -> None:
        while True:
            self._engine_metrics.set_replicas({self.replica_id: self._engine.stats()})
            await asyncio.sleep(self._stats_period_s)

    async def _before_exit(self) -> None:
        """The engine died: let the requests this replica sent elsewhere finish (they stream
        through this process) before it exits, for up to the drain timeout."""
        if self._gateway is None:
            return
        deadline = asyncio.get_running_loop().time() + RETRIED_GRACE_S
        while self._gateway.service.in_flight() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)

    def record_routing_stats(self) -> dict:
        return {**super().record_routing_stats(), HANDOFF_ENDPOINT_STAT: self._inbox.endpoint}

    async def drain(self, timeout_s: float | None = None) -> dict:
        """See :meth:`serving.gateway.separate.Gateway.drain`."""
        if self._gateway is None:
            return {"replica": self.replica_id, "report": None}
        return await self._gateway.drain(timeout_s)
