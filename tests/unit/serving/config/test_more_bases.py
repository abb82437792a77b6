"""Several base models in one stack (``more_bases``): each one its own engine
deployment, the names served once, the direct mode refused (a FAKE resolver stands
for the adapter store)."""

from pathlib import Path

import pytest

from serving.app_builder import engine_deployment_options
from serving.config.adapters import AdapterSpec
from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.errors import ConfigError
from tests.paths import MODELS

BASE, OTHER = "smollm2-135m-instruct", "tiny-llama-tp2-test"
SEPARATE = {"gateway": {"mode": "separate"}}


def fake_resolver(spec, name):
    """Stands for AdapterStore.spec: a prepared recipe at a made-up path."""
    return AdapterSpec(name=name, path=Path("/adapters") / name, rank=8)


def build(data):
    return build_stack_config(data, catalog=ModelCatalog(MODELS), resolve_path=lambda n: Path("/m") / n,
                              resolve_adapter=fake_resolver)


def two_bases(**other):
    return build({**SEPARATE, "adapters": ["clinic"], "replicas": {"num_replicas": 2, "cpus_per_rank": 1},
                  "more_bases": [{"model": OTHER, "tensor_parallel_size": 1,
                                  "replicas": {"num_replicas": 1, "cpus_per_rank": 1}, **other}]})


def test_each_base_is_a_one_base_stack_with_its_own_engine_deployment():
    config = two_bases(replicas={"num_replicas": 3, "cpus_per_rank": 1}, engine={"max_num_seqs": 8},
                       adapters=[{"name": "admin-docs", "path": "/data/admin", "rank": 4}])
    first, other = config.bases
    assert config.engine_deployments == ("engine", f"engine-{OTHER}")
    assert config.served_names == (BASE, "clinic", OTHER, "admin-docs")
    assert (first.model.name, first.replicas.num_replicas, first.adapter_names) == (BASE, 2, ("clinic",))
    assert (other.model.name, other.replicas.num_replicas, other.adapter_names) == (OTHER, 3, ("admin-docs",))
    assert other.model.tensor_parallel_size == 1 and other.model_path == Path("/m") / OTHER
    assert other.engine_settings.max_num_seqs == 8 and other.engine_settings.lora is not None
    assert other.gateway == config.gateway and other.routing == config.routing and not other.more_bases
    options = engine_deployment_options(other, config.engine_deployments[1])
    assert options["name"] == f"engine-{OTHER}" and options["num_replicas"] == 3


def test_a_stack_of_one_base_is_its_own_only_base():
    config = build({})
    assert config.bases == (config,) and config.engine_deployments == ("engine",)


def test_a_name_served_twice_is_refused():
    with pytest.raises(ConfigError, match="'clinic' is served twice"):
        two_bases(adapters=[{"name": "clinic", "path": "/data/clinic"}])
    with pytest.raises(ConfigError, match=f"'{BASE}' is served twice"):
        build({**SEPARATE, "replicas": {"cpus_per_rank": 1},
               "more_bases": [{"model": BASE, "replicas": {"cpus_per_rank": 1}}]})


def test_the_direct_mode_refuses_more_bases_and_says_why():
    with pytest.raises(ConfigError, match="more_bases needs gateway.mode separate"):
        build({"more_bases": [{"model": OTHER}]})


def test_a_further_base_is_checked_like_the_first():
    with pytest.raises(ConfigError, match="above the engine's max_lora_rank 16"):
        two_bases(adapters=[{"name": "wide", "path": "/data/wide", "rank": 64}])
    with pytest.raises(ConfigError, match="give it replicas.cpus_per_rank"):
        two_bases(replicas={"num_replicas": 1})
    with pytest.raises(ConfigError, match="more_bases must be a list"):
        build({**SEPARATE, "more_bases": OTHER})
