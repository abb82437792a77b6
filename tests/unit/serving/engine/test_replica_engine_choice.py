"""Which engine a replica builds from its config (no Serve, no vLLM: the null engine)."""

from pathlib import Path

from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.engine import replica as replica_module
from serving.engine.core_slots import CoreSlot
from serving.engine.null_engine import NullEngine
from tests.paths import MODELS  # noqa: E402


def test_a_null_backend_builds_the_null_engine_bound_to_one_core(monkeypatch):
    bindings = []
    monkeypatch.setattr(replica_module, "apply_binding", bindings.append)  # never pin pytest itself
    monkeypatch.setattr(replica_module, "claim_core_slot", lambda: CoreSlot(0, -1))  # FAKE: no lock file
    config = build_stack_config(
        {"model": "tiny-llama-tp2-test", "engine_backend": {"kind": "null", "tokens_per_s": 5},
         "replicas": {"cpus_per_rank": 2}},
        catalog=ModelCatalog(MODELS), resolve_path=lambda n: Path("/m") / n)
    replica = replica_module.EngineReplica.__new__(replica_module.EngineReplica)
    replica.replica_id = "r1"
    engine = replica._start_engine(config.engine_replica_config())
    assert isinstance(engine, NullEngine)
    assert config.model.tensor_parallel_size == 2  # the spec's TP and cores are not what it takes
    assert len(bindings) == 1 and len(bindings[0].all_cores) == 1
