"""SLO parsing, run verdicts, per-request goodput checks and share objectives."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.slo import (
    Metric,
    Objective,
    Stat,
    check_applicable,
    evaluate,
    judge_share,
    parse_slos,
    request_meets,
    verdict_confidence,
)
from loadtest.analysis.stats import Distribution
from loadtest.errors import ConfigError, SLOError


def test_parse_issue_example():
    objectives = parse_slos("ttft_p95=500ms,tpot_p95=50ms,e2e_p95=10s")
    assert [(o.metric, o.stat, o.threshold) for o in objectives] == [
        (Metric.TTFT, Stat.P95, 0.5),
        (Metric.TPOT, Stat.P95, 0.05),
        (Metric.E2E, Stat.P95, 10.0),
    ]


def test_parse_error_rate_and_other_stats():
    objectives = parse_slos(" itl_p99=80ms , e2e_mean=2s, ttft_max=1.5, error_rate=1% ")
    assert objectives[0] == Objective(metric=Metric.ITL, stat=Stat.P99, threshold=0.08)
    assert objectives[1].stat is Stat.MEAN
    assert objectives[2].threshold == 1.5
    assert objectives[3] == Objective(metric=Metric.ERROR_RATE, threshold=0.01)
    assert parse_slos("error_rate=0.05")[0].threshold == 0.05


@pytest.mark.parametrize(
    "text",
    ["ttft=1s", "ttft_p42=1s", "latency_p95=1s", "ttft_p95", "ttft_p95=", "ttft_p95=abc",
     "ttft_p95=1s,ttft_p95=2s", "ttft_p95=0ms", "error_rate=150%", "ttft_p95=-1s",
     "goodput_share=90%"],  # a share judged from counts (the sweep's), not an --slo key
)
def test_parse_rejects(text):
    with pytest.raises(SLOError):
        parse_slos(text)


def test_slo_error_is_a_config_error():
    assert issubclass(SLOError, ConfigError)


def test_empty_means_no_objectives():
    assert parse_slos(None) == () and parse_slos("  ") == ()


def test_stream_only_objectives_need_streaming():
    check_applicable(parse_slos("e2e_p95=1s,error_rate=1%"), streaming=False)
    with pytest.raises(SLOError, match="ttft_p95"):
        check_applicable(parse_slos("ttft_p95=1s"), streaming=False)


def _figures(ttft, itl, tpot, e2e):
    return {
        Metric.TTFT: Distribution.of(ttft),
        Metric.ITL: Distribution.of(itl),
        Metric.TPOT: Distribution.of(tpot),
        Metric.E2E: Distribution.of(e2e),
    }


def test_evaluate_pass_fail_and_missing():
    figures = _figures([0.1, 0.2, 0.3], [0.01], [0.02, 0.03], [])
    results = evaluate(parse_slos("ttft_p50=200ms,ttft_max=250ms,e2e_p95=1s,error_rate=10%"), figures, 0.05)
    assert [r.passed for r in results] == [True, False, False, True]
    assert results[0].observed == pytest.approx(0.2)
    assert results[2].observed is None  # nothing measured fails
    assert evaluate(parse_slos("error_rate=1%"), figures, None)[0].passed is False


def test_threshold_is_inclusive():
    figures = _figures([0.5], [], [], [])
    assert evaluate(parse_slos("ttft_p95=500ms"), figures, 0.0)[0].passed


def test_request_meets_rules():
    objectives = parse_slos("ttft_p95=500ms,tpot_p95=50ms,itl_max=100ms,error_rate=1%")
    assert request_meets(objectives, ttft=0.4, tpot=0.04, e2e=3.0, itl=[0.05, 0.09], output_tokens=3)
    assert not request_meets(objectives, ttft=0.6, tpot=0.04, e2e=3.0, itl=[], output_tokens=3)
    assert not request_meets(objectives, ttft=0.4, tpot=0.06, e2e=3.0, itl=[], output_tokens=3)
    assert not request_meets(objectives, ttft=0.4, tpot=0.04, e2e=3.0, itl=[0.05, 0.2], output_tokens=3)
    # one output token: no TPOT and no gaps, as in vLLM's goodput
    assert request_meets(objectives, ttft=0.4, tpot=None, e2e=0.4, itl=[], output_tokens=1)
    # a missing TTFT never meets a TTFT objective
    assert not request_meets(objectives, ttft=None, tpot=0.01, e2e=1.0, itl=[], output_tokens=3)


def test_unknown_token_count_never_meets_a_tpot_objective():
    # Before: a request without a token count has no TPOT and silently met the objective.
    tpot = parse_slos("tpot_p95=50ms")
    assert not request_meets(tpot, ttft=0.1, tpot=None, e2e=9.0, itl=[0.5] * 10, output_tokens=None)
    # without a TPOT objective the count does not matter
    assert request_meets(parse_slos("ttft_p95=1s"), ttft=0.1, tpot=None, e2e=9.0, itl=[], output_tokens=None)


def test_request_itl_uses_the_requests_own_percentile():
    objectives = parse_slos("itl_p50=100ms")
    assert request_meets(objectives, ttft=0.1, tpot=0.1, e2e=1.0, itl=[0.05, 0.06, 0.5], output_tokens=4)
    assert not request_meets(objectives, ttft=0.1, tpot=0.1, e2e=1.0, itl=[0.05, 0.2, 0.5], output_tokens=4)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.001, 5), st.floats(0.001, 0.5), st.floats(0.001, 30)),
        min_size=1,
        max_size=100,
    ),
    st.floats(0.01, 5),
    st.floats(0.001, 0.5),
)
def test_goodput_mask_matches_numpy(requests, ttft_max, tpot_max):
    objectives = (
        Objective(metric=Metric.TTFT, stat=Stat.P95, threshold=ttft_max),
        Objective(metric=Metric.TPOT, stat=Stat.P99, threshold=tpot_max),
    )
    ours = sum(request_meets(objectives, ttft=t, tpot=p, e2e=e, itl=[], output_tokens=9) for t, p, e in requests)
    arr = np.array(requests)
    theirs = int(np.sum((arr[:, 0] <= ttft_max) & (arr[:, 1] <= tpot_max)))
    assert ours == theirs


def _samples(values):
    return {Metric.TTFT: values, Metric.ITL: [], Metric.TPOT: [], Metric.E2E: values}


def _judge(slos, values, error_rate=0.0, measured=None):
    samples = _samples(values)
    figures = {m: Distribution.of(v) for m, v in samples.items()}
    return evaluate(parse_slos(slos), figures, error_rate, samples=samples, measured=measured or len(values))


def test_verdicts_carry_a_bootstrap_interval_and_confidence():
    rng = np.random.default_rng(1)
    values = list(rng.gamma(4.0, 0.1, size=600))
    p95_ms = float(np.percentile(values, 95)) * 1e3
    slos = f"ttft_p95=2s,e2e_p95={p95_ms:.3f}ms,error_rate=1%"
    far, near, error = _judge(slos, values, error_rate=0.01)
    assert far.passed and far.confidence == 1.0
    assert far.ci_low < far.observed < far.ci_high
    # at the boundary a single sample is a coin toss, and the confidence says so
    assert 0.2 < near.confidence < 0.8 and near.ci_low < near.observed < near.ci_high
    # the error rate is resampled as a proportion of the measured requests
    assert error.ci_low < 0.01 < error.ci_high and 0.2 < error.confidence < 0.8
    # seeded: the same data give the same interval
    assert _judge(f"e2e_p95={p95_ms:.3f}ms", values)[0] == near
    # without raw samples, no interval is claimed
    plain = evaluate(parse_slos("ttft_p95=2s"), {Metric.TTFT: Distribution.of(values)}, None)[0]
    assert plain.ci_low is None and plain.confidence is None


def test_verdict_confidence():
    values = [0.1 * (i + 1) for i in range(100)]  # p95 = 9.5 s
    sure_pass, coin_pass = _judge("ttft_p95=20s,e2e_p95=9.6s", values)
    assert verdict_confidence([sure_pass]) == 1.0
    assert verdict_confidence([sure_pass, coin_pass]) == coin_pass.confidence < 1.0
    sure_fail, coin_fail = _judge("ttft_p95=1s,e2e_p95=9.4s", values)
    assert verdict_confidence([sure_fail, coin_fail]) == 1.0  # one objective surely fails
    assert verdict_confidence([sure_pass, coin_fail]) == pytest.approx(1.0 - coin_fail.confidence)
    unmeasured = evaluate(parse_slos("tpot_p95=1s"), {Metric.TPOT: Distribution()}, None)[0]
    assert verdict_confidence([unmeasured]) == 1.0  # nothing measured fails for sure
    assert verdict_confidence([]) is None


GOODPUT = Objective(metric=Metric.GOODPUT_SHARE, threshold=0.9)


def test_the_goodput_share_is_a_lower_bound_with_its_own_ratio():
    assert GOODPUT.lower_bound and not parse_slos("e2e_p95=2s")[0].lower_bound
    assert GOODPUT.holds(0.9) and GOODPUT.holds(1.0) and not GOODPUT.holds(0.89) and not GOODPUT.holds(None)
    assert GOODPUT.ratio(0.95) == pytest.approx(0.9 / 0.95) and GOODPUT.ratio(0.0) is None
    assert GOODPUT.describe() == "goodput_share >= 90.00%"
    e2e = parse_slos("e2e_p95=2s")[0]
    assert e2e.ratio(2.5) == pytest.approx(1.25) and e2e.describe() == "e2e_p95 <= 2.00 s"


def test_a_verdict_carries_its_ratio_and_margin():
    (result,) = evaluate(parse_slos("ttft_p95=500ms"), _figures([0.4], [], [], []), None)
    assert result.ratio == pytest.approx(0.8) and result.margin == pytest.approx(0.2)
    low = judge_share(GOODPUT, 45, 60)  # 75% against 90%
    assert not low.passed and low.ratio == pytest.approx(1.2) and low.margin == pytest.approx(-0.2)
    assert low.observed_text() == "75.00%"
    assert judge_share(GOODPUT, 0, 60).ratio is None  # nobody good: infinitely far off


def test_goodput_share_confidence_is_the_proportion_bootstrap():
    # 9 of 10 good against a 90% minimum: a resample holds when it has >= 9 good (P = 0.736)
    assert judge_share(GOODPUT, 9, 10).confidence == pytest.approx(0.9**10 + 10 * 0.9**9 * 0.1, abs=0.05)
    assert judge_share(GOODPUT, 10, 10).confidence == 1.0
    assert judge_share(GOODPUT.model_copy(update={"threshold": 0.1}), 0, 10).confidence == 0.0
    unmeasured = judge_share(GOODPUT, 0, 0)
    assert unmeasured.observed is None and not unmeasured.passed and unmeasured.confidence is None
    # more requests at the same share sharpen the verdict
    assert judge_share(GOODPUT, 95, 100).confidence > judge_share(GOODPUT, 19, 20).confidence > 0.5
    with pytest.raises(ValueError):
        judge_share(parse_slos("e2e_p95=1s")[0], 1, 2)


def test_the_error_rate_is_judged_as_a_share_of_the_measured_requests():
    errors = parse_slos("error_rate=5%")
    (result,) = evaluate(errors, {}, 3 / 60, measured=60)
    assert result == judge_share(errors[0], 3, 60)
    assert result.passed and 0 < result.confidence < 1


def test_a_share_objective_never_judges_a_single_request():
    assert request_meets((GOODPUT, *parse_slos("error_rate=1%")), ttft=9.0, tpot=9.0, e2e=9.0, itl=[],
                         output_tokens=None)
