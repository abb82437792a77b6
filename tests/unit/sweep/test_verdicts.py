"""Point verdicts: invalid measurements, per-objective confidence, the boundary margin."""

from __future__ import annotations

import pytest

from sweep import (
    Candidate,
    Evidence,
    Objective,
    Outcome,
    SearchSettings,
    SearchSpace,
    SloSpec,
    Trial,
    build_rows,
    choose,
    evaluate_point,
)
from sweep.verdicts import covers, fails_decisively, near_boundary, outcome_at, settled, share_confidence
from serving.config.model_spec import AcceleratorKind

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
    rec = record(Trial(candidate=Candidate(tp=1, replicas=2), offered_rates=(2.0, 4.0)), point)
    assert outcome_at(rec, 2.0, slo) is Outcome.INVALID
    assert outcome_at(rec, 4.0, slo) is Outcome.INVALID  # not measured above an invalid point
    assert covers(rec, (2.0, 4.0), slo)
    assert not fails_decisively(rec, 4.0, slo, SearchSettings())


def test_an_invalid_target_point_neither_passes_nor_names_a_closest():
    spec = make_spec(rate=2.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    invalid = passing_point(2.0).model_copy(update={"invalid_reasons": CAP})
    rows = build_rows(space, [record(Trial(candidate=Candidate(tp=1, replicas=2), offered_rates=(2.0,)), invalid)])
    answer = choose(rows)
    assert answer.kind.value == "none" and "1 measurement(s) there were invalid" in answer.explanation


def test_confidence_of_each_verdict():
    slo = SloSpec(ttft_p95=1.0, e2e_p95=10.0, min_goodput_share=0.9)
    point = passing_point(2.0).model_copy(update={
        "evidence": {Objective.TTFT_P95: Evidence(ci_low=0.15, ci_high=0.3, confidence=0.97),
                     Objective.E2E_P95: Evidence(confidence=0.88)},
    })
    verdict = evaluate_point(point, slo)
    by = {v.objective: v for v in verdict.verdicts}
    assert by[Objective.TTFT_P95].confidence == 0.97 and by[Objective.E2E_P95].confidence == 0.88
    assert by[Objective.GOODPUT_SHARE].confidence == 1.0  # every request good: every resample holds
    assert verdict.passed and verdict.confidence == 0.88  # a pass is as sure as its least sure objective
    unknown = point.model_copy(update={"evidence": {}})
    assert evaluate_point(unknown, slo).confidence is None  # not known for every objective
    failing = point.model_copy(update={"e2e_p95_s": 12.0, "evidence": {Objective.E2E_P95: Evidence(confidence=0.3)}})
    assert evaluate_point(failing, slo).confidence == pytest.approx(0.7)  # a failure: 1 - P(holds)


def test_goodput_share_confidence_is_the_load_testers_proportion_bootstrap():
    # 9 of 10 good against a 90% minimum: a resample holds when it has >= 9 good (P = 0.736)
    assert share_confidence(9, 10, 0.9) == pytest.approx(0.9**10 + 10 * 0.9**9 * 0.1, abs=0.05)
    assert share_confidence(10, 10, 0.9) == 1.0 and share_confidence(0, 10, 0.1) == 0.0
    assert share_confidence(0, 0, 0.9) is None
    # more requests at the same share sharpen the verdict
    assert share_confidence(95, 100, 0.9) > share_confidence(19, 20, 0.9) > 0.5


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
    trial = Trial(candidate=Candidate(tp=1, replicas=3), offered_rates=(1.0,))
    assert not fails_decisively(record(trial, near_fail), 1.0, slo, search)
    assert fails_decisively(record(trial, failing_point(1.0)), 1.0, slo, search)
