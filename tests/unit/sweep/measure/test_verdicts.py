"""Point verdicts: invalid measurements, per-objective confidence, the boundary margin."""

from __future__ import annotations

import pytest

from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import build_rows
from sweep.analysis.selection import choose
from sweep.measure.results import Evidence, Trial
from sweep.measure.verdicts import Outcome, covers, evaluate_point, fails_decisively, near_boundary, outcome_at, settled
from sweep.spec.space import DeploymentCandidate, SearchSpace
from sweep.spec.sweep_spec import SearchSettings, SloSpec
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, make_spec, passing_point, record

CAP = ("client concurrency cap reached (256 in flight)",)


def test_an_invalid_measurement_is_never_a_pass():
    """Before: a point measured under the concurrency cap or a lagging generator was
    judged on its figures alone and could pass (the sweep had no notion of validity)."""
    slo = make_spec().slo
    point = passing_point(2.0).model_copy(update={"invalid_reasons": CAP})
    verdict = evaluate_point(point, slo)
    assert verdict.met and not verdict.passed and verdict.outcome is Outcome.INVALID
    assert verdict.confidence is None
    rec = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(2.0, 4.0)), point)
    assert outcome_at(rec, 2.0, slo) is Outcome.INVALID
    assert outcome_at(rec, 4.0, slo) is Outcome.INVALID  # not measured above an invalid point
    assert covers(rec, (2.0, 4.0), slo)
    assert not fails_decisively(rec, 4.0, slo, SearchSettings())


def test_an_invalid_target_point_neither_passes_nor_names_a_closest():
    spec = make_spec(rate=2.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    invalid = passing_point(2.0).model_copy(update={"invalid_reasons": CAP})
    trial = Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(2.0,))
    rows = build_rows(space, [record(trial, invalid)])
    answer = choose(rows)
    assert answer.kind.value == "none" and "1 measurement(s) there were invalid" in answer.explanation


def test_confidence_of_each_verdict():
    slo = SloSpec(ttft_p95=1.0, e2e_p95=10.0, min_goodput_share=0.9)
    point = passing_point(2.0).model_copy(update={
        "evidence": {"ttft_p95": Evidence(ci_low=0.15, ci_high=0.3, confidence=0.97),
                     "e2e_p95": Evidence(confidence=0.88)},
    })
    verdict = evaluate_point(point, slo)
    by = {v.objective.key: v for v in verdict.verdicts}
    assert by["ttft_p95"].confidence == 0.97 and by["e2e_p95"].confidence == 0.88
    assert (by["ttft_p95"].ci_low, by["ttft_p95"].ci_high) == (0.15, 0.3)  # the load tester's evidence, whole
    assert by["goodput_share"].confidence == 1.0  # every request good: every resample holds
    assert verdict.passed and verdict.confidence == 0.88  # a pass is as sure as its least sure objective
    unknown = point.model_copy(update={"evidence": {}})
    assert evaluate_point(unknown, slo).confidence is None  # not known for every objective
    failing = point.model_copy(update={"e2e_p95_s": 12.0, "evidence": {"e2e_p95": Evidence(confidence=0.3)}})
    assert evaluate_point(failing, slo).confidence == pytest.approx(0.7)  # a failure: 1 - P(holds)


def test_the_goodput_share_is_judged_by_the_load_testers_proportion_bootstrap():
    slo = SloSpec(min_goodput_share=0.9)
    (share,) = evaluate_point(passing_point(1.0).model_copy(update={"requests_good": 54}), slo).verdicts  # 54/60
    assert share.passed and share.observed == pytest.approx(0.9) and 0.2 < share.confidence < 0.8
    assert share.ci_low < 0.9 < share.ci_high


def test_near_the_boundary_on_each_objective_scale():
    slo = SloSpec(tpot_p95=0.05, min_goodput_share=0.9)
    margin = 0.1
    clear = passing_point(1.0)  # tpot 20 ms of 50, every request good
    assert not near_boundary(evaluate_point(clear, slo), margin)
    assert near_boundary(evaluate_point(clear.model_copy(update={"tpot_p95_s": 0.048}), slo), margin)
    # goodput: 100% good against 90% is far from the error budget; 89% is near it
    assert near_boundary(evaluate_point(clear.model_copy(update={"requests_good": 54}), slo), margin)  # 54/60 = 90%
    assert not near_boundary(evaluate_point(clear.model_copy(update={"requests_good": 56}), slo), margin)
    # a failure is near only when every failed objective is near
    both = clear.model_copy(update={"tpot_p95_s": 0.052, "requests_good": 30})
    assert not near_boundary(evaluate_point(both, slo), margin)
    assert near_boundary(evaluate_point(clear.model_copy(update={"tpot_p95_s": 0.052}), slo), margin)


def test_settled_needs_validity_and_distance_or_every_sample():
    slo = make_spec().slo
    search = SearchSettings(boundary_margin=0.1, max_samples=3)
    near_fail = passing_point(1.0).model_copy(update={"tpot_p95_s": 0.052})
    assert not settled(near_fail, slo, search)
    assert settled(near_fail.model_copy(update={"seeds": (1, 2, 3)}), slo, search)
    assert not settled(passing_point(1.0).model_copy(update={"invalid_reasons": CAP}), slo, search)
    assert settled(failing_point(1.0), slo, search)
    # the search prunes only on a settled failure
    trial = Trial(candidate=DeploymentCandidate(tp=1, replicas=3), offered_rates=(1.0,))
    assert not fails_decisively(record(trial, near_fail), 1.0, slo, search)
    assert fails_decisively(record(trial, failing_point(1.0)), 1.0, slo, search)
