"""The header-obeying client's arithmetic (pure): OpenAI's reset durations read back,
and the wait it derives from a last answer's headers."""

import pytest

from benchmarks.rate_limit_headers import parse_reset, wait_before
from serving.admission.rate_headers import format_reset


@pytest.mark.parametrize("seconds", [0.0, 0.25, 1.0, 1.5, 360.0, 3723.5])
def test_every_reset_the_gateway_writes_reads_back(seconds):
    assert parse_reset(format_reset(seconds)) == pytest.approx(seconds)


def test_a_reset_that_is_not_a_duration_is_refused():
    with pytest.raises(ValueError):
        parse_reset("soon")


def test_the_wait_is_the_reset_of_each_budget_that_cannot_take_the_request():
    headers = {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "2s",
               "x-ratelimit-remaining-tokens": "90", "x-ratelimit-reset-tokens": "1.5s"}
    assert wait_before(headers, reserve_tokens=80) == 0.0
    assert wait_before(headers, reserve_tokens=100) == 1.5
    assert wait_before(headers | {"x-ratelimit-remaining-requests": "0"}, reserve_tokens=100) == 2.0
    assert wait_before({}, reserve_tokens=100) == 0.0  # a key without limits sends no headers
