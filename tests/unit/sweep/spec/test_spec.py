"""Spec and price loading: every file in sweeps/, overrides, validation, fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadtest.analysis.slo import Metric, Objective, parse_slos
from loadtest.errors import ConfigError
from serving.config.model_spec import AcceleratorKind
from sweep.errors import SpecError
from sweep.measure.load_test import loadtest_config
from sweep.report.document import ReportStatus
from sweep.report.folder import ResultsFolder
from sweep.search.loop import run_sweep
from sweep.spec.files import load_price_table, load_sweep_spec
from sweep.spec.space import SearchSpace
from sweep.spec.sweep_spec import SloSpec, SweepSpec, measurement_fingerprint
from tests.paths import SWEEPS
from tests.unit.sweep.sweep_fakes import FakeClusterMeasurer, fixed_clock, make_spec

SPEC_FILES = sorted(p for p in SWEEPS.glob("*.yaml") if not p.name.startswith("prices"))


def with_overrides(spec: SweepSpec, overrides: list[str], folder: Path) -> SweepSpec:
    """``spec`` with ``--set`` overrides, through the one path they take: a spec file."""
    path = folder / f"spec-{len(list(folder.glob('spec-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return load_sweep_spec(path, overrides)


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


def test_price_table_prices_every_example_with_a_source_and_a_date():
    prices = load_price_table(SWEEPS / "prices.yaml")
    assert prices.currency == "USD"
    assert {load_sweep_spec(p).budget.accelerator for p in SPEC_FILES} <= set(prices.per_accelerator_hour)
    for entry in prices.per_accelerator_hour.values():  # a cited list price, or one that says it is assumed
        assert "on-demand list price" in entry.source or entry.source.startswith("ASSUMED")
        assert entry.as_of.startswith("20")


@pytest.mark.parametrize("entry, missing", [
    ("{per_hour: 0.05, as_of: 2025-01}", "source"),
    ("{per_hour: 0.05, source: AWS c7i.large list price}", "as_of"),
    ("{per_hour: 0.05, source: AWS c7i.large list price, as_of: January 2025}", "as_of"),
    ("0.05", "cpu"),
])
def test_a_price_without_its_source_and_date_is_a_config_error(tmp_path: Path, entry: str, missing: str):
    """Before: a bare number was a price; nothing said where it came from or when."""
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"per_accelerator_hour:\n  cpu: {entry}\n")
    with pytest.raises(SpecError, match=missing) as info:
        load_price_table(prices)
    assert "\n" not in str(info.value)  # one line


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


def test_durations_and_overrides():
    overrides = ["traffic.profile.rate_rps=4", "slo.ttft_p95=500ms", "space.tensor_parallel=[1]",
                 "space.replicas.max=null"]
    spec = load_sweep_spec(SWEEPS / "cpu-smollm2.yaml", overrides)
    assert spec.target_rps == 4.0
    assert spec.slo.ttft_p95 == pytest.approx(0.5)
    assert spec.traffic.duration_s == 60.0  # "60s" in the file
    assert spec.space.tensor_parallel == (1,)
    assert spec.space.replicas.max is None
    again = load_sweep_spec(SWEEPS / "cpu-smollm2.yaml", [*overrides, "search.strategy=grid"])
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
        ("traffic.warmup_s=-1s", "warmup_s"),
        # the traffic must be the load tester's: checked when the spec loads, not at each load test
        ("traffic.profile.name=nope", "unknown profile 'nope'; valid:"),
        ("traffic.profile.name=constant", "burstiness"),  # an open-loop profile without burstiness
        ("traffic.workload.name=nope", "unknown workload 'nope'"),
    ],
)
def test_bad_overrides_name_the_key(override: str, fragment: str):
    with pytest.raises(SpecError) as info:
        load_sweep_spec(SWEEPS / "cpu-smollm2.yaml", [override])
    assert fragment in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_slo_needs_an_objective_and_positive_limits(tmp_path: Path):
    with pytest.raises(SpecError, match="at least one objective"):
        with_overrides(
            make_spec(),
            ["slo.ttft_p95=null", "slo.tpot_p95=null", "slo.e2e_p95=null", "slo.min_goodput_share=null"],
            tmp_path,
        )
    with pytest.raises(SpecError, match="e2e_p95"):
        with_overrides(make_spec(), ["slo.e2e_p95=0"], tmp_path)


def test_the_slo_is_the_load_testers_objective_model():
    """Before: the sweep had its own Objective enum beside the load tester's Objective."""
    slo = make_spec().slo
    assert slo.per_request_objectives() == parse_slos("ttft_p95=1s,tpot_p95=50ms,e2e_p95=10s")
    assert slo.objectives == (*slo.per_request_objectives(), Objective(metric=Metric.GOODPUT_SHARE, threshold=0.9))
    assert SloSpec(e2e_p95="2s").objectives == parse_slos("e2e_p95=2s")


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
    prices.write_text("per_accelerator_hour: {cpu: {per_hour: 0.05, source: a test price, as_of: 2025-01}}\n")
    table = load_price_table(prices)
    with pytest.raises(SpecError, match="priced: cpu"):
        table.hourly(AcceleratorKind.H200)


def test_fingerprint_tracks_what_a_measurement_depends_on(tmp_path: Path):
    base = make_spec()
    same = measurement_fingerprint(base)
    assert same == measurement_fingerprint(SweepSpec.model_validate(base.model_dump()))
    # what only selects candidates does not change it
    for override in ["space.tensor_parallel=[1,2]", "budget.nodes=1", "search.strategy=grid", "prices=other.yaml"]:
        assert measurement_fingerprint(with_overrides(base, [override], tmp_path)) == same
    # what changes a measurement does
    for override in ["traffic.profile.rate_rps=11", "slo.e2e_p95=9", "model=other", "budget.accelerator=b300",
                     "traffic.workload.output_tokens=7", "budget.accelerators_per_rank=2",
                     "traffic.model_mix=zipf:1", "adapters=3"]:
        assert measurement_fingerprint(with_overrides(base, [override], tmp_path)) != same


def test_adapters_by_count_and_a_model_mix_reach_the_load_tester(tmp_path: Path):
    spec = with_overrides(make_spec(), ["adapters=2", "traffic.model_mix=zipf:1"], tmp_path)
    assert spec.adapters == ("adapter-1", "adapter-2")
    assert spec.served == ("test-model", "adapter-1", "adapter-2")
    config = loadtest_config(spec, "http://x", 1.0, 0)
    assert config.model_mix is not None and config.model_mix.shares(spec.served, "x")["test-model"] > 0.5


def test_a_bad_model_mix_is_a_spec_error_naming_it(tmp_path: Path):
    with pytest.raises(SpecError, match="model.mix"):
        with_overrides(make_spec(), ["traffic.model_mix=clinic=oops"], tmp_path)


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


def test_h200_spec_needs_more_than_the_default_client_cap():
    """Before: the cap was the load tester's 256, not settable from a spec, while
    Little's law gives ~275 requests in flight at 20 req/s x 13.75 s (TTFT 1 s + 255
    tokens x 50 ms): points near the SLO hit the cap."""
    h200 = SWEEPS / "h200-llama-70b.yaml"
    spec = load_sweep_spec(h200)
    assert spec.request_time_s() == pytest.approx(13.75)
    at_target = load_sweep_spec(h200, ["search.extra_rate_factors=[]"])
    assert at_target.in_flight_needed() == 275
    assert spec.in_flight_needed() == 344  # the 1.25 extra factor: 25 req/s
    assert spec.max_concurrency() == 1024
    with pytest.raises(SpecError, match="max_concurrency 256 is below the ~344 requests in flight"):
        load_sweep_spec(h200, ["traffic.profile.max_concurrency=256"])
    # unset: derived with room to spare (4 x Little's law), never below the load tester's 256
    derived = ["traffic.profile.max_concurrency=null"]
    assert load_sweep_spec(h200, derived).max_concurrency() == 4 * 344
    assert load_sweep_spec(SWEEPS / "cpu-smollm2.yaml").max_concurrency() == 256
    busy = load_sweep_spec(h200, [*derived, "traffic.profile.rate_rps=80"])  # ~1375 in flight
    assert busy.max_concurrency() == 4096  # the load tester's maximum
    with pytest.raises(SpecError, match="the load tester's cap of 4096 is below the ~6875"):
        load_sweep_spec(h200, [*derived, "traffic.profile.rate_rps=400"])


def test_a_load_point_is_the_load_testers_typed_config():
    """Before: the spec went back into --profile/--workload/--slo strings for a child
    `loadtest run`, whose summary.json was read back."""
    spec = load_sweep_spec(SWEEPS / "h200-llama-70b.yaml")
    config = loadtest_config(spec, "http://127.0.0.1:8000", 20.5, 7, tokenizer=Path("/m"))
    profile = config.profile
    assert (profile.kind, profile.rate, profile.burstiness, profile.max_concurrency) == ("poisson", 20.5, 1.0, 1024)
    assert (config.workload.kind, config.workload.input_len, config.workload.output_len) == ("random", 1024, 256)
    assert config.slos == parse_slos("ttft_p95=1000ms,tpot_p95=50ms,e2e_p95=15000ms")
    assert config.seed == 7 and config.tokenizer == Path("/m")
    assert config.warmup_s == spec.traffic.warmup_s
    assert config.duration_s == spec.traffic.warmup_s + spec.traffic.duration_s
    assert config.measured_window == (config.warmup_s, config.duration_s)
    assert (config.target.url, config.target.model) == ("http://127.0.0.1:8000", spec.model)
    other = load_sweep_spec(SWEEPS / "h200-llama-70b.yaml", ["traffic.profile.max_concurrency=2048"])
    assert measurement_fingerprint(other) != measurement_fingerprint(spec)
