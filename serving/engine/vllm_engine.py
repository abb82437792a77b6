"""The vLLM adapter: one ``AsyncLLM`` engine behind the small :class:`Engine` protocol.

Imported only inside engine replicas: importing vLLM in the driver was seen to pin
every Ray process to one core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from vllm.config.kv_events import KVEventsConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError

from serving.config.model_spec import AcceleratorKind, EngineSettings, ModelSpec
from serving.engine.protocol import (
    EngineStats,
    GenerationChunk,
    GenerationDelta,
    GenerationRequest,
)
from serving.engine.vllm_stats import EngineStatsRecorder
from serving.errors import ReplicaFailedError

GIB = 1 << 30


def engine_args(model: ModelSpec, model_path: Path, settings: EngineSettings) -> AsyncEngineArgs:
    """vLLM engine arguments for a model spec (pure mapping, no side effects)."""
    on_cpu = model.accelerator is AcceleratorKind.CPU
    tp = model.tensor_parallel_size
    return AsyncEngineArgs(
        model=str(model_path),
        served_model_name=model.name,
        dtype=model.dtype.value,
        max_model_len=model.max_model_len,
        tensor_parallel_size=tp,
        distributed_executor_backend="mp" if on_cpu or tp == 1 else "ray",
        enforce_eager=settings.enforce_eager,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        enable_prefix_caching=settings.enable_prefix_caching,
        block_size=settings.block_size,
        kv_cache_memory_bytes=int(settings.kv_cache_space_gib * GIB) if on_cpu else None,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        stream_interval=settings.stream_interval,
        disable_log_stats=True,  # our recorder replaces vLLM's periodic log lines
        enable_log_requests=False,  # prompts are not logged by default
        kv_events_config=kv_events_config(settings),
    )


def kv_events_config(settings: EngineSettings) -> KVEventsConfig | None:
    """vLLM's KV cache event publisher: a ZMQ PUB socket on the node's address (``VLLM_HOST_IP``)
    and a port vLLM picks, read back with :meth:`VllmEngine.kv_events_endpoint`."""
    if not settings.kv_cache_events:
        return None
    return KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint="tcp://*:0")


def sampling_params(request: GenerationRequest) -> SamplingParams:
    s = request.sampling
    return SamplingParams(
        n=s.n,
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        stop=list(s.stop) or None,
        seed=s.seed,
        ignore_eos=s.ignore_eos,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
        repetition_penalty=s.repetition_penalty,
        top_k=s.top_k,
        min_p=s.min_p,
        min_tokens=s.min_tokens,
        output_kind=RequestOutputKind.DELTA,
    )


class VllmEngine:
    """One vLLM async engine (implements :class:`serving.engine.protocol.Engine`)."""

    def __init__(self, args: AsyncEngineArgs, replica_id: str) -> None:
        self._replica_id = replica_id
        self._recorder = EngineStatsRecorder(replica_id)
        self._llm = AsyncLLM.from_engine_args(args, stat_loggers=self._recorder.stat_loggers)

    @property
    def dead(self) -> bool:
        """Whether the engine process died (unrecoverable: the replica must be replaced)."""
        return self._llm.errored

    def dead_error(self) -> ReplicaFailedError:
        return ReplicaFailedError(
            f"the engine of replica {self._replica_id} died", replica_id=self._replica_id,
            reason="engine_dead")

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream chunks; a dead engine raises :class:`ReplicaFailedError`."""
        try:
            async for chunk in self._generate(request):
                yield chunk
        except EngineDeadError:
            raise self.dead_error() from None

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        prompt_tokens = len(request.prompt_token_ids)
        completion_tokens = 0
        outputs = self._llm.generate(prompt, sampling_params(request), request.request_id)
        async for out in outputs:
            deltas = tuple(
                GenerationDelta(
                    index=o.index,
                    text=o.text,
                    num_tokens=len(o.token_ids),
                    finish_reason=o.finish_reason,
                )
                for o in out.outputs
            )
            completion_tokens += sum(d.num_tokens for d in deltas)
            yield GenerationChunk(
                deltas=deltas,
                replica_id=self._replica_id,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                finished=out.finished,
            )

    def stats(self) -> EngineStats:
        """Live load plus cumulative counters.

        vLLM reports scheduler stats only after engine steps, so its last report goes
        stale when the engine turns idle (it would show the last step's running
        requests forever). The frontend's count of unfinished requests is exact and
        current: waiting + running equals it.
        """
        recorded = self._recorder.snapshot()
        unfinished = self._llm.get_num_unfinished_requests()
        running = min(recorded.running, unfinished)
        return dataclasses.replace(recorded, running=running, waiting=unfinished - running,
                                   kv_events_endpoint=self.kv_events_endpoint())

    def kv_events_endpoint(self) -> str:
        """Where the engine publishes its KV cache events (``""``: it does not)."""
        source = self._llm.get_kv_event_sources().get(0)
        return source.endpoint if source is not None and source.publisher == "zmq" else ""

    async def check_health(self) -> None:
        if self.dead:
            raise self.dead_error()
        await self._llm.check_health()

    def shutdown(self) -> None:
        self._llm.shutdown()
