"""The engine replica: a Ray Serve deployment wrapping one engine: a vLLM async
engine, or the null engine (no model: it streams fixed tokens at a set pace, to
measure the serving path alone; bound to one core).

It takes token ids plus sampling settings from the gateway, streams
:class:`GenerationChunk` s back, aborts the engine request when the caller goes
away (Serve cancels the generator; vLLM aborts on cancellation), and reports its
engine stats for routing (``record_routing_stats``) and autoscaling
(``record_autoscaling_stats``). The stack's LoRA adapters arrive with its settings
(``reconfigure``): loaded before the replica takes traffic, changed without a restart.
vLLM is imported only when the replica starts.

A replica whose engine process died cannot recover: the first request (or health
check, or the watchdog, within :data:`WATCH_PERIOD_S`) that sees it fails with
:class:`~serving.errors.ReplicaFailedError`, and the replica kills its own actor
:data:`EXIT_GRACE_S` later (after the errors of its in-flight requests are on their
way). Every router then drops it on the ``ActorDiedError`` of its next call, and
Serve replaces it, instead of routing to a replica that fails everything instantly
until health checks give up on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator

import psutil
import ray
from ray import serve

from serving.autoscaling.queue_depth import QUEUE_DEPTH_METRIC
from serving.config.model_spec import AcceleratorKind
from serving.config.stack import EngineReplicaConfig, NullBackend, StackConfig
from serving.engine.core_slots import CoreSlot, claim_core_slot
from serving.engine.cpu_binding import CpuBinding, apply_binding, plan_binding
from serving.engine.null_engine import NullEngine
from serving.engine.process_guard import die_with_parent
from serving.engine.protocol import Engine, EngineStats, GenerationChunk, GenerationRequest
from serving.errors import ReplicaFailedError

log = logging.getLogger("serveout.engine")

WATCH_PERIOD_S = 1.0
"""How often an idle replica checks that its engine process lives."""
EXIT_GRACE_S = 0.5
"""How long a replica with a dead engine lets its in-flight errors leave before it exits."""
SHUTDOWN_TIMEOUT_S = 5.0


class EngineReplica:
    """One engine replica (Serve deployment ``engine``)."""

    def __init__(self, config: EngineReplicaConfig) -> None:
        die_with_parent()  # its raylet killed, the replica goes at once, its engine with it
        context = serve.get_replica_context()
        self.replica_id = context.replica_tag
        self._core_slot: CoreSlot | None = None  # held for the replica's life (CPU engines)
        self._engine = self._start_engine(config)
        self._watchdog: asyncio.Task | None = None
        self._exit: asyncio.Task | None = None
        self._stopping = False
        log.info("engine replica %s ready", self.replica_id)

    def _start_engine(self, config: EngineReplicaConfig) -> Engine:
        node_cores = sorted(os.sched_getaffinity(0))
        if isinstance(config.backend, NullBackend):  # one core, whatever the model spec says
            self._bind(plan_binding(slot=self._claim_core_slot(), tensor_parallel_size=1, cores_per_rank=1,
                                    node_cores=node_cores))
            return NullEngine(config.backend, config.engine, self.replica_id)
        if config.model.accelerator is AcceleratorKind.CPU:
            tp = config.model.tensor_parallel_size
            per_rank = config.cpus_per_rank or max(1, len(node_cores) // ((config.max_replicas or 1) * tp))
            self._bind(plan_binding(slot=self._claim_core_slot(), tensor_parallel_size=tp,
                                    cores_per_rank=per_rank, node_cores=node_cores))
        os.environ.setdefault("VLLM_HOST_IP", ray.util.get_node_ip_address())
        from serving.engine.vllm_engine import VllmEngine, engine_args

        tools = config.model.tool_calling
        return VllmEngine(engine_args(config.model, config.model_path, config.engine), self.replica_id,
                          tool_parser=tools.parser if tools else None)

    def _claim_core_slot(self) -> int:
        self._core_slot = claim_core_slot()
        return self._core_slot.index

    def _bind(self, binding: CpuBinding) -> None:
        apply_binding(binding)
        log.info("replica %s bound to cores %s", self.replica_id, binding.omp_threads_bind())

    async def generate(
        self, request: GenerationRequest, avoid_replica: str | None = None
    ) -> AsyncIterator[GenerationChunk]:
        """Stream the request's chunks. ``avoid_replica`` is read by the gateway's router
        (a retry names the replica that failed it); the replica ignores it."""
        self._watch()
        last: GenerationChunk | None = None
        try:
            if self._engine.dead:
                raise self._engine.dead_error()
            async for chunk in self._engine.generate(request):
                last = chunk
                yield chunk
        except ReplicaFailedError:
            self._leave()
            raise
        finally:  # one structured line per request, carrying the client's X-Request-Id
            log.info(json.dumps({
                "event": "engine_request", "request_id": request.trace_id,
                "engine_request_id": request.request_id, "replica": self.replica_id,
                "completion_tokens": last.completion_tokens if last else 0,
                "finished": bool(last and last.finished),
            }))

    async def reconfigure(self, user_config: dict) -> None:
        """Serve's hook for the app's settings (the whole :class:`StackConfig`, before
        the replica takes traffic and on every change): serve its adapters."""
        await self.apply_adapters(StackConfig.model_validate(user_config))

    async def apply_adapters(self, config: StackConfig) -> None:
        """Load the config's new adapters into the engine, remove the ones it dropped."""
        await self._engine.set_adapters(config.adapters)

    async def stats(self) -> EngineStats:
        return self._engine.stats()

    async def check_health(self) -> None:
        """Called by Serve periodically; raising marks the replica unhealthy."""
        self._watch()
        try:
            await self._engine.check_health()
        except ReplicaFailedError:
            self._leave()
            raise

    async def pids(self) -> dict[str, str | int | list[int] | bool]:
        """This replica's process id, its engine core processes' and whether its engine
        died (for fault tests)."""
        children = psutil.Process().children(recursive=True)
        return {
            "replica_id": self.replica_id,
            "replica": os.getpid(),
            "engine_core": [p.pid for p in children if _is_engine_core(p)],
            "engine_dead": self._engine.dead,
        }

    def _watch(self) -> None:
        """Start the watchdog that notices a dead engine while no request runs (once;
        from a Serve call, because ``__init__`` runs outside the replica's event loop)."""
        if self._watchdog is None:
            die_with_parent()  # again from the event loop's thread, which lives as long as the replica
            self._watchdog = asyncio.create_task(self._watch_engine())

    async def _watch_engine(self) -> None:
        while not self._engine.dead:
            await asyncio.sleep(WATCH_PERIOD_S)
        self._leave()

    def _leave(self) -> None:
        """The engine died: shut it down and end this actor (Serve starts a new replica)."""
        if self._exit is None and not self._stopping:
            log.error("engine of replica %s died: the replica exits", self.replica_id)
            self._exit = asyncio.create_task(self._exit_soon())

    async def _exit_soon(self) -> None:
        await asyncio.sleep(EXIT_GRACE_S)
        await self._before_exit()
        try:
            await asyncio.wait_for(asyncio.to_thread(self._engine.shutdown), SHUTDOWN_TIMEOUT_S)
        except Exception:  # the engine is dead anyway: never let it keep the actor alive
            log.exception("engine shutdown failed on replica %s", self.replica_id)
        try:
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        except Exception:
            log.exception("ray.kill of replica %s failed; exiting the process", self.replica_id)
            os._exit(1)

    async def _before_exit(self) -> None:
        """What a replica whose engine died finishes before it exits (nothing here)."""

    def record_routing_stats(self) -> dict:
        return self._engine.stats().to_dict()

    def record_autoscaling_stats(self) -> dict[str, float]:
        return {QUEUE_DEPTH_METRIC: float(self._engine.stats().queue_depth)}

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            self._stopping = True  # Serve is stopping the replica: not a death to act on
            engine.shutdown()


def _is_engine_core(process: psutil.Process) -> bool:
    try:
        return "EngineCore" in process.name() or "EngineCore" in " ".join(process.cmdline())
    except psutil.Error:
        return False

