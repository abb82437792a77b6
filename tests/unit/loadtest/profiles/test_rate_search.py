"""The rate sweep's search: probing, refinement, stopping."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.profiles import RateSweep, StageOutcome
from loadtest.profiles.rate_search import next_sweep_rate, probe_rates


def run_search(capacity, **sweep_kwargs):
    """The rates tried against a server passing every rate up to ``capacity``, and the
    highest one that passed."""
    sweep = RateSweep(**sweep_kwargs)
    history = []
    while (plan := sweep.next_stage(history)) is not None:
        passed = plan.offered_rate <= capacity
        history.append(StageOutcome(plan=plan, passed=passed))
        assert plan.index == len(history) - 1
    return [h.plan.offered_rate for h in history], max((h.plan.offered_rate for h in history if h.passed), default=None)


def test_probe_rates():
    assert probe_rates(rates=None, start_rate=1, growth=2, max_rate=10) == [1, 2, 4, 8, 10]
    assert probe_rates(rates=None, start_rate=1, growth=2, max_rate=8) == [1, 2, 4, 8]
    assert probe_rates(rates=[4, 1, 2, 2], start_rate=1, growth=2, max_rate=8) == [1, 2, 4]


def test_probe_then_bisect():
    tried, best = run_search(5.0, start_rate=1, growth=2, max_rate=64, refine=2)
    assert tried == [1, 2, 4, 8, 6, 5]
    assert best == 5


def test_every_probe_passes():
    tried, best = run_search(100.0, rates=(1, 2, 3), refine=3)
    assert tried == [1, 2, 3] and best == 3


def test_first_probe_fails_bisects_down_from_zero():
    tried, best = run_search(0.3, start_rate=1, refine=2)
    assert tried == [1, 0.5, 0.25]
    assert best == 0.25


def test_no_refinement():
    tried, best = run_search(2.5, rates=(1, 2, 4, 8), refine=0)
    assert tried == [1, 2, 4] and best == 2


def test_converged_interval_stops_early():
    assert next_sweep_rate([(1.0, True), (1.01, False)], probes=[1.0, 1.01], refine=5) is None


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.05, 200),
    st.floats(0.1, 4),
    st.floats(1.2, 4),
    st.floats(1, 100),
    st.integers(0, 6),
)
def test_search_brackets_a_monotone_capacity(capacity, start, growth, max_rate, refine):
    tried, best = run_search(capacity, start_rate=start, growth=growth, max_rate=max_rate, refine=refine)
    probes = probe_rates(rates=None, start_rate=start, growth=growth, max_rate=max_rate)
    assert len(tried) <= len(probes) + refine
    if best is not None:
        assert best <= capacity
        # never worse than the best probe below capacity
        assert best >= max((p for p in probes if p <= capacity), default=0)
    else:
        assert all(r > capacity for r in tried)


def test_sweep_needs_slo_and_duration_flags():
    assert RateSweep.needs_slo and RateSweep.needs_duration
    with pytest.raises(ValueError):
        RateSweep(rates=())
