"""Taking a trial's points: rates (ladder then bisection) and repeats near the SLO."""

from __future__ import annotations

import pytest

from sweep.measure.results import Evidence, LoadPoint, Trial
from sweep.measure.sampling import combine, measure_rates, sample_seed
from sweep.measure.verdicts import evaluate_point
from sweep.spec.space import DeploymentCandidate
from sweep.spec.sweep_spec import SearchSettings
from tests.unit.sweep.sweep_fakes import failing_point, make_spec, passing_point

SLO = make_spec().slo  # tpot_p95 <= 50 ms among others
SEARCH = SearchSettings(boundary_margin=0.1, max_samples=3)


def tpot_point(rate: float, tpot: float, **update) -> LoadPoint:
    return passing_point(rate).model_copy(update={"tpot_p95_s": tpot, **update})


class FakeLoadTester:
    """FAKE ``take``: a TPOT per (rate, sample index), recording every call."""

    def __init__(self, tpot_by_sample: dict[float, list[float]] | None = None, capacity: float | None = None):
        self.tpot_by_sample = tpot_by_sample or {}
        self.capacity = capacity
        self.calls: list[tuple[float, int]] = []

    def __call__(self, rate: float, seed: int) -> LoadPoint:
        index = sum(1 for r, _ in self.calls if r == rate)
        self.calls.append((rate, seed))
        if self.capacity is not None:
            return passing_point(rate) if rate <= self.capacity else failing_point(rate)
        return tpot_point(rate, self.tpot_by_sample[rate][index])


def trial(*rates: float, refine: int = 0) -> Trial:
    return Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=rates, refine=refine)


def test_a_noisy_failure_near_the_slo_is_measured_again_with_new_seeds():
    """Before: one 60 s sample decided; a TPOT p95 of 52 ms (4% over) failed the point
    and stopped the probe ladder, whatever the next sample would have said."""
    take = FakeLoadTester({1.0: [0.052, 0.046, 0.047], 2.0: [0.02]})
    (one, two) = measure_rates(trial(1.0, 2.0), 7, SLO, SEARCH, take)
    assert one.samples == 3 and len(set(one.seeds)) == 3
    assert one.tpot_p95_s == pytest.approx(0.047)  # the median of 52, 46, 47 ms
    assert evaluate_point(one, SLO).passed and two.samples == 1  # the ladder went on; 2.0 was clear
    assert [seed for _, seed in take.calls] == [sample_seed(7, 1.0, i) for i in range(3)] + [sample_seed(7, 2.0, 0)]


def test_a_clear_point_is_taken_once_and_samples_stop_at_the_maximum():
    take = FakeLoadTester({1.0: [0.02]})
    (point,) = measure_rates(trial(1.0), 0, SLO, SEARCH, take)
    assert point.samples == 1 and len(take.calls) == 1
    stubborn = FakeLoadTester({1.0: [0.049, 0.049, 0.049, 0.049]})
    (point,) = measure_rates(trial(1.0), 0, SLO, SEARCH, stubborn)
    assert point.samples == 3 and len(stubborn.calls) == 3  # still near, out of samples


def test_invalid_samples_are_retaken_and_left_out():
    reason = ("generator loop lag 0.4 s",)

    def take(rate: float, seed: int) -> LoadPoint:
        first = seed == sample_seed(0, rate, 0)
        return tpot_point(rate, 0.01 if first else 0.02, invalid_reasons=reason if first else ())

    (point,) = measure_rates(trial(1.0), 0, SLO, SEARCH, take)
    assert point.valid and point.samples == 2 and point.tpot_p95_s == 0.02

    def always_invalid(rate: float, seed: int) -> LoadPoint:
        return tpot_point(rate, 0.01, invalid_reasons=reason)

    (point,) = measure_rates(trial(1.0, 2.0), 0, SLO, SEARCH, always_invalid)
    assert not point.valid and point.invalid_reasons == reason and point.samples == 3
    assert not evaluate_point(point, SLO).passed  # and the ladder stopped there


def test_a_probe_bisects_below_its_first_failure():
    """Before: one replica's capacity was the highest ladder rate that passed (1.0
    here, for a true 1.7); two bisections bring it to 1.5, between 1.5 and 1.75."""
    take = FakeLoadTester(capacity=1.7)
    points = measure_rates(trial(1.0, 2.0, 4.0, refine=2), 0, SLO, SEARCH, take)
    assert [p.offered_rps for p in points] == [1.0, 1.5, 1.75, 2.0]
    assert [r for r, _ in take.calls] == [1.0, 2.0, 1.5, 1.75]


def test_combine_pools_counts_and_takes_medians():
    a = tpot_point(1.0, 0.03, seeds=(1,), requests_good=50, evidence={"tpot_p95": Evidence(
        ci_low=0.02, ci_high=0.04, confidence=0.9)})
    b = tpot_point(1.0, 0.05, seeds=(2,), requests_good=60, e2e_p95_s=None, evidence={"tpot_p95": Evidence(
        ci_low=0.03, ci_high=0.07, confidence=0.5)})
    c = tpot_point(1.0, 0.04, seeds=(3,), requests_good=40)
    both = combine([a, b, c])
    assert both.seeds == (1, 2, 3) and both.requests_sent == 180 and both.requests_good == 150
    assert both.goodput_share == pytest.approx(150 / 180)
    assert both.tpot_p95_s == pytest.approx(0.04)
    assert both.e2e_p95_s == 2.0  # a missing p95 counts as the worst: the median of 2, 2, none
    tpot = both.evidence["tpot_p95"]  # the mean confidence, the envelope of the CIs
    assert (tpot.ci_low, tpot.ci_high, tpot.confidence) == (0.02, 0.07, pytest.approx(0.7))
    assert combine([a]) is a
    with pytest.raises(ValueError):
        combine([a, tpot_point(2.0, 0.03, seeds=(4,))])


def test_sample_seeds_keep_the_first_sample_of_a_rate_as_before():
    assert sample_seed(5, 0.8, 0) == 5 + 800
    assert len({sample_seed(5, 0.8, i) for i in range(3)} | {sample_seed(5, 1.6, 0)}) == 4
