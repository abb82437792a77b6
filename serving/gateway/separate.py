"""The separate mode's gateway deployment (:class:`Gateway`, in front of the engine
replicas), and :func:`drain_gateway`, which the process owning an app (either mode)
calls before it stops it.

There may be several gateway replicas (``gateway.replicas``, or autoscaled on their
own in-flight requests); each admits its share of the app's limits, updated from
Serve's count of running gateway replicas (:mod:`serving.admission.bound`), and each
one's ``/metrics`` shows every replica's series (:mod:`serving.gateway.metrics_sharing`)."""

from __future__ import annotations

import time

from ray import serve
from ray.serve.handle import DeploymentHandle

from serving.config.stack import StackConfig
from serving.gateway.core import GatewayCore
from serving.gateway.engine_client import ServeHandleEngineClient
from serving.gateway.replica_status import counts_from_states

DRAIN_CALL_MARGIN_S = 30.0
"""How long :func:`drain_gateway` waits for the gateway beyond the drain itself."""
DRAIN_ANSWER_S = 0.5
"""How long :func:`drain_gateway` waits for a drain call's answer before it counts the
call's replica as draining (an idle replica drains within this and answers)."""
DRAIN_CALLS_PER_REPLICA = 8
"""The most drain calls :func:`drain_gateway` sends per gateway replica."""


@serve.ingress()
class Gateway:
    """OpenAI-compatible front door for the stack's engine deployments (one per base model)."""

    async def __init__(self, config: StackConfig, engines: dict[str, DeploymentHandle]) -> None:
        self._core = GatewayCore(config, {name: ServeHandleEngineClient(h) for name, h in engines.items()})

    def __serve_build_asgi_app__(self):
        return self._core.http_app()

    async def drain(self, timeout_s: float | None = None) -> dict:
        """Stop taking requests (``/health`` 503 draining, new completions 503
        ``server_draining``), let those in flight finish for up to ``timeout_s`` (default
        ``drain.timeout_s``), cut the rest with an error their clients see; returns this
        replica's id and its :class:`~serving.gateway.drain.DrainReport` (``None`` when it
        was already draining: another call owns that report). Called through a handle
        (:func:`drain_gateway`): Serve tells a replica nothing before stopping it."""
        return await self._core.drain(timeout_s)


def drain_gateway(config: StackConfig, timeout_s: float | None = None) -> dict[str, int]:
    """Drain every gateway replica of ``config``'s running app for ``timeout_s``
    (default ``drain.timeout_s``); returns their reports summed and ``gateways``, how
    many drained. Blocks until the drains end. Call it before ``serve.shutdown``, which
    would otherwise cut the streams in flight (it kills the HTTP proxies at once).
    Needs a Ray driver.

    A handle cannot address one replica, so calls go out one by one until every
    running gateway replica is draining: a call reaching a replica that already drains
    answers at once with no report (then another call goes out), and Serve's router
    prefers the replicas without a drain call in flight."""
    timeout = config.drain.timeout_s if timeout_s is None else timeout_s
    handle = serve.get_app_handle(config.app_name)
    deployment = serve.status().applications[config.app_name].deployments[handle.deployment_name]
    gateways = max(1, counts_from_states(deployment.replica_states).ready)
    reports, draining = [], []
    for _ in range(DRAIN_CALLS_PER_REPLICA * gateways):
        if len(reports) + len(draining) >= gateways:
            break
        response = handle.drain.remote(timeout)
        try:
            answer = response.result(timeout_s=DRAIN_ANSWER_S)
        except TimeoutError:  # this call started a drain that is still waiting on requests
            draining.append(response)
            continue
        if answer["report"] is not None:
            reports.append(answer["report"])
    deadline = time.monotonic() + timeout + DRAIN_CALL_MARGIN_S
    reports += [r.result(timeout_s=max(1.0, deadline - time.monotonic()))["report"] for r in draining]
    summed = {key: sum(report[key] for report in reports) for key in ("in_flight", "cut", "left")}
    return {"gateways": len(reports), **summed}
