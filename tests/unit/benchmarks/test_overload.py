"""The overload benchmark's pure figures (benchmarks/overload.py) on fake outcomes, and
its metric readers on text from the gateway's real metrics registry."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.overload import (
    NO_RESPONSE,
    Outcome,
    Peaks,
    burst_verdict,
    fairness,
    in_flight_of,
    post,
    retry_after_s,
    samples,
    tally,
)
from serving.gateway.metrics import GatewayMetrics


def fake_outcomes(ok: int = 0, refused: int = 0, refused_bare: int = 0,
                  other: tuple[int, ...] = ()) -> list[Outcome]:
    """``ok`` 200s taking 1..ok s, 429s with and without Retry-After, then ``other`` statuses."""
    return ([Outcome(200, None, float(i + 1)) for i in range(ok)]
            + [Outcome(429, "1", 0.01) for _ in range(refused)]
            + [Outcome(429, None, 0.02) for _ in range(refused_bare)]
            + [Outcome(status, None, 0.5) for status in other])


def test_tally_counts_each_status_and_the_latency_of_200s_only():
    t = tally(fake_outcomes(ok=5, refused=3, refused_bare=1, other=(504, 0, 504)))
    assert (t.sent, t.ok, t.refused, t.refused_with_retry_after) == (12, 5, 4, 3)
    assert t.other == {0: 1, 504: 2}
    assert t.ok_p50_s == 3.0 and t.ok_p95_s == pytest.approx(4.8)
    assert t.refused_p95_s == pytest.approx(0.0185)  # three 429s in 10 ms, one in 20 ms


def test_tally_of_no_200s_has_no_latency():
    t = tally(fake_outcomes(refused=2))
    assert t.ok_p50_s is None and t.ok_p95_s is None and t.ok == 0


def test_a_burst_that_refuses_the_excess_holds_and_one_that_answers_all_does_not():
    held = burst_verdict(tally(fake_outcomes(ok=256, refused=144)), 400, 256, peak_in_flight=256)
    assert all(held.values()), held
    # the run of the issue: all 400 answered, nothing refused
    leaked = burst_verdict(tally(fake_outcomes(ok=400)), 400, 256, peak_in_flight=256)
    assert not leaked["refused_at_least_excess"]
    short = burst_verdict(tally(fake_outcomes(ok=305, refused=95)), 400, 256, peak_in_flight=257)
    assert not short["refused_at_least_excess"] and not short["peak_within_bound"]


def test_a_burst_verdict_tells_missing_retry_after_other_statuses_and_an_unknown_peak():
    v = burst_verdict(tally(fake_outcomes(ok=200, refused=150, refused_bare=1, other=(503,))), 400, 256, None)
    assert v["refused_at_least_excess"]
    assert not v["retry_after_on_every_429"] and not v["only_200_and_429"]
    assert v["peak_within_bound"] is None


def test_fairness_gives_a_light_key_its_demand_and_the_heavy_key_its_share():
    tallies = {"heavy": tally(fake_outcomes(ok=80, refused=900)), "light": tally(fake_outcomes(ok=60))}
    fair = fairness({"heavy": 42, "light": 6}, tallies, bound=16)
    assert fair["heavy"]["fair_share"] == fair["light"]["fair_share"] == 8
    assert (fair["heavy"]["slots"], fair["light"]["slots"]) == (8, 6)
    assert fair["light"]["expected_share"] == pytest.approx(6 / 14)
    assert fair["light"]["admitted_share"] == pytest.approx(60 / 140)
    assert fair["light"]["within_share"] and fair["light"]["never_refused"]
    assert not fair["heavy"]["within_share"] and not fair["heavy"]["never_refused"]


def test_fairness_flags_a_light_key_that_was_refused_and_rounds_the_share_up():
    tallies = {"heavy": tally(fake_outcomes(ok=10)), "light": tally(fake_outcomes(ok=3, refused=1))}
    fair = fairness({"heavy": 40, "light": 3}, tallies, bound=5)
    assert fair["light"]["fair_share"] == 3  # ceil(5 / 2)
    assert fair["light"]["within_share"] and not fair["light"]["never_refused"]


def test_fairness_with_nothing_admitted_is_a_zero_share():
    tallies = {"heavy": tally(fake_outcomes(refused=4)), "light": tally([])}
    assert fairness({"heavy": 4, "light": 1}, tallies, bound=2)["light"]["admitted_share"] == 0.0


def test_peaks_keep_the_highest_value_of_each_figure():
    peaks = Peaks()
    for sample in ({"heavy": 3.0}, {"heavy": 8.0, "light": 2.0}, {"heavy": 5.0, "light": 6.0}):
        peaks.add(sample)
    assert peaks.values == {"heavy": 8.0, "light": 6.0} and peaks.polls == 3


def test_samples_read_the_gateways_own_per_key_metrics():
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    metrics.declare_keys(("heavy", "light"))
    metrics.key_in_flight.labels("heavy").set(8)
    metrics.key_in_flight.labels("light").set(5)
    for _ in range(3):
        metrics.count_rejected("m", "heavy", "fair_share")
    metrics.count_rejected("m", "light", "overloaded")
    text = generate_latest(registry).decode()
    assert samples(text, "serveout_key_in_flight_requests", "key") == {"heavy": 8.0, "light": 5.0}
    assert samples(text, "serveout_key_rejected_requests_total", "key", "reason") == {
        "heavy fair_share": 3.0, "light overloaded": 1.0}
    assert samples(text, "serveout_no_such_metric", "key") == {}


def test_retry_after_is_whole_seconds_or_the_default():
    assert retry_after_s("3") == 3.0
    assert retry_after_s(None) == 1.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", default=2.0) == 2.0


def test_in_flight_is_read_from_the_status_body():
    assert in_flight_of(httpx.Response(200, json={"in_flight": 17, "admission_limit": 256})) == {"in_flight": 17}


def test_post_records_the_status_and_retry_after_or_no_response():
    def fake_gateway(request: httpx.Request) -> httpx.Response:
        if b"refuse" in request.content:
            return httpx.Response(429, headers={"Retry-After": "1"}, json={"error": {}})
        if b"drop" in request.content:
            raise httpx.ReadError("connection reset", request=request)
        assert request.headers["authorization"] == "Bearer sk-fake"
        return httpx.Response(200, json={"choices": []})

    async def go() -> list[Outcome]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake_gateway)) as client:
            return [await post(client, "http://fake", {"prompt": p}, {"Authorization": "Bearer sk-fake"})
                    for p in ("ok", "refuse", "drop")]

    ok, refused, dropped = asyncio.run(go())
    assert (ok.status, ok.retry_after) == (200, None)
    assert (refused.status, refused.retry_after) == (429, "1")
    assert (dropped.status, dropped.retry_after) == (NO_RESPONSE, None)
