"""The sweep CLI's live progress and answer table, driven by a sweep over a fake measurer."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.live import Live

from sweep.cli import main
from sweep.commands.run import LiveProgress
from sweep.report.console import answer_table
from sweep.report.folder import ResultsFolder
from sweep.search.loop import run_sweep
from tests.unit.sweep.sweep_fakes import PRICES, FakeClusterMeasurer, fixed_clock, make_spec

SPEC = make_spec(rate=10.0, tp=(1, 2))


def test_progress_follows_every_trial_and_the_table_lists_every_run(tmp_path: Path):
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    measurer = FakeClusterMeasurer(slo=SPEC.slo, per_replica_rps={1: 0.7, 2: 1.6}, contention=0.01)
    with Live(console=console, auto_refresh=False) as live:
        progress = LiveProgress(live)
        report = run_sweep(SPEC, PRICES, measurer, ResultsFolder(tmp_path), clock=fixed_clock, plots=False,
                           observer=progress)
    assert len(progress.done) == report.runs_measured == len(measurer.calls) > 0
    assert progress.trial is None and len(progress.durations) == report.runs_measured
    console.print(answer_table(report))
    text = out.getvalue()
    for row in report.runs:
        assert row.candidate_id in text


def test_plan_command_reads_a_results_folder(tmp_path: Path, capsys):
    measurer = FakeClusterMeasurer(slo=SPEC.slo, per_replica_rps={1: 0.7, 2: 1.6}, contention=0.01)
    report = run_sweep(SPEC, PRICES, measurer, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    assert report.capacity
    assert main(["plan", "--results", str(tmp_path), "--traffic", "4rps", "--headroom", "0.2"]) == 0
    shown = capsys.readouterr().out
    assert "4 req/s" in shown and report.capacity[0].shape.id in shown and "20% of capacity kept spare" in shown
    assert "add a replica above" in shown
    assert main(["plan", "--results", str(tmp_path), "--traffic", "fast"]) == 2
    assert main(["plan", "--results", str(tmp_path), "--traffic", "0"]) == 2  # was a traceback
    assert main(["plan", "--results", str(tmp_path), "--traffic", "4", "--headroom", "1.5"]) == 2
