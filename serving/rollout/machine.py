"""A rollout's state machine (pure): which step it is at, and what to do on each event.

    loading --loaded--> step 0 --pass--> step 1 ... --pass at 100%--> promoting --retired--> promoted
        |                  |--fail / abort--> rolling back --retired--> rolled back
        '--load failed--> failed (the stable version never stopped serving)

Without ``auto_promote`` the rollout holds at the step before 100% until the operator
promotes. ``promote`` from any running state jumps to 100% and retires the stable
version; ``abort`` rolls back. Every transition returns the :class:`Action` the I/O side
carries out and a log line."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from serving.config.rollout import RolloutPlan
from serving.errors import InvalidRequestError
from serving.rollout.judge import Outcome, Verdict


class Phase(enum.StrEnum):
    LOADING = "loading"
    STEPPING = "stepping"
    HOLDING = "holding"  # judged good up to the last step before 100%, waiting for `promote`
    PROMOTING = "promoting"  # 100% on the canary; the stable version drains, then unloads
    ROLLING_BACK = "rolling_back"  # 0% on the canary; it drains, then unloads
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


RUNNING = frozenset({Phase.LOADING, Phase.STEPPING, Phase.HOLDING, Phase.PROMOTING, Phase.ROLLING_BACK})


class ActionKind(enum.StrEnum):
    SET_WEIGHT = "set_weight"  # send the canary ``percent``
    RETIRE_STABLE = "retire_stable"  # 100% to the canary, drain the stable version, unload it
    RETIRE_CANARY = "retire_canary"  # 0% to the canary, drain it, unload it
    NONE = "none"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    percent: float = 0.0


@dataclass(frozen=True)
class Rollout:
    """One rollout: its plan, the adapter it replaces, where it stands, and why."""

    plan: RolloutPlan
    stable: str
    phase: Phase = Phase.LOADING
    step: int = -1  # index into plan.steps (-1: not started)
    reason: str = ""

    @property
    def running(self) -> bool:
        return self.phase in RUNNING

    @property
    def percent(self) -> float:
        """The canary's share now."""
        if self.phase in (Phase.PROMOTING, Phase.PROMOTED):
            return 100.0
        if self.step < 0 or self.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.FAILED):
            return 0.0
        return self.plan.steps[self.step]

    def loaded(self) -> tuple["Rollout", Action, str]:
        self._expect(Phase.LOADING)
        first = self.plan.steps[0]
        return self._to(Phase.STEPPING, step=0), Action(ActionKind.SET_WEIGHT, first), f"canary loaded; {first:g}%"

    def load_failed(self, why: str) -> tuple["Rollout", Action, str]:
        self._expect(Phase.LOADING)
        return self._to(Phase.FAILED, reason=why), Action(ActionKind.NONE), f"canary refused: {why}"

    def judged(self, verdict: Verdict) -> tuple["Rollout", Action, str]:
        """The step's verdict: stay (WAIT), next step, hold, promote, or roll back."""
        self._expect(Phase.STEPPING)
        now = self.plan.steps[self.step]
        if verdict.outcome is Outcome.WAIT:
            return self, Action(ActionKind.NONE), f"{now:g}%: waiting ({'; '.join(verdict.findings)})"
        if verdict.outcome is Outcome.FAIL:
            why = "; ".join(verdict.reasons)
            return (self._to(Phase.ROLLING_BACK, reason=why), Action(ActionKind.RETIRE_CANARY),
                    f"{now:g}%: regression, rolling back: {why}")
        if self.step == len(self.plan.steps) - 1:
            return self._promoting(f"{now:g}%: passed; promoting")
        after = self.plan.steps[self.step + 1]
        if after >= 100 and not self.plan.auto_promote:
            return (self._to(Phase.HOLDING), Action(ActionKind.NONE),
                    f"{now:g}%: passed; holding for `serving rollout promote`")
        return (self._to(Phase.STEPPING, step=self.step + 1), Action(ActionKind.SET_WEIGHT, after),
                f"{now:g}%: passed; {after:g}%")

    def promote(self) -> tuple["Rollout", Action, str]:
        """The operator's promotion: 100% now, whatever the step."""
        if self.phase not in (Phase.STEPPING, Phase.HOLDING):
            raise InvalidRequestError(f"the rollout of {self.plan.model!r} is {self.phase}: nothing to promote")
        return self._promoting("promoted by the operator")

    def abort(self, why: str = "aborted by the operator") -> tuple["Rollout", Action, str]:
        if self.phase not in (Phase.STEPPING, Phase.HOLDING):
            raise InvalidRequestError(f"the rollout of {self.plan.model!r} is {self.phase}: nothing to abort")
        return self._to(Phase.ROLLING_BACK, reason=why), Action(ActionKind.RETIRE_CANARY), f"rolling back: {why}"

    def retired(self) -> tuple["Rollout", Action, str]:
        """The retired version drained and unloaded: the rollout is over."""
        if self.phase is Phase.PROMOTING:
            return self._to(Phase.PROMOTED), Action(ActionKind.NONE), f"promoted: {self.plan.canary} serves 100%"
        self._expect(Phase.ROLLING_BACK)
        return (self._to(Phase.ROLLED_BACK), Action(ActionKind.NONE),
                f"rolled back: {self.stable} serves 100%, {self.plan.canary} unloaded")

    def _promoting(self, line: str) -> tuple["Rollout", Action, str]:
        return self._to(Phase.PROMOTING, step=len(self.plan.steps) - 1), Action(ActionKind.RETIRE_STABLE), line

    def _to(self, phase: Phase, **changes) -> "Rollout":
        return dataclasses.replace(self, phase=phase, **changes)

    def _expect(self, *phases: Phase) -> None:
        if self.phase not in phases:
            raise InvalidRequestError(f"the rollout of {self.plan.model!r} is {self.phase}, not {phases[0]}")
