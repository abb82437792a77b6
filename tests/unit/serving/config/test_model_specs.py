
import pytest

from serving.config.model_spec import AcceleratorKind, ModelCatalog, load_model_spec
from serving.errors import ConfigError
from serving.model_store import models_dir
from tests.paths import MODELS  # noqa: E402


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_model_file_loads(path):
    spec = load_model_spec(path)
    assert path.stem == spec.name
    assert spec.max_model_len >= 16


def test_catalog_has_default_cpu_model_and_two_h200_specs():
    catalog = ModelCatalog(MODELS)
    default = catalog.get("smollm2-135m-instruct")
    assert default.accelerator is AcceleratorKind.CPU and default.tested_here
    h200 = [s for s in catalog.specs() if s.accelerator is AcceleratorKind.H200]
    assert len(h200) >= 2
    assert not any(s.tested_here for s in h200)
    assert {s.tensor_parallel_size for s in h200} >= {1, 4}


def test_unknown_model_lists_known_names():
    with pytest.raises(ConfigError, match="smollm2-135m-instruct"):
        ModelCatalog(MODELS).get("nope")


def test_unknown_field_in_spec_is_an_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((MODELS / "smollm2-135m-instruct.yaml").read_text() + "\nbogus: 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        load_model_spec(bad)


def test_model_specs_come_from_the_repository_unless_the_environment_names_a_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("SERVEOUT_MODELS_DIR", raising=False)
    assert models_dir() == MODELS
    monkeypatch.setenv("SERVEOUT_MODELS_DIR", str(tmp_path))
    assert models_dir() == tmp_path
