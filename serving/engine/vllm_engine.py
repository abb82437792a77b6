"""The vLLM adapter: one ``AsyncLLM`` engine behind the small :class:`Engine` protocol.

Imported only inside engine replicas: importing vLLM in the driver was seen to pin
every Ray process to one core.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import nullcontext
from pathlib import Path

from vllm.config import StructuredOutputsConfig
from vllm.config.kv_events import KVEventsConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.exceptions import VLLMClientError
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError

from serving.adapters.checks import check_adapter
from serving.config.adapters import AdapterSpec
from serving.config.model_spec import AcceleratorKind, EngineSettings, ModelSpec
from serving.engine.adapter_residency import POLL_PERIOD_S, HostCacheWatch
from serving.engine.adapter_set import AdapterSet, LoadedAdapter
from serving.engine.process_guard import ProcessGuard, descendants
from serving.engine.protocol import (
    EngineStats,
    GenerationChunk,
    GenerationDelta,
    GenerationRequest,
    GuidedDecoding,
    TokenLogprob,
)
from serving.engine.tool_calls import ChoiceReader, reader_for
from serving.engine.vllm_stats import EngineStatsRecorder
from serving.engine.vllm_tool_parser import ToolParserFactory
from serving.errors import AdapterLoadError, InvalidRequestError, ReplicaFailedError

log = logging.getLogger("serveout.engine")

GIB = 1 << 30


def engine_args(model: ModelSpec, model_path: Path, settings: EngineSettings) -> AsyncEngineArgs:
    """vLLM engine arguments for a model spec (pure mapping, no side effects)."""
    on_cpu = model.accelerator is AcceleratorKind.CPU
    tp = model.tensor_parallel_size
    lora = settings.lora
    return AsyncEngineArgs(
        model=str(model_path),
        served_model_name=model.name,
        dtype=model.dtype.value,
        max_model_len=model.max_model_len,
        tensor_parallel_size=tp,
        distributed_executor_backend="mp" if on_cpu or tp == 1 else "ray",
        enforce_eager=settings.enforce_eager,
        max_num_seqs=settings.max_num_seqs,
        scheduling_policy=settings.scheduling_policy,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        enable_prefix_caching=settings.enable_prefix_caching,
        block_size=settings.block_size,
        kv_cache_memory_bytes=int(settings.kv_cache_space_gib * GIB) if on_cpu else None,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        stream_interval=settings.stream_interval,
        structured_outputs_config=StructuredOutputsConfig(
            backend=settings.structured_outputs.backend,
            disable_any_whitespace=not settings.structured_outputs.any_whitespace),
        disable_log_stats=True,  # our recorder replaces vLLM's periodic log lines
        enable_log_requests=False,  # prompts are not logged by default
        kv_events_config=kv_events_config(settings),
        enable_lora=lora is not None,
        max_loras=lora.max_loras if lora else 1,
        max_lora_rank=lora.max_lora_rank if lora else 16,
        max_cpu_loras=lora.host_slots if lora else None,
    )


def kv_events_config(settings: EngineSettings) -> KVEventsConfig | None:
    """vLLM's KV cache event publisher: a ZMQ PUB socket on the node's address (``VLLM_HOST_IP``)
    and a port vLLM picks, read back with :meth:`VllmEngine.kv_events_endpoint`."""
    if not settings.kv_cache_events:
        return None
    return KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint="tcp://*:0")


def sampling_params(request: GenerationRequest, *, keep_special_tokens: bool = False) -> SamplingParams:
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
        logprobs=s.logprobs,
        logit_bias=dict(s.logit_bias) or None,
        structured_outputs=_structured_outputs(s.guided),
        skip_special_tokens=not keep_special_tokens,
        output_kind=RequestOutputKind.DELTA,
    )


def _structured_outputs(guided: GuidedDecoding | None) -> StructuredOutputsParams | None:
    if guided is None:
        return None
    if guided.json_schema is not None:
        return StructuredOutputsParams(json=guided.json_schema)
    return StructuredOutputsParams(json_object=True)


def token_logprobs(token_ids: Sequence[int], logprobs, top: int) -> tuple[TokenLogprob, ...]:
    """vLLM's logprobs of a delta's tokens (one {token id: Logprob} per token: the chosen
    token and the ``top`` most likely, ranked from 1) as :class:`TokenLogprob` s."""
    out = []
    for token_id, candidates in zip(token_ids, logprobs or ()):
        chosen = candidates[token_id]
        ranked = sorted((lp for lp in candidates.values() if lp.rank is not None and lp.rank <= top),
                        key=lambda lp: lp.rank)
        out.append(TokenLogprob(chosen.decoded_token or "", chosen.logprob,
                                tuple((lp.decoded_token or "", lp.logprob) for lp in ranked)))
    return tuple(out)


class VllmEngine:
    """One vLLM async engine (implements :class:`serving.engine.protocol.Engine`)."""

    def __init__(self, args: AsyncEngineArgs, replica_id: str, *, tool_parser: str | None = None) -> None:
        self._replica_id = replica_id
        self._recorder = EngineStatsRecorder(replica_id)
        self._guard = ProcessGuard()  # the engine's processes die with this one, however it dies
        try:
            self._llm = AsyncLLM.from_engine_args(args, stat_loggers=self._recorder.stat_loggers)
        finally:
            self._guard.ready(descendants(os.getpid()))
        self._tool_parsers = (ToolParserFactory(tool_parser, self._llm.get_tokenizer(), str(args.served_model_name))
                              if tool_parser else None)
        self._lora_slots = args.max_loras if args.enable_lora else 0
        base_config = json.loads((Path(args.model) / "config.json").read_text())
        self.adapters = AdapterSet(
            lambda spec: self._check_adapter(spec, args, base_config), self._load_adapter, self._unload_adapter)
        self._host_cache = HostCacheWatch()
        self._host_cache_poll: asyncio.Task[None] | None = None

    def _check_adapter(self, spec: AdapterSpec, args: AsyncEngineArgs, base_config: dict) -> None:
        if not args.enable_lora:
            raise AdapterLoadError(f"adapter {spec.name!r}: this engine was started without LoRA "
                                      "(set engine.lora in the stack config)")
        check_adapter(spec, max_lora_rank=args.max_lora_rank, base_config=base_config)

    async def _load_adapter(self, adapter: LoadedAdapter) -> None:
        await self._llm.add_lora(_lora_request(adapter))

    async def _unload_adapter(self, adapter: LoadedAdapter) -> None:
        await self._llm.remove_lora(adapter.engine_id)

    async def set_adapters(self, adapters: tuple[AdapterSpec, ...]) -> None:
        """Serve exactly these adapters (see :class:`AdapterSet`)."""
        await self.adapters.apply(adapters)
        if self._lora_slots and self._host_cache_poll is None:  # the first call runs on the replica's loop
            self._host_cache_poll = asyncio.get_running_loop().create_task(self._poll_host_cache())

    async def _poll_host_cache(self) -> None:
        """Follow the engine's host-memory adapter cache (see :class:`HostCacheWatch`)."""
        while not self.dead:
            try:
                self._host_cache.observe(await self._llm.list_loras(), self.adapters.by_engine_id())
            except Exception as exc:  # noqa: BLE001 (a dying engine: the watchdog replaces the replica)
                log.warning("could not read the engine's adapter cache: %s", exc)
            await asyncio.sleep(POLL_PERIOD_S)

    @property
    def dead(self) -> bool:
        """Whether the engine process died (unrecoverable: the replica must be replaced)."""
        return self._llm.errored

    def dead_error(self) -> ReplicaFailedError:
        return ReplicaFailedError(
            f"the engine of replica {self._replica_id} died", replica_id=self._replica_id,
            reason="engine_dead")

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream chunks; a dead engine raises :class:`ReplicaFailedError`, a request the
        engine refuses (e.g. a schema its grammar cannot compile)
        :class:`InvalidRequestError`."""
        try:
            async for chunk in self._generate(request):
                yield chunk
        except EngineDeadError:
            raise self.dead_error() from None
        except VLLMClientError as exc:
            raise InvalidRequestError(f"the engine refused the request: {exc.args[0] if exc.args else exc}",
                                      param=_refused_param(request, exc)) from None

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        prompt_tokens = len(request.prompt_token_ids)
        completion_tokens = 0
        readers, keep_special = self._readers(request)
        top = request.sampling.logprobs
        params = sampling_params(request, keep_special_tokens=keep_special)
        with self.adapters.use(request.adapter) if request.adapter else nullcontext() as adapter:
            lora = _lora_request(adapter) if adapter is not None else None
            outputs = self._llm.generate(prompt, params, request.request_id, lora_request=lora,
                                         priority=request.priority)
            async for out in outputs:
                deltas = tuple(_delta(o, readers, top) for o in out.outputs)
                completion_tokens += sum(d.num_tokens for d in deltas)
                yield GenerationChunk(
                    deltas=deltas,
                    replica_id=self._replica_id,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    finished=out.finished,
                    cached_tokens=out.num_cached_tokens if out.finished else None,
                )

    def _readers(self, request: GenerationRequest):
        """A tool-call reader per choice (built when a choice first speaks), and whether
        the text must keep special tokens for the parser."""
        calling = request.tool_calling
        if calling is None:
            return None, False
        parser, keep_special = None, False
        if calling.mode == "auto":
            if self._tool_parsers is None:
                raise InvalidRequestError("this model has no tool-call parser", param="tool_choice")
            parser, keep_special = self._tool_parsers.for_request(calling)
        return _Readers(lambda: reader_for(calling, parser)), keep_special

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
                                   adapters_active=recorded.adapters_active if unfinished else (),
                                   kv_events_endpoint=self.kv_events_endpoint(),
                                   adapters=self.adapters.names, adapter_slots=self._lora_slots,
                                   adapter_loads=self.adapters.loads,
                                   adapter_load_seconds=self.adapters.load_seconds,
                                   adapters_refused=len(self.adapters.failed),
                                   adapters_cached=self._host_cache.cached,
                                   adapter_evictions=self._host_cache.evictions)

    def kv_events_endpoint(self) -> str:
        """Where the engine publishes its KV cache events (``""``: it does not)."""
        source = self._llm.get_kv_event_sources().get(0)
        return source.endpoint if source is not None and source.publisher == "zmq" else ""

    async def check_health(self) -> None:
        if self.dead:
            raise self.dead_error()
        await self._llm.check_health()

    def shutdown(self) -> None:
        if self._host_cache_poll is not None:
            self._host_cache_poll.cancel()
        self._llm.shutdown()
        self._guard.close()


def _lora_request(adapter: LoadedAdapter) -> LoRARequest:
    return LoRARequest(adapter.spec.name, adapter.engine_id, str(adapter.spec.path))


class _Readers(dict):
    """One tool-call reader per choice index."""

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, index: int) -> ChoiceReader:
        self[index] = reader = self._make()
        return reader


def _delta(output, readers: _Readers | None, top: int | None) -> GenerationDelta:
    text, calls, reason = output.text, (), output.finish_reason
    if readers is not None:
        piece = readers[output.index].read(output.text, output.token_ids, output.finish_reason)
        text, calls, reason = piece.text, piece.tool_calls, piece.finish_reason
    logprobs = token_logprobs(_text_tokens(output), output.logprobs, top) if top is not None else ()
    return GenerationDelta(index=output.index, text=text, num_tokens=len(output.token_ids),
                           finish_reason=reason, tool_calls=calls, logprobs=logprobs,
                           token_ids=tuple(output.token_ids))


def _text_tokens(output) -> Sequence[int]:
    """The output's tokens that are part of its text: without the end-of-sequence token
    an answer that stopped by itself ends with (it is counted in usage, as vLLM does,
    but it is no text, so it has no logprob entry, as OpenAI shows it)."""
    ids = output.token_ids
    if output.finish_reason == "stop" and output.stop_reason is None and ids:
        return ids[:-1]
    return ids


def _refused_param(request: GenerationRequest, exc: VLLMClientError) -> str | None:
    named = getattr(exc, "parameter", None)
    if named:
        return named
    if request.tool_calling is not None and request.tool_calling.mode != "auto":
        return "tools"
    return "response_format" if request.sampling.guided is not None else None
