"""A rollout's plan and a stack's traffic splits: what is refused, and why."""

import pytest
from pydantic import ValidationError

from serving.config.rollout import RolloutPlan, TrafficSplit, split_problems

ADAPTERS, BASES = ("clinic", "clinic-v2", "pharmacy"), ("smollm2-135m-instruct",)


@pytest.mark.parametrize(("steps", "words"), [
    ((5, 5, 100), "must increase"), ((50, 25, 100), "must increase"), ((5, 50), "last step"),
    ((0, 100), "(0, 100]"), ((5, 120), "(0, 100]"), ((), "at least 1"),
])
def test_steps_must_increase_to_100(steps, words):
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace("]", r"\]")):
        RolloutPlan(model="clinic", canary="clinic-v2", steps=steps)


def test_the_default_plan_steps_5_25_50_100():
    assert RolloutPlan(model="clinic", canary="clinic-v2").steps == (5, 25, 50, 100)


def test_a_split_needs_two_versions_and_a_canary_to_weigh():
    with pytest.raises(ValidationError, match="another adapter"):
        TrafficSplit(name="clinic", stable="clinic", canary="clinic", canary_percent=5)
    with pytest.raises(ValidationError, match="no canary"):
        TrafficSplit(name="clinic", stable="clinic", canary_percent=5)


def test_the_stack_refuses_splits_that_name_what_it_does_not_serve():
    ok = (TrafficSplit(name="clinic", stable="clinic", canary="clinic-v2", canary_percent=25),
          TrafficSplit(name="support", stable="pharmacy"))
    assert split_problems(ok, ADAPTERS, BASES) == []
    bad = (TrafficSplit(name="smollm2-135m-instruct", stable="clinic"),
           TrafficSplit(name="pharmacy", stable="clinic"),
           TrafficSplit(name="x", stable="clinic", canary="radiology", canary_percent=5),
           TrafficSplit(name="x", stable="clinic"))
    problems = "\n".join(split_problems(bad, ADAPTERS, BASES))
    for words in ("is a base model", "must be itself", "'radiology', which is not a served adapter",
                  "two traffic splits"):
        assert words in problems
