"""The rollout's state machine: steps in order, promotion, automatic and operator
roll-back, holding before 100%, refusals in the wrong phase."""

import pytest

from serving.config.rollout import RolloutPlan
from serving.errors import InvalidRequestError
from serving.rollout.judge import Outcome, Verdict
from serving.rollout.machine import ActionKind, Phase, Rollout

PASS, WAIT = Verdict(Outcome.PASS, ()), Verdict(Outcome.WAIT, ())
FAIL = Verdict(Outcome.FAIL, (), ("error rate 50% above stable's 2%",))


def started(**plan):
    rollout, action, _ = Rollout(RolloutPlan(model="clinic", canary="clinic-v2", **plan), "clinic").loaded()
    return rollout, action


def test_a_good_canary_walks_every_step_then_retires_the_stable_version():
    rollout, action = started()
    weights = [action.percent]
    while True:
        rollout, action, _ = rollout.judged(PASS)
        if action.kind is not ActionKind.SET_WEIGHT:
            break
        weights.append(action.percent)
    assert weights == [5, 25, 50, 100]
    assert (rollout.phase, action.kind, rollout.percent) == (Phase.PROMOTING, ActionKind.RETIRE_STABLE, 100)
    rollout, action, line = rollout.retired()
    assert rollout.phase is Phase.PROMOTED and action.kind is ActionKind.NONE and "clinic-v2" in line


def test_a_regression_rolls_back_with_its_reason_and_waiting_changes_nothing():
    rollout, _ = started()
    rollout, action, _ = rollout.judged(PASS)
    same, action, _ = rollout.judged(WAIT)
    assert same == rollout and action.kind is ActionKind.NONE
    rollout, action, line = rollout.judged(FAIL)
    assert (rollout.phase, action.kind, rollout.percent) == (Phase.ROLLING_BACK, ActionKind.RETIRE_CANARY, 0)
    assert "error rate" in rollout.reason and "25%" in line
    rollout, _, _ = rollout.retired()
    assert rollout.phase is Phase.ROLLED_BACK and not rollout.running


def test_without_auto_promote_it_holds_before_100_until_the_operator_promotes():
    rollout, _ = started(steps=(10, 100), auto_promote=False)
    rollout, action, _ = rollout.judged(PASS)
    assert rollout.phase is Phase.HOLDING and action.kind is ActionKind.NONE and rollout.percent == 10
    rollout, action, _ = rollout.promote()
    assert rollout.phase is Phase.PROMOTING and action.kind is ActionKind.RETIRE_STABLE


def test_the_operator_aborts_and_cannot_promote_or_abort_twice():
    rollout, _ = started()
    rollout, action, _ = rollout.abort()
    assert rollout.phase is Phase.ROLLING_BACK and action.kind is ActionKind.RETIRE_CANARY
    for command in (rollout.promote, rollout.abort):
        with pytest.raises(InvalidRequestError, match="rolling_back"):
            command()


def test_a_canary_that_does_not_load_fails_without_touching_traffic():
    rollout = Rollout(RolloutPlan(model="clinic", canary="clinic-v2"), "clinic")
    rollout, action, line = rollout.load_failed("DoRA is not supported")
    assert rollout.phase is Phase.FAILED and action.kind is ActionKind.NONE and rollout.percent == 0
    assert "DoRA" in line and not rollout.running
