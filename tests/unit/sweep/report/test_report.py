"""Pure report rendering: report.md text and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from pydantic import ValidationError

from serving.config.model_spec import AcceleratorKind
from sweep.measure.results import MeasuredResult, RunRecord, Trial
from sweep.report.document import ReportStatus, SweepReport, build_report
from sweep.report.folder import ResultsFolder
from sweep.report.markdown import render_markdown
from sweep.report.plots import write_plots
from sweep.search.loop import run_sweep
from sweep.search.capacity_search import CapacitySearch
from sweep.spec.space import SearchSpace
from sweep.spec.sweep_spec import as_simulated
from tests.unit.sweep.sweep_fakes import PRICES, FakeClusterMeasurer, fixed_clock, make_spec

PNG = b"\x89PNG\r\n\x1a\n"


def small_spec():
    return make_spec(rate=3.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, replicas_max=2,
                     extra_rate_factors=(1.5,))


def searched_report(simulated: bool = False, **world):
    spec = as_simulated(small_spec()) if simulated else small_spec()
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(slo=spec.slo, **world)
    history: list[RunRecord] = []
    strategy = CapacitySearch()
    while (trial := strategy.next_trial(space, history)) is not None:
        history.append(RunRecord(trial=trial, result=fake.measure(trial)))
    return build_report(space, strategy.kind, history, status=ReportStatus.COMPLETE, generated_at=fixed_clock(),
                        notes=strategy.notes(space, history))


def test_markdown_has_the_answer_runs_capacity_and_assumptions():
    report = searched_report(per_replica_rps={1: 2.0, 2: 2.5})
    text = render_markdown(report)
    assert text.startswith("# Sweep `test` (complete)")
    assert "**Cheapest configuration meeting the SLO: `tp1-r2-seqsdef-mbtdef`**" in text
    assert "Runner-up: `tp2-r1-seqsdef-mbtdef`" not in text  # TP2 x 1 fails at 3 req/s
    assert "| objective | limit | observed | margin | verdict | confidence |" in text
    assert "for a grid of 3" in text
    assert "### p95 against offered rate" in text  # the probe measured two rates
    assert "## Capacity model" in text and "c1 = 1.5 req/s" in text
    assert "add a replica above req/s (10% headroom)" in text
    assert "## Assumptions" in text and "## Search notes" in text
    assert "a test price, not a quote, as of 2025-01" in text


def test_markdown_when_nothing_passes_names_the_failed_objective():
    report = searched_report(per_replica_rps={1: 2.0, 2: 2.5}, tpot_floor_s={1: 0.2, 2: 0.2})
    text = render_markdown(report)
    assert "No configuration meets the SLO; closest" in text
    assert "Failed objective(s), worst first: tpot_p95" in text
    assert "No shape met the SLO at any count" in text


def test_markdown_of_an_empty_partial_report():
    spec = make_spec()
    space = SearchSpace(spec, PRICES)
    report = build_report(space, "grid", [], status=ReportStatus.PARTIAL, generated_at=fixed_clock())
    text = render_markdown(report)
    assert "(partial)" in text and "no configuration was validly measured at the target rate" in text


def test_plots_are_pngs(tmp_path: Path):
    report = searched_report(per_replica_rps={1: 2.0, 2: 2.5})
    written = write_plots(report, tmp_path)
    assert sorted(p.name for p in written) == ["cost_vs_latency.png", "p95_vs_rate.png", "scaling.png"]
    for path in written:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


def test_plots_of_an_empty_report_skip_the_rate_plot(tmp_path: Path):
    spec = make_spec()
    space = SearchSpace(spec, PRICES)
    report = build_report(space, "grid", [], status=ReportStatus.PARTIAL, generated_at=fixed_clock())
    assert sorted(p.name for p in write_plots(report, tmp_path)) == ["cost_vs_latency.png", "scaling.png"]


def test_an_invalid_measurement_is_a_warning_and_shown_as_such():
    report = searched_report(per_replica_rps={1: 2.0, 2: 2.5})
    run = report.run("tp1-r2-seqsdef-mbtdef")
    assert run is not None and run.target is not None
    point = run.target.point.model_copy(update={"invalid_reasons": ("load generator CPU-saturated",)})
    rec = RunRecord(
        trial=Trial(candidate=run.candidate, offered_rates=(point.offered_rps,)),
        result=MeasuredResult(status=run.status, points=(point,)),
    )
    again = build_report(SearchSpace(report.spec, PRICES), "grid", [rec], status=ReportStatus.PARTIAL,
                         generated_at=fixed_clock())
    assert any("invalid measurement (load generator CPU-saturated)" in w for w in again.warnings)
    text = render_markdown(again)
    assert "## Warnings" in text and "invalid: load generator CPU-saturated" in text


def test_scaling_section_reports_replica_and_tensor_parallel_efficiency():
    report = searched_report(per_replica_rps={1: 2.0, 2: 4.5})
    text = render_markdown(report)
    assert "## Scaling efficiency" in text
    assert "### Tensor parallel, per accelerator (against the smallest TP)" in text
    # one TP1 replica: 1.5 req/s (fails at 3); two: 3 (fail at 4.5); one TP2 (2 cores): 3, probed there only
    assert [(s.kind.value, s.candidate_id, s.base_id, s.speedup, s.ideal_speedup, s.efficiency,
             s.efficiency_low, s.efficiency_high) for s in report.scaling] == [
        ("replicas", "tp1-r2-seqsdef-mbtdef", "tp1-r1-seqsdef-mbtdef", 2.0, 2, 1.0, 0.5, 1.5),
        ("tensor-parallel", "tp2-r1-seqsdef-mbtdef", "tp1-r1-seqsdef-mbtdef", 2.0, 2, 1.0, 0.5, None),
    ]
    assert ("| `tp2-r1-seqsdef-mbtdef` | `tp1-r1-seqsdef-mbtdef` | 2 vs 1 | 3 vs 1.5 | 2.00x | 2x | "
            "1.00 (0.50 to ?) |") in text


def png_title(path: Path) -> str:
    """The ``Title`` text chunk of a PNG written by the plots."""
    with Image.open(path) as image:
        return image.text["Title"]


def test_a_simulated_report_says_so_in_its_title_and_under_it():
    report = searched_report(simulated=True, per_replica_rps={1: 2.0, 2: 2.5})
    assert report.simulated
    title, blank, caveat, *_ = render_markdown(report).splitlines()
    assert (title, blank) == ("# SIMULATED sweep `test` (complete)", "")
    assert caveat.startswith("> **SIMULATED, not measured: every figure comes from the simulator (hardware "
                             "profile 'cpu'")
    measured = searched_report(per_replica_rps={1: 2.0, 2: 2.5})
    assert not measured.simulated and "SIMULATED" not in render_markdown(measured)


def test_the_plots_of_a_simulated_report_are_titled_simulated(tmp_path: Path):
    simulated = searched_report(simulated=True, per_replica_rps={1: 2.0, 2: 2.5})
    titles = {p.name: png_title(p) for p in write_plots(simulated, tmp_path / "sim")}
    assert titles == {"cost_vs_latency.png": "SIMULATED: test: cost vs latency (filled = meets the SLO)",
                      "scaling.png": "SIMULATED: test: capacity and scaling",
                      "p95_vs_rate.png": "SIMULATED: test: p95 vs offered rate"}
    measured = searched_report(per_replica_rps={1: 2.0, 2: 2.5})
    assert [png_title(p) for p in write_plots(measured, tmp_path / "real")] == [
        "test: cost vs latency (filled = meets the SLO)", "test: capacity and scaling", "test: p95 vs offered rate"]


def test_the_simulated_flag_follows_the_spec_and_cannot_contradict_it():
    simulated = searched_report(simulated=True, per_replica_rps={1: 2.0, 2: 2.5})
    raw = json.loads(simulated.model_dump_json())
    assert raw["simulated"] is True and SweepReport.model_validate(raw) == simulated
    del raw["simulated"]  # a report written before the field existed: its spec says
    assert SweepReport.model_validate(raw).simulated
    with pytest.raises(ValidationError, match="contradicts the spec, which is simulated"):
        SweepReport.model_validate({**raw, "simulated": False})
    measured = json.loads(searched_report(per_replica_rps={1: 2.0, 2: 2.5}).model_dump_json())
    with pytest.raises(ValidationError, match="contradicts the spec, which is measured"):
        SweepReport.model_validate({**measured, "simulated": True})


def test_the_loop_writes_a_simulated_sweep_as_simulated(tmp_path: Path):
    spec = as_simulated(small_spec())
    report = run_sweep(spec, PRICES, FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 2.0, 2: 2.5}),
                       ResultsFolder(tmp_path), clock=fixed_clock)
    assert report.simulated and ResultsFolder(tmp_path).read_report().simulated
    assert report.warnings[0].startswith("SIMULATED, not measured")
    assert (tmp_path / "report.md").read_text().startswith("# SIMULATED sweep `test` (complete)\n\n> **SIMULATED")
    assert all(png_title(p).startswith("SIMULATED: test: ") for p in (tmp_path / "plots").glob("*.png"))
    assert len(list((tmp_path / "plots").glob("*.png"))) == 3
