import pytest

from serving.errors import OverloadedError
from serving.gateway.admission import AdmissionController


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
