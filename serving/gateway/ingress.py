"""The gateway as a Ray Serve ingress deployment (builds its FastAPI app per replica),
and :func:`drain_gateway`, which the process owning the app calls before it stops it.

There may be several gateway replicas (``gateway.replicas``, or autoscaled on their
own in-flight requests); each admits its share of the app's limits, updated from
Serve's count of running gateway replicas (:mod:`serving.gateway.admission`), and each
one's ``/metrics`` shows every replica's series (:mod:`serving.gateway.metrics_sharing`)."""

from __future__ import annotations

import json
import logging
import time

from prometheus_client import REGISTRY
from ray import serve
from ray.serve.handle import DeploymentHandle

from serving.config.stack import StackConfig
from serving.gateway.admission import AdmissionController
from serving.gateway.api_keys import KeyRing, read_keys_file
from serving.gateway.engine_client import EngineClient, ServeHandleEngineClient
from serving.gateway.http_app import build_http_app
from serving.gateway.key_limits import KeyRateLimiter
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.metrics_sharing import FleetMetrics, RayBoardChannel, shared_views
from serving.gateway.replica_status import ReplicaCounts, ServeReplicaWatcher, counts_from_states
from serving.gateway.service import GatewayService, ServedModel
from serving.gateway.tokenization import PromptTokenizer
from serving.routing.metrics import routing_collector

log = logging.getLogger("serveout.gateway")

DRAIN_CALL_MARGIN_S = 30.0
"""How long :func:`drain_gateway` waits for the gateway beyond the drain itself."""
DRAIN_ANSWER_S = 0.5
"""How long :func:`drain_gateway` waits for a drain call's answer before it counts the
call's replica as draining (an idle replica drains within this and answers)."""
DRAIN_CALLS_PER_REPLICA = 8
"""The most drain calls :func:`drain_gateway` sends per gateway replica."""


class GatewayCore:
    """Everything one gateway replica runs (admission, keys, tokenizer, metrics, the
    OpenAI app), whichever Serve deployment hosts it: the ``gateway`` deployment in
    front of the engines (:class:`Gateway`) or each engine replica itself
    (:class:`~serving.gateway.in_engine.EngineIngress`). Build it on the replica's
    event loop (it starts the replica watcher)."""

    def __init__(self, config: StackConfig, engine: EngineClient, *, engine_deployment: str) -> None:
        self._config = config
        # prometheus_client's process registry: the request router (which Serve runs
        # inside this process) adds its collectors there too, so /metrics shows both.
        self._registry = REGISTRY
        self._metrics = GatewayMetrics(self._registry)
        model = config.model.name
        self._metrics.declare_model(model)
        gateway = config.gateway
        self._keys = None  # no keys file: no authentication
        if gateway.api_keys_file is not None:
            self._keys = KeyRing(read_keys_file(gateway.api_keys_file, defaults=gateway.key_limits))
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        # Until Serve's count arrives, assume the replicas the deployment starts with.
        starting = gateway_replicas_at_start(config)
        self._admission = AdmissionController(
            gateway.max_in_flight, retry_after_s=gateway.retry_after_s,
            active_window_s=gateway.fair_share_window_s, gateways=starting,
        )
        self._rate_limiter = KeyRateLimiter(gateways=starting)
        self._watcher = ServeReplicaWatcher(
            config.app_name, engine_deployment, gateway=context.deployment, on_update=self._publish_replicas
        )
        self._watcher.start()
        self._fleet = None  # one gateway replica at most: /metrics is its registry as it is
        if gateway_replicas_at_most(config) > 1:
            self._fleet = FleetMetrics(self._registry, self.replica_id, RayBoardChannel(config.app_name),
                                       shared=shared_views(gateway.in_engine))
            self._fleet.start()
        served = ServedModel(
            name=model,
            max_model_len=config.model.max_model_len,
            tokenizer=PromptTokenizer(config.model_path),
            engine=engine,
            admission=self._admission,
            replicas=lambda: self._watcher.counts,
            scales_from_zero=config.autoscaling.enabled and config.autoscaling.min_replicas == 0,
        )
        self._service = GatewayService(
            [served], self._metrics,
            request_timeout_s=gateway.request_timeout_s,
            log_prompts=gateway.log_prompts,
            rate_limiter=self._rate_limiter,
        )

    def http_app(self):
        """The FastAPI app Serve runs for this replica."""
        return build_http_app(
            self._service,
            registry=self._registry,
            max_body_bytes=self._config.gateway.max_body_bytes,
            status=self._status,
            keys=self._keys,
            metrics_public=self._config.gateway.metrics_public,
            echo_request_id=False,  # Serve's proxy returns the id it passed us
            metrics_text=self._fleet.render if self._fleet else None,
            on_shutdown=self._fleet.close if self._fleet else None,
        )

    async def drain(self, timeout_s: float | None = None) -> dict:
        """See :meth:`Gateway.drain`."""
        if self._service.draining:
            return {"replica": self.replica_id, "report": None}
        timeout = self._config.drain.timeout_s if timeout_s is None else timeout_s
        report = await self._service.drain(timeout, retry_after_s=self._config.gateway.retry_after_s)
        log.info(json.dumps({"event": "drained", "timeout_s": timeout, **report.to_dict()}))
        return {"replica": self.replica_id, "report": report.to_dict()}

    def _publish_replicas(self, engines: ReplicaCounts, gateways: ReplicaCounts) -> None:
        gauge, model = self._metrics.replicas, self._config.model.name
        gauge.labels(model, "ready").set(engines.ready)
        gauge.labels(model, "starting").set(engines.starting)
        gauge.labels(model, "desired").set(engines.desired)
        if gateways.ready:
            self._admission.set_gateways(gateways.ready)
            self._rate_limiter.set_gateways(gateways.ready)

    def _status(self) -> dict:
        c = self._config
        counts = self._watcher.counts
        return {
            "app": c.app_name,
            "model": c.model.name,
            "replicas": {"ready": counts.ready, "starting": counts.starting,
                         "failed": routing_collector(self._registry).failed_replicas()},
            "tensor_parallel_size": c.model.tensor_parallel_size,
            "routing_policy": c.routing.policy.value,
            "autoscaling": c.autoscaling.model_dump() if c.autoscaling.enabled else None,
            "draining": self._service.draining,
            "gateway": {"mode": c.gateway.mode, "replica": self.replica_id,
                        "replicas": self._admission.gateways},
            "in_flight": self._admission.in_flight,
            "admission_limit": self._admission.limit,
            "app_admission_limit": self._admission.app_limit,
            "api_keys": len(self._keys.names) if self._keys else None,
            "active_keys": self._admission.active_keys(),
            "fair_share": self._admission.fair_share(),
        }


def gateway_replicas_at_start(config: StackConfig) -> int:
    """How many gateway replicas the app starts with (in-engine: its engine replicas)."""
    if config.gateway.in_engine:
        scaling = config.autoscaling
        return max(1, scaling.min_replicas if scaling.enabled else config.replicas.num_replicas)
    gateway = config.gateway
    return gateway.autoscaling.min_replicas if gateway.autoscaling.enabled else gateway.replicas


def gateway_replicas_at_most(config: StackConfig) -> int:
    """The most gateway replicas the app can run at once (in-engine: its engine replicas)."""
    return config.max_replica_count if config.gateway.in_engine else config.gateway.max_replica_count


@serve.ingress()
class Gateway:
    """OpenAI-compatible front door for one model's engine deployment."""

    async def __init__(self, config: StackConfig, engine: DeploymentHandle, engine_name: str) -> None:
        self._core = GatewayCore(config, ServeHandleEngineClient(engine), engine_deployment=engine_name)

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
