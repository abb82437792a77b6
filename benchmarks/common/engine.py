"""ONE vLLM engine driven in this process (V1 engine core in-process, serving's engine
arguments, no server, no Ray): what the step-time and engine-vs-simulator benchmarks
measure. vLLM is imported only when an engine starts."""

from __future__ import annotations

import dataclasses
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import StackConfig
from serving.engine.cpu_binding import plan_binding
from serving.engine.placement import engine_runtime_env
from serving.errors import ConfigError


@dataclass(frozen=True)
class Limits:
    """The engine's resolved limits the grid must respect."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_tokens: int  # KV cache capacity in tokens


def prepare_process(config: StackConfig, module: str) -> None:
    """This process's environment before vLLM loads: an in-process engine core, offline,
    and on a CPU serving's OMP core binding and intel-openmp preload (by a re-exec of
    ``python -m module`` with the same arguments)."""
    spec, env = config.model, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_HOST_IP": "127.0.0.1"}
    if spec.accelerator is AcceleratorKind.CPU:
        cores, tp = sorted(os.sched_getaffinity(0)), spec.tensor_parallel_size
        binding = plan_binding(slot=0, tensor_parallel_size=tp, cores_per_rank=max(1, len(cores) // tp),
                               node_cores=cores)
        env["VLLM_CPU_OMP_THREADS_BIND"] = binding.omp_threads_bind()
    for key, value in env.items():
        os.environ.setdefault(key, value)
    runtime = engine_runtime_env(config)["env_vars"]
    preload = runtime.pop("LD_PRELOAD", None)
    os.environ.update(runtime)
    if preload and preload not in os.environ.get("LD_PRELOAD", ""):
        os.environ["LD_PRELOAD"] = ":".join(filter(None, [preload, os.environ.get("LD_PRELOAD")]))
        os.execv(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]])


@contextmanager
def in_process_engine(config: StackConfig) -> Iterator[tuple]:
    """An ``LLMEngine`` with serving's engine arguments (synchronous scheduling), and its
    :class:`Limits`, for the block; shut down after it. :class:`ConfigError` when vLLM
    refuses the settings."""
    from vllm.v1.engine.llm_engine import LLMEngine

    from serving.engine.vllm_engine import engine_args

    args = dataclasses.replace(engine_args(config.model, config.model_path, config.engine_settings),
                               distributed_executor_backend="mp", async_scheduling=False)
    try:
        vllm_config = args.create_engine_config()
    except ValueError as exc:  # e.g. attention heads not divisible by the tensor-parallel size
        raise ConfigError(f"vLLM refused the engine settings: {exc}".splitlines()[0]) from exc
    engine = LLMEngine.from_vllm_config(vllm_config, disable_log_stats=True)
    try:
        c = engine.vllm_config
        yield engine, Limits(c.scheduler_config.max_num_seqs, c.scheduler_config.max_num_batched_tokens,
                             c.model_config.max_model_len, c.cache_config.num_gpu_blocks * c.cache_config.block_size)
    finally:
        engine.engine_core.shutdown()


class Driver:
    """Feeds one ``LLMEngine`` requests of random distinct prompts (so no cache hits) and
    steps it."""

    def __init__(self, engine, limits: Limits, seed: int = 0) -> None:
        self.engine, self.limits, self._rng = engine, limits, random.Random(seed)
        self._tokens = (256, max(257, int(engine.model_config.get_vocab_size() * 0.9)))  # no special tokens
        self._count = self.steps = 0
        self.started: set[str] = set()  # requests with a first token: prompt done
        self.finished: set[str] = set()

    def add(self, prompt_len: int, max_tokens: int, lora_request=None) -> str:
        """A request of ``prompt_len`` random tokens and ``max_tokens`` output tokens (under
        ``lora_request``, a vLLM ``LoRARequest``, if given); returns its id."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        self._count += 1
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=1.0, detokenize=False,
                                output_kind=RequestOutputKind.DELTA)
        ids = [self._rng.randrange(*self._tokens) for _ in range(prompt_len)]
        self.engine.add_request(f"r{self._count}", TokensPrompt(prompt_token_ids=ids), params,
                                lora_request=lora_request)
        return f"r{self._count}"

    def step_until(self, done: Callable[[], bool]) -> None:
        while not done():
            self.steps += 1
            for out in self.engine.step():
                if any(o.token_ids for o in out.outputs):
                    self.started.add(out.request_id)
                if out.finished:
                    self.finished.add(out.request_id)
