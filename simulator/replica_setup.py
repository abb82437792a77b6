"""What one simulated replica is made of: the model spec, engine settings, step-time
model and KV cache size for a :class:`SimulationConfig` (pure but for reading specs)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from serving.config.model_spec import EngineSettings, LoraSettings, ModelCatalog, ModelSpec
from serving.config.stack import max_ongoing_per_replica
from serving.errors import ConfigError as ServingConfigError
from simulator.config import SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.hardware import HardwareKind, HardwareProfile, load_hardware
from simulator.lora import BASE, AdapterSlots, adapter_bytes
from simulator.replica import Replica
from simulator.step_time import DTYPE_BYTES, StepTimeModel

GIB = 1024**3


@dataclass(frozen=True)
class ReplicaSetup:
    """Everything needed to build identical replicas (and to describe them)."""

    spec: ModelSpec
    hardware: HardwareProfile
    engine: EngineSettings
    tensor_parallel: int
    step_model: StepTimeModel
    num_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_ongoing: int
    replica_start_s: float
    adapters: tuple[str, ...] = ()  # LoRA adapters served, by name (ids 1, 2, ... in this order)
    lora: LoraSettings | None = None  # the engine's LoRA settings (None: no adapters)

    def replica(self) -> Replica:
        slots = None
        if self.lora is not None:
            size = adapter_bytes(self.spec.architecture, self.lora.max_lora_rank, DTYPE_BYTES.get(str(self.spec.dtype), 2))
            slots = AdapterSlots(self.lora.max_loras, self.lora.host_slots, self.hardware.lora.costs(size))
            slots.preload(range(1, len(self.adapters) + 1))  # loaded before traffic, as serving's replicas do
        return Replica(self.step_model, num_blocks=self.num_blocks, block_size=self.block_size,
                       max_num_seqs=self.engine.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                       prefix_caching=self.engine.enable_prefix_caching, adapters=slots)

    def adapter_id(self, model: str | None) -> int:
        """The adapter id of a request naming ``model`` (:data:`BASE` for the base model or none)."""
        return self.adapters.index(model) + 1 if model in self.adapters else BASE

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size


def load_model(name: str, models_dir: Path) -> ModelSpec:
    try:
        spec = ModelCatalog(models_dir).get(name)
    except ServingConfigError as exc:
        raise SimulationConfigError(str(exc)) from None
    if spec.architecture is None:
        raise SimulationConfigError(f"model {name!r} has no `architecture:` section in its spec")
    return spec


def kv_blocks(spec: ModelSpec, hardware: HardwareProfile, engine: EngineSettings, model: StepTimeModel,
              block_size: int) -> int:
    """KV blocks of one replica: vLLM-CPU's ``kv_cache_space_gib`` per rank, or on a GPU
    memory x ``gpu_memory_utilization`` minus the weights and the profile's
    ``reserved_gb`` (activations, CUDA graphs, communication buffers)."""
    per_block = model.kv_bytes_per_token * block_size
    if hardware.kind is HardwareKind.CPU:
        space = engine.kv_cache_space_gib * GIB
    else:
        space = hardware.memory_gb.value * 1e9 * engine.gpu_memory_utilization - model.weight_bytes - hardware.reserved_bytes
    blocks = int(space // per_block)
    if blocks < math.ceil(spec.max_model_len / block_size):
        raise SimulationConfigError(
            f"{spec.name} on {hardware.name} x TP{model.tp}: the KV cache ({blocks * block_size} tokens) cannot "
            f"hold one max_model_len ({spec.max_model_len}) sequence; vLLM would refuse to start")
    return blocks


def replica_setup(sim: SimulationConfig) -> ReplicaSetup:
    """The replicas ``sim`` describes; :class:`SimulationConfigError` for a bad combination."""
    spec = load_model(sim.model, sim.models_dir)
    if sim.dtype is not None:
        spec = spec.model_copy(update={"dtype": sim.dtype})
    hardware = load_hardware(sim.hardware)
    engine = sim.engine or spec.engine
    tp = sim.tensor_parallel or spec.tensor_parallel_size
    if spec.architecture.num_attention_heads % tp:
        raise SimulationConfigError(
            f"{spec.name} has {spec.architecture.num_attention_heads} attention heads: not divisible by TP {tp}")
    most = sim.autoscaling.max_replicas if sim.autoscaling.enabled else sim.replicas
    ranks = most * tp
    step_model = StepTimeModel(spec.architecture, hardware, tensor_parallel=tp, dtype=str(spec.dtype),
                               quantization=sim.quantization, kv_cache_dtype=sim.kv_cache_dtype, ranks_on_node=ranks, slowdown=hardware.step_slowdown,
                               seq_s=hardware.step_seq_s, noise=hardware.step_noise)
    block_size = engine.block_size or hardware.defaults.block_size
    batched = engine.max_num_batched_tokens or hardware.defaults.max_num_batched_tokens * (
        tp if hardware.kind is HardwareKind.CPU else 1)
    batched = max(batched, engine.max_num_seqs)
    lora = (engine.lora or LoraSettings()) if sim.adapters else None
    if lora is not None and hardware.lora is None:
        raise SimulationConfigError(f"hardware {hardware.name!r} has no `lora:` figures: it cannot simulate adapters")
    return ReplicaSetup(
        spec=spec, hardware=hardware, engine=engine, tensor_parallel=tp, step_model=step_model,
        num_blocks=kv_blocks(spec, hardware, engine, step_model, block_size), block_size=block_size,
        max_num_batched_tokens=batched, max_ongoing=max_ongoing_per_replica(sim.max_ongoing_requests, engine.max_num_seqs),
        replica_start_s=hardware.replica_start_s.value if sim.replica_start_s is None else sim.replica_start_s,
        adapters=sim.adapters, lora=lora,
    )
