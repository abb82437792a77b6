"""The gateway as a Ray Serve ingress deployment (builds its FastAPI app per replica),
and :func:`drain_gateway`, which the process owning the app calls before it stops it."""

from __future__ import annotations

import json
import logging

from prometheus_client import REGISTRY
from ray import serve
from ray.serve.handle import DeploymentHandle

from serving.config.stack import StackConfig
from serving.gateway.admission import AdmissionController
from serving.gateway.api_keys import KeyRing, read_keys_file
from serving.gateway.engine_client import ServeHandleEngineClient
from serving.gateway.http_app import build_http_app
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.replica_status import ReplicaCounts, ServeReplicaWatcher
from serving.gateway.service import GatewayService, ServedModel
from serving.gateway.tokenization import PromptTokenizer
from serving.routing.metrics import routing_collector

log = logging.getLogger("serveout.gateway")

DRAIN_CALL_MARGIN_S = 30.0
"""How long :func:`drain_gateway` waits for the gateway beyond the drain itself."""


@serve.ingress()
class Gateway:
    """OpenAI-compatible front door for one model's engine deployment."""

    async def __init__(self, config: StackConfig, engine: DeploymentHandle, engine_name: str) -> None:
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
        self._watcher = ServeReplicaWatcher(
            config.app_name, engine_name, on_update=self._publish_replicas
        )
        self._watcher.start()
        self._admission = AdmissionController(
            gateway.max_in_flight, retry_after_s=gateway.retry_after_s,
            active_window_s=gateway.fair_share_window_s,
        )
        served = ServedModel(
            name=model,
            max_model_len=config.model.max_model_len,
            tokenizer=PromptTokenizer(config.model_path),
            engine=ServeHandleEngineClient(engine),
            admission=self._admission,
            replicas=lambda: self._watcher.counts,
            scales_from_zero=config.autoscaling.enabled and config.autoscaling.min_replicas == 0,
        )
        self._service = GatewayService(
            [served], self._metrics,
            request_timeout_s=gateway.request_timeout_s,
            log_prompts=gateway.log_prompts,
        )

    def __serve_build_asgi_app__(self):
        return build_http_app(
            self._service,
            registry=self._registry,
            max_body_bytes=self._config.gateway.max_body_bytes,
            status=self._status,
            keys=self._keys,
            metrics_public=self._config.gateway.metrics_public,
            echo_request_id=False,  # Serve's proxy returns the id it passed us
        )

    async def drain(self, timeout_s: float | None = None) -> dict[str, int]:
        """Stop taking requests (``/health`` 503 draining, new completions 503
        ``server_draining``), let those in flight finish for up to ``timeout_s`` (default
        ``drain.timeout_s``), cut the rest with an error their clients see; returns the
        :class:`~serving.gateway.drain.DrainReport` as a dict. Called through a handle
        (:func:`drain_gateway`): Serve tells a replica nothing before stopping it."""
        timeout = self._config.drain.timeout_s if timeout_s is None else timeout_s
        report = await self._service.drain(timeout, retry_after_s=self._config.gateway.retry_after_s)
        log.info(json.dumps({"event": "drained", "timeout_s": timeout, **report.to_dict()}))
        return report.to_dict()

    def _publish_replicas(self, counts: ReplicaCounts) -> None:
        gauge, model = self._metrics.replicas, self._config.model.name
        gauge.labels(model, "ready").set(counts.ready)
        gauge.labels(model, "starting").set(counts.starting)
        gauge.labels(model, "desired").set(counts.desired)

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
            "in_flight": self._admission.in_flight,
            "admission_limit": self._admission.limit,
            "api_keys": len(self._keys.names) if self._keys else None,
            "active_keys": self._admission.active_keys(),
            "fair_share": self._admission.fair_share(),
        }


def drain_gateway(config: StackConfig, timeout_s: float | None = None) -> dict[str, int]:
    """Drain the gateway of ``config``'s running app for ``timeout_s`` (default
    ``drain.timeout_s``) and return its report; blocks until the drain ends. Call it
    before ``serve.shutdown``, which would otherwise cut the streams in flight (it kills
    the HTTP proxies at once). Needs a Ray driver."""
    timeout = config.drain.timeout_s if timeout_s is None else timeout_s
    handle = serve.get_app_handle(config.app_name)
    return handle.drain.remote(timeout).result(timeout_s=timeout + DRAIN_CALL_MARGIN_S)
