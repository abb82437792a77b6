"""Results folder persistence and resume, driven through run_sweep with fake measurers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest

from loadtest.registry import Registry
from serving.config.model_spec import AcceleratorKind
from sweep.analysis.selection import AnswerKind
from sweep.errors import ResultsFolderError, SweepAborted, SweepError
from sweep.measure.results import MeasuredResult, RunStatus, Trial
from sweep.report.document import ReportStatus
from sweep.report.folder import ResultsFolder, atomic_write_text
from sweep.search.loop import run_sweep
from sweep.spec.sweep_spec import measurement_fingerprint
from tests.unit.sweep.sweep_fakes import PRICES, FakeClusterMeasurer, InterruptingMeasurer, fixed_clock, make_spec

SPEC = make_spec(rate=10.0, tp=(1, 2, 4, 8))


def world() -> FakeClusterMeasurer:
    return FakeClusterMeasurer(
        slo=SPEC.slo, per_replica_rps={1: 0.7, 2: 1.6, 4: 3.5, 8: 6.0}, contention=0.01, tpot_floor_s={1: 0.08}
    )


def sweep(folder: Path, measurer, **kwargs):
    return run_sweep(SPEC, PRICES, measurer, ResultsFolder(folder), clock=fixed_clock, plots=False, **kwargs)


def comparable(report) -> list[tuple]:
    return [(r.candidate_id, r.status, r.points, r.outcome_at_target) for r in report.runs]


def test_rerun_reuses_every_finished_candidate(tmp_path: Path):
    first_world = world()
    first = sweep(tmp_path, first_world)
    assert first.status is ReportStatus.COMPLETE and first.answer.best == "tp4-r3-seqsdef-mbtdef"
    assert first.runs_measured == 10 == len(first_world.calls) and first.runs_reused == 0
    runs = sorted(p.name for p in (tmp_path / "runs" / measurement_fingerprint(SPEC)).glob("*.json"))
    assert len(runs) == 10 and "tp4-r3-seqsdef-mbtdef.json" in runs

    again_world = world()
    again = sweep(tmp_path, again_world)
    assert again_world.calls == []
    assert again.runs_reused == 10 and again.runs_measured == 0
    assert comparable(again) == comparable(first) and again.answer == first.answer


def test_ctrl_c_leaves_a_valid_partial_report_and_resume_completes(tmp_path: Path):
    reference = sweep(tmp_path / "ref", world())
    with pytest.raises(KeyboardInterrupt):
        sweep(tmp_path / "run", InterruptingMeasurer(world(), at=4))
    partial = ResultsFolder(tmp_path / "run").read_report()
    assert partial.status is ReportStatus.INTERRUPTED
    assert [r.candidate_id for r in partial.runs] == [r.candidate_id for r in reference.runs[:3]]
    assert (tmp_path / "run" / "report.md").read_text().startswith("# Sweep `test` (interrupted)")

    resumed_world = world()
    resumed = sweep(tmp_path / "run", resumed_world)
    assert [t.candidate.id for t in resumed_world.calls] == [r.candidate_id for r in reference.runs[3:]]
    assert resumed.runs_reused == 3 and resumed.runs_measured == 7
    assert comparable(resumed) == comparable(reference) and resumed.answer == reference.answer


def test_partly_written_folder_resumes_cleanly(tmp_path: Path):
    reference = sweep(tmp_path, world())
    runs_dir = tmp_path / "runs" / measurement_fingerprint(SPEC)
    # a writer killed mid-write leaves a truncated temp file ...
    (runs_dir / ".tp4-r3-seqsdef-mbtdef.json.abc123.tmp").write_text('{"kind": "serveout.sweep.ru')
    # ... and a damaged final file (e.g. a disk problem) is not trusted
    damaged = runs_dir / "tp2-r7-seqsdef-mbtdef.json"
    damaged.write_text(damaged.read_text()[:100])
    # and a sweep killed before its last run never wrote that run
    (runs_dir / "tp4-r3-seqsdef-mbtdef.json").unlink()

    resumed_world = world()
    resumed = sweep(tmp_path, resumed_world)
    assert sorted(t.candidate.id for t in resumed_world.calls) == ["tp2-r7-seqsdef-mbtdef", "tp4-r3-seqsdef-mbtdef"]
    assert not list(tmp_path.rglob("*.tmp"))
    assert any("tp2-r7-seqsdef-mbtdef.json: unreadable" in w for w in resumed.warnings)
    assert comparable(resumed) == comparable(reference)
    json.loads(damaged.read_text())  # rewritten whole


def test_failures_are_recorded_with_reasons_and_not_retried_unless_asked(tmp_path: Path):
    spec_world = world()
    spec_world.deploy_failures = {"tp8-r1-seqsdef-mbtdef": "placement group for TP8 never became ready"}
    spec_world.crashes = {"tp2-r8-seqsdef-mbtdef": "engine died: CUDA OOM"}
    report = sweep(tmp_path, spec_world)
    rows = {r.candidate_id: r for r in report.runs}
    assert rows["tp8-r1-seqsdef-mbtdef"].status is RunStatus.FAILED_TO_DEPLOY
    assert rows["tp8-r1-seqsdef-mbtdef"].reason == "placement group for TP8 never became ready"
    assert rows["tp2-r8-seqsdef-mbtdef"].status is RunStatus.CRASHED
    assert report.answer.kind is AnswerKind.PASSING  # the sweep went on

    again = world()
    sweep(tmp_path, again)
    assert again.calls == []  # failures are results too
    retry = world()
    sweep(tmp_path, retry, retry_failed=True)
    assert {t.candidate.id for t in retry.calls} >= {"tp8-r1-seqsdef-mbtdef", "tp2-r8-seqsdef-mbtdef"}


class ExplodingMeasurer:
    """FAKE measurer that raises for one candidate."""

    def __init__(self, inner: FakeClusterMeasurer, boom: str) -> None:
        self.inner, self.boom = inner, boom

    def measure(self, trial: Trial) -> MeasuredResult:
        if trial.candidate.id == self.boom:
            raise RuntimeError("health check timed out")
        return self.inner.measure(trial)


def test_a_measurer_exception_is_a_tool_error_and_the_sweep_goes_on(tmp_path: Path):
    report = sweep(tmp_path, ExplodingMeasurer(world(), "tp4-r1-seqsdef-mbtdef"))
    row = report.run("tp4-r1-seqsdef-mbtdef")
    assert row is not None and row.status is RunStatus.TOOL_ERROR
    assert row.reason == "measurer raised RuntimeError: health check timed out"
    assert report.status is ReportStatus.COMPLETE


class AbortingMeasurer:
    """FAKE measurer that aborts the sweep on its second call."""

    def __init__(self) -> None:
        self.inner, self.calls = world(), 0

    def measure(self, trial: Trial) -> MeasuredResult:
        self.calls += 1
        if self.calls == 2:
            raise SweepAborted("the Ray cluster went away")
        return self.inner.measure(trial)


def test_abort_writes_an_aborted_report(tmp_path: Path):
    with pytest.raises(SweepAborted):
        sweep(tmp_path, AbortingMeasurer())
    report = ResultsFolder(tmp_path).read_report()
    assert report.status is ReportStatus.ABORTED and len(report.runs) == 1
    assert any("Ray cluster went away" in w for w in report.warnings)


def test_other_traffic_neither_reuses_nor_overwrites(tmp_path: Path):
    sweep(tmp_path, world())
    other = SPEC.model_copy(update={"traffic": SPEC.traffic.model_copy(update={"seed": 1})})
    fake = world()
    run_sweep(other, PRICES, fake, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    assert len(fake.calls) == 10
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_grid_after_search_reuses_what_covers_it(tmp_path: Path):
    sweep(tmp_path, world())
    grid_spec = SPEC.model_copy(update={"search": SPEC.search.model_copy(update={"strategy": "grid"})})
    fake = world()
    report = run_sweep(grid_spec, PRICES, fake, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    assert report.runs_reused == 10 and len(fake.calls) == report.grid_size - 10
    assert report.answer.best == "tp4-r3-seqsdef-mbtdef"


class RepeatingStrategy:
    """A buggy strategy that proposes the same trial forever."""

    kind: ClassVar[str] = "repeat"

    def next_trial(self, space, history):
        return Trial(candidate=space.grid()[0], offered_rates=(space.target_rps,))

    def notes(self, space, history):
        return ()


def test_a_strategy_repeating_itself_is_stopped(tmp_path: Path):
    spec = SPEC.model_copy(update={"search": SPEC.search.model_copy(update={"strategy": "repeat"})})
    with pytest.raises(SweepError, match="proposed tp1-r1"):
        run_sweep(spec, PRICES, world(), ResultsFolder(tmp_path), registry=Registry("strategy", [RepeatingStrategy]),
                  clock=fixed_clock, plots=False)


def test_report_round_trip_and_schema_checks(tmp_path: Path):
    report = sweep(tmp_path, world())
    folder = ResultsFolder(tmp_path)
    assert folder.read_report() == report
    raw = json.loads(folder.report_path.read_text())
    assert raw["kind"] == "serveout.sweep" and raw["schema_version"] == 3
    assert raw["answer"]["best"] == "tp4-r3-seqsdef-mbtdef"
    raw["schema_version"] = 2
    folder.report_path.write_text(json.dumps(raw))
    with pytest.raises(ResultsFolderError, match="schema version 2.*rebuilds it from the stored runs"):
        folder.read_report()
    folder.report_path.write_text("{}")
    with pytest.raises(ResultsFolderError, match="not a serveout sweep report"):
        folder.read_report()
    with pytest.raises(ResultsFolderError, match="cannot read"):
        ResultsFolder(tmp_path / "empty").read_report()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ResultsFolderError, match="is a file"):
        ResultsFolder(tmp_path / "file")


def test_atomic_write_keeps_the_old_file_when_replace_fails(tmp_path: Path, monkeypatch):
    target = tmp_path / "sweep.json"
    atomic_write_text(target, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]


def test_cpu_sweep_with_tp2_refused(tmp_path: Path):
    spec = make_spec(rate=3.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, replicas_max=2)
    fake = FakeClusterMeasurer(
        slo=spec.slo, per_replica_rps={1: 2.0, 2: 3.5},
        deploy_failures={"tp2-r1-seqsdef-mbtdef": "Total number of attention heads (9) must be divisible by "
                                                  "tensor parallel size (2)"},
    )
    report = run_sweep(spec, PRICES, fake, ResultsFolder(tmp_path), clock=fixed_clock, plots=True)
    assert report.answer.best == "tp1-r2-seqsdef-mbtdef" and report.runs_needed == 3 == report.grid_size
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "cost_vs_latency.png", "p95_vs_rate.png", "scaling.png",
    ]
