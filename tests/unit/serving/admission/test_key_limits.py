"""Per-key requests- and tokens-per-minute budgets, with a FAKE clock (pure logic)."""

import pytest

from serving.config.gateway import KeyLimits
from serving.errors import InvalidRequestError, RateLimitedError
from serving.admission.api_keys import Caller
from serving.admission.key_limits import KeyRateLimiter
from tests.fakes import FakeClock


def limiter():
    clock = FakeClock(1000.0)
    return KeyRateLimiter(clock=clock), clock


def test_rpm_allows_a_burst_of_rpm_then_says_when_one_more_frees():
    rate, clock = limiter()
    alice = Caller("alice", KeyLimits(rpm=3))
    for _ in range(3):
        rate.admit(alice)
    with pytest.raises(RateLimitedError) as err:
        rate.admit(alice)
    assert err.value.reason == "rpm"
    assert err.value.retry_after_s == 20  # one request refills in 60 / 3 s
    clock.now += 19.0
    with pytest.raises(RateLimitedError) as err:
        rate.admit(alice)
    assert err.value.retry_after_s == 1
    clock.now += 1.0
    rate.admit(alice)


def test_keys_have_separate_budgets_and_no_limit_means_none():
    rate, _ = limiter()
    alice, bob = Caller("alice", KeyLimits(rpm=1)), Caller("bob", KeyLimits(rpm=1))
    rate.admit(alice)
    rate.admit(bob)  # alice's budget is hers alone
    free = Caller("free")
    for _ in range(1000):
        rate.admit(free)


def test_tokens_are_reserved_then_corrected_to_the_real_usage():
    rate, clock = limiter()
    alice = Caller("alice", KeyLimits(tpm=600))
    first = rate.admit(alice)
    first.reserve_tokens(500)  # prompt + max_tokens
    with pytest.raises(RateLimitedError) as err:
        rate.admit(alice).reserve_tokens(200)
    assert err.value.reason == "tpm"
    assert err.value.retry_after_s == 10  # 100 tokens short at 10 tokens/s
    first.settle(120)  # it used 120: 380 come back
    first.settle(0)  # settling twice changes nothing
    second = rate.admit(alice)
    second.reserve_tokens(480)
    assert rate.bucket(alice, "tpm").level == pytest.approx(0)
    clock.now += 6.0  # 60 tokens refill
    with pytest.raises(RateLimitedError):
        rate.admit(alice).reserve_tokens(61)


def test_a_request_larger_than_the_whole_budget_is_a_400_not_a_429():
    rate, _ = limiter()
    with pytest.raises(InvalidRequestError) as err:
        rate.admit(Caller("alice", KeyLimits(tpm=100))).reserve_tokens(101)
    assert err.value.param == "max_tokens"


def test_retry_after_is_at_least_one_second():
    rate, clock = limiter()
    alice = Caller("alice", KeyLimits(rpm=6000))  # refills 100 per second
    budget = rate.admit(alice)
    for _ in range(5999):
        rate.admit(alice)
    with pytest.raises(RateLimitedError) as err:
        rate.admit(alice)
    assert err.value.retry_after_s == 1
    budget.settle(0)  # no tpm limit: nothing to settle


def test_refill_never_exceeds_the_per_minute_limit():
    rate, clock = limiter()
    alice = Caller("alice", KeyLimits(rpm=2))
    clock.now += 3600.0  # an idle hour banks nothing beyond the limit
    rate.admit(alice)
    rate.admit(alice)
    with pytest.raises(RateLimitedError):
        rate.admit(alice)


def test_each_of_n_gateway_replicas_enforces_a_share_of_the_rpm():
    clock = FakeClock(1000.0)
    gateways = [KeyRateLimiter(clock=clock, sharers=2) for _ in range(2)]
    alice = Caller("alice", KeyLimits(rpm=6))
    admitted = 0
    for rate in gateways:
        for _ in range(6):
            try:
                rate.admit(alice)
                admitted += 1
            except RateLimitedError:
                pass
    assert admitted == 6  # the app as a whole: the key's limit, not 2 x it


def test_rescaling_keeps_the_budget_fill_in_proportion():
    rate, clock = limiter()
    alice = Caller("alice", KeyLimits(rpm=4))
    rate.admit(alice)
    rate.admit(alice)  # half the budget used
    rate.set_sharers(2)  # budget 2, half used: one more
    rate.admit(alice)
    with pytest.raises(RateLimitedError):
        rate.admit(alice)


def test_a_request_larger_than_one_gateways_token_share_still_runs_on_a_full_budget():
    clock = FakeClock(1000.0)
    rate = KeyRateLimiter(clock=clock, sharers=4)
    alice = Caller("alice", KeyLimits(tpm=1000))
    rate.admit(alice).reserve_tokens(600)  # > 1000 / 4, <= 1000: lent by the full bucket
    with pytest.raises(RateLimitedError):  # in debt until the share refills
        rate.admit(alice).reserve_tokens(10)
    with pytest.raises(InvalidRequestError):  # more than the key may ever use
        rate.admit(alice).reserve_tokens(1001)
