"""What a candidate deploys (pure): one :class:`CandidateDeployment` per candidate, and
from it the :class:`StackConfig` a real deployment runs and the
:class:`~simulator.config.SimulationConfig` the simulator runs, so the two cannot drift."""

from __future__ import annotations

from pathlib import Path

from pydantic import PositiveInt

from serving.config.model_spec import AcceleratorKind, EngineSettings, ModelCatalog, ModelSpec
from serving.config.stack import GatewaySpec, ReplicaSpec, StackConfig
from simulator.config import SimulationConfig
from sweep.spec.space import Candidate
from sweep.spec.sweep_spec import SweepSpec
from sweep.strict import Strict

# The gateway's admission bound of a candidate (requests in flight before a 429).
GATEWAY_MAX_IN_FLIGHT = 1024


class CandidateDeployment(Strict):
    """What deploying one candidate means, whichever measurer deploys it: the spec's
    model at the candidate's TP, the model spec's engine settings with the candidate's
    knobs, its replicas (``cpus_per_rank`` cores per rank on CPU, else ``None``) and the
    gateway's admission bound."""

    model: ModelSpec
    engine: EngineSettings
    replicas: PositiveInt
    cpus_per_rank: PositiveInt | None
    max_in_flight: PositiveInt = GATEWAY_MAX_IN_FLIGHT

    @property
    def tensor_parallel(self) -> int:
        return self.model.tensor_parallel_size


def deployment_for(candidate: Candidate, spec: SweepSpec, catalog: ModelCatalog) -> CandidateDeployment:
    """The one source both configs below are built from."""
    model = catalog.get(spec.model).model_copy(update={"tensor_parallel_size": candidate.tp})
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    on_cpu = model.accelerator is AcceleratorKind.CPU
    return CandidateDeployment(
        model=model,
        engine=model.engine.model_copy(update=knobs),
        replicas=candidate.replicas,
        cpus_per_rank=spec.budget.accelerators_per_rank if on_cpu else None,
    )


def stack_config_for(candidate: Candidate, spec: SweepSpec, *, catalog: ModelCatalog, model_path: Path,
                     port: int) -> StackConfig:
    """The candidate's deployment as serving deploys it, with the prepared weights at
    ``model_path`` and the gateway on ``port``."""
    deployment = deployment_for(candidate, spec, catalog)
    return StackConfig(
        model=deployment.model,
        model_path=model_path,
        engine=deployment.engine,
        replicas=ReplicaSpec(num_replicas=deployment.replicas, cpus_per_rank=deployment.cpus_per_rank),
        gateway=GatewaySpec(port=port, max_in_flight=deployment.max_in_flight),
        app_name="serveout",
    )


def simulation_config_for(candidate: Candidate, spec: SweepSpec, catalog: ModelCatalog,
                          models_dir: Path) -> SimulationConfig:
    """The candidate's deployment as the simulator runs it, on the spec's hardware profile."""
    deployment = deployment_for(candidate, spec, catalog)
    return SimulationConfig(
        hardware=spec.hardware, model=spec.model, replicas=deployment.replicas,
        tensor_parallel=deployment.tensor_parallel, engine=deployment.engine,
        max_in_flight=deployment.max_in_flight, models_dir=models_dir,
    )
