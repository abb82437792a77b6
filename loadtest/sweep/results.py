"""What a measurement gives: load points, a candidate's measured result, a run record.

A *trial* asks for one candidate to be deployed once and load-tested at one or more
offered rates (ascending). Each rate gives a :class:`LoadPoint`, built by the
orchestration from the load tester's summary of that run.
"""

from __future__ import annotations

import enum
import itertools
import math

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, model_validator

from loadtest.sweep.base import Strict
from loadtest.sweep.candidate import Candidate


class RunStatus(enum.StrEnum):
    OK = "ok"
    FAILED_TO_DEPLOY = "failed-to-deploy"
    CRASHED = "crashed"


class TrialPurpose(enum.StrEnum):
    """Why a trial was proposed: a one-replica capacity probe or a run at the target."""

    PROBE = "probe"
    TARGET = "target"


def same_rate(a: float, b: float) -> bool:
    """Offered rates are compared with a relative tolerance (they come from divisions)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _ascending(rates: tuple[float, ...], what: str) -> None:
    if any(not b > a or same_rate(a, b) for a, b in itertools.pairwise(rates)):
        raise ValueError(f"{what} must be strictly ascending: {list(rates)}")


class LoadPoint(Strict):
    """The figures of one load test at one offered rate (the measured window only).

    Latencies are seconds and ``None`` when no request succeeded. ``requests_good``
    counts requests that met every per-request latency objective (the goodput
    numerator). ``generator_saturated`` is the load tester's warning that its own
    CPU limited the run, making the figures untrustworthy.
    """

    offered_rps: PositiveFloat
    duration_s: PositiveFloat
    requests_sent: NonNegativeInt
    requests_ok: NonNegativeInt
    requests_good: NonNegativeInt
    achieved_rps: NonNegativeFloat = Field(description="successful requests per second")
    output_tokens_per_s: NonNegativeFloat
    ttft_p95_s: NonNegativeFloat | None = None
    tpot_p95_s: NonNegativeFloat | None = None
    e2e_p95_s: NonNegativeFloat | None = None
    goodput_rps: NonNegativeFloat = 0.0
    generator_saturated: bool = False

    @model_validator(mode="after")
    def _counts(self) -> LoadPoint:
        if self.requests_good > self.requests_ok or self.requests_ok > self.requests_sent:
            raise ValueError("need requests_good <= requests_ok <= requests_sent")
        return self

    @property
    def goodput_share(self) -> float | None:
        """Share of sent requests that met every per-request objective."""
        return None if self.requests_sent == 0 else self.requests_good / self.requests_sent


class Trial(Strict):
    """A request to measure ``candidate`` at each offered rate, lowest first.

    A measurer may skip the rates above one whose point fails the SLO
    (:func:`loadtest.sweep.verdicts.evaluate_point`): higher rates are then taken as failing.
    """

    candidate: Candidate
    offered_rates: tuple[PositiveFloat, ...] = Field(min_length=1)
    purpose: TrialPurpose = TrialPurpose.TARGET
    reason: str = Field("", description="why the strategy proposed it")

    @model_validator(mode="after")
    def _rates(self) -> Trial:
        _ascending(self.offered_rates, "offered_rates")
        return self


class MeasuredResult(Strict):
    """What measuring one trial gave. Non-ok results carry a reason; ok ones a point."""

    status: RunStatus
    reason: str | None = None
    points: tuple[LoadPoint, ...] = ()
    wall_time_s: NonNegativeFloat | None = Field(None, description="deploy to teardown")
    artifacts: tuple[str, ...] = Field((), description="load tester output folders, relative")

    @model_validator(mode="after")
    def _consistent(self) -> MeasuredResult:
        if self.status is not RunStatus.OK and not self.reason:
            raise ValueError(f"a {self.status.value} result needs a reason")
        if self.status is RunStatus.OK and not self.points:
            raise ValueError("an ok result needs at least one load point")
        _ascending(tuple(p.offered_rps for p in self.points), "load points' offered rates")
        return self

    def point_at(self, rate: float) -> LoadPoint | None:
        return next((p for p in self.points if same_rate(p.offered_rps, rate)), None)


class RunRecord(Strict):
    """A finished trial: what was asked and what was measured."""

    trial: Trial
    result: MeasuredResult

    @property
    def candidate(self) -> Candidate:
        return self.trial.candidate

    @property
    def ok(self) -> bool:
        return self.result.status is RunStatus.OK
