"""The capacity model and plan."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.sweep import Candidate, SearchSpace, Shape, ShapeCapacity, Trial, build_rows, fit_capacity, plan
from loadtest.sweep.capacity import EfficiencyPoint, fit_contention
from serving.config.model_spec import AcceleratorKind

from sweep_fakes import PRICES, failing_point, make_spec, passing_point, record


def model(c1: float = 2.0, a: float = 0.0, max_replicas: int = 8, tokens: float = 100.0) -> ShapeCapacity:
    return ShapeCapacity(
        shape=Shape(tp=1), accelerators_per_replica=1, cost_per_replica_hour=4.0, max_replicas=max_replicas,
        per_replica_rps=c1, contention=a, output_tokens_per_request=tokens,
    )


def test_fit_contention_by_hand():
    # e(2) = 1 / 1.1 -> a = 0.1 exactly
    assert fit_contention([EfficiencyPoint(replicas=2, efficiency=1 / 1.1)]) == pytest.approx(0.1)
    # two points on the same curve a = 0.05
    pts = [EfficiencyPoint(replicas=n, efficiency=1 / (1 + 0.05 * (n - 1))) for n in (3, 6)]
    assert fit_contention(pts) == pytest.approx(0.05)
    assert fit_contention([]) == 0.0
    assert fit_contention([EfficiencyPoint(replicas=2, efficiency=1.2)]) == 0.0  # super-linear clamps


def test_plan_by_hand_perfect_scaling():
    m = model(c1=2.0)
    rows = plan([m], 5.0)
    row = rows[0]
    # 5 req/s at 2 req/s per replica -> 3 replicas carrying 6; next replica above 6 req/s
    assert row.feasible and row.replicas == 3 and row.accelerators == 3
    assert row.cost_per_hour == 12.0 and row.next_replica_at_rps == 6.0
    assert row.cost_per_million_output_tokens == pytest.approx(12.0 / (5 * 100 * 3600) * 1e6)
    assert "assumed" in row.reason
    measured = model(c1=2.0).model_copy(update={"efficiency_points": (EfficiencyPoint(replicas=2, efficiency=1.0),)})
    assert plan([measured], 5.0)[0].reason == ""


def test_plan_with_contention_needs_more_replicas():
    m = model(c1=2.0, a=0.1)
    # capacity(3) = 6 / 1.2 = 5.0 -> exactly enough for 5 req/s; capacity(4) = 8 / 1.3
    assert m.capacity_rps(3) == pytest.approx(5.0)
    assert m.replicas_for(5.0) == 3 and m.replicas_for(5.01) == 4
    assert plan([m], 5.01)[0].next_replica_at_rps == pytest.approx(8 / 1.3)


def test_beyond_the_budget_is_infeasible_with_a_reason():
    row = plan([model(c1=2.0, max_replicas=3)], 7.0)[0]
    assert not row.feasible and row.replicas is None and "carry only 6" in row.reason


def test_plan_orders_cheapest_feasible_first():
    cheap = model(c1=2.0)
    dear = ShapeCapacity(
        shape=Shape(tp=2), accelerators_per_replica=2, cost_per_replica_hour=8.0, max_replicas=4,
        per_replica_rps=5.0, contention=0.0, output_tokens_per_request=100,
    )
    # 6 req/s: TP1 needs 3 replicas (12 $/h), TP2 needs 2 (16 $/h)
    rows = plan([dear, cheap], 6.0)
    assert [(r.shape_id, r.cost_per_hour) for r in rows] == [("tp1-seqsdef-mbtdef", 12.0), ("tp2-seqsdef-mbtdef", 16.0)]
    # 4 req/s: both 8 $/h on 2 accelerators -> the models' order decides
    assert [r.shape_id for r in plan([dear, cheap], 4.0)] == ["tp2-seqsdef-mbtdef", "tp1-seqsdef-mbtdef"]
    # 30 req/s: TP1 tops out at 16 -> infeasible rows last
    assert [r.feasible for r in plan([cheap, dear], 30.0)] == [False, False]
    assert [r.feasible for r in plan([cheap, dear], 18.0)] == [True, False]
    with pytest.raises(ValueError):
        plan([cheap], 0.0)


def test_fit_capacity_from_measured_runs():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    one = record(
        Trial(candidate=Candidate(tp=1, replicas=1), offered_rates=(1.0, 2.0, 4.0)),
        passing_point(1.0, tokens=80), passing_point(2.0, tokens=80), failing_point(4.0),
    )
    three = record(
        Trial(candidate=Candidate(tp=1, replicas=3), offered_rates=(4.0, 5.0)), passing_point(4.0), passing_point(5.0)
    )
    models = fit_capacity(space, build_rows(space, [one, three]))
    assert len(models) == 1
    m = models[0]
    assert m.per_replica_rps == 2.0 and m.output_tokens_per_request == pytest.approx(80)
    assert m.max_replicas == 4 and m.cost_per_replica_hour == pytest.approx(0.05)
    # 3 replicas met the SLO at 5 req/s: e = 5 / 6 -> a = (6/5 - 1) / 2 = 0.1
    assert m.efficiency_points[0].efficiency == pytest.approx(5 / 6)
    assert m.contention == pytest.approx(0.1)


@given(c1=st.floats(0.1, 50), a=st.floats(0, 0.5), top=st.integers(1, 32), traffic=st.floats(0.01, 500))
def test_replicas_for_is_the_smallest_sufficient_count(c1, a, top, traffic):
    m = model(c1=c1, a=a, max_replicas=top)
    n = m.replicas_for(traffic)
    if n is None:
        assert all(m.capacity_rps(k) < traffic for k in range(1, top + 1))
    else:
        assert m.capacity_rps(n) >= traffic * (1 - 1e-9)
        assert n == 1 or m.capacity_rps(n - 1) < traffic * (1 - 1e-9)
        # more traffic never needs fewer replicas
        more = m.replicas_for(traffic * 1.5)
        assert more is None or more >= n


def test_without_a_multi_replica_run_scaling_comes_from_the_assumed_efficiency():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4, assumed_efficiency=0.8)
    space = SearchSpace(spec, PRICES)
    one = record(
        Trial(candidate=Candidate(tp=1, replicas=1), offered_rates=(2.0, 4.0)), passing_point(2.0), failing_point(4.0)
    )
    (m,) = fit_capacity(space, build_rows(space, [one]))
    assert m.efficiency_assumed
    assert m.efficiency(2) == pytest.approx(0.8)  # a = 1/0.8 - 1 = 0.25
    assert m.contention == pytest.approx(0.25)
    # 4 req/s: 2 replicas carry 3.2, 3 carry 6 / 1.5 = 4.0
    assert m.replicas_for(4.0) == 3
