"""`sweep plan`'s capacity model: "add a replica at X req/s", where more GPUs stop
paying, and the traffic -> GPUs curve."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.capacity.curve import accelerators_at, replica_steps, stops_paying_at, traffic_curve
from sweep.capacity.model import MeasuredCount, ShapeCapacity, capacity_plan
from sweep.spec.space import Shape


def shape_model(tp: int = 1, c1: float = 2.0, a: float = 0.0, max_replicas: int = 6,
                cost: float = 4.0) -> ShapeCapacity:
    return ShapeCapacity(
        shape=Shape(tp=tp), accelerators_per_replica=tp, cost_per_replica_hour=cost, max_replicas=max_replicas,
        measured=(MeasuredCount(replicas=1, passes_at_rps=c1),), contention=a, contention_assumed=True,
        output_tokens_per_request=100.0,
    )


def test_add_a_replica_at_by_hand():
    # linear, 2 req/s per replica, 10% headroom: N replicas serve up to 1.8 N req/s
    steps = replica_steps(shape_model(c1=2.0), headroom=0.1)
    assert [s.add_next_above_rps for s in steps] == pytest.approx([1.8, 3.6, 5.4, 7.2, 9.0, 10.8])
    assert [s.accelerators for s in steps] == [1, 2, 3, 4, 5, 6]
    assert all(s.pays and s.marginal_efficiency == pytest.approx(1.0) for s in steps)


@given(c1=st.floats(0.5, 20), a=st.floats(0, 0.5), headroom=st.floats(0, 0.5))
def test_each_threshold_is_where_the_plan_adds_the_replica(c1: float, a: float, headroom: float):
    """Just below "add above X" the capacity plan keeps N replicas; just above it takes N + 1."""
    model = shape_model(c1=c1, a=a)
    for step in replica_steps(model, headroom)[:-1]:
        x = step.add_next_above_rps
        assert model.replicas_for(x * (1 - 1e-6), headroom) == step.replicas
        assert model.replicas_for(x * (1 + 1e-6), headroom) == step.replicas + 1


def test_more_gpus_stop_paying_where_the_marginal_replica_adds_too_little():
    # capacity(N) = N / (1 + 0.1 (N - 1)) replicas' worth: the 2nd adds 0.818, the 3rd 0.682
    steps = replica_steps(shape_model(c1=3.0, a=0.1), min_efficiency=0.8)
    assert [round(s.marginal_efficiency, 3) for s in steps[:3]] == [1.0, 0.818, 0.682]
    stop = stops_paying_at(steps)
    assert stop is not None and stop.replicas == 3
    assert stops_paying_at(replica_steps(shape_model(c1=3.0, a=0.0))) is None


def test_the_curve_follows_the_cheapest_shape():
    # tp1 at 1 req/s per GPU and tp2 at 3 req/s per 2 GPUs: up to 2 req/s both cost the same
    # (the tie goes to the first shape), from 2 to 3 one tp2 replica is cheaper than three tp1
    small, big = shape_model(tp=1, c1=1.0, cost=1.0), shape_model(tp=2, c1=3.0, cost=2.0)
    curve = traffic_curve([small, big])
    got = [(p.shape_id, p.replicas, p.to_rps) for p in curve[:3]]
    assert got == [("tp1-seqsdef-mbtdef", 1, pytest.approx(1.0)), ("tp1-seqsdef-mbtdef", 2, pytest.approx(2.0)),
                   ("tp2-seqsdef-mbtdef", 1, pytest.approx(3.0))]
    assert [p.from_rps for p in curve[1:]] == [p.to_rps for p in curve[:-1]]  # contiguous
    assert accelerators_at(curve, 2.5) == 2 and accelerators_at(curve, 100.0) is None


@given(traffic=st.floats(0.01, 30), headroom=st.floats(0, 0.3))
def test_the_curve_agrees_with_the_capacity_plan(traffic: float, headroom: float):
    models = [shape_model(tp=1, c1=1.0, a=0.05, cost=1.0), shape_model(tp=2, c1=2.6, a=0.1, cost=2.0)]
    cheapest = next((r for r in capacity_plan(models, traffic, headroom) if r.feasible), None)
    got = accelerators_at(traffic_curve(models, headroom), traffic)
    assert got == (None if cheapest is None else cheapest.accelerators)
