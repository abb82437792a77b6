"""Token-weighted fair sharing of one class (VTC at a refusing bound), simulated with a
fake clock: closed-loop senders that retry after Retry-After, as the OpenAI SDK does."""

import heapq
import math
from collections import Counter

import pytest

from serving.admission.bound import AdmissionController
from serving.config.priority import PrioritySpec
from serving.errors import OverloadedError
from tests.fakes import FakeClock

OUTPUT = 50


def saturate(controller, clock, prompts, *, senders=8, seconds=120.0, hold_s=1.0, weights=None):
    """Each key of ``prompts`` (key -> prompt tokens) runs ``senders`` closed-loop senders;
    an admitted request holds its slot ``hold_s`` and generates ``OUTPUT`` tokens, a
    refused one retries after 1 s. Returns the weighted tokens (1 per prompt token, 2 per
    output token) served per key, and the 429s per key."""
    weights = weights or {}
    events, seq, served, refused = [], 0, Counter(), Counter()
    occupancy = [0.0, 0.0]  # slot-seconds held, and the time they were counted until
    for key in prompts:
        for i in range(senders):
            heapq.heappush(events, (i * 0.01, seq := seq + 1, key, None))
    while events:
        at, _, key, ticket = heapq.heappop(events)
        if at > seconds:
            break
        occupancy[0] += controller.in_flight * (at - occupancy[1])
        occupancy[1] = clock.now = at
        if ticket is not None:  # a request ends; its sender sends the next one at once
            ticket.release(OUTPUT)
            served[key] += prompts[key] + 2 * OUTPUT
        try:
            new = controller.admit(key, weight=weights.get(key, 1.0))
        except OverloadedError:
            refused[key] += 1
            heapq.heappush(events, (at + 1.0, seq := seq + 1, key, None))
            continue
        new.charge(prompts[key])
        heapq.heappush(events, (at + hold_s, seq := seq + 1, key, new))
    saturate.occupancy = occupancy[0] / (occupancy[1] * controller.limit)
    return served, refused


def test_two_keys_one_with_prompts_4x_longer_get_equal_tokens():
    clock = FakeClock()
    served, refused = saturate(AdmissionController(4, clock=clock), clock, {"long": 400, "short": 100})
    share = served["long"] / (served["long"] + served["short"])
    assert 0.4 <= share <= 0.6, (served, refused)
    assert refused["long"] > refused["short"]


def test_request_count_sharing_the_control_gives_the_long_prompts_more_tokens():
    # A tolerance no lead reaches makes no key favoured: each active key is held to its
    # equal part of the bound, i.e. the request-count fair share this scheme replaced.
    clock = FakeClock()
    controller = AdmissionController(4, clock=clock, priority=PrioritySpec(tolerance=math.inf))
    served, _ = saturate(controller, clock, {"long": 400, "short": 100})
    assert served["long"] / (served["long"] + served["short"]) > 0.65, served


def test_a_key_of_weight_2_gets_twice_the_tokens():
    clock = FakeClock()
    served, _ = saturate(AdmissionController(6, clock=clock), clock, {"gold": 100, "plain": 100},
                         weights={"gold": 2.0})
    assert 1.6 <= served["gold"] / served["plain"] <= 2.4, served


def test_the_bound_stays_nearly_full_while_both_keys_want_more():
    # A slot is held free only for the retry of a key served less (at most
    # retry_after_s + 1 s); the control (equal parts) never holds one free here.
    clock = FakeClock()
    saturate(AdmissionController(4, clock=clock), clock, {"long": 400, "short": 100})
    assert saturate.occupancy >= 0.9, saturate.occupancy


def test_an_idle_key_cannot_bank_credit():
    clock = FakeClock()
    controller = AdmissionController(8, active_window_s=5.0, clock=clock)
    controller.admit("early").release()  # seen at t=0, then idle for long
    clock.now = 100.0
    for _ in range(3):
        controller.admit("busy").charge(1000)
    assert controller.counter("busy") == 3000
    controller.admit("early")  # active again: lifted to the lowest active counter
    assert controller.counter("early") == 3000


def test_a_key_served_less_gets_the_next_free_slot():
    clock = FakeClock()
    controller = AdmissionController(2, clock=clock)
    controller.admit("b").release()  # b active, served nothing
    ticket = controller.admit("a")
    ticket.charge(100)
    controller.admit("b")  # served less: b may go past its equal part (1 of 2)...
    with pytest.raises(OverloadedError) as err:
        controller.admit("b")  # ...up to the bound: then it waits
    assert err.value.reason == "overloaded"
    ticket.release(10)
    with pytest.raises(OverloadedError) as err:
        controller.admit("a")  # a slot is free, but b (served less) waits for it
    assert err.value.reason == "fair_share" and "`b`" in err.value.message
    controller.admit("b")  # b's retry finds it
