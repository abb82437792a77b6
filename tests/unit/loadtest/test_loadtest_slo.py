"""SLO parsing, run verdicts and per-request goodput checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.errors import ConfigError, SLOError
from loadtest.slo import Metric, Objective, Stat, check_applicable, evaluate, parse_slos, request_meets
from loadtest.stats import Distribution


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
     "ttft_p95=1s,ttft_p95=2s", "ttft_p95=0ms", "error_rate=150%", "ttft_p95=-1s"],
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
    assert request_meets(objectives, ttft=0.4, tpot=0.04, e2e=3.0, itl=[0.05, 0.09])
    assert not request_meets(objectives, ttft=0.6, tpot=0.04, e2e=3.0, itl=[])
    assert not request_meets(objectives, ttft=0.4, tpot=0.06, e2e=3.0, itl=[])
    assert not request_meets(objectives, ttft=0.4, tpot=0.04, e2e=3.0, itl=[0.05, 0.2])
    # one output token: no TPOT and no gaps, as in vLLM's goodput
    assert request_meets(objectives, ttft=0.4, tpot=None, e2e=0.4, itl=[])
    # a missing TTFT never meets a TTFT objective
    assert not request_meets(objectives, ttft=None, tpot=0.01, e2e=1.0, itl=[])


def test_request_itl_uses_the_requests_own_percentile():
    objectives = parse_slos("itl_p50=100ms")
    assert request_meets(objectives, ttft=0.1, tpot=0.1, e2e=1.0, itl=[0.05, 0.06, 0.5])
    assert not request_meets(objectives, ttft=0.1, tpot=0.1, e2e=1.0, itl=[0.05, 0.2, 0.5])


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
    ours = sum(request_meets(objectives, ttft=t, tpot=p, e2e=e, itl=[]) for t, p, e in requests)
    arr = np.array(requests)
    theirs = int(np.sum((arr[:, 0] <= ttft_max) & (arr[:, 1] <= tpot_max)))
    assert ours == theirs
