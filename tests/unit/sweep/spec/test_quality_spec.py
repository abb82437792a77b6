"""The spec's quality section and the dtype axis: parsing, errors, ids, fingerprint, deployment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serving.config.model_spec import AcceleratorKind, Dtype, ModelCatalog
from sweep.errors import SpecError
from sweep.measure.deployment import simulation_config_for, stack_config_for
from sweep.spec.files import load_sweep_spec, probe_items
from sweep.spec.quality import QualitySpec
from sweep.spec.space import DeploymentCandidate, EngineKnobs, SearchSpace, reference_shape
from sweep.spec.sweep_spec import measurement_fingerprint
from tests.paths import MODELS, SWEEPS
from tests.unit.sweep.sweep_fakes import PRICES, make_spec

CATALOG = ModelCatalog(MODELS)


def write_spec(folder: Path, **sections) -> Path:
    """The committed CPU spec with ``sections`` replaced, as a file in ``folder``."""
    document = yaml.safe_load((SWEEPS / "cpu-smollm2.yaml").read_text())
    document["prices"] = str(SWEEPS / "prices.yaml")
    document.update(sections)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def space_with_dtypes() -> dict:
    return {"tensor_parallel": [1], "replicas": {"min": 1, "max": 2}, "dtype": ["float32", "bfloat16"]}


def test_the_dtype_axis_names_its_candidates_and_doubles_the_grid(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, space=space_with_dtypes()))
    ids = [c.id for c in SearchSpace(spec, PRICES).grid()]
    assert sorted(ids) == ["tp1-r1-seqsdef-mbtdef-bfloat16", "tp1-r1-seqsdef-mbtdef-float32",
                           "tp1-r2-seqsdef-mbtdef-bfloat16", "tp1-r2-seqsdef-mbtdef-float32"]
    assert DeploymentCandidate(tp=1, replicas=1).id == "tp1-r1-seqsdef-mbtdef"  # unset: the ids of before


def test_a_candidate_deploys_and_simulates_with_its_dtype():
    spec = make_spec(accelerator=AcceleratorKind.CPU, dtype=(Dtype.BFLOAT16,)).model_copy(
        update={"model": "smollm2-135m-instruct"})
    assert CATALOG.get("smollm2-135m-instruct").dtype is Dtype.FLOAT32
    bf16 = DeploymentCandidate(tp=1, replicas=1, engine=EngineKnobs(dtype=Dtype.BFLOAT16))
    config = stack_config_for(bf16, spec, catalog=CATALOG, model_path=Path("/m"), port=8000)
    assert config.model.dtype is Dtype.BFLOAT16
    assert simulation_config_for(bf16, spec, CATALOG, MODELS).dtype is Dtype.BFLOAT16
    plain = stack_config_for(DeploymentCandidate(tp=1, replicas=1), spec, catalog=CATALOG, model_path=Path("/m"),
                             port=8000)
    assert plain.model.dtype is Dtype.FLOAT32  # None keeps the model spec's


def test_quality_defaults_take_a_subset_of_the_bundled_set_in_every_category(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, space=space_with_dtypes(), quality={"items": 20}))
    assert spec.quality == QualitySpec(items=20)
    items = probe_items(spec)
    assert len(items) == 20 and len({i.category for i in items}) >= 4
    assert probe_items(spec) == items  # the same items for every candidate
    assert reference_shape(spec).id == "tp1-seqsdef-mbtdef-float32"  # first: the lists' first values


def test_a_reference_may_name_a_candidate_or_a_shape(tmp_path):
    for name in ("tp1-r2-seqsdef-mbtdef-bfloat16", "tp1-seqsdef-mbtdef-bfloat16"):
        spec = load_sweep_spec(write_spec(tmp_path, space=space_with_dtypes(), quality={"reference": name}))
        assert reference_shape(spec).engine.dtype is Dtype.BFLOAT16


@pytest.mark.parametrize("quality, message", [
    ({"reference": "tp1-r1-seqsdef-mbtdef-float16"}, "quality.reference 'tp1-r1-seqsdef-mbtdef-float16' is not a "
                                                     "candidate of the space"),
    ({"reference": "tp1-r3-seqsdef-mbtdef-float32"}, "is not a candidate of the space"),
    ({"tolerance": 1.5}, "quality.tolerance: Input should be less than 1"),
    ({"tolerance": -0.01}, "quality.tolerance: Input should be greater than or equal to 0"),
    ({"items": 0}, "quality.items: Input should be greater than 0"),
    ({"set": "missing.jsonl"}, "quality.set: items file"),
    ({"sets": "typo.jsonl"}, "quality.sets: Extra inputs are not permitted"),
])
def test_bad_quality_sections_are_spec_errors_naming_the_key(tmp_path, quality, message):
    with pytest.raises(SpecError, match="^") as caught:
        load_sweep_spec(write_spec(tmp_path, space=space_with_dtypes(), quality=quality))
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_probe_set_that_does_not_parse_is_a_spec_error_naming_the_line(tmp_path):
    (tmp_path / "probe.jsonl").write_text(
        '{"id": "a", "category": "facts", "source": "test", "prompt": "1+1?", "number": 2}\n{"id": "b", oops\n')
    with pytest.raises(SpecError, match=r"quality.set: .*probe.jsonl, line 2: not JSON"):
        load_sweep_spec(write_spec(tmp_path, quality={"set": "probe.jsonl"}))  # relative to the spec file


def test_a_first_reference_that_does_not_fit_the_budget_is_refused(tmp_path):
    space = {"tensor_parallel": [4, 1], "replicas": {"min": 1, "max": 2}}
    with pytest.raises(SpecError, match=r"quality.reference first \(tp4-seqsdef-mbtdef\) does not fit the budget"):
        load_sweep_spec(write_spec(tmp_path, space=space, quality={}))


def test_the_probe_size_changes_the_fingerprint_the_tolerance_does_not():
    base = make_spec()
    graded = base.model_copy(update={"quality": QualitySpec(items=50)})
    assert measurement_fingerprint(base) != measurement_fingerprint(graded)
    assert measurement_fingerprint(graded) != measurement_fingerprint(
        base.model_copy(update={"quality": QualitySpec(items=60)}))
    assert measurement_fingerprint(graded) == measurement_fingerprint(
        base.model_copy(update={"quality": QualitySpec(items=50, tolerance=0.05, reference="tp1-seqsdef-mbtdef")}))
