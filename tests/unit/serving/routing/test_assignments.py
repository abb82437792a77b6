from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.config.stack import RoutingPolicyName
from serving.routing.assignments import Assignment, AssignmentTracker
from serving.routing.policy import RoutingDecision


def to(replica_id: str) -> Assignment:
    return Assignment(replica_id, RoutingPolicyName.LEAST_LOADED, RoutingDecision.LEAST_LOADED)


def test_counts_requests_until_they_are_released():
    tracker = AssignmentTracker()
    tracker.assign("q1", to("a"))
    tracker.assign("q2", to("a"))
    tracker.assign("q3", to("b"))
    assert (tracker.count("a"), tracker.count("b")) == (2, 1)
    tracker.release("q1")
    tracker.release("q1")  # a second completion notice is harmless
    tracker.release("unknown")
    assert (tracker.count("a"), tracker.count("b")) == (1, 1)


def test_a_retry_or_a_move_counts_the_request_once_where_it_went():
    tracker = AssignmentTracker()
    tracker.assign("q", to("a"))
    tracker.assign("q", to("b"))  # routing retried
    assert (tracker.count("a"), tracker.count("b")) == (0, 1)
    original = tracker.move("q", "c")  # Serve sent it past the first rank
    assert original == to("b")
    assert (tracker.count("b"), tracker.count("c")) == (0, 1)
    assert tracker.move("never-assigned", "c") is None


def test_requests_on_replicas_that_left_are_dropped():
    tracker = AssignmentTracker()
    tracker.assign("q1", to("a"))
    tracker.assign("q2", to("b"))
    tracker.retain({"b"})
    assert "q1" not in tracker and tracker.count("a") == 0 and tracker.count("b") == 1


def test_bound_must_be_positive():
    with pytest.raises(ValueError):
        AssignmentTracker(0)


ops = st.lists(
    st.tuples(st.sampled_from(["assign", "move", "release"]), st.integers(0, 9), st.sampled_from("abc")),
    max_size=60,
)


@given(ops, st.integers(1, 6))
def test_counts_match_a_model_and_stay_bounded(operations, bound):
    tracker = AssignmentTracker(bound)
    model: dict[str, str] = {}  # insertion-ordered, like the tracker
    for op, n, replica in operations:
        request = f"q{n}"
        if op == "assign":
            model.pop(request, None)
            model[request] = replica
            while len(model) > bound:
                del model[next(iter(model))]
            tracker.assign(request, to(replica))
        elif op == "move":
            if request in model:
                model[request] = replica
            tracker.move(request, replica)
        else:
            model.pop(request, None)
            tracker.release(request)
        assert len(tracker) == len(model) <= bound
        expected = Counter(model.values())
        assert all(tracker.count(r) == expected[r] for r in "abc")
