"""The gateway as a Ray Serve ingress deployment (builds its FastAPI app per replica)."""

from __future__ import annotations

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
            "replicas": {"ready": counts.ready, "starting": counts.starting},
            "tensor_parallel_size": c.model.tensor_parallel_size,
            "routing_policy": c.routing.policy.value,
            "autoscaling": c.autoscaling.model_dump() if c.autoscaling.enabled else None,
            "in_flight": self._admission.in_flight,
            "admission_limit": self._admission.limit,
            "api_keys": len(self._keys.names) if self._keys else None,
            "active_keys": self._admission.active_keys(),
            "fair_share": self._admission.fair_share(),
        }
