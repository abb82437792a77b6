"""The generator's shared pacing state, driven by a fake clock."""

import time

from loadtest.generator.context import RunContext
from loadtest.workloads import Session, Turn, WorkloadPlan
from tests.fakes import FakeClock

PLAN = WorkloadPlan(sessions=tuple(Session(id=i, turns=(Turn(content=str(i)),)) for i in range(3)))


def context(**kwargs):
    clock = FakeClock(100.0)
    kwargs.setdefault("arrivals", None)
    kwargs.setdefault("max_requests", None)
    kwargs.setdefault("load_duration_s", None)
    run = RunContext(plan=PLAN, clock=clock, **kwargs)
    run.start()
    return run, clock


def test_sessions_cycle_and_count_wraps():
    run, _ = context()
    ids = [run.next_session().id for _ in range(7)]
    assert ids == [0, 1, 2, 0, 1, 2, 0] and run.session_wraps == 2


def test_request_budget():
    run, _ = context(max_requests=2)
    assert run.take_request() == 0 and run.take_request() == 1
    assert run.take_request() is None and not run.issuing()
    assert not run.done()  # two in flight
    run.finish(None)
    run.finish(None)
    assert run.done() and run.completed == 2


def test_duration_stops_issuing():
    run, clock = context(load_duration_s=10.0)
    assert run.issuing() and run.take_request() == 0
    clock.now += 10.0
    assert run.now() == 10.0 and not run.issuing() and run.take_request() is None
    run.finish(None)
    assert run.done()


def test_open_loop_arrivals():
    run, clock = context(arrivals=[0.0, 0.5, 1.0, 12.0], load_duration_s=10.0)
    assert run.open_loop
    assert [run.take_arrival() for _ in range(3)] == [0.0, 0.5, 1.0]
    assert run.take_arrival() is None  # beyond the duration
    run2, _ = context(arrivals=[0.0])
    assert run2.take_arrival() == 0.0 and run2.take_arrival() is None
    assert not run2.issuing() and run2.done()


def test_session_in_think_time_keeps_the_stage_alive():
    run, _ = context(arrivals=[0.0])
    run.take_arrival()
    run.session_started()
    assert not run.done()
    run.session_ended()
    assert run.done()


def test_stop():
    run, _ = context()
    run.stop()
    assert not run.issuing() and run.take_request() is None and run.done()


def test_a_workers_ids_interleave_with_the_others_and_never_collide():
    runs = [context(slot=k, slots=3, max_requests=4)[0] for k in range(3)]
    requests = [r.take_request() for r in runs for _ in range(4)]
    users = [r.user_index() for r in runs for _ in range(2)]
    assert sorted(requests) == list(range(12)) and sorted(users) == [0, 1, 2, 3, 4, 5]
    assert runs[1].take_request() is None  # its own part of the budget is spent


def test_a_worker_with_no_budget_is_done_at_once():
    run, _ = context(max_requests=0, arrivals=[])
    assert not run.issuing() and run.done()


def test_start_at_a_unix_time_sets_the_shared_zero():
    run, clock = context()
    run.start_at(time.time() + 5.0)  # the master's zero, a moment ahead
    assert -5.5 < run.now() < -4.5  # before the zero the stage clock is negative
    clock.now += 5.0
    assert abs(run.now()) < 0.5


def test_the_last_arrival_taken_is_remembered():
    """Users that take every arrival at once (more users than arrivals) leave the stage
    issuing nothing more; its drain must start at the last arrival, not now."""
    run, _ = context(arrivals=[0.0, 5.0, 9.0], load_duration_s=20.0)
    while run.take_arrival() is not None:
        pass
    assert not run.issuing() and run.last_arrival_s == 9.0
