"""A step's verdict: noise inside the intervals passes, a real regression fails with
its reason, too few canary requests wait."""

from serving.config.rollout import JudgeSettings
from serving.rollout.evidence import Evidence, VersionCounts
from serving.rollout.judge import Outcome, judge, quality_regression

EDGES = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, float("inf"))
SETTINGS = JudgeSettings(min_requests=20)


def counts(requests, errors=0, ttft=0.08, tpot=0.04):
    hist = lambda v: tuple((e, float(requests if v <= e else 0)) for e in EDGES)  # noqa: E731
    return VersionCounts(requests, errors, hist(ttft), hist(tpot))


def test_the_same_behaviour_passes():
    verdict = judge(Evidence(counts(200, 2), counts(40, 1)), SETTINGS, timed_out=False)
    assert verdict.outcome is Outcome.PASS and not verdict.reasons
    assert any(f.startswith("error rate") for f in verdict.findings)


def test_a_few_more_errors_on_a_small_sample_are_noise():
    assert judge(Evidence(counts(200, 2), counts(20, 1)), SETTINGS, timed_out=False).outcome is Outcome.PASS


def test_an_error_rate_well_above_stable_fails():
    verdict = judge(Evidence(counts(200, 2), counts(40, 20)), SETTINGS, timed_out=False)
    assert verdict.outcome is Outcome.FAIL and "error rate" in verdict.reasons[0]


def test_a_slower_first_token_fails_only_past_the_ratio():
    slower = judge(Evidence(counts(200), counts(40, ttft=0.9)), SETTINGS, timed_out=False)
    assert slower.outcome is Outcome.FAIL and "TTFT p95" in slower.reasons[0]
    a_bit = judge(Evidence(counts(200), counts(40, ttft=0.15)), SETTINGS, timed_out=False)
    assert a_bit.outcome is Outcome.PASS


def test_a_slower_decode_fails():
    verdict = judge(Evidence(counts(200), counts(40, tpot=0.8)), SETTINGS, timed_out=False)
    assert verdict.outcome is Outcome.FAIL and "TPOT p95" in verdict.reasons[0]


def test_too_few_canary_requests_wait_until_the_step_times_out():
    evidence = Evidence(counts(200), counts(5))
    assert judge(evidence, SETTINGS, timed_out=False).outcome is Outcome.WAIT
    assert judge(evidence, SETTINGS, timed_out=True).outcome is Outcome.PASS
    assert judge(Evidence(counts(0), counts(0)), SETTINGS, timed_out=True).outcome is Outcome.PASS


def test_quality_fails_when_the_canary_interval_is_wholly_below():
    bad = Evidence(counts(200), counts(40), quality={"stable": (38, 40), "canary": (3, 40)})
    verdict = judge(bad, SETTINGS, timed_out=False)
    assert verdict.outcome is Outcome.FAIL and verdict.reasons[0].startswith("quality")
    assert quality_regression({"stable": (38, 40), "canary": (35, 40)}, SETTINGS) is None  # overlapping
    assert quality_regression({"stable": (38, 40)}, SETTINGS) is None  # no canary score: nothing to judge
