"""LoRA adapters in the stack config: recipes or folders, the engine's LoRA settings
they turn on, and the sets refused as a whole (a FAKE resolver stands for the store)."""

from pathlib import Path

import pytest

from serving.config.adapters import AdapterSpec, adapter_problems, lora_settings_for
from serving.config.loading import build_stack_config
from serving.config.model_spec import LoraSettings, ModelCatalog
from serving.errors import ConfigError
from tests.paths import MODELS

BASE = "smollm2-135m-instruct"


def fake_resolver(spec, name):
    """Stands for AdapterStore.spec: a prepared recipe at a made-up path."""
    if name not in {r.name for r in spec.adapters}:
        raise ConfigError(f"no adapter recipe {name!r}")
    return AdapterSpec(name=name, path=Path("/adapters") / name, rank=8)


def build(data):
    return build_stack_config(data, catalog=ModelCatalog(MODELS), resolve_path=lambda n: Path("/m") / n,
                              resolve_adapter=fake_resolver)


def test_all_serves_every_recipe_and_turns_lora_on_with_its_defaults():
    config = build({"adapters": "all"})
    assert config.adapter_names == ("clinic", "pharmacy")
    assert config.served_names == (BASE, "clinic", "pharmacy")
    assert config.engine_settings.lora == LoraSettings()
    assert config.engine_settings.lora.host_slots == 16


def test_recipes_and_folders_mix_and_no_adapters_means_no_lora():
    config = build({"adapters": ["pharmacy", {"name": "admin-docs", "path": "/data/admin", "rank": 4}]})
    assert [(a.name, a.path) for a in config.adapters] == [("pharmacy", Path("/adapters/pharmacy")),
                                                           ("admin-docs", Path("/data/admin"))]
    assert build({}).engine_settings.lora is None


def test_lora_settings_never_follow_the_adapters_so_a_new_adapter_restarts_nothing():
    one = build({"adapters": ["clinic"]}).engine_settings
    two = build({"adapters": "all"}).engine_settings
    assert one == two
    given = LoraSettings(max_loras=4)
    assert lora_settings_for((), given) is given and lora_settings_for((), None) is None


@pytest.mark.parametrize("adapters, reason", [
    ([{"name": BASE, "path": "/a"}], "base model's name"),
    ([{"name": "x", "path": "/a"}, {"name": "x", "path": "/b"}], "declared twice"),
    ([{"name": "x", "path": "/a", "rank": 32}], "max_lora_rank 16"),
    ("clinic", "must be a list"),
    (["nosuch"], "no adapter recipe 'nosuch'"),
    ([{"name": "bad name", "path": "/a"}], "pattern"),
])
def test_bad_sets_are_refused_before_anything_starts(adapters, reason):
    with pytest.raises(ConfigError, match=reason):
        build({"adapters": adapters})


def test_a_recipe_without_a_store_is_a_clear_error():
    with pytest.raises(ConfigError, match="no adapter store"):
        build_stack_config({"adapters": ["clinic"]}, catalog=ModelCatalog(MODELS),
                           resolve_path=lambda n: Path("/m") / n)


def test_adapter_problems_lists_each_one():
    specs = (AdapterSpec(name=BASE, path=Path("/a")), AdapterSpec(name="x", path=Path("/b"), rank=64),
             AdapterSpec(name="x", path=Path("/c")))
    assert len(adapter_problems(specs, BASE, LoraSettings())) == 3
    assert adapter_problems(specs[1:2], BASE, None) == []  # no LoRA settings: ranks checked at load
