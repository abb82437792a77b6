"""Everything one gateway replica runs, whichever Serve deployment hosts it.

:class:`GatewayCore` holds admission, API keys, the tokenizer, metrics and the OpenAI
app. In the direct mode it runs inside every engine replica
(:class:`~serving.direct.engine_ingress.EngineIngress`); in the separate mode inside
each gateway replica (:class:`~serving.gateway.separate.Gateway`).

Settings change without a restart: :meth:`GatewayCore.reconfigure` takes a new
:class:`StackConfig` (Serve calls the hosting replica's ``reconfigure`` with the app's
``user_config``) and applies the gateway's bound, limits, timeouts and keys to new
requests; requests in flight finish under the settings they started with. The API keys
file is also re-read when it changes on disk (checked every
:data:`KEYS_FILE_CHECK_S`), so rotating a key needs neither a redeploy nor a restart
and drops no stream; a file that no longer parses is refused (the old keys stay, the
error is logged and counted).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from pathlib import Path

from prometheus_client import REGISTRY
from ray import serve

from serving.config.gateway import GatewaySpec

from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.admission.bound import AdmissionController
from serving.admission.api_keys import ANONYMOUS, KeyRing, read_keys_file
from serving.gateway.engine_client import EngineClient
from serving.api.app import build_http_app
from serving.admission.key_limits import KeyRateLimiter
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.metrics_sharing import FleetMetrics, RayBoardChannel, shared_views
from serving.direct.handoff_store import HandoffStore
from serving.gateway.replica_status import ReplicaCounts, ServeReplicaWatcher
from serving.gateway.service import GatewayService, ServedModel
from serving.openai.tokenization import prompt_tokenizer
from serving.routing.metrics import routing_collector
from serving.model_store import default_home
from serving.tenancy.ledger import Ledger
from serving.tenancy.metering import UsageMetrics

log = logging.getLogger("serveout.gateway")

KEYS_FILE_CHECK_S = 2.0
"""How often a gateway replica looks whether its API keys file changed."""


class KeysFile:
    """The API keys of ``path``, re-read when its modification time or size changes."""

    def __init__(self, path: Path, spec: GatewaySpec) -> None:
        self.path, self._spec = path, spec
        self.ring = KeyRing(read_keys_file(path, defaults=spec.key_limits, priority=spec.priority))
        self._stamp = _stamp(path)

    def refresh(self) -> bool:
        """Re-read the file if it changed; True when new keys took effect."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.ring = KeyRing(read_keys_file(self.path, defaults=self._spec.key_limits,
                                               priority=self._spec.priority))
        except (ConfigError, OSError) as exc:
            log.error(json.dumps({"event": "keys_file_refused", "path": str(self.path), "error": str(exc)}))
            raise
        log.info(json.dumps({"event": "keys_file_reloaded", "path": str(self.path), "keys": len(self.ring.names)}))
        return True


def replica_accelerators(config: StackConfig) -> float:
    """What one engine replica holds: its TP ranks' GPUs, or on a CPU its cores."""
    tp = config.model.tensor_parallel_size
    if config.model.accelerator.value != "cpu":
        return float(tp)
    cores = config.replicas.cpus_per_rank or max(1, (os.cpu_count() or 1) // config.max_replica_count)
    return float(tp * cores)


def _scales_from_zero(base: StackConfig) -> bool:
    return base.autoscaling.enabled and base.autoscaling.min_replicas == 0


def _stamp(path: Path) -> tuple[float, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime, stat.st_size


class GatewayCore:
    """One gateway replica: build it on the replica's event loop (it starts the replica
    watcher and the keys file check). ``plans`` is the replica's store of the router's
    plans (direct mode) or None."""

    def __init__(self, config: StackConfig, engines: dict[str, EngineClient], *,
                 plans: HandoffStore | None = None) -> None:
        """``engines``: a client per engine deployment, by name
        (:attr:`StackConfig.engine_deployments`; the direct mode has one)."""
        self._config = config
        # prometheus_client's process registry: the request router (which Serve runs
        # inside this process) adds its collectors there too, so /metrics shows both.
        self._registry = REGISTRY
        self._metrics = GatewayMetrics(self._registry)
        gateway = config.gateway
        self._keys = KeysFile(gateway.api_keys_file, gateway) if gateway.api_keys_file else None
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        # Until Serve's count arrives, assume the replicas the deployment starts with.
        self._starting = config.gateway_replicas_at_start
        self._rate_limiter = KeyRateLimiter(sharers=self._starting)
        self._fleet = None  # one process at most: /metrics is its registry as it is
        if config.gateway_processes_at_most > 1:
            self._fleet = FleetMetrics(self._registry, self.replica_id, RayBoardChannel(config.app_name),
                                       shared=shared_views(gateway.direct))
            self._fleet.start()
        # Each base: its engine deployment, admission bound, replica watcher (the first
        # one also counts the gateway replicas that share the bounds).
        self._bases = [self._served_base(base, engines[name], name, context.deployment if i == 0 else None)
                       for i, (name, base) in enumerate(zip(config.engine_deployments, config.bases))]
        self._admission = self._bases[0][0].admission  # the first base's: /status reports it
        self._watcher = self._bases[0][1]
        self._usage_metrics = UsageMetrics(self._registry)
        self._service = GatewayService(
            self._served_models(config), self._metrics,
            request_timeout_s=gateway.request_timeout_s,
            log_prompts=gateway.log_prompts,
            rate_limiter=self._rate_limiter,
            ledger=self._ledger(config),
            priority=gateway.priority,
        )
        self._service.set_models(list(self._service.models.values()), config.splits)
        self._plans = plans
        self._keys_task = (asyncio.get_running_loop().create_task(self._watch_keys_file())
                           if self._keys else None)

    def _served_base(self, base: StackConfig, engine: EngineClient, deployment: str,
                     gateway: str | None) -> tuple[ServedModel, ServeReplicaWatcher]:
        """One base model (a one-base ``base``) behind ``deployment``, and its watcher."""
        spec = base.gateway
        # In the direct mode admission runs in the engine replica: a lower class's ceiling
        # then also counts the engine's sequences (serving.admission.bound).
        admission = AdmissionController(spec.max_in_flight, retry_after_s=spec.retry_after_s,
                                        active_window_s=spec.fair_share_window_s, sharers=self._starting,
                                        priority=spec.priority,
                                        slots=base.engine_settings.max_num_seqs if spec.direct else None)
        watcher = ServeReplicaWatcher(base.app_name, deployment, gateway=gateway,
                                      on_update=functools.partial(self._publish_replicas, base.model.name))
        watcher.start()
        served = ServedModel(
            name=base.model.name,
            max_model_len=base.model.max_model_len,
            tokenizer=prompt_tokenizer(base),
            engine=engine,
            admission=admission,
            replicas=lambda: watcher.counts,
            scales_from_zero=_scales_from_zero(base),
            supports_tools=base.model.tool_calling is not None,
        )
        return served, watcher

    def _served_models(self, config: StackConfig) -> list[ServedModel]:
        """Each base model, then its adapters (declared in the metrics at 0)."""
        models = []
        for (served, _), base in zip(self._bases, config.bases):
            models += [served, *(served.with_adapter(n) for n in (*base.adapter_names, *base.alias_names))]
        for served in models:
            self._metrics.declare_model(served.name)
            self._metrics.declare_classes(served.name, config.gateway.priority.names)
        return models

    def _ledger(self, config: StackConfig, after: Ledger | None = None) -> Ledger:
        """Usage counters, the usage store and the audit trail of this replica."""
        return Ledger(self._usage_metrics, config.usage, config.audit, writer=self.replica_id,
                      home=default_home(), accelerator=config.model.accelerator.value,
                      accelerators=replica_accelerators(config) if config.gateway.direct else None,
                      after=after)

    @property
    def service(self) -> GatewayService:
        return self._service

    def http_app(self):
        """The ASGI app Serve runs for this replica."""
        return build_http_app(
            self._service,
            registry=self._registry,
            max_body_bytes=lambda: self._config.gateway.max_body_bytes,
            status=self._status,
            keys=lambda: self._keys.ring if self._keys else None,
            metrics_public=lambda: self._config.gateway.metrics_public,
            echo_request_id=False,  # Serve's ingress returns the id it passed us
            metrics_text=self._fleet.render if self._fleet else None,
            on_shutdown=self.close,
            plans=self._plans,
        )

    def reconfigure(self, config: StackConfig) -> None:
        """Apply ``config``'s gateway settings to new requests. What the replica was built
        from (the model, the engine, the app's deployments) stays as it is."""
        gateway = config.gateway
        for (served, _), base in zip(self._bases, config.bases):
            served.admission.reconfigure(gateway.max_in_flight, retry_after_s=gateway.retry_after_s,
                                         active_window_s=gateway.fair_share_window_s, priority=gateway.priority)
            served.scales_from_zero = _scales_from_zero(base)
        self._service.request_timeout_s = gateway.request_timeout_s
        self._service.log_prompts = gateway.log_prompts
        self._service.priority = gateway.priority
        self._service.set_models(self._served_models(config), config.splits)  # the adapters, and their copy of the above
        old = self._config.gateway
        if (gateway.api_keys_file, gateway.key_limits, gateway.priority) != (
                old.api_keys_file, old.key_limits, old.priority):
            self._keys = KeysFile(gateway.api_keys_file, gateway) if gateway.api_keys_file else None
            if self._keys is not None and self._keys_task is None:
                self._keys_task = asyncio.get_running_loop().create_task(self._watch_keys_file())
        self._keys_changed()
        if (config.usage, config.audit) != (self._config.usage, self._config.audit):
            old = self._service.ledger
            old.close(wait=False)  # its thread writes what it holds, then ends
            self._service.ledger = self._ledger(config, after=old)  # writes once the old one is done
        self._config = config

    async def _watch_keys_file(self) -> None:
        while True:
            await asyncio.sleep(KEYS_FILE_CHECK_S)
            keys = self._keys
            if keys is None:
                continue
            try:
                if keys.refresh():
                    self._keys_changed()
            except (ConfigError, OSError):
                self._metrics.keys_reload_failures.inc()

    def _keys_changed(self) -> None:
        names = self._keys.ring.names if self._keys else (ANONYMOUS,)
        self._metrics.declare_keys(names)
        for served, _ in self._bases:
            served.admission.retain_keys(names)

    async def drain(self, timeout_s: float | None = None) -> dict:
        """See :meth:`serving.gateway.separate.Gateway.drain`."""
        if self._service.draining:
            return {"replica": self.replica_id, "report": None}
        timeout = self._config.drain.timeout_s if timeout_s is None else timeout_s
        report = await self._service.drain(timeout, retry_after_s=self._config.gateway.retry_after_s)
        log.info(json.dumps({"event": "drained", "timeout_s": timeout, **report.to_dict()}))
        return {"replica": self.replica_id, "report": report.to_dict()}

    async def close(self) -> None:
        if self._keys_task is not None:
            self._keys_task.cancel()
        if self._fleet is not None:
            await self._fleet.close()
        await asyncio.to_thread(self._service.ledger.close)

    def _publish_replicas(self, model: str, engines: ReplicaCounts, sharers: ReplicaCounts) -> None:
        gauge = self._metrics.replicas
        gauge.labels(model, "ready").set(engines.ready)
        gauge.labels(model, "starting").set(engines.starting)
        gauge.labels(model, "desired").set(engines.desired)
        # Every replica that runs admission (an engine replica in the direct mode, a
        # gateway replica in the separate mode), running or starting, shares the bound:
        # counting only the ready ones would let each of them admit too much while
        # another one starts (a starting replica takes nothing yet, so the app admits a
        # little less meanwhile).
        if sharers.desired:
            for served, _ in self._bases:
                served.admission.set_sharers(sharers.desired)
            self._rate_limiter.set_sharers(sharers.desired)

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
                        "replicas": self._admission.sharers},
            "in_flight": self._admission.in_flight,
            "admission_limit": self._admission.limit,
            "app_admission_limit": self._admission.app_limit,
            "api_keys": len(self._keys.ring.names) if self._keys else None,
            "active_keys": self._admission.active_keys(),
            "fair_share": self._admission.fair_share(),
            "priority_classes": {name: {"in_flight": self._admission.in_flight_of_class(name),
                                        "ceiling": self._admission.ceiling(name)}
                                 for name in c.gateway.priority.names},
            "bases": [{"model": served.name, "replicas": {"ready": watcher.counts.ready,
                                                          "starting": watcher.counts.starting}}
                      for served, watcher in self._bases],
        }
