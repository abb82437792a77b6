"""What each measurer deploys for one candidate (pure): the :class:`StackConfig` a real
deployment runs, and the :class:`~simulator.config.SimulationConfig` the simulator runs."""

from __future__ import annotations

from pathlib import Path

from serving.config.model_spec import AcceleratorKind, ModelCatalog
from serving.config.stack import GatewaySpec, ReplicaSpec, StackConfig
from simulator.config import SimulationConfig
from sweep.spec.space import Candidate
from sweep.spec.sweep_spec import SweepSpec

# The gateway's admission bound of a candidate (requests in flight before a 429).
GATEWAY_MAX_IN_FLIGHT = 1024


def stack_config_for(candidate: Candidate, spec: SweepSpec, *, catalog: ModelCatalog, model_path: Path,
                     port: int) -> StackConfig:
    """The deployment of one candidate: the spec's model at the candidate's TP,
    replica count and engine knobs, ``accelerators_per_rank`` cores per rank on CPU."""
    model = catalog.get(spec.model).model_copy(update={"tensor_parallel_size": candidate.tp})
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    on_cpu = model.accelerator is AcceleratorKind.CPU
    return StackConfig(
        model=model,
        model_path=model_path,
        engine=model.engine.model_copy(update=knobs),
        replicas=ReplicaSpec(
            num_replicas=candidate.replicas,
            cpus_per_rank=spec.budget.accelerators_per_rank if on_cpu else None,
        ),
        gateway=GatewaySpec(port=port, max_in_flight=GATEWAY_MAX_IN_FLIGHT),
        app_name="serveout",
    )


def simulation_config_for(candidate: Candidate, spec: SweepSpec, catalog: ModelCatalog,
                          models_dir: Path) -> SimulationConfig:
    """The simulated deployment of one candidate (what :func:`~sweep.measure.serveout.stack_config_for`
    deploys for real): the model spec's engine with the candidate's knobs."""
    model = catalog.get(spec.model)
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    return SimulationConfig(
        hardware=spec.hardware, model=spec.model, replicas=candidate.replicas, tensor_parallel=candidate.tp,
        engine=model.engine.model_copy(update=knobs), max_in_flight=GATEWAY_MAX_IN_FLIGHT, models_dir=models_dir,
    )
