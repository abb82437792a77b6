"""The gateway inside each engine replica (``gateway.mode: in-engine``).

Each engine replica is also the app's ingress: it runs the whole gateway
(:class:`~serving.gateway.ingress.GatewayCore`: admission, keys, tokenising, the
OpenAI app) in its own process and calls its engine directly, so a token crosses
no Ray hop between the engine and the HTTP response. Serve's HTTP proxy (or, with
``RAY_SERVE_ENABLE_HA_PROXY=1``, HAProxy, which leaves no Python process between the
client and the replica) picks the replica by load, before any serveout code sees
the request: routing is least-loaded only, and each replica admits its share of the
app's bound (see :mod:`serving.gateway.admission`). A replica whose engine died
answers 503 (no retry on another replica: the request is already in this one).
Its ``/metrics`` shows its own engine's stats (the ``serveout_engine_*`` series, as
the router shows them in the separate mode), refreshed every ``stats_period_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from ray import serve

from serving.config.stack import StackConfig
from serving.engine.protocol import GenerationChunk, GenerationRequest
from serving.engine.replica import EngineReplica
from serving.errors import EngineError, RequestError
from serving.gateway.ingress import GatewayCore
from serving.routing.metrics import RouterMetrics, routing_collector


class LocalEngineClient:
    """The :class:`~serving.gateway.engine_client.EngineClient` of a gateway that runs in
    the engine's own process: it iterates the replica's ``generate``."""

    def __init__(self, generate: Callable[[GenerationRequest], AsyncIterator[GenerationChunk]]) -> None:
        self._generate = generate

    async def stream(
        self, request: GenerationRequest, *, avoid_replica: str | None = None
    ) -> AsyncIterator[GenerationChunk]:
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


@serve.ingress()
class EngineIngress(EngineReplica):
    """An engine replica that is also a gateway replica (Serve deployment ``engine``)."""

    async def __init__(self, config: StackConfig, deployment: str) -> None:
        super().__init__(config.engine_replica_config())
        self._gateway = GatewayCore(config, LocalEngineClient(self.generate), engine_deployment=deployment)
        self._engine_metrics = RouterMetrics(f"{config.app_name}:{deployment}")
        routing_collector().attach(self._engine_metrics)
        self._stats_task = asyncio.get_running_loop().create_task(
            self._publish_engine_stats(config.routing.stats_period_s))

    async def _publish_engine_stats(self, period_s: float) -> None:
        while True:
            self._engine_metrics.set_replicas({self.replica_id: self._engine.stats()})
            await asyncio.sleep(period_s)

    def __serve_build_asgi_app__(self):
        return self._gateway.http_app()

    async def drain(self, timeout_s: float | None = None) -> dict:
        """See :meth:`serving.gateway.ingress.Gateway.drain`."""
        return await self._gateway.drain(timeout_s)
