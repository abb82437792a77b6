"""OpenAI's rate-limit headers from a key's budgets: names, values, the reset format."""

from __future__ import annotations

import pytest

from serving.admission.api_keys import Caller
from serving.admission.key_limits import KeyRateLimiter
from serving.admission.rate_headers import format_reset, rate_limit_headers
from serving.config.gateway import KeyLimits
from serving.errors import RateLimitedError


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (-1, "0s"), (0.0001, "1ms"), (0.12, "120ms"), (0.999, "999ms"), (1, "1s"), (1.5, "1.5s"),
    (7.66, "7.66s"), (59.9999, "1m0s"), (60, "1m0s"), (86.4, "1m26.4s"), (360, "6m0s"), (3661, "1h1m1s"),
])
def test_reset_is_written_as_openai_writes_it(seconds, text):
    assert format_reset(seconds) == text


def test_a_key_without_rpm_or_tpm_gets_no_headers():
    assert rate_limit_headers(KeyRateLimiter(), Caller("free", KeyLimits(concurrency=2))) == {}


def test_remaining_requests_falls_by_exactly_one_per_admitted_request_then_refills():
    clock = FakeClock()
    limiter = KeyRateLimiter(clock=clock)
    caller = Caller("alice", KeyLimits(rpm=60))
    assert rate_limit_headers(limiter, caller) == {
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "60",
        "x-ratelimit-reset-requests": "0s"}
    for n in range(1, 4):
        limiter.admit(caller)
        headers = rate_limit_headers(limiter, caller)
        assert headers["x-ratelimit-remaining-requests"] == str(60 - n)
        assert headers["x-ratelimit-reset-requests"] == f"{n}s"  # 1 request per second refills
    clock.now += 1.5
    assert rate_limit_headers(limiter, caller)["x-ratelimit-remaining-requests"] == "58"  # 57 + 1.5


def test_remaining_zero_is_exactly_when_the_next_request_is_refused():
    clock = FakeClock()
    limiter = KeyRateLimiter(clock=clock)
    caller = Caller("limited", KeyLimits(rpm=2))
    limiter.admit(caller)
    assert rate_limit_headers(limiter, caller)["x-ratelimit-remaining-requests"] == "1"
    limiter.admit(caller)
    headers = rate_limit_headers(limiter, caller)
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "1m0s"  # two requests at 2 per minute
    with pytest.raises(RateLimitedError):
        limiter.admit(caller)


def test_tokens_show_the_reservation_then_the_real_usage():
    clock = FakeClock()
    limiter = KeyRateLimiter(clock=clock)
    caller = Caller("bob", KeyLimits(tpm=6000))
    budget = limiter.admit(caller)
    budget.reserve_tokens(1000)  # prompt + n * max_tokens
    headers = rate_limit_headers(limiter, caller)
    assert headers["x-ratelimit-limit-tokens"] == "6000"
    assert headers["x-ratelimit-remaining-tokens"] == "5000"
    assert headers["x-ratelimit-reset-tokens"] == "10s"  # 1000 tokens at 100 per second
    assert "x-ratelimit-limit-requests" not in headers
    budget.settle(300)
    assert rate_limit_headers(limiter, caller)["x-ratelimit-remaining-tokens"] == "5700"


def test_a_budget_in_debt_shows_zero_remaining():
    clock = FakeClock()
    limiter = KeyRateLimiter(clock=clock, sharers=2)  # this replica enforces 500 of 1000
    caller = Caller("big", KeyLimits(tpm=1000))
    limiter.admit(caller).reserve_tokens(800)  # lent by the full budget: level -300
    headers = rate_limit_headers(limiter, caller)
    assert headers["x-ratelimit-limit-tokens"] == "500"
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert headers["x-ratelimit-reset-tokens"] == "1m36s"  # 800 tokens at 500/60 per second


def test_with_several_replicas_the_headers_show_this_replicas_share():
    limiter = KeyRateLimiter(clock=FakeClock(), sharers=2)
    headers = rate_limit_headers(limiter, Caller("alice", KeyLimits(rpm=60, tpm=10000)))
    assert headers["x-ratelimit-limit-requests"] == "30"
    assert headers["x-ratelimit-limit-tokens"] == "5000"
