import pytest

from serving.errors import OverloadedError
from serving.admission.bound import AdmissionController, share_of


def test_admits_up_to_the_limit_then_refuses():
    controller = AdmissionController(2, retry_after_s=5)
    tickets = [controller.admit(), controller.admit()]
    with pytest.raises(OverloadedError) as err:
        controller.admit()
    assert err.value.retry_after_s == 5
    tickets[0].release()
    controller.admit()
    assert controller.in_flight == 2


def test_double_release_does_not_free_two_slots():
    controller = AdmissionController(1)
    ticket = controller.admit()
    ticket.release()
    ticket.release()
    assert controller.in_flight == 0
    controller.admit()
    with pytest.raises(OverloadedError):
        controller.admit()


# --- per key: concurrency and fair sharing (with a FAKE clock) ------------------------

from collections import Counter  # noqa: E402

from serving.errors import RateLimitedError  # noqa: E402
from tests.fakes import FakeClock  # noqa: E402


def test_a_keys_concurrency_limit_is_its_own_429():
    controller = AdmissionController(10, retry_after_s=2)
    controller.admit("alice", concurrency=1)
    with pytest.raises(RateLimitedError) as err:
        controller.admit("alice", concurrency=1)
    assert err.value.reason == "concurrency" and err.value.retry_after_s == 2
    controller.admit("bob", concurrency=1)


def test_a_key_alone_may_use_the_whole_bound():
    controller = AdmissionController(4, clock=FakeClock())
    for _ in range(4):
        controller.admit("alice")
    with pytest.raises(OverloadedError) as err:
        controller.admit("alice")
    assert err.value.reason == "overloaded"


def test_a_key_ahead_is_capped_at_its_equal_part_while_another_key_is_active():
    clock = FakeClock()
    controller = AdmissionController(4, active_window_s=5.0, clock=clock)
    controller.admit("bob").release()  # bob seen at t=0, nothing served
    for _ in range(2):
        controller.admit("alice").charge(10)  # alice now ahead of bob
    with pytest.raises(OverloadedError) as err:
        controller.admit("alice")
    assert err.value.reason == "fair_share" and controller.fair_share() == 2
    clock.now = 5.1  # bob idle past the window: alice is alone again
    controller.admit("alice")
    assert controller.in_flight_of("alice") == 3 and controller.active_keys() == 1


def test_the_least_served_key_may_fill_the_whole_bound():
    controller = AdmissionController(4, clock=FakeClock())
    controller.admit("alice").release()  # active, served nothing
    controller.admit("bob").charge(5)
    for _ in range(3):  # alice was served less than bob: no equal part caps her
        controller.admit("alice")
    with pytest.raises(OverloadedError) as err:
        controller.admit("bob")
    assert err.value.reason == "overloaded"


def simulate(controller, clock, key_of_heavy, key_of_light, seconds=10.0, hold_s=1.0):
    """Heavy sends 6 requests/s, light 2/s (a third of it), evenly spaced; each admitted
    request of 20 prompt and 10 output tokens holds its slot for ``hold_s``. Returns
    statuses counted per sender."""
    arrivals = [(k / 6, "heavy") for k in range(int(seconds * 6))]
    arrivals += [(0.05 + k / 2, "light") for k in range(int(seconds * 2))]
    held, counts = [], Counter()
    for at, sender in sorted(arrivals):
        clock.now = at
        for ends, ticket in [h for h in held if h[0] <= at]:
            ticket.release(10)
            held.remove((ends, ticket))
        try:
            ticket = controller.admit(key_of_heavy if sender == "heavy" else key_of_light)
        except OverloadedError:
            counts[sender, 429] += 1
        else:
            ticket.charge(20)
            counts[sender, 200] += 1
            held.append((at + hold_s, ticket))
        assert controller.in_flight <= controller.limit  # the global bound still holds
    return counts


def test_fair_share_the_light_key_is_always_admitted_and_the_heavy_key_takes_the_429s():
    clock = FakeClock()
    counts = simulate(AdmissionController(4, clock=clock), clock, "heavy", "light")
    assert counts["light", 200] == 20 and counts["light", 429] == 0
    assert counts["heavy", 429] > 0 and counts["heavy", 200] + counts["heavy", 429] == 60
    assert counts["heavy", 200] >= counts["light", 200]  # heavy still gets its full share


def test_without_keys_the_same_load_refuses_the_light_sender():
    # The control: one shared key (the plain bound) lets the heavy sender crowd out the light one.
    clock = FakeClock()
    counts = simulate(AdmissionController(4, clock=clock), clock, "anonymous", "anonymous")
    assert counts["light", 429] > 0


def test_each_gateway_replica_admits_its_share_of_the_app_bound():
    assert [share_of(10, n) for n in (1, 2, 3, 4, 20)] == [10, 5, 3, 2, 1]
    gateways = [AdmissionController(10, sharers=3) for _ in range(3)]
    admitted = 0
    for controller in gateways:
        for _ in range(10):
            try:
                controller.admit("k")
                admitted += 1
            except OverloadedError:
                pass
    assert admitted == 9  # never more than the app's bound of 10 together


def test_the_share_follows_the_gateway_count_and_keeps_requests_in_flight():
    controller = AdmissionController(8, sharers=1)
    tickets = [controller.admit("k") for _ in range(6)]
    controller.set_sharers(2)
    assert controller.limit == 4 and controller.in_flight == 6
    with pytest.raises(OverloadedError):
        controller.admit("k")
    for ticket in tickets[:3]:
        ticket.release()
    controller.admit("k")  # 3 + 1 <= 4


def test_a_keys_concurrency_is_shared_between_gateway_replicas():
    controller = AdmissionController(100, sharers=2)
    controller.admit("k", concurrency=4)
    controller.admit("k", concurrency=4)
    with pytest.raises(RateLimitedError, match="2 through each of 2 gateway replicas"):
        controller.admit("k", concurrency=4)


def test_a_key_that_can_no_longer_send_stops_taking_a_fair_share():
    clock = [0.0]
    admission = AdmissionController(4, active_window_s=120, clock=lambda: clock[0])
    admission.admit("old").release()
    admission.admit("heavy").charge(5)
    assert admission.active_keys() == 2 and admission.fair_share() == 2
    admission.retain_keys({"heavy", "light"})  # the keys file no longer has "old"
    assert admission.active_keys() == 1 and admission.fair_share() == 4
