"""The engine replica: a Ray Serve deployment wrapping one vLLM async engine.

It takes token ids plus sampling settings from the gateway, streams
:class:`GenerationChunk` s back, aborts the engine request when the caller goes
away (Serve cancels the generator; vLLM aborts on cancellation), and reports its
engine stats for routing (``record_routing_stats``) and autoscaling
(``record_autoscaling_stats``). vLLM is imported only when the replica starts.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator

from ray import serve

from serving.autoscaling import QUEUE_DEPTH_METRIC
from serving.config.model_spec import AcceleratorKind
from serving.config.stack import EngineReplicaConfig
from serving.engine.cpu_binding import apply_binding, plan_binding
from serving.engine.protocol import EngineStats, GenerationChunk, GenerationRequest

log = logging.getLogger("serveout.engine")


class EngineReplica:
    """One engine replica (Serve deployment ``engine``)."""

    def __init__(self, config: EngineReplicaConfig) -> None:
        context = serve.get_replica_context()
        self.replica_id = context.replica_tag
        if config.model.accelerator is AcceleratorKind.CPU:
            self._bind_cpus(config, _local_rank(context))
        import ray

        os.environ.setdefault("VLLM_HOST_IP", ray.util.get_node_ip_address())
        from serving.engine.vllm_engine import VllmEngine, engine_args

        args = engine_args(config.model, config.model_path, config.engine)
        self._engine = VllmEngine(args, self.replica_id)
        log.info("engine replica %s ready", self.replica_id)

    def _bind_cpus(self, config: EngineReplicaConfig, local_rank: int) -> None:
        node_cores = sorted(os.sched_getaffinity(0))
        tp = config.model.tensor_parallel_size
        per_rank = config.cpus_per_rank or max(1, len(node_cores) // (config.max_replicas * tp))
        binding = plan_binding(
            local_rank=local_rank, tensor_parallel_size=tp, cores_per_rank=per_rank,
            node_cores=node_cores,
        )
        apply_binding(binding)
        log.info("replica %s bound to cores %s", self.replica_id, binding.omp_threads_bind())

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        last: GenerationChunk | None = None
        try:
            async for chunk in self._engine.generate(request):
                last = chunk
                yield chunk
        finally:  # one structured line per request, carrying the client's X-Request-Id
            log.info(json.dumps({
                "event": "engine_request", "request_id": request.trace_id,
                "engine_request_id": request.request_id, "replica": self.replica_id,
                "completion_tokens": last.completion_tokens if last else 0,
                "finished": bool(last and last.finished),
            }))

    async def stats(self) -> EngineStats:
        return self._engine.stats()

    async def check_health(self) -> None:
        """Called by Serve periodically; raising marks the replica unhealthy."""
        await self._engine.check_health()

    def record_routing_stats(self) -> dict:
        return self._engine.stats().to_dict()

    def record_autoscaling_stats(self) -> dict[str, float]:
        return {QUEUE_DEPTH_METRIC: float(self._engine.stats().queue_depth)}

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.shutdown()


def _local_rank(context) -> int:
    rank = getattr(context, "rank", None)
    return int(getattr(rank, "local_rank", rank or 0))
