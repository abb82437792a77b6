"""What a candidate deploys (pure): the candidate resolved against the spec and the model
catalog (:class:`ResolvedCandidate`), and from it both the :class:`StackConfig` a real
deployment runs and the :class:`~simulator.config.SimulationConfig` the simulator runs,
so the two cannot drift."""

from __future__ import annotations

from pathlib import Path

from pydantic import PositiveInt

from serving.config.model_spec import AcceleratorKind, EngineSettings, LoraSettings, ModelCatalog, ModelSpec
from serving.config.adapters import AdapterSpec
from serving.config.gateway import GatewaySpec
from serving.config.stack import ReplicaSpec, StackConfig
from simulator.config import SimulationConfig
from sweep.spec.space import DeploymentCandidate
from sweep.spec.sweep_spec import SweepSpec
from sweep.strict import Strict

# The gateway's admission bound of a candidate (requests in flight before a 429).
GATEWAY_MAX_IN_FLIGHT = 1024


class ResolvedCandidate(Strict):
    """One candidate as any measurer deploys it: the spec's model at the candidate's TP and
    dtype, the model spec's engine settings with the candidate's knobs, its replicas
    (``cpus_per_rank`` cores per rank on CPU, else ``None``) and the gateway's admission bound."""

    model: ModelSpec
    engine: EngineSettings
    replicas: PositiveInt
    cpus_per_rank: PositiveInt | None
    max_in_flight: PositiveInt = GATEWAY_MAX_IN_FLIGHT

    @property
    def tensor_parallel(self) -> int:
        return self.model.tensor_parallel_size


def resolve(candidate: DeploymentCandidate, spec: SweepSpec, catalog: ModelCatalog) -> ResolvedCandidate:
    """``candidate`` filled in from the spec and the model catalog: the one source of both configs below."""
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    model = catalog.get(spec.model).model_copy(
        update={"tensor_parallel_size": candidate.tp, **({"dtype": knobs.pop("dtype")} if "dtype" in knobs else {})})
    if (slots := knobs.pop("max_loras", None)) is not None:
        lora = (model.engine.lora or LoraSettings()).model_dump() | {"max_loras": slots}
        if lora["max_cpu_loras"] is not None and lora["max_cpu_loras"] < slots:
            lora["max_cpu_loras"] = slots  # the host cache holds at least the slots
        knobs["lora"] = LoraSettings.model_validate(lora)
    on_cpu = model.accelerator is AcceleratorKind.CPU
    return ResolvedCandidate(
        model=model,
        engine=model.engine.model_copy(update=knobs),
        replicas=candidate.replicas,
        cpus_per_rank=spec.budget.accelerators_per_rank if on_cpu else None,
    )


def stack_config_for(candidate: DeploymentCandidate, spec: SweepSpec, *, catalog: ModelCatalog, model_path: Path,
                     port: int, adapters: tuple[AdapterSpec, ...] = ()) -> StackConfig:
    """The resolved candidate as serving deploys it, with the prepared weights at
    ``model_path``, the spec's ``adapters`` (prepared) and the gateway on ``port``."""
    resolved = resolve(candidate, spec, catalog)
    return StackConfig(
        model=resolved.model,
        model_path=model_path,
        engine=resolved.engine,
        replicas=ReplicaSpec(num_replicas=resolved.replicas, cpus_per_rank=resolved.cpus_per_rank),
        gateway=GatewaySpec(port=port, max_in_flight=resolved.max_in_flight),
        adapters=adapters,
        app_name="serveout",
    )


def simulation_config_for(candidate: DeploymentCandidate, spec: SweepSpec, catalog: ModelCatalog,
                          models_dir: Path) -> SimulationConfig:
    """The resolved candidate as the simulator runs it, on the spec's hardware profile."""
    resolved = resolve(candidate, spec, catalog)
    return SimulationConfig(
        hardware=spec.hardware, model=spec.model, replicas=resolved.replicas,
        tensor_parallel=resolved.tensor_parallel, dtype=resolved.model.dtype, engine=resolved.engine,
        max_in_flight=resolved.max_in_flight, models_dir=models_dir, adapters=spec.adapters,
    )
