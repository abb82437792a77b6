"""Scaling efficiency: capacity over capacity against the ideal, with the range it allows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import ScalingKind, build_rows, scaling_rows
from sweep.measure.results import Trial
from sweep.spec.space import DeploymentCandidate, SearchSpace
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, make_spec, passing_point, record

CPU = make_spec(rate=0.8, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)


def sent(point, rate: float):
    return point.model_copy(update={"arrival_rps": rate})


def test_the_readme_figure_is_a_point_in_a_wide_range():
    """The README's sweep: one replica passed at 0.4 req/s offered (0.42 sent) and
    failed at 0.8 (0.75 sent); two passed at 0.8 (0.75 sent) and were measured nowhere
    else. The README's "0.90" is 0.75 / (2 x 0.42); the measurements only bound the
    efficiency from below: two replicas' capacity is at least 0.75, one replica's is
    under 0.75, so it is above 0.75 / (2 x 0.75) = 0.5, and unbounded above."""
    space = SearchSpace(CPU, PRICES)
    one = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(0.4, 0.8)),
                 sent(passing_point(0.4), 0.42), sent(failing_point(0.8), 0.75))
    two = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=2), offered_rates=(0.8,)),
                 sent(passing_point(0.8), 0.75))
    (row,) = scaling_rows(build_rows(space, [one, two]))
    assert row.kind is ScalingKind.REPLICAS and row.ideal_speedup == 2
    assert row.speedup == pytest.approx(0.75 / 0.42) and row.efficiency == pytest.approx(0.75 / (2 * 0.42))
    assert row.efficiency_low == pytest.approx(0.5) and row.efficiency_high is None


def test_tensor_parallel_scaling_is_per_accelerator_against_the_smallest_tp():
    spec = make_spec(rate=4.0, tp=(1, 2, 4), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
    space = SearchSpace(spec, PRICES)

    def probe(tp: int, passes: float, fails: float):
        return record(Trial(candidate=DeploymentCandidate(tp=tp, replicas=1), offered_rates=(passes, fails)),
                      passing_point(passes), failing_point(fails))

    rows = scaling_rows(build_rows(space, [probe(1, 1.0, 1.2), probe(2, 1.8, 2.0), probe(4, 4.0, 4.4)]))
    by = {r.candidate_id: r for r in rows}
    assert set(by) == {"tp2-r1-seqsdef-mbtdef", "tp4-r1-seqsdef-mbtdef"}
    tp2, tp4 = by["tp2-r1-seqsdef-mbtdef"], by["tp4-r1-seqsdef-mbtdef"]
    assert all(r.kind is ScalingKind.TENSOR_PARALLEL and r.base_id == "tp1-r1-seqsdef-mbtdef" for r in rows)
    # TP2: 1.8x one TP1 replica on 2x the accelerators -> 0.9 per accelerator
    assert (tp2.speedup, tp2.ideal_speedup, tp2.efficiency) == (pytest.approx(1.8), 2, pytest.approx(0.9))
    assert tp2.efficiency_low == pytest.approx(1.8 / 1.2 / 2) and tp2.efficiency_high == pytest.approx(2.0 / 1.0 / 2)
    assert tp4.efficiency == pytest.approx(1.0)


@given(
    cap1=st.floats(0.5, 5), gain=st.floats(0.3, 1.5), n=st.integers(2, 8),
    grid1=st.lists(st.integers(1, 100), min_size=1, max_size=5, unique=True),
    grid_n=st.lists(st.integers(1, 600), min_size=1, max_size=5, unique=True),
)
def test_the_stated_range_holds_the_true_efficiency_whatever_the_grid(cap1, gain, n, grid1, grid_n):
    """Whichever rates a grid happens to offer, the true efficiency (capacity over
    capacity, over N) lies in the reported range; the point figure depends on the grid."""
    cap_n = gain * n * cap1
    space = SearchSpace(make_spec(rate=1.0, tp=(1,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=8), PRICES)

    def measured(replicas: int, tenths: list[int], capacity: float):
        rates = [t / 10 for t in sorted(tenths)]
        points = [passing_point(r) if r <= capacity else failing_point(r) for r in rates]
        trial = Trial(candidate=DeploymentCandidate(tp=1, replicas=replicas), offered_rates=tuple(rates))
        return record(trial, *points)

    rows = scaling_rows(build_rows(space, [measured(1, grid1, cap1), measured(n, grid_n, cap_n)]))
    if not rows:  # a capacity was not measured at all (every rate failed)
        assert min(grid1) / 10 > cap1 or min(grid_n) / 10 > cap_n
        return
    (row,) = rows
    truth = cap_n / (n * cap1)
    assert row.efficiency_low is None or row.efficiency_low <= truth * (1 + 1e-9)
    assert row.efficiency_high is None or truth <= row.efficiency_high * (1 + 1e-9)
