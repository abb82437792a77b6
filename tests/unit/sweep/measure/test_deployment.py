"""What a measurer deploys for a candidate: its StackConfig (and its SimulationConfig)."""

from pathlib import Path

import pytest

from serving.config.model_spec import AcceleratorKind, ModelCatalog
from sweep.measure.deployment import GATEWAY_MAX_IN_FLIGHT, simulation_config_for, stack_config_for
from sweep.spec.space import DeploymentCandidate, EngineKnobs
from tests.paths import MODELS
from tests.unit.sweep.sweep_fakes import make_spec

CATALOG = ModelCatalog(MODELS)


def spec_for(model: str, accelerator: AcceleratorKind, per_rank: int):
    return make_spec(accelerator=accelerator, per_rank=per_rank).model_copy(update={"model": model})


def test_cpu_candidate_maps_tp_replicas_knobs_and_cores():
    spec = spec_for("smollm2-135m-instruct", AcceleratorKind.CPU, per_rank=1)
    candidate = DeploymentCandidate(tp=2, replicas=3, engine=EngineKnobs(max_num_seqs=16))
    config = stack_config_for(candidate, spec, catalog=CATALOG, model_path=Path("/m"), port=8123)
    assert config.model.tensor_parallel_size == 2
    assert config.replicas.num_replicas == 3 and config.replicas.cpus_per_rank == 1
    assert config.engine_settings.max_num_seqs == 16
    default = CATALOG.get("smollm2-135m-instruct").engine
    assert config.engine_settings.max_num_batched_tokens == default.max_num_batched_tokens
    assert config.engine_settings.kv_cache_space_gib == default.kv_cache_space_gib
    assert config.gateway.port == 8123


def test_gpu_candidate_reserves_no_cpu_cores_per_rank():
    spec = spec_for("llama-3.3-70b-instruct", AcceleratorKind.H200, per_rank=1)
    config = stack_config_for(DeploymentCandidate(tp=8, replicas=1), spec, catalog=CATALOG, model_path=Path("/m"),
                              port=8000)
    assert config.model.tensor_parallel_size == 8
    assert config.replicas.cpus_per_rank is None
    assert config.engine_settings == CATALOG.get("llama-3.3-70b-instruct").engine


@pytest.mark.parametrize(("model", "accelerator", "candidate"), [
    ("smollm2-135m-instruct", AcceleratorKind.CPU,
     DeploymentCandidate(tp=1, replicas=2, engine=EngineKnobs(max_num_seqs=16))),
    ("llama-3.3-70b-instruct", AcceleratorKind.H200,
     DeploymentCandidate(tp=4, replicas=3, engine=EngineKnobs(max_num_batched_tokens=4096))),
])
def test_the_simulator_runs_what_a_real_sweep_deploys(model, accelerator, candidate):
    """One source for both measurers: the same TP, replicas, engine settings and admission bound."""
    spec = spec_for(model, accelerator, per_rank=1)
    stack = stack_config_for(candidate, spec, catalog=CATALOG, model_path=Path("/m"), port=8000)
    simulated = simulation_config_for(candidate, spec, CATALOG, MODELS)
    assert (simulated.model, simulated.tensor_parallel) == (spec.model, stack.model.tensor_parallel_size)
    assert simulated.replicas == stack.replicas.num_replicas == candidate.replicas
    assert simulated.engine == stack.engine_settings
    assert simulated.max_in_flight == stack.gateway.max_in_flight == GATEWAY_MAX_IN_FLIGHT


def test_adapter_slots_are_an_engine_knob_of_both_measurers():
    spec = spec_for("llama-3.1-8b-instruct", AcceleratorKind.H200, per_rank=1).model_copy(
        update={"adapters": ("clinic", "pharmacy")})
    candidate = DeploymentCandidate(tp=1, replicas=2, engine=EngineKnobs(max_loras=4))
    stack = stack_config_for(candidate, spec, catalog=CATALOG, model_path=Path("/m"), port=8000)
    simulated = simulation_config_for(candidate, spec, CATALOG, MODELS)
    assert stack.engine_settings.lora.max_loras == simulated.engine.lora.max_loras == 4
    assert simulated.engine.lora.host_slots == 16  # the host cache keeps its default
    assert simulated.adapters == ("clinic", "pharmacy")


def test_adapter_slots_raise_a_smaller_host_cache_to_hold_them():
    from serving.config.model_spec import LoraSettings

    spec = spec_for("smollm2-135m-instruct", AcceleratorKind.CPU, per_rank=1)
    catalog = ModelCatalog(MODELS)
    model = catalog.get("smollm2-135m-instruct")
    catalog._specs[model.name] = model.model_copy(update={"engine": model.engine.model_copy(
        update={"lora": LoraSettings(max_loras=1, max_cpu_loras=2)})})
    simulated = simulation_config_for(DeploymentCandidate(tp=1, replicas=1, engine=EngineKnobs(max_loras=4)),
                                      spec, catalog, MODELS)
    assert (simulated.engine.lora.max_loras, simulated.engine.lora.max_cpu_loras) == (4, 4)
