"""The capacity model and capacity plan: measured capacities, failures as ceilings, headroom."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import build_rows
from sweep.capacity.model import EfficiencyPoint, MeasuredCount, ShapeCapacity, capacity_plan, fit_capacity, fit_contention
from sweep.measure.results import Trial
from sweep.spec.space import DeploymentCandidate, SearchSpace, Shape
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, make_spec, passing_point, record


def model(c1: float = 2.0, a: float = 0.0, max_replicas: int = 8, tokens: float = 100.0, *,
          measured: tuple[MeasuredCount, ...] = (), assumed: bool = True) -> ShapeCapacity:
    return ShapeCapacity(
        shape=Shape(tp=1), accelerators_per_replica=1, cost_per_replica_hour=4.0, max_replicas=max_replicas,
        measured=(MeasuredCount(replicas=1, passes_at_rps=c1), *measured), contention=a,
        contention_assumed=assumed, output_tokens_per_request=tokens,
    )


def test_fit_contention_by_hand():
    # e(2) = 1 / 1.1 -> a = 0.1 exactly
    assert fit_contention([EfficiencyPoint(replicas=2, efficiency=1 / 1.1)]) == pytest.approx(0.1)
    # two points on the same curve a = 0.05
    pts = [EfficiencyPoint(replicas=n, efficiency=1 / (1 + 0.05 * (n - 1))) for n in (3, 6)]
    assert fit_contention(pts) == pytest.approx(0.05)
    assert fit_contention([]) == 0.0
    assert fit_contention([EfficiencyPoint(replicas=2, efficiency=1.2)]) == 0.0  # not extrapolated upwards


def test_plan_by_hand_perfect_scaling():
    m = model(c1=2.0)
    row = capacity_plan([m], 5.0, headroom=0.0)[0]
    # 5 req/s at 2 req/s per replica -> 3 replicas carrying 6; add the 4th above 6 req/s
    assert row.feasible and row.replicas == 3 and row.accelerators == 3
    assert row.cost_per_hour == 12.0 and row.next_replica_at_rps == 6.0 and row.next_accelerators == 4
    assert row.cost_per_million_output_tokens == pytest.approx(12.0 / (5 * 100 * 3600) * 1e6)
    assert "assumed" in row.reason
    assert capacity_plan([m], 2.0)[0].reason == "measured"


def test_headroom_keeps_a_share_of_capacity_spare():
    m = model(c1=2.0)
    # 5 req/s with 20% spare needs 6.25 of capacity -> 4 replicas (8); add the 5th above 8 x 0.8 = 6.4
    row = capacity_plan([m], 5.0, headroom=0.2)[0]
    assert row.replicas == 4 and row.next_replica_at_rps == pytest.approx(6.4) and row.headroom == 0.2
    with pytest.raises(ValueError):
        capacity_plan([m], 5.0, headroom=1.0)


def test_plan_never_recommends_a_count_measured_failing_at_that_traffic():
    """Before: failing multi-replica runs never entered the model, so the USL curve
    (3 x 2 = 6 req/s) recommended 3 replicas at 5 req/s although 3 failed at 5."""
    m = model(c1=2.0, measured=(MeasuredCount(replicas=3, fails_at_rps=5.0),))
    assert m.capacity_rps(3) == 5.0 and not m.carries(3, 5.0)
    assert m.capacity_rps(2) == 4.0  # the model, below the failure
    assert capacity_plan([m], 5.0, headroom=0.0)[0].replicas == 4
    assert capacity_plan([m], 4.9, headroom=0.0)[0].replicas == 3
    # fewer replicas fail where more did: 2 replicas cannot be credited above 5 either
    lower = model(c1=3.0, measured=(MeasuredCount(replicas=3, fails_at_rps=5.0),))
    assert lower.capacity_rps(2) == 5.0 and not lower.carries(2, 5.0)


def test_measured_super_linear_scaling_is_kept_not_clamped():
    """Before: a = max(0, fit) turned the measured e(2) = 1.25 into 1.0, so the plan
    asked for 3 replicas at 4.5 req/s although 2 replicas had met the SLO at 5."""
    m = model(c1=2.0, measured=(MeasuredCount(replicas=2, passes_at_rps=5.0),), assumed=False)
    assert m.capacity_rps(2) == 5.0 and m.efficiency(2) == pytest.approx(1.25)
    assert capacity_plan([m], 4.5, headroom=0.0)[0].replicas == 2
    # beyond the largest measured count the gain is held (a = 0), not grown: 5 / 2 per replica
    assert m.capacity_rps(4) == pytest.approx(10.0)
    assert m.basis(4).startswith("extrapolated beyond 2")


def test_interpolation_between_measured_counts_and_floors():
    m = model(c1=2.0, a=0.1, measured=(MeasuredCount(replicas=4, passes_at_rps=6.0),), assumed=False)
    assert m.capacity_rps(2) == pytest.approx(2.0 + (6.0 - 2.0) / 3)
    assert m.basis(3) == "interpolated between measured counts"
    # 5 replicas: 6 x 5/4 x (1 + 0.3) / (1 + 0.4)
    assert m.capacity_rps(5) == pytest.approx(6.0 * 5 / 4 * 1.3 / 1.4)
    # never below what fewer replicas carried: a noisy lower figure at 5 does not pull 5 down
    noisy = model(c1=2.0, measured=(MeasuredCount(replicas=4, passes_at_rps=6.0),
                                    MeasuredCount(replicas=5, passes_at_rps=5.0)), assumed=False)
    assert noisy.capacity_rps(5) == 6.0


def test_beyond_the_budget_is_infeasible_with_a_reason():
    row = capacity_plan([model(c1=2.0, max_replicas=3)], 7.0, headroom=0.0)[0]
    assert not row.feasible and row.replicas is None and "carry only 6" in row.reason
    full = capacity_plan([model(c1=2.0, max_replicas=3)], 5.5, headroom=0.0)[0]
    assert full.replicas == 3 and full.next_accelerators is None  # the budget is full


def test_plan_orders_cheapest_feasible_first():
    cheap = model(c1=2.0)
    dear = ShapeCapacity(
        shape=Shape(tp=2), accelerators_per_replica=2, cost_per_replica_hour=8.0, max_replicas=4,
        measured=(MeasuredCount(replicas=1, passes_at_rps=5.0),), contention=0.0, output_tokens_per_request=100,
    )
    # 6 req/s: TP1 needs 3 replicas (12 $/h), TP2 needs 2 (16 $/h)
    rows = capacity_plan([dear, cheap], 6.0)
    assert [(r.shape_id, r.cost_per_hour) for r in rows] == [("tp1-seqsdef-mbtdef", 12.0), ("tp2-seqsdef-mbtdef", 16.0)]
    # 4 req/s: both 8 $/h on 2 accelerators -> the models' order decides
    assert [r.shape_id for r in capacity_plan([dear, cheap], 4.0)] == ["tp2-seqsdef-mbtdef", "tp1-seqsdef-mbtdef"]
    # 30 req/s: TP1 tops out at 16 -> infeasible rows last
    assert [r.feasible for r in capacity_plan([cheap, dear], 30.0)] == [False, False]
    assert [r.feasible for r in capacity_plan([cheap, dear], 18.0)] == [True, False]
    with pytest.raises(ValueError):
        capacity_plan([cheap], 0.0)


def test_fit_capacity_from_measured_runs():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    one = record(
        Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(1.0, 2.0, 4.0)),
        passing_point(1.0, tokens=80), passing_point(2.0, tokens=80), failing_point(4.0),
    )
    three = record(
        Trial(candidate=DeploymentCandidate(tp=1, replicas=3), offered_rates=(4.0, 5.0)),
        passing_point(4.0), passing_point(5.0)
    )
    two = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(4.0,)), failing_point(4.0))
    (m,) = fit_capacity(space, build_rows(space, [one, three, two]))
    assert m.per_replica_rps == 2.0 and m.output_tokens_per_request == pytest.approx(80)
    assert m.max_replicas == 4 and m.cost_per_replica_hour == pytest.approx(0.05)
    # 3 replicas met the SLO at 5 req/s: e = 5 / 6 -> a = (6/5 - 1) / 2 = 0.1
    assert not m.contention_assumed and m.contention == pytest.approx(0.1)
    assert m.measured == (
        MeasuredCount(replicas=1, passes_at_rps=2.0, fails_at_rps=4.0),
        MeasuredCount(replicas=2, fails_at_rps=4.0),
        MeasuredCount(replicas=3, passes_at_rps=5.0),
    )
    # the failing 2-replica run enters the model: interpolation says 3.5, the failure caps it below 4
    assert m.capacity_rps(2) == pytest.approx(3.5) and not m.carries(2, 4.0)


@given(c1=st.floats(0.1, 50), a=st.floats(0, 0.5), top=st.integers(1, 32), traffic=st.floats(0.01, 500),
       headroom=st.floats(0, 0.5))
def test_replicas_for_is_the_smallest_sufficient_count(c1, a, top, traffic, headroom):
    m = model(c1=c1, a=a, max_replicas=top)
    n = m.replicas_for(traffic, headroom)
    need = traffic / (1 - headroom)
    if n is None:
        assert all(m.capacity_rps(k) < need * (1 - 1e-9) for k in range(1, top + 1))
    else:
        assert m.capacity_rps(n) >= need * (1 - 1e-9)
        assert n == 1 or m.capacity_rps(n - 1) < need * (1 - 1e-9)
        # more traffic never needs fewer replicas
        more = m.replicas_for(traffic * 1.5, headroom)
        assert more is None or more >= n


def test_without_a_multi_replica_run_scaling_comes_from_the_assumed_efficiency():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4, assumed_efficiency=0.8)
    space = SearchSpace(spec, PRICES)
    one = record(
        Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(2.0, 4.0)),
        passing_point(2.0), failing_point(4.0)
    )
    (m,) = fit_capacity(space, build_rows(space, [one]))
    assert m.contention_assumed
    assert m.efficiency(2) == pytest.approx(0.8)  # a = 1/0.8 - 1 = 0.25
    assert m.contention == pytest.approx(0.25)
    # 4 req/s: 2 replicas carry 3.2, 3 carry 6 / 1.5 = 4.0
    assert m.replicas_for(4.0) == 3


def test_a_shape_whose_single_replica_never_passed_is_modelled_from_its_smallest_passing_count():
    spec = make_spec(rate=4.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)
    one = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(1.0, 4.0)), failing_point(1.0))
    two = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(4.0,)), passing_point(4.0))
    (m,) = fit_capacity(space, build_rows(space, [one, two]))
    assert m.per_replica_rps is None and m.capacity_rps(1) == 0.0 and m.capacity_rps(2) == 4.0
    assert m.replicas_for(3.0, 0.0) == 2
