"""The cheapest-passing choice (ties, none passing) and the Pareto front."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.analysis.slo import Metric
from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import build_rows
from sweep.analysis.selection import AnswerKind, choose, pareto_front
from sweep.measure.results import RunStatus, Trial
from sweep.spec.space import DeploymentCandidate, EngineKnobs, SearchSpace
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, make_spec, passing_point, record

SPEC = make_spec(rate=2.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=4)
SPACE = SearchSpace(SPEC, PRICES)


def at_target(tp: int, replicas: int, point, *, seqs: int | None = None):
    c = DeploymentCandidate(tp=tp, replicas=replicas, engine=EngineKnobs(max_num_seqs=seqs))
    return record(Trial(candidate=c, offered_rates=(2.0,)), point)


def test_cheapest_passing_wins_with_margin_and_runner_up():
    rows = build_rows(
        SPACE,
        [
            at_target(1, 1, failing_point(2.0)),
            at_target(1, 2, passing_point(2.0, e2e=5.0)),
            at_target(1, 4, passing_point(2.0, e2e=1.0)),
        ],
    )
    answer = choose(rows)
    assert answer.kind is AnswerKind.PASSING
    assert answer.best == "tp1-r2-seqsdef-mbtdef" and answer.runner_up == "tp1-r4-seqsdef-mbtdef"
    e2e = next(v for v in answer.verdicts if v.objective.metric is Metric.E2E)
    assert e2e.margin == 0.5  # 5 s against 10 s
    assert answer.failed == ()


def test_ties_fewer_accelerators_then_lower_e2e_then_id():
    # same cost and accelerators (2 cores): TP1 x 2 vs TP2 x 1 -> lower p95 E2E wins
    rows = build_rows(
        SPACE, [at_target(1, 2, passing_point(2.0, e2e=4.0)), at_target(2, 1, passing_point(2.0, e2e=3.0))]
    )
    assert choose(rows).best == "tp2-r1-seqsdef-mbtdef"
    # identical figures: candidate id decides, whatever the input order
    a = at_target(1, 2, passing_point(2.0), seqs=32)
    b = at_target(1, 2, passing_point(2.0), seqs=64)
    assert choose(build_rows(SPACE, [b, a])).best == choose(build_rows(SPACE, [a, b])).best == a.candidate.id


def test_none_passes_names_the_closest_and_its_failed_objective():
    bad_tpot = passing_point(2.0).model_copy(update={"tpot_p95_s": 0.06})  # 1.2 x the 50 ms limit
    very_bad = failing_point(2.0, e2e=30.0)  # ttft 3 x, e2e 3 x, goodput
    rows = build_rows(SPACE, [at_target(1, 4, very_bad), at_target(1, 1, bad_tpot)])
    answer = choose(rows)
    assert answer.kind is AnswerKind.CLOSEST
    assert answer.best == "tp1-r1-seqsdef-mbtdef" and answer.runner_up == "tp1-r4-seqsdef-mbtdef"
    assert answer.failed == ("tpot_p95",)
    assert "tpot_p95 0.06 s > 0.05 s, 20.0% over" in answer.explanation


def test_a_zero_goodput_share_is_described_as_such():
    nobody_good = failing_point(2.0, e2e=30.0).model_copy(update={"requests_good": 0, "goodput_rps": 0.0})
    answer = choose(build_rows(SPACE, [at_target(1, 4, nobody_good)]))
    assert answer.kind is AnswerKind.CLOSEST
    assert "goodput share 0% <" in answer.explanation and "e2e_p95 30 s >" in answer.explanation


def test_closest_ignores_runs_never_measured_at_the_target():
    crashed = record(
        Trial(candidate=DeploymentCandidate(tp=1, replicas=3), offered_rates=(2.0,)),
        status=RunStatus.CRASHED, reason="OOM"
    )
    probe = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(1.0, 2.0)), failing_point(1.0))
    assert choose(build_rows(SPACE, [crashed, probe])).kind is AnswerKind.NONE
    assert choose(build_rows(SPACE, [])).kind is AnswerKind.NONE


def test_pareto_front_by_hand():
    rows = build_rows(
        SPACE,
        [
            at_target(1, 1, passing_point(2.0, e2e=8.0)),  # cheapest, slow: on the front
            at_target(1, 2, passing_point(2.0, e2e=3.0)),  # dearer, faster: on the front
            at_target(2, 1, passing_point(2.0, e2e=4.0)),  # same cost as tp1 x 2, slower: dominated
            at_target(1, 4, passing_point(2.0, e2e=3.0)),  # dearer, not faster: dominated
        ],
    )
    assert pareto_front(rows) == ("tp1-r1-seqsdef-mbtdef", "tp1-r2-seqsdef-mbtdef")
    assert pareto_front(rows, Metric.TTFT) == ("tp1-r1-seqsdef-mbtdef",)  # every TTFT p95 is 0.2 s
    with pytest.raises(ValueError):
        pareto_front(rows, Metric.GOODPUT_SHARE)


@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(0.01, 100)), min_size=1, max_size=25))
def test_pareto_front_is_exactly_the_non_dominated_set(pairs):
    rows = []
    base = build_rows(SPACE, [at_target(1, 1, passing_point(2.0))])[0]
    for i, (cost, lat) in enumerate(pairs):
        target = base.target.model_copy(update={"point": base.target.point.model_copy(update={"e2e_p95_s": lat})})
        update = {"candidate_id": f"c{i:02d}", "cost_per_million_output_tokens": cost, "target": target}
        rows.append(base.model_copy(update=update))
    front = set(pareto_front(rows))

    def dominated(i: int) -> bool:
        cost, lat = pairs[i]
        return any(c2 <= cost and l2 <= lat and (c2 < cost or l2 < lat) for c2, l2 in pairs)

    assert front == {f"c{i:02d}" for i in range(len(pairs)) if not dominated(i)}
    assert front  # never empty when there are points
