"""What a measurer deploys for a candidate: its StackConfig (and its SimulationConfig)."""

from pathlib import Path

from serving.config.model_spec import AcceleratorKind, ModelCatalog
from sweep.measure.deployment import stack_config_for
from sweep.spec.space import Candidate, EngineKnobs
from tests.paths import MODELS
from tests.unit.sweep.sweep_fakes import make_spec

CATALOG = ModelCatalog(MODELS)


def spec_for(model: str, accelerator: AcceleratorKind, per_rank: int):
    return make_spec(accelerator=accelerator, per_rank=per_rank).model_copy(update={"model": model})


def test_cpu_candidate_maps_tp_replicas_knobs_and_cores():
    spec = spec_for("smollm2-135m-instruct", AcceleratorKind.CPU, per_rank=1)
    candidate = Candidate(tp=2, replicas=3, engine=EngineKnobs(max_num_seqs=16))
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
    config = stack_config_for(Candidate(tp=8, replicas=1), spec, catalog=CATALOG, model_path=Path("/m"), port=8000)
    assert config.model.tensor_parallel_size == 8
    assert config.replicas.cpus_per_rank is None
    assert config.engine_settings == CATALOG.get("llama-3.3-70b-instruct").engine
