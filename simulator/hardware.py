"""Hardware profiles: data files in ``simulator/hardware/`` (one per accelerator), each
figure with its source and whether it is an assumption.

A profile's figures are per tensor-parallel rank (one GPU) except on ``kind: cpu``,
where they are the whole machine's (measured by ``python -m simulator.measure_cpu``)
and the ranks running on it share them (:meth:`HardwareProfile.rank_share`).
"""

from __future__ import annotations

import enum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import SimulationConfigError
from simulator.lora import LoraCosts

HARDWARE_DIR = Path(__file__).resolve().parent / "hardware"
DEFAULT_PATH_SIGMA = 0.25  # assumed: the spread of one request's serving path around its mean (docs/simulator.md)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Strict):
    """One number and where it comes from; ``assumed`` until measured on that hardware."""

    value: float = Field(ge=0)
    source: str = Field(min_length=1)
    assumed: bool = False


class HardwareKind(enum.StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class Efficiencies(_Strict):
    """The fitted constants of the step-time model (docs/simulator.md, "Step time")."""

    memory: Figure = Field(description="share of memory bandwidth the weights' GEMMs reach")
    compute: Figure = Field(description="share of peak FLOP/s the GEMMs reach")
    kv_memory: Figure | None = Field(
        None, description="share of memory bandwidth attention's KV reads reach; none: as `memory`")
    kv_heads_half: Figure | None = Field(
        None, description="KV heads per rank at which attention's KV reads reach half of `kv_memory` (a rank "
                          "with few heads leaves the GPU's SMs idle); none: 0, every rank reaches the share")
    attention: Figure | None = Field(
        None, description="share of peak FLOP/s attention reaches; none: as `compute`")
    fp8_memory: Figure | None = Field(
        None, description="share of memory bandwidth fp8 weights' GEMMs reach (dynamic activation "
                          "quantisation, scaled GEMMs); none: as `memory`")
    network: Figure = Field(description="share of interconnect bandwidth reached by all-reduces")
    allreduce_latency_us: Figure = Field(description="fixed cost of one all-reduce (at 2 ranks)")
    allreduce_latency_per_rank_us: Figure | None = Field(
        None, description="what each rank past 2 adds to an all-reduce's fixed cost; none: 0")
    step_overhead_ms: Figure = Field(description="fixed cost of one engine step")
    seq_overhead_us: Figure = Field(description="cost per scheduled sequence per step")

    @property
    def kv_memory_share(self) -> float:
        return (self.kv_memory or self.memory).value

    @property
    def kv_heads_half_value(self) -> float:
        return self.kv_heads_half.value if self.kv_heads_half else 0.0

    @property
    def fp8_memory_share(self) -> float:
        return (self.fp8_memory or self.memory).value

    @property
    def attention_share(self) -> float:
        return (self.attention or self.compute).value

    @property
    def allreduce_rank_us(self) -> float:
        return self.allreduce_latency_per_rank_us.value if self.allreduce_latency_per_rank_us else 0.0


class LoraFigures(_Strict):
    """What LoRA adapters cost on this hardware (:mod:`simulator.lora`): an adapter's
    load is ``load_ms`` plus its bytes over ``disk_gbps``, its activation ``activate_ms``
    plus its bytes over ``host_to_slot_gbps`` (no bandwidth: the fixed figure alone)."""

    step_factor: Figure = Field(description="a step whose batch holds an adapter's sequence takes this many "
                                            "times the base model's")
    load_ms: Figure = Field(description="reading one adapter from disk into the host cache: the fixed part")
    disk_gbps: Figure | None = Field(None, description="disk to host memory, for the adapter's bytes")
    activate_ms: Figure = Field(description="copying one adapter from the host cache into a batch slot: the "
                                            "fixed part")
    host_to_slot_gbps: Figure | None = Field(None, description="host memory to a batch slot, for the bytes")

    def costs(self, adapter_bytes: float) -> LoraCosts:
        """The costs of adapters of ``adapter_bytes`` bytes each."""
        over = lambda bandwidth: adapter_bytes / (bandwidth.value * 1e9) if bandwidth else 0.0  # noqa: E731
        return LoraCosts(step_factor=self.step_factor.value, load_s=self.load_ms.value / 1e3 + over(self.disk_gbps),
                         activate_s=self.activate_ms.value / 1e3 + over(self.host_to_slot_gbps))


class EngineDefaults(_Strict):
    """vLLM's defaults on this hardware where the model spec leaves them unset."""

    max_num_batched_tokens: int = Field(ge=16, description="per replica (CPU: times the TP size)")
    block_size: int = Field(ge=1)


class HardwareProfile(_Strict):
    """One accelerator (or CPU machine) as the step-time model sees it."""

    name: str
    description: str = ""
    kind: HardwareKind
    cores: int | None = Field(None, ge=1, description="CPU only: cores the figures were measured on")
    fitted_on_cpu: str | None = Field(
        None, description="CPU only: the CPU model (/proc/cpuinfo) the constants were fitted on; the simulator "
                          "warns on another")
    serving_path_cpu_us_per_token: Figure | None = Field(
        None, description="CPU the serving path (proxy, gateway, streaming) spends per streamed token; on a CPU "
                          "box it competes with the engine for the cores, on a GPU node it takes spare host cores")
    serving_path_cpu_us_per_request: Figure | None = Field(
        None, description="CPU the serving path spends per request (parse, tokenise, route, admit), as above")
    memory_gb: Figure
    memory_bandwidth_gbps: Figure
    peak_tflops: dict[str, Figure] = Field(description="dense peak by dtype name")
    interconnect_gbps: Figure = Field(description="between TP ranks, both directions together")
    replica_start_s: Figure = Field(description="a new replica's time to ready (weights, warm-up)")
    reserved_gb: Figure | None = Field(
        None, description="GPU: memory per rank held besides weights and KV cache (activations, CUDA graphs, "
                          "communication buffers); none: 0")
    serving_path_ms: Figure | None = Field(
        None, description="what the serving path (HTTP proxy, gateway, Ray hops) adds to a request's first "
                          "token and end, on this hardware's hosts; none: 0")
    serving_path_sigma: Figure | None = Field(
        None, description="sigma of a mean-1 lognormal factor on each request's serving path (real requests' "
                          "paths differ: client, network, the gateway's event loop; it is what makes closed-loop "
                          "users drift apart); none: DEFAULT_PATH_SIGMA")
    in_stack_slowdown: Figure | None = Field(
        None, description="engine steps inside the serving stack: their fixed costs (step and sequence "
                          "overheads) take this many times the step-time model's (on a CPU the serving path and "
                          "the load generator share the engine's cores); none: 1")
    in_stack_compute_slowdown: Figure | None = Field(
        None, description="the same for the memory, compute and network terms; none: 1")
    in_stack_seq_us: Figure | None = Field(
        None, description="extra microseconds per sequence per engine step inside the stack: the serving "
                          "path's CPU for each streamed token, taken from the engine's cores (CPU); none: 0")
    in_stack_core_speedup: Figure | None = Field(
        None, description="CPU: how many times faster one replica runs inside the stack on all `cores` than on "
                          "one core (sets what each of several replicas on the machine gets); none: `cores`")
    in_stack_noise: Figure | None = Field(
        None, description="sigma of a mean-1 lognormal factor on each engine step inside the stack (the "
                          "jitter of a shared machine); none: 0, every step as the model says")
    efficiency: Efficiencies
    defaults: EngineDefaults
    lora: LoraFigures | None = Field(None, description="LoRA's costs; none: a simulation with adapters is refused")

    def peak_flops(self, dtype: str) -> float:
        """FLOP/s for ``dtype`` (``auto`` = bfloat16); an error lists the dtypes known."""
        key = "bfloat16" if dtype == "auto" else dtype
        if key not in self.peak_tflops:
            raise SimulationConfigError(
                f"hardware {self.name!r} has no peak for {key}; known: {', '.join(sorted(self.peak_tflops))}")
        return self.peak_tflops[key].value * 1e12

    @property
    def step_slowdown(self) -> tuple[float, float]:
        """(memory/compute/network, fixed costs) factors of engine steps inside the stack."""
        value = lambda figure: figure.value if figure else 1.0  # noqa: E731
        return value(self.in_stack_compute_slowdown), value(self.in_stack_slowdown)

    @property
    def step_seq_s(self) -> float:
        """Seconds each sequence adds to a step inside the stack, on top of the model's."""
        return self.in_stack_seq_us.value * 1e-6 if self.in_stack_seq_us else 0.0

    @property
    def step_noise(self) -> float:
        return self.in_stack_noise.value if self.in_stack_noise else 0.0

    @property
    def reserved_bytes(self) -> float:
        return self.reserved_gb.value * 1e9 if self.reserved_gb else 0.0

    @property
    def serving_path_s(self) -> float:
        return self.serving_path_ms.value / 1e3 if self.serving_path_ms else 0.0

    @property
    def path_sigma(self) -> float:
        return self.serving_path_sigma.value if self.serving_path_sigma else DEFAULT_PATH_SIGMA

    def rank_share(self, ranks: int) -> float:
        """The share of the profile's figures one of ``ranks`` ranks gets (GPU: each rank
        has its own device; CPU: the cores are split between the ranks on the machine, and
        a rank on ``c`` of the ``cores`` runs ``1 + (c - 1) (s - 1) / (cores - 1)`` times as
        fast as on one, ``s`` = :attr:`in_stack_core_speedup`: linear by default)."""
        if self.kind is HardwareKind.GPU:
            return 1.0
        cores = self.cores or ranks
        if ranks <= 1 or cores <= 1:
            return 1.0
        speedup = self.in_stack_core_speedup.value if self.in_stack_core_speedup else float(cores)
        speed = lambda c: 1.0 + (c - 1.0) * (speedup - 1.0) / (cores - 1.0)  # noqa: E731
        return speed(max(cores / ranks, 1.0)) / speed(cores)  # more ranks than cores: as many as cores

    def assumptions(self) -> list[str]:
        """The names of the figures marked ``assumed``."""
        figures = {**dict(self), **{f"efficiency.{k}": v for k, v in dict(self.efficiency).items()},
                   **{f"lora.{k}": v for k, v in (dict(self.lora) if self.lora else {}).items()},
                   **{f"peak_tflops.{k}": v for k, v in self.peak_tflops.items()}}
        return sorted(k for k, v in figures.items() if isinstance(v, Figure) and v.assumed)


def hardware_names(folder: Path = HARDWARE_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def load_hardware(name_or_path: str | Path, folder: Path = HARDWARE_DIR) -> HardwareProfile:
    """A profile by name (``h200``) or by path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = folder / f"{name_or_path}.yaml"
        if not path.is_file():
            raise SimulationConfigError(
                f"unknown hardware {str(name_or_path)!r}; known: {', '.join(hardware_names(folder))}")
    try:
        return HardwareProfile.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise SimulationConfigError(f"invalid hardware profile {path}: {exc}") from None
