"""Cost and efficiency maths, SLO ratios and margins, per-run figures."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import build_rows
from sweep.measure.results import LoadPoint, Trial
from sweep.measure.verdicts import Outcome, covers, evaluate_point, outcome_at
from sweep.spec.economics import cost_per_hour, cost_per_million_tokens, scaling_efficiency
from sweep.spec.space import DeploymentCandidate, SearchSpace
from sweep.spec.sweep_spec import SloSpec
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, make_spec, passing_point, record


def test_cost_per_hour_and_per_million_tokens_by_hand():
    assert cost_per_hour(24, 4.0) == 96.0
    # 96 $/h at 10,000 tok/s: 36M tokens per hour -> 96 / 36 = 2.666... $ per million
    assert cost_per_million_tokens(96.0, 10_000) == pytest.approx(96 / 36)
    # this box: 2 cores at 0.05 $/h and 300 tok/s -> 0.1 / 1.08 = 0.0926 $ per million
    assert cost_per_million_tokens(cost_per_hour(2, 0.05), 300) == pytest.approx(0.1 / 1.08)
    assert cost_per_million_tokens(1.0, 0.0) is None


def test_scaling_efficiency_by_hand():
    # a four-GPU job at 3.6x one GPU is 90% efficient
    assert scaling_efficiency(3.6, 4, 1.0) == pytest.approx(0.9)
    assert scaling_efficiency(19.0, 2, 10.0) == pytest.approx(0.95)
    # per accelerator: TP4 (4 GPUs) carrying 3x what TP2 (2 GPUs) carries: 3 / 2
    assert scaling_efficiency(6.0, 4, 2.0, 2) == pytest.approx(1.5)
    assert scaling_efficiency(5.0, 2, 0.0) is None
    with pytest.raises(ValueError):
        scaling_efficiency(1.0, 0, 1.0)


@given(acc=st.integers(0, 64), price=st.floats(0.01, 20), tok=st.floats(0.1, 1e6))
def test_cost_per_million_scales_inversely_with_throughput(acc, price, tok):
    hourly = cost_per_hour(acc, price)
    per_m = cost_per_million_tokens(hourly, tok)
    assert per_m is not None
    assert per_m * tok * 3600 / 1e6 == pytest.approx(hourly, rel=1e-9, abs=1e-12)
    assert cost_per_million_tokens(hourly, 2 * tok) == pytest.approx(per_m / 2, rel=1e-9, abs=1e-12)


def test_ratios_and_margins_of_each_objective():
    slo = SloSpec(ttft_p95=1.0, tpot_p95=0.05, e2e_p95=10.0, min_goodput_share=0.9)
    point = LoadPoint(
        offered_rps=2, duration_s=60, requests_sent=100, requests_ok=98, requests_good=95,
        achieved_rps=1.63, output_tokens_per_s=160, ttft_p95_s=0.8, tpot_p95_s=0.055, e2e_p95_s=10.0,
        goodput_rps=1.58,
    )
    verdict = evaluate_point(point, slo)
    by = {v.objective.key: v for v in verdict.verdicts}
    assert by["ttft_p95"].ratio == pytest.approx(0.8) and by["ttft_p95"].margin == pytest.approx(0.2)
    assert by["tpot_p95"].ratio == pytest.approx(1.1) and not by["tpot_p95"].passed
    assert by["e2e_p95"].passed and by["e2e_p95"].margin == pytest.approx(0.0)  # at the limit
    assert by["goodput_share"].observed == pytest.approx(0.95)
    assert by["goodput_share"].ratio == pytest.approx(0.9 / 0.95)
    assert not verdict.passed and verdict.failed == ("tpot_p95",)
    assert verdict.worst_ratio == pytest.approx(1.1)


def test_unmeasurable_objective_fails_and_is_infinitely_far():
    slo = SloSpec(ttft_p95=1.0, min_goodput_share=0.5)
    point = LoadPoint(offered_rps=1, duration_s=10, requests_sent=10, requests_ok=0, requests_good=0,
                      achieved_rps=0, output_tokens_per_s=0)
    verdict = evaluate_point(point, slo)
    assert not verdict.passed and math.isinf(verdict.worst_ratio)
    assert all(v.ratio is None and v.margin is None for v in verdict.verdicts)


def test_unset_objectives_are_not_judged():
    verdict = evaluate_point(passing_point(1.0), SloSpec(e2e_p95=5.0))
    assert [v.objective.key for v in verdict.verdicts] == ["e2e_p95"]


def test_rates_above_a_failure_count_as_failing():
    slo = make_spec().slo
    trial = Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(1.0, 2.0, 4.0))
    rec = record(trial, passing_point(1.0), failing_point(2.0))
    assert outcome_at(rec, 1.0, slo) is Outcome.PASS
    assert outcome_at(rec, 4.0, slo) is Outcome.FAIL
    assert outcome_at(rec, 0.5, slo) is Outcome.UNKNOWN
    assert covers(rec, (1.0, 2.0, 4.0), slo) and not covers(rec, (0.5, 1.0), slo)


def test_run_rows_cost_capacity_bracket_and_throughput():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    one = record(
        Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(1.0, 2.0, 4.0)),
        passing_point(1.0), passing_point(2.0), failing_point(4.0, achieved=2.4),
    )
    three = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=3), offered_rates=(4.0,)), passing_point(4.0))
    rows = {r.candidate_id: r for r in build_rows(space, [one, three])}
    r1, r3 = rows["tp1-r1-seqsdef-mbtdef"], rows["tp1-r3-seqsdef-mbtdef"]
    assert r1.capacity_rps == 2.0 and r1.fails_at_rps == 4.0 and r1.throughput_rps == 2.0
    assert r1.outcome_at_target is Outcome.FAIL and r1.target is not None
    assert r3.capacity_rps == 4.0 and r3.fails_at_rps is None
    assert r3.cost_per_hour == pytest.approx(0.15) and r3.accelerators == 3
    # 0.15 $/h at 4 req/s x 100 tokens = 400 tok/s
    assert r3.cost_per_million_output_tokens == pytest.approx(0.15 / (400 * 3600) * 1e6)


def test_a_point_is_judged_at_the_rate_actually_sent():
    """Capacity is the rate the generator sent (0.75 of an offered 0.8), not the offer."""
    spec = make_spec(rate=0.8, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2)
    space = SearchSpace(spec, PRICES)
    sent = passing_point(0.8).model_copy(update={"arrival_rps": 0.75})
    trial = Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(0.8,))
    (row,) = build_rows(space, [record(trial, sent)])
    assert row.passes and row.capacity_rps == 0.75
    assert row.target is not None and row.target.verdict.rate_rps == 0.75
