"""The search proposes the expected trials from given results (hand-worked scenarios)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.errors import ConfigError, UnknownNameError
from serving.config.model_spec import AcceleratorKind
from sweep.analysis.rows import build_rows
from sweep.analysis.selection import choose
from sweep.errors import UnknownStrategyError
from sweep.measure.results import RunRecord, RunStatus, Trial, TrialPurpose
from sweep.search.loop import measure_safely
from sweep.search.capacity_search import CapacitySearch, ladder, probe_rates, shape_state
from sweep.search.strategies import GridStrategy, create_strategy
from sweep.spec.space import DeploymentCandidate, SearchSpace
from tests.unit.sweep.sweep_fakes import PRICES, FakeClusterMeasurer, failing_point, make_spec, passing_point, record


def drive(space: SearchSpace, strategy, measurer, limit: int = 200) -> list[RunRecord]:
    """The loop without persistence: propose, measure, append (replacing the candidate)."""
    history: dict[str, RunRecord] = {}
    for _ in range(limit):
        trial = strategy.next_trial(space, tuple(history.values()))
        if trial is None:
            return list(history.values())
        history.pop(trial.candidate.id, None)
        history[trial.candidate.id] = RunRecord(trial=trial, result=measure_safely(measurer, trial))
    raise AssertionError("the strategy did not finish")


def steps(records: list[RunRecord]) -> list[tuple[str, tuple[float, ...]]]:
    return [(r.candidate.id, tuple(round(x, 4) for x in r.trial.offered_rates)) for r in records]


def test_ladder_grows_by_the_factor_and_ends_at_the_max():
    assert ladder(1, 2.0) == (1,)
    assert ladder(2, 2.0) == (1, 2)
    assert ladder(12, 2.0) == (1, 2, 4, 8, 12)
    assert ladder(24, 2.0) == (1, 2, 4, 8, 16, 24)
    assert ladder(10, 3.0) == (1, 3, 9, 10)
    assert ladder(5, 1.1) == (1, 2, 3, 4, 5)  # always at least +1


def test_cpu_box_probe_then_two_replicas():
    """R=3 on 2 cores: TP1 probe at 1.5 and 3 req/s; TP2 fails to deploy (9 heads); 2 x TP1."""
    spec = make_spec(rate=3.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, replicas_max=2)
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(
        slo=spec.slo,
        per_replica_rps={1: 2.0, 2: 3.5},
        deploy_failures={"tp2-r1-seqsdef-mbtdef": "heads (9) not divisible by tensor parallel size (2)"},
    )
    records = drive(space, CapacitySearch(), fake)
    assert steps(records) == [
        ("tp1-r1-seqsdef-mbtdef", (1.5, 3.0)),
        ("tp2-r1-seqsdef-mbtdef", (3.0,)),
        ("tp1-r2-seqsdef-mbtdef", (3.0,)),
    ]
    assert [r.trial.purpose for r in records] == [TrialPurpose.PROBE, TrialPurpose.PROBE, TrialPurpose.TARGET]
    assert records[1].result.status is RunStatus.FAILED_TO_DEPLOY
    answer = choose(build_rows(space, records))
    assert answer.best == "tp1-r2-seqsdef-mbtdef"
    assert space.grid_size == 3


def test_24_h200_scenario_worked_by_hand():
    """R=10 on 3 x 8 H200 (see the worked numbers in the comments)."""
    spec = make_spec(rate=10.0, tp=(1, 2, 4, 8))
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(
        slo=spec.slo,
        per_replica_rps={1: 0.7, 2: 1.6, 4: 3.5, 8: 6.0},
        contention=0.01,
        tpot_floor_s={1: 0.08},  # TP1 is too slow per token whatever the load
    )
    records = drive(space, CapacitySearch(), fake)
    assert steps(records) == [
        # probes: one replica at R/n, n = 1, 2, 4, ... up to the replicas that fit
        ("tp1-r1-seqsdef-mbtdef", (0.4167, 0.625, 1.25, 2.5, 5.0, 10.0)),  # fails at 0.42: no c1
        ("tp2-r1-seqsdef-mbtdef", (0.8333, 1.25, 2.5, 5.0, 10.0)),  # c1 = 1.25 -> predicts 8
        ("tp4-r1-seqsdef-mbtdef", (1.6667, 2.5, 5.0, 10.0)),  # c1 = 2.5 -> 4
        ("tp8-r1-seqsdef-mbtdef", (3.3333, 5.0, 10.0)),  # c1 = 5 -> 2; TP1: the largest count, 24
        # 16 GPUs each for tp2/tp4/tp8: tie -> shape order
        ("tp2-r8-seqsdef-mbtdef", (10.0,)),  # capacity 11.96: pass, best = 16 GPUs
        ("tp2-r7-seqsdef-mbtdef", (10.0,)),  # 14 GPUs, cheapest open option: capacity 10.57, pass
        ("tp2-r6-seqsdef-mbtdef", (10.0,)),  # 12 GPUs ties tp4-r3; shape order: 9.14, fail
        ("tp4-r3-seqsdef-mbtdef", (10.0,)),  # capacity 10.29: pass, best = 12 GPUs
        # the probe bounds nothing (pooling may beat one replica at R/N): 2 x TP4 is cheaper, so tried
        ("tp4-r2-seqsdef-mbtdef", (10.0,)),  # 6.93: fail
        # TP1's floor failure drops nothing either: its largest affordable count is tried
        ("tp1-r12-seqsdef-mbtdef", (10.0,)),  # TPOT floor: fail
    ]
    # the TP1 probe stopped at its first (failing) rate
    assert len(records[0].result.points) == 1
    answer = choose(build_rows(space, records))
    assert answer.best == "tp4-r3-seqsdef-mbtdef"
    assert answer.runner_up == "tp2-r7-seqsdef-mbtdef"
    assert len(records) == 10 and space.grid_size == 24 + 12 + 6 + 3
    notes = CapacitySearch().notes(space, records)
    assert any(n.startswith("tp1") and "c1 unknown" in n for n in notes)


def test_pooling_lets_fewer_replicas_pass_than_the_old_probe_bound_allowed():
    """One replica carries 2.4 req/s (the ladder sees 1.25 pass, 2.5 fail); behind one
    router, N >= 2 replicas carry 1.1 x N x 2.4, so 4 replicas carry 10.56 >= R = 10.
    The old bound said N replicas fail at R whenever one replica fails at R/N
    (10/4 = 2.5 failed), so it never tried fewer than floor(10 / 2.5) + 1 = 5: it
    answered tp1-r5 and skipped the cheapest configuration."""
    spec = make_spec(rate=10.0, tp=(1,))
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 2.4}, pooling_gain=1.1)
    searched = drive(space, CapacitySearch(), fake)
    answer = choose(build_rows(space, searched))
    assert answer.best == "tp1-r4-seqsdef-mbtdef"
    assert [r.candidate.replicas for r in searched] == [1, 8, 7, 6, 5, 4, 3]
    world = FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 2.4}, pooling_gain=1.1)
    gridded = drive(space, GridStrategy(), world)
    assert choose(build_rows(space, gridded)).best == answer.best


def test_one_passing_replica_prunes_dearer_probes():
    spec = make_spec(rate=1.0, tp=(1, 2, 4))
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 2.0, 2: 4.0, 4: 8.0})
    records = drive(space, CapacitySearch(), fake)
    assert [r.candidate.id for r in records] == ["tp1-r1-seqsdef-mbtdef"]


def test_equal_cost_alternatives_are_still_measured():
    """TP2 x 1 costs what TP1 x 2 costs: it may win the tie-break, so it is probed."""
    spec = make_spec(rate=2.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, replicas_max=2)
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 1.0, 2: 2.5})
    records = drive(space, CapacitySearch(), fake)
    assert [r.candidate.id for r in records] == [
        "tp1-r1-seqsdef-mbtdef",
        "tp2-r1-seqsdef-mbtdef",  # passes at R with 2 cores
        "tp1-r2-seqsdef-mbtdef",  # also 2 cores: not dearer, so still tried
    ]


def test_next_trial_from_given_history_after_a_failed_prediction():
    """Probe says c1 = 1.25 (fails at 2.5); 8 replicas failed -> try 9, not 8 again."""
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    shape_one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=shape_one, offered_rates=probe_rates(space, shape_one.shape), purpose=TrialPurpose.PROBE)
    history = [
        record(probe, passing_point(10 / 12), passing_point(1.25), failing_point(2.5)),
        record(Trial(candidate=DeploymentCandidate(tp=2, replicas=8), offered_rates=(10.0,)), failing_point(10.0)),
    ]
    trial = CapacitySearch().next_trial(space, history)
    assert trial is not None and trial.candidate.replicas == 9 and trial.offered_rates == (10.0,)


def test_next_trial_walks_down_after_a_pass_and_stops_at_a_known_failure():
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=one, offered_rates=probe_rates(space, one.shape))
    base = [record(probe, passing_point(10 / 12), passing_point(1.25), failing_point(2.5))]
    at = lambda n: Trial(candidate=DeploymentCandidate(tp=2, replicas=n), offered_rates=(10.0,))  # noqa: E731
    assert CapacitySearch().next_trial(space, base).candidate.replicas == 8
    after_pass = [*base, record(at(8), passing_point(10.0))]
    assert CapacitySearch().next_trial(space, after_pass).candidate.replicas == 7
    after_fail = [*after_pass, record(at(7), failing_point(10.0))]
    assert CapacitySearch().next_trial(space, after_fail) is None  # 7 fails, 8 passes: done


@pytest.mark.parametrize("status", [RunStatus.CRASHED, RunStatus.TOOL_ERROR])
def test_a_crash_or_tool_error_prunes_no_other_count(status):
    """Before: a crash at 8 (a load-tester crash too) capped the shape at 7 replicas."""
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=one, offered_rates=probe_rates(space, one.shape))
    history = [
        record(probe, passing_point(10 / 12), passing_point(1.25), failing_point(2.5)),
        record(Trial(candidate=DeploymentCandidate(tp=2, replicas=8), offered_rates=(10.0,)), status=status,
               reason="boom"),
    ]
    trial = CapacitySearch().next_trial(space, history)
    assert trial is not None and trial.candidate.replicas == 9  # 8 is tried, so the next up
    nine = Trial(candidate=DeploymentCandidate(tp=2, replicas=9), offered_rates=(10.0,))
    history.append(record(nine, passing_point(10.0)))
    assert CapacitySearch().next_trial(space, history).candidate.replicas == 7  # below 8, not capped


def test_a_failed_deploy_still_caps_larger_counts():
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=one, offered_rates=probe_rates(space, one.shape))
    history = [
        record(probe, passing_point(10 / 12), passing_point(1.25), failing_point(2.5)),
        record(Trial(candidate=DeploymentCandidate(tp=2, replicas=8), offered_rates=(10.0,)),
               status=RunStatus.FAILED_TO_DEPLOY, reason="placement group never ready"),
    ]
    assert CapacitySearch().next_trial(space, history).candidate.replicas == 7
    seven = Trial(candidate=DeploymentCandidate(tp=2, replicas=7), offered_rates=(10.0,))
    history.append(record(seven, failing_point(10.0)))
    assert CapacitySearch().next_trial(space, history) is None


def test_a_noisy_probe_failure_does_not_drop_the_shape():
    """Before: one replica failing at its lowest probe rate dropped the shape (every
    larger count pruned), even on one sample a few percent over the limit."""
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=one, offered_rates=probe_rates(space, one.shape))
    noisy = passing_point(10 / 12).model_copy(update={"tpot_p95_s": 0.052})  # 4% over, one sample
    state = shape_state(space, one.shape, {one.id: record(probe, noisy)}, None)
    assert state.next_replicas == 12  # no c1: the largest count; the probe's failure is not settled
    # nor does an invalid probe point: it says nothing either way
    invalid = passing_point(10 / 12).model_copy(update={"invalid_reasons": ("arrivals left late",)})
    assert shape_state(space, one.shape, {one.id: record(probe, invalid)}, None).next_replicas == 12


def test_an_invalid_target_point_prunes_nothing():
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    one = DeploymentCandidate(tp=2, replicas=1)
    probe = Trial(candidate=one, offered_rates=probe_rates(space, one.shape))
    capped = failing_point(10.0).model_copy(update={"invalid_reasons": ("client concurrency cap reached",)})
    history = [
        record(probe, passing_point(10 / 12), passing_point(1.25), failing_point(2.5)),
        record(Trial(candidate=DeploymentCandidate(tp=2, replicas=8), offered_rates=(10.0,)), capped),
        record(Trial(candidate=DeploymentCandidate(tp=2, replicas=9), offered_rates=(10.0,)), passing_point(10.0)),
    ]
    # 8 was invalid, not a failure: 7 is still open below the pass at 9
    assert CapacitySearch().next_trial(space, history).candidate.replicas == 7


def test_probe_is_repeated_when_its_record_lacks_the_ladder():
    """A one-replica record measured only at R (e.g. by a grid) and failing does not give c1."""
    spec = make_spec(rate=10.0, tp=(2,))
    space = SearchSpace(spec, PRICES)
    at_target = Trial(candidate=DeploymentCandidate(tp=2, replicas=1), offered_rates=(10.0,))
    history = [record(at_target, failing_point(10.0))]
    trial = CapacitySearch().next_trial(space, history)
    assert trial is not None and trial.purpose is TrialPurpose.PROBE and len(trial.offered_rates) == 5


def test_extra_rate_factors_add_points_above_the_target():
    spec = make_spec(rate=2.0, tp=(1,), extra_rate_factors=(1.5,), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2)
    space = SearchSpace(spec, PRICES)
    assert space.target_rates() == (2.0, 3.0)
    grid_trial = GridStrategy().next_trial(space, ())
    assert grid_trial is not None and grid_trial.offered_rates == (2.0, 3.0)


def test_grid_measures_every_feasible_candidate_in_order():
    spec = make_spec(rate=3.0, tp=(1, 2), accelerator=AcceleratorKind.CPU, nodes=1, per_node=2, strategy="grid")
    space = SearchSpace(spec, PRICES)
    fake = FakeClusterMeasurer(slo=spec.slo, per_replica_rps={1: 2.0, 2: 3.5})
    records = drive(space, create_strategy("grid"), fake)
    assert [r.candidate.id for r in records] == [c.id for c in space.grid()] == [
        "tp1-r1-seqsdef-mbtdef",
        "tp1-r2-seqsdef-mbtdef",
        "tp2-r1-seqsdef-mbtdef",
    ]


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(UnknownStrategyError) as info:
        create_strategy("random-walk")
    message = str(info.value)
    assert "capacity-search" in message and "grid" in message
    assert isinstance(info.value, (UnknownNameError, ConfigError))


@settings(max_examples=60, deadline=None)
@given(
    caps=st.lists(st.floats(0.2, 12.0), min_size=3, max_size=3),
    contention=st.floats(0.0, 0.3),
    pooling=st.floats(1.0, 1.6),
    slow_tp1=st.booleans(),
    rate=st.floats(0.5, 30.0),
    crash_at=st.one_of(st.none(), st.integers(2, 12)),
    refine=st.integers(0, 2),
)
def test_search_finds_the_grid_optimum_cost(caps, contention, pooling, slow_tp1, rate, crash_at, refine):
    """In a world meeting the search's assumptions (pooled replicas included: the old
    probe bound failed this), search and grid agree on the cost."""
    spec = make_spec(rate=rate, tp=(1, 2, 4), probe_refine=refine)
    space = SearchSpace(spec, PRICES)

    def fake() -> FakeClusterMeasurer:
        return FakeClusterMeasurer(
            slo=spec.slo,
            per_replica_rps=dict(zip((1, 2, 4), caps, strict=True)),
            contention=contention,
            pooling_gain=pooling,
            tpot_floor_s={1: 0.09} if slow_tp1 else {},
            crashes={} if crash_at is None else {f"tp2-r{n}-seqsdef-mbtdef": "boom" for n in range(crash_at, 13)},
        )

    searched = drive(space, CapacitySearch(), fake())
    gridded = drive(space, GridStrategy(), fake())
    by_search = choose(build_rows(space, searched))
    by_grid = choose(build_rows(space, gridded))
    assert by_search.kind == by_grid.kind, (by_search, by_grid)
    if by_grid.kind.value == "passing":
        cost = {r.candidate.id: space.cost_per_hour(r.candidate) for r in gridded + searched}
        assert cost[by_search.best] == cost[by_grid.best]
    # no candidate measured twice, and never more trials than grid + probes
    ids = [r.candidate.id for r in searched]
    assert len(ids) == len(set(ids))
    assert len(searched) <= space.grid_size
