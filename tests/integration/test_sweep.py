"""A short real sweep: two configurations of the default model (1 and 2 replicas),
deployed through serving's app builder, load-tested through the load tester's typed
API (its generator in child processes), each then graded on a small quality probe on
the same deployment, then resumed without re-running anything."""

from __future__ import annotations

import json

import pytest
import yaml

from sweep.measure.serveout import ServeoutMeasurer
from sweep.report.folder import ResultsFolder
from sweep.search.loop import run_sweep
from sweep.spec.files import load_price_table, load_sweep_spec
from tests.integration.settings import SWEEP_SPEC as SPEC

pytestmark = pytest.mark.integration


class CountingMeasurer:
    """Wraps the real measurer and counts the trials it is asked to measure."""

    def __init__(self, inner: ServeoutMeasurer) -> None:
        self.inner, self.calls = inner, 0

    def measure(self, trial):
        self.calls += 1
        return self.inner.measure(trial)


PROBE_ITEMS = 5  # taken in turn from each category of the bundled set: one of each of its five


def test_sweep_end_to_end_then_resume(stack, tmp_path):
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump({**SPEC, "quality": {"items": PROBE_ITEMS, "tolerance": 0.02}}))
    spec = load_sweep_spec(spec_path)
    prices = load_price_table(spec.prices)
    out = tmp_path / "results"
    stack.config = None  # the sweep redeploys the app; later tests must redeploy theirs
    measurer = CountingMeasurer(ServeoutMeasurer(spec, stack.cluster, catalog=stack.catalog,
                                                 artifacts=out / "loadtests"))
    with measurer.inner:  # the 2-replica candidate is deployed over the 1-replica one: one engine more
        first = run_sweep(spec, prices, measurer, ResultsFolder(out))
    assert measurer.calls == 2 and first.runs_measured == 2
    assert first.status.value == "complete"
    ok_runs = [r for r in first.runs if r.status.value == "ok"]
    assert {r.candidate.replicas for r in ok_runs} == {1, 2}, [(r.candidate_id, r.reason) for r in first.runs]
    for row in ok_runs:
        assert row.accelerators == row.candidate.replicas
        assert row.throughput_output_tokens_per_s > 0 and row.cost_per_million_output_tokens > 0
        assert all(p.point.seeds and p.point.arrival_rps for p in row.points)  # sampled, judged at the rate sent
    assert first.answer.best in {r.candidate_id for r in ok_runs}
    reference = "tp1-r1-seqsdef-mbtdef"  # `first`: the model spec's float32, one replica
    for row in ok_runs:  # float32 answers every item of the set (it was built so)
        quality = row.quality
        assert quality.score.items == PROBE_ITEMS and quality.score.correct == PROBE_ITEMS, quality.explanation
        assert quality.reference_id == reference and quality.errors == 0 and quality.changed == 0
        assert quality.status.value == ("reference" if row.candidate_id == reference else "accepted")
    assert first.answer.refused == () and f"quality 100.0% ({PROBE_ITEMS}/{PROBE_ITEMS})" in first.answer.explanation
    stored = ResultsFolder(out).load_runs(first.fingerprint).records  # runs/*.json: the probe's wall time too
    assert all(rec.result.quality.wall_time_s > 0 for rec in stored) and len(stored) == 2
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["kind"] == "serveout.sweep" and len(saved["runs"]) == 2
    assert (out / "report.md").read_text().count("tp1-r") >= 2 and "## Quality" in (out / "report.md").read_text()
    assert list((out / "plots").glob("*.png"))
    assert len(list((out / "loadtests").glob("*/summary.json"))) >= 2

    again = CountingMeasurer(measurer.inner)
    resumed = run_sweep(spec, prices, again, ResultsFolder(out))
    assert again.calls == 0
    assert resumed.runs_reused == 2 and resumed.runs_measured == 0
    assert resumed.answer.best == first.answer.best
    assert [r.quality for r in resumed.runs] == [r.quality for r in first.runs]  # stored with the runs
