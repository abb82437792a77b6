"""Stage figures from raw records: exclusion rules, TPOT, throughput, goodput, verdicts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis.metrics import build_stage, rate_search_report, request_tpot, stage_verdict
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import ClosedLoad, OpenLoad, StagePlan
from tests.unit.loadtest.loadtest_factories import ErrorKind, failed_record, ok_record

CLOSED = StagePlan(index=0, label="4 users", load=ClosedLoad(users=4))


def stage(records, *, window=(0.0, float("inf")), timed=False, slos="", plan=CLOSED, **kwargs):
    return build_stage(
        records,
        plan=plan,
        window=window,
        timed=timed,
        objectives=parse_slos(slos),
        started_unix=1_700_000_000.0,
        offset_s=0.0,
        generator=kwargs.pop("generator", GeneratorReport()),
        **kwargs,
    )


def test_tpot_definition():
    record = ok_record(0.0, 0.5, [0.1, 0.1, 0.1, 0.1], output_tokens=5)
    assert request_tpot(record) == pytest.approx((0.9 - 0.5) / 4)
    assert request_tpot(ok_record(0.0, 0.5, [], output_tokens=1)) is None
    record_no_tokens = ok_record(0.0, 0.5, [0.1], output_tokens=0).model_copy(update={"output_tokens": None})
    assert request_tpot(record_no_tokens) is None


def test_failed_requests_do_not_pollute_latency_and_are_counted_by_kind():
    records = [
        ok_record(0.0, 0.2, [0.05] * 9),
        ok_record(0.1, 0.4, [0.05] * 9),
        failed_record(0.2, ErrorKind.HTTP_429, status=429),
        failed_record(0.3, ErrorKind.HTTP_429, status=429),
        failed_record(0.4, ErrorKind.TIMEOUT, elapsed=99.0),
        failed_record(0.5, ErrorKind.STREAM_ERROR),
    ]
    s = stage(records)
    assert (s.requests.sent, s.requests.measured, s.requests.ok, s.requests.failed) == (6, 6, 2, 4)
    assert s.requests.errors == {ErrorKind.HTTP_429: 2, ErrorKind.STREAM_ERROR: 1, ErrorKind.TIMEOUT: 1}
    assert s.requests.error_rate == pytest.approx(4 / 6)
    assert s.latency.e2e.max == pytest.approx(0.85)  # the 99 s timeout is not a latency
    assert s.latency.ttft.count == 2 and s.latency.itl.count == 18
    assert s.requests.sent == s.requests.ok + s.requests.failed


def test_warmup_and_cooldown_are_excluded():
    records = [ok_record(t, 0.1, [0.01]) for t in (0.5, 1.5, 2.5, 3.5, 8.5, 9.5)]
    s = stage(records, window=(2.0, 8.0), timed=True)
    assert s.requests.measured == 2
    assert (s.requests.excluded_warmup, s.requests.excluded_cooldown) == (2, 2)
    assert s.window.start_s == 2.0
    assert s.window.end_s == pytest.approx(3.61)  # the last measured request ended early
    assert s.requests.sent == 6


def test_count_run_throughput_matches_totals_over_duration():
    records = [ok_record(0.0, 1.0, [0.1] * 9), ok_record(0.5, 1.0, [0.2] * 9, prompt_tokens=20)]
    s = stage(records)
    duration = (0.5 + 1.0 + 1.8) - 0.0
    assert s.window.duration_s == pytest.approx(duration)
    assert s.throughput.output_tokens_per_s == pytest.approx(20 / duration)
    assert s.throughput.input_tokens_per_s == pytest.approx(30 / duration)
    assert s.throughput.total_tokens_per_s == pytest.approx(50 / duration)
    assert s.throughput.request_rate == pytest.approx(2 / duration)
    assert s.tokens.output_total == 20 and s.tokens.prompt_total == 30


def test_timed_run_counts_only_tokens_streamed_inside_the_window():
    # one request streaming 10 chunks, one per second from t=1 to t=10; window [0, 5]
    records = [ok_record(0.0, 1.0, [1.0] * 9)]
    s = stage(records, window=(0.0, 5.0), timed=True)
    assert s.window.duration_s == 5.0
    assert s.throughput.output_tokens_per_s == pytest.approx(5 / 5.0)


def test_output_and_prompt_length_mismatches():
    records = [
        ok_record(0.0, 0.1, [0.01] * 3, requested_output_tokens=4, expected_prompt_tokens=10),
        ok_record(0.0, 0.1, [0.01] * 2, requested_output_tokens=4, expected_prompt_tokens=11),
    ]
    tokens = stage(records).tokens
    assert tokens.output_len_mismatches == 1 and tokens.prompt_len_mismatches == 1
    assert tokens.from_usage == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 100), st.floats(0.001, 3), st.lists(st.floats(0.001, 0.3), max_size=8)),
        min_size=1,
        max_size=40,
    )
)
def test_latency_figures_match_numpy(spec):
    records = [ok_record(start, ttft, gaps) for start, ttft, gaps in spec]
    s = stage(records)
    ttfts = np.array([t for _, t, _ in spec])
    assert s.latency.ttft.p95 == pytest.approx(float(np.percentile(ttfts, 95)), rel=1e-9)
    e2e = np.array([t + sum(g) for _, t, g in spec])
    assert s.latency.e2e.p50 == pytest.approx(float(np.percentile(e2e, 50)), rel=1e-9)
    gaps = [g for _, _, gs in spec for g in gs]
    if gaps:
        assert s.latency.itl.p99 == pytest.approx(float(np.percentile(gaps, 99)), rel=1e-9)
    tpots = [sum(g) / len(g) for _, _, g in spec if g]
    if tpots:
        assert s.latency.tpot.mean == pytest.approx(float(np.mean(tpots)), rel=1e-9)


def test_slo_verdicts_and_goodput():
    records = [
        ok_record(0.0, 0.1, [0.02] * 4),
        ok_record(0.0, 0.3, [0.02] * 4),  # TTFT too slow for the per-request objective
        ok_record(1.0, 0.1, [0.08] * 4),  # TPOT too slow
        failed_record(1.0, ErrorKind.HTTP_5XX, status=500),
    ]
    s = stage(records, slos="ttft_p50=200ms,tpot_p95=50ms,error_rate=50%")
    verdicts = {r.objective.key: r.passed for r in s.slo.objectives}
    assert verdicts == {"ttft_p50": True, "tpot_p95": False, "error_rate": True}
    assert s.slo.passed is False and s.passed is False
    assert s.slo.good_requests == 1
    assert s.slo.goodput_fraction == pytest.approx(1 / 4)
    assert s.slo.goodput_rps == pytest.approx(1 / s.window.duration_s)
    assert "tpot_p95 missed" in s.verdict_reason


def test_no_slo_means_no_verdict():
    s = stage([ok_record(0.0, 0.1, [0.01])])
    assert s.passed is None and s.slo.passed is None and s.slo.good_requests == 1
    assert s.slo.goodput_rps is None and s.slo.goodput_fraction is None


OPEN = StagePlan(index=0, label="2 req/s", load=OpenLoad(start_rate=2, end_rate=2, max_concurrency=8), offered_rate=2.0)


def on_time(times, **extra):
    return [ok_record(t, 0.1, [0.01], scheduled=t, user=i, **extra) for i, t in enumerate(times)]


def test_arrival_lag_and_sweep_verdict():
    records = [ok_record(t + lag, 0.1, [0.01], scheduled=t) for t, lag in [(0, 0), (0.5, 0.2), (1.0, 0.3)]]
    s = stage(records, plan=OPEN, slos="ttft_p95=1s", max_error_rate=0.01)
    assert s.arrivals.scheduled == 3 and s.arrivals.late == 2
    assert s.arrivals.lag_max_s == pytest.approx(0.3)
    assert s.passed is False and not s.validity.valid
    assert s.verdict_reason == "invalid measurement: 67% of arrivals left more than 50 ms late"
    good = stage(on_time([0, 0.5, 1.0]), plan=OPEN, slos="ttft_p95=1s", max_error_rate=0.01)
    assert good.passed is True and good.validity.valid
    saturated = good.model_copy(update={"generator": GeneratorReport(saturated=True, cpu_percent_p90=97.0)})
    assert stage_verdict(saturated, max_error_rate=0.01) == (
        False, "invalid measurement: load generator CPU-saturated (p90 97% of a core)")
    report = rate_search_report([good, s.model_copy(update={"index": 1})])
    assert report.max_rate_meeting_slo == 2.0


def test_an_invalid_measurement_is_never_a_pass():
    # Before: lateness and saturation only counted with an error-rate bound (rate sweeps),
    # so a single-stage run with an SLO passed however badly it was measured.
    late = [ok_record(t + 0.5, 0.1, [0.01], scheduled=t, user=i) for i, t in enumerate([0, 1, 2, 3])]
    s = stage(late, plan=OPEN, slos="ttft_p95=1s")
    assert s.slo.passed is True and s.passed is False
    assert s.verdict_reason.startswith("invalid measurement: 100% of arrivals left more than 50 ms late")
    lagging = GeneratorReport(loop_lag_p99_s=0.25)
    lagged = stage(on_time([0, 1, 2]), plan=OPEN, slos="ttft_p95=1s", generator=lagging)
    assert lagged.passed is False and lagged.validity.reasons == ("generator event loop lagged (p99 250 ms > 100 ms)",)
    saturated = stage([ok_record(0.0, 0.1, [0.01])], slos="ttft_p95=1s", generator=GeneratorReport(saturated=True))
    assert saturated.passed is False and saturated.validity.reasons == ("load generator CPU-saturated",)
    # no verdict asked: none given, but the measurement is still marked invalid
    unjudged = stage(late, plan=OPEN)
    assert unjudged.passed is None and unjudged.verdict_reason.startswith("invalid measurement")


def test_hitting_the_client_concurrency_cap_invalidates_the_stage():
    plan = OPEN.model_copy(update={"load": OpenLoad(start_rate=2, end_rate=2, max_concurrency=1)})
    # one slot: the second arrival (due at 0.5) waits until the first request ends at 2.0
    records = [ok_record(0.0, 1.0, [1.0], scheduled=0.0), ok_record(2.0, 0.1, [0.01], scheduled=0.5)]
    s = stage(records, plan=plan, slos="e2e_p95=10s", window=(0.0, 2.0), timed=True, duration_s=2.0)
    assert s.arrivals.max_concurrency == 1 and s.arrivals.slot_waits == 1
    assert s.passed is False
    assert "client concurrency cap hit: 1 arrivals waited for one of the 1 slots" in s.verdict_reason


def test_dropped_arrivals_and_the_achieved_rate():
    # The short sweep point: 0.8 req/s for 30 s, 18 sent where 24 were due.
    plan = StagePlan(index=0, label="0.8", load=OpenLoad(start_rate=0.8, end_rate=0.8), offered_rate=0.8)
    records = on_time([i * 30.0 / 24 for i in range(18)])
    s = stage(records, plan=plan, slos="e2e_p95=10s", window=(0.0, 30.0), timed=True, duration_s=30.0)
    assert (s.arrivals.due, s.arrivals.scheduled, s.arrivals.dropped) == (24, 18, 6)
    assert s.arrivals.achieved_rate == pytest.approx(0.6)
    assert s.passed is False and "6 of 24 due arrivals never sent (achieved 0.6 req/s)" in s.verdict_reason
    full = stage(on_time([i * 30.0 / 24 for i in range(24)]), plan=plan, slos="e2e_p95=10s",
                 window=(0.0, 30.0), timed=True, duration_s=30.0)  # fmt: skip
    assert full.passed is True and full.arrivals.dropped == 0
    assert rate_search_report([full]).points[0].achieved_rate == pytest.approx(0.8)


def test_completed_rate_counts_completions_inside_the_window():
    # Overload: one start per second for 10 s, but each takes 8 s; the window is [0, 10].
    records = [ok_record(t, 1.0, [7.0]) for t in range(10)]
    s = stage(records, window=(0.0, 10.0), timed=True)
    assert s.throughput.request_rate == pytest.approx(10 / 10.0)  # by start: the offered rate
    assert s.throughput.completed_rate == pytest.approx(3 / 10.0)  # ended at 8, 9 and 10 s


def test_goodput_does_not_count_unknown_token_counts_as_meeting_tpot():
    unknown = ok_record(0.0, 0.1, [0.5] * 5).model_copy(update={"output_tokens": None})
    s = stage([ok_record(0.0, 0.1, [0.01] * 5), unknown], slos="tpot_p95=50ms")
    assert s.slo.good_requests == 1


def test_verdicts_have_confidence():
    records = [ok_record(i * 0.1, 0.1 + 0.001 * i, [0.01]) for i in range(200)]
    s = stage(records, slos="ttft_p95=10s")
    result = s.slo.objectives[0]
    assert result.confidence == 1.0 and result.ci_low <= result.observed <= result.ci_high
    assert s.slo.confidence == 1.0 and rate_search_report([s]).points == ()  # closed loop: no sweep point
    assert s.latency.ttft.ci95["p95"] == (result.ci_low, result.ci_high)


def test_sweep_report_skips_invalid_points_and_reports_the_achieved_rate():
    plans = [
        StagePlan(index=i, label=f"{r}", load=OpenLoad(start_rate=r, end_rate=r), offered_rate=r)
        for i, r in enumerate([1.0, 2.0])
    ]
    ok_stage = stage(on_time(np.arange(10) / 1.0), plan=plans[0], slos="e2e_p95=1s", window=(0.0, 10.0),
                     timed=True, duration_s=10.0)  # fmt: skip
    saturated = GeneratorReport(saturated=True)
    bad_stage = stage(on_time(np.arange(20) / 2.0), plan=plans[1], slos="e2e_p95=1s", window=(0.0, 10.0),
                      timed=True, duration_s=10.0, generator=saturated)  # fmt: skip
    report = rate_search_report([ok_stage, bad_stage])
    assert [(p.passed, p.valid) for p in report.points] == [(True, True), (False, False)]
    assert report.max_rate_meeting_slo == 1.0 and report.achieved_rate_meeting_slo == pytest.approx(1.0)
    assert report.points[0].confidence == 1.0


def test_generator_cpu_per_thousand_tokens():
    records = [ok_record(0.0, 0.1, [0.01] * 499), ok_record(0.0, 0.1, [0.01] * 1499)]
    s = stage(records, generator=GeneratorReport(cpu_seconds_load=3.0))
    assert s.generator.cpu_seconds_per_1k_tokens == pytest.approx(3.0 / 2.0)


def test_empty_stage():
    s = stage([], window=(0.0, 10.0), timed=True)
    assert s.requests.measured == 0 and s.latency.ttft.count == 0
    assert s.requests.error_rate is None and s.timeline == ()
