"""Spec and price loading: every file in sweeps/, overrides, validation, fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.errors import ConfigError
from loadtest.sweep import (
    ReportStatus,
    ResultsFolder,
    SearchSpace,
    SpecError,
    SweepSpec,
    apply_overrides,
    load_price_table,
    load_sweep_spec,
    measurement_fingerprint,
    run_sweep,
)
from serving.config.model_spec import AcceleratorKind

from sweep_fakes import FakeClusterMeasurer, fixed_clock, make_spec

SWEEPS = Path(__file__).resolve().parents[3] / "sweeps"
SPEC_FILES = sorted(p for p in SWEEPS.glob("*.yaml") if not p.name.startswith("prices"))


def test_sweeps_folder_has_the_example_specs():
    names = {p.name for p in SWEEPS.glob("*.yaml")}
    assert {"prices.yaml", "cpu-smollm2.yaml", "h200-llama-70b.yaml"} <= names


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.name)
def test_every_sweep_spec_loads_with_its_prices(path: Path):
    spec = load_sweep_spec(path)
    assert spec.prices.is_absolute() and spec.prices.is_file()
    prices = load_price_table(spec.prices)
    space = SearchSpace(spec, prices)
    assert space.grid_size >= 1
    assert all(space.accelerators(c) <= spec.budget.total for c in space.grid())


def test_price_table_ships_every_accelerator_kind():
    prices = load_price_table(SWEEPS / "prices.yaml")
    assert set(prices.per_accelerator_hour) == set(AcceleratorKind)
    assert prices.currency == "USD"


def test_cpu_example_is_this_machine():
    spec = load_sweep_spec(SWEEPS / "cpu-smollm2.yaml")
    assert spec.tested_here and spec.budget.accelerator is AcceleratorKind.CPU
    assert spec.budget.total == 2
    space = SearchSpace(spec, load_price_table(spec.prices))
    assert [c.id for c in space.grid()] == ["tp1-r1-seqsdef-mbtdef", "tp1-r2-seqsdef-mbtdef", "tp2-r1-seqsdef-mbtdef"]


def test_h200_example_is_a_24_gpu_space_documented_untested():
    spec = load_sweep_spec(SWEEPS / "h200-llama-70b.yaml")
    assert not spec.tested_here
    assert spec.budget.total == 24 and spec.budget.accelerator is AcceleratorKind.H200
    space = SearchSpace(spec, load_price_table(spec.prices))
    # TP2: 12 replicas, TP4: 6, TP8: 3; two max_num_seqs values each
    assert space.grid_size == (12 + 6 + 3) * 2


def test_durations_and_overrides(tmp_path: Path):
    spec = load_sweep_spec(
        SWEEPS / "cpu-smollm2.yaml",
        ["traffic.profile.rate_rps=4", "slo.ttft_p95=500ms", "space.tensor_parallel=[1]", "space.replicas.max=null"],
    )
    assert spec.target_rps == 4.0
    assert spec.slo.ttft_p95 == pytest.approx(0.5)
    assert spec.traffic.duration_s == 60.0  # "60s" in the file
    assert spec.space.tensor_parallel == (1,)
    assert spec.space.replicas.max is None
    again = apply_overrides(spec, ["search.strategy=grid"])
    assert again.search.strategy == "grid" and again.traffic == spec.traffic


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("traffic.profile.rate=4", "rate"),  # unknown key
        ("traffic.profile.rate_rps=-1", "rate_rps"),
        ("slo.ttft_p95=fast", "ttft_p95"),
        ("space.tensor_parallel=[1,1]", "duplicates"),
        ("no-equals-sign", "key.path=value"),
        ("model.name=x", "model is a value"),
        ("space.replicas.min=3", "replicas"),  # min > max 2
    ],
)
def test_bad_overrides_name_the_key(override: str, fragment: str):
    with pytest.raises(SpecError) as info:
        load_sweep_spec(SWEEPS / "cpu-smollm2.yaml", [override])
    assert fragment in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_slo_needs_an_objective_and_positive_limits():
    with pytest.raises(SpecError, match="at least one objective"):
        apply_overrides(
            make_spec(), ["slo.ttft_p95=null", "slo.tpot_p95=null", "slo.e2e_p95=null", "slo.min_goodput_share=null"]
        )
    with pytest.raises(SpecError):
        apply_overrides(make_spec(), ["slo.e2e_p95=0"])


def test_slo_as_load_tester_string():
    spec = make_spec()
    assert spec.slo.as_loadtest_slo() == "ttft_p95=1000ms,tpot_p95=50ms,e2e_p95=10000ms"


def test_missing_or_broken_files_are_spec_errors(tmp_path: Path):
    with pytest.raises(SpecError, match="cannot read"):
        load_sweep_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(SpecError, match="mapping"):
        load_sweep_spec(bad)
    prices = tmp_path / "prices.yaml"
    prices.write_text("per_accelerator_hour: {tpu: 1.0}\n")
    with pytest.raises(SpecError, match="price table"):
        load_price_table(prices)


def test_unpriced_accelerator_is_an_error_listing_priced_ones(tmp_path: Path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("per_accelerator_hour: {cpu: 0.05}\n")
    table = load_price_table(prices)
    with pytest.raises(SpecError, match="priced: cpu"):
        table.hourly(AcceleratorKind.H200)


def test_fingerprint_tracks_what_a_measurement_depends_on():
    base = make_spec()
    same = measurement_fingerprint(base)
    assert same == measurement_fingerprint(SweepSpec.model_validate(base.model_dump()))
    # what only selects candidates does not change it
    for override in ["space.tensor_parallel=[1,2]", "budget.nodes=1", "search.strategy=grid", "prices=other.yaml"]:
        assert measurement_fingerprint(apply_overrides(base, [override])) == same
    # what changes a measurement does
    for override in ["traffic.profile.rate_rps=11", "slo.e2e_p95=9", "model=other", "budget.accelerator=b300",
                     "traffic.workload.output_tokens=7", "budget.accelerators_per_rank=2"]:
        assert measurement_fingerprint(apply_overrides(base, [override])) != same


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.name)
def test_every_sweep_spec_runs_through_the_same_code_path(path: Path, tmp_path: Path):
    """Each example spec, H200 included, is searched end to end against a FAKE measurer."""
    spec = load_sweep_spec(path)
    prices = load_price_table(spec.prices)
    per_replica = {tp: 0.3 * spec.target_rps * tp for tp in spec.space.tensor_parallel}
    fake = FakeClusterMeasurer(slo=spec.slo, per_replica_rps=per_replica, contention=0.02)
    report = run_sweep(spec, prices, fake, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    assert report.status is ReportStatus.COMPLETE
    assert 1 <= report.runs_needed <= report.grid_size
    assert ResultsFolder(tmp_path).read_report() == report
