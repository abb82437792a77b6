"""The quality gate: the Wilson lower-bound rule, the reference, refusals in the answer,
simulated sweeps, and the search not pruning on a refused run."""

from __future__ import annotations

import pytest

from loadtest.quality.wilson import wilson_interval
from serving.config.model_spec import AcceleratorKind, Dtype
from sweep.analysis.quality import QualityStatus, judge_quality
from sweep.analysis.rows import build_rows
from sweep.analysis.selection import AnswerKind, choose
from sweep.measure.results import MeasuredResult, RunRecord, RunStatus, Trial
from sweep.report.document import ReportStatus, build_report
from sweep.report.folder import ResultsFolder
from sweep.report.markdown import render_markdown
from sweep.search.loop import run_sweep
from sweep.spec.quality import QualitySpec
from sweep.spec.space import DeploymentCandidate, EngineKnobs, SearchSpace
from sweep.spec.sweep_spec import as_simulated
from tests.unit.sweep.sweep_fakes import (
    PRICES,
    SLO,
    FakeClusterMeasurer,
    FakeQualityMeasurer,
    failing_point,
    fixed_clock,
    graded,
    make_spec,
    passing_point,
)

F32, BF16 = Dtype.FLOAT32, Dtype.BFLOAT16
SPEC = make_spec(rate=2.0, accelerator=AcceleratorKind.CPU, nodes=1, per_node=4, dtype=(F32, BF16),
                 quality=QualitySpec(items=100, tolerance=0.02))
SPACE = SearchSpace(SPEC, PRICES)


def run(dtype: Dtype, replicas: int, point, quality=None, status=RunStatus.OK) -> RunRecord:
    candidate = DeploymentCandidate(tp=1, replicas=replicas, engine=EngineKnobs(dtype=dtype))
    result = MeasuredResult(status=status, reason=None if status is RunStatus.OK else "broken",
                            points=(point,) if status is RunStatus.OK else (), quality=quality)
    return RunRecord(trial=Trial(candidate=candidate, offered_rates=(2.0,)), result=result)


def verdicts(*records: RunRecord):
    return judge_quality(SPACE, records)


@pytest.mark.parametrize("correct, status", [(100, "reference"), (99, "accepted"), (98, "refused"), (94, "refused")])
def test_a_run_is_refused_when_its_lower_bound_is_more_than_the_tolerance_below_the_references(correct, status):
    reference = run(F32, 1, passing_point(2.0), graded(100, 100))
    other = run(BF16, 1, passing_point(2.0), graded(100, correct)) if correct < 100 else reference
    verdict = verdicts(reference, other)[other.candidate.id]
    assert verdict.status.value == status
    bar = wilson_interval(100, 100).low - 0.02  # 96.3% - 2 pts
    assert (verdict.score.low >= bar) == (status in ("reference", "accepted"))


def test_the_refusal_says_by_how_much_and_which_answers_changed():
    reference = run(F32, 1, passing_point(2.0), graded(314, 312))
    bf16 = run(BF16, 1, passing_point(2.0), graded(314, 296))
    verdict = verdicts(reference, bf16)[bf16.candidate.id]
    assert verdict.status is QualityStatus.REFUSED and verdict.changed == 16
    assert verdict.explanation.startswith("refused: quality 94.3% (296/314) [91.1%, 96.3%], lower bound 91.1% "
                                          "below the reference's lower bound 97.7% - 2 pts "
                                          "(tp1-r1-seqsdef-mbtdef-float32: 99.4% (312/314) [97.7%, 99.8%])")


def test_the_reference_is_its_shapes_fewest_replicas_measured_and_unknown_until_then():
    two = run(F32, 2, passing_point(2.0), graded(100, 100))
    bf16 = run(BF16, 1, passing_point(2.0), graded(100, 100))
    assert verdicts(two, bf16)[bf16.candidate.id].reference_id == "tp1-r2-seqsdef-mbtdef-float32"
    one = run(F32, 1, passing_point(2.0), graded(100, 99))
    assert verdicts(two, bf16, one)[bf16.candidate.id].reference_id == "tp1-r1-seqsdef-mbtdef-float32"
    alone = verdicts(bf16)[bf16.candidate.id]
    assert alone.status is QualityStatus.UNKNOWN and not alone.admits
    broken = run(F32, 1, passing_point(2.0), status=RunStatus.FAILED_TO_DEPLOY)
    assert verdicts(broken, bf16)[bf16.candidate.id].status is QualityStatus.UNKNOWN


def test_the_answer_skips_a_cheaper_run_refused_on_quality_and_says_why():
    history = [
        run(BF16, 1, passing_point(2.0), graded(100, 90)),
        run(F32, 1, failing_point(2.0), graded(100, 100)),
        run(F32, 2, passing_point(2.0), graded(100, 100)),
    ]
    answer = choose(build_rows(SPACE, history))
    assert answer.kind is AnswerKind.PASSING and answer.best == "tp1-r2-seqsdef-mbtdef-float32"
    assert [r.candidate_id for r in answer.refused] == ["tp1-r1-seqsdef-mbtdef-bfloat16"]
    assert answer.refused[0].why.startswith("refused: quality 90.0% (90/100)")
    report = build_report(SPACE, "grid", history, status=ReportStatus.COMPLETE, generated_at=fixed_clock())
    text = render_markdown(report)
    assert "## Quality" in text and "Refused on quality" in text
    assert "| `tp1-r1-seqsdef-mbtdef-bfloat16` | 90/100 | 90.0% [82.6%, 94.5%] |" in text
    assert "96.3%" in text  # the reference's lower bound, in the refusal


def test_without_an_admitted_pass_the_closest_says_it_was_refused_on_quality():
    history = [run(BF16, 1, passing_point(2.0), graded(100, 90)), run(F32, 1, failing_point(2.0), graded(100, 100))]
    answer = choose(build_rows(SPACE, history))
    assert answer.kind is AnswerKind.CLOSEST and answer.best == "tp1-r1-seqsdef-mbtdef-bfloat16"
    assert answer.explanation.startswith("no configuration meets the SLO and keeps quality; closest is "
                                         "tp1-r1-seqsdef-mbtdef-bfloat16 (it meets the SLO but refused: quality")


def test_without_a_quality_section_runs_have_no_verdict_and_the_slo_alone_decides():
    spec = SPEC.model_copy(update={"quality": None})
    rows = build_rows(SearchSpace(spec, PRICES), [run(BF16, 1, passing_point(2.0))])
    assert rows[0].quality is None and rows[0].admitted
    assert "## Quality" not in render_markdown(build_report(SearchSpace(spec, PRICES), "grid", [],
                                                            status=ReportStatus.COMPLETE, generated_at="t"))


def test_the_capacity_search_does_not_prune_on_a_pass_refused_on_quality(tmp_path):
    spec = make_spec(rate=4.0, accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, dtype=(F32, BF16),
                     quality=QualitySpec(items=100))
    worlds = {F32: FakeClusterMeasurer(SLO, per_replica_rps={1: 2.5}),  # needs two replicas at 4 req/s
              BF16: FakeClusterMeasurer(SLO, per_replica_rps={1: 5.0})}  # one replica is enough
    measurer = FakeQualityMeasurer(worlds, correct={F32: 100, BF16: 93})
    report = run_sweep(spec, PRICES, measurer, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    assert report.answer.kind is AnswerKind.PASSING and report.answer.best == "tp1-r2-seqsdef-mbtdef-float32"
    assert [r.candidate_id for r in report.answer.refused] == ["tp1-r1-seqsdef-mbtdef-bfloat16"]


def test_a_simulated_sweep_says_quality_was_not_measured_and_applies_no_gate():
    spec = as_simulated(SPEC)
    space = SearchSpace(spec, PRICES)
    history = [run(BF16, 1, passing_point(2.0)), run(F32, 2, passing_point(2.0))]
    report = build_report(space, "grid", history, status=ReportStatus.COMPLETE, generated_at=fixed_clock())
    assert {r.quality.status for r in report.runs} == {QualityStatus.SIMULATED}
    assert report.answer.best == "tp1-r1-seqsdef-mbtdef-bfloat16" and report.answer.refused == ()
    text = render_markdown(report)
    assert "quality not measured (SIMULATED)" in text and "not measured (SIMULATED) |" in text
