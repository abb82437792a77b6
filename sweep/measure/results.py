"""What a measurement gives: load points, a candidate's measured result, a run record.

A *trial* asks for one candidate to be deployed once and load-tested at one or more
offered rates (ascending), then ``refine`` bisections below its first failure. Each
rate gives a :class:`LoadPoint`, built by the orchestration from the load tester's
summary of one run, or combined from several runs with new seeds
(:mod:`sweep.measure.sampling`).
"""

from __future__ import annotations

import enum
import itertools
import math

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from loadtest.analysis.slo import Metric
from sweep.spec.space import DeploymentCandidate
from sweep.strict import Strict


class RunStatus(enum.StrEnum):
    """How a trial ended. Only a deploy failure says something about the candidate's
    other replica counts; a crash or a tool error says nothing about them."""

    OK = "ok"
    FAILED_TO_DEPLOY = "failed-to-deploy"
    CRASHED = "crashed"
    TOOL_ERROR = "tool-error"


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


class Evidence(Strict):
    """The load tester's bootstrap evidence on one latency objective (``None``: not
    computed): the 95% CI of the observed p95 and the share of resamples meeting the limit."""

    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = Field(None, ge=0, le=1)


class LoadPoint(Strict):
    """The figures of one load test at one offered rate (the measured window only).

    Latencies are seconds and ``None`` when no request succeeded. ``requests_good``
    counts requests that met every per-request latency objective (the goodput
    numerator). ``evidence`` is keyed by the objective's key (``"ttft_p95"``, ...).
    ``arrival_rps`` is the rate the generator actually sent: the point is
    judged at it (:attr:`rate_rps`). ``invalid_reasons`` says why the load tester
    does not trust the measurement (late arrivals, its concurrency cap, a saturated
    or lagging generator, a rate short of the offered one): such a point is neither
    a pass nor a failure. ``seeds`` are the arrival seeds of the samples combined.
    """

    offered_rps: PositiveFloat
    duration_s: PositiveFloat
    requests_sent: NonNegativeInt
    requests_ok: NonNegativeInt
    requests_good: NonNegativeInt
    achieved_rps: NonNegativeFloat = Field(description="successful requests per second")
    arrival_rps: NonNegativeFloat | None = Field(None, description="arrivals sent per second")
    completed_rps: NonNegativeFloat | None = Field(None, description="completions in the window per second")
    output_tokens_per_s: NonNegativeFloat
    ttft_p95_s: NonNegativeFloat | None = None
    tpot_p95_s: NonNegativeFloat | None = None
    e2e_p95_s: NonNegativeFloat | None = None
    goodput_rps: NonNegativeFloat = 0.0
    evidence: dict[str, Evidence] = {}
    invalid_reasons: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _counts(self) -> LoadPoint:
        if self.requests_good > self.requests_ok or self.requests_ok > self.requests_sent:
            raise ValueError("need requests_good <= requests_ok <= requests_sent")
        return self

    @property
    def goodput_share(self) -> float | None:
        """Share of sent requests that met every per-request objective."""
        return None if self.requests_sent == 0 else self.requests_good / self.requests_sent

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    @property
    def samples(self) -> int:
        """How many load tests this point combines."""
        return max(1, len(self.seeds))

    @property
    def rate_rps(self) -> float:
        """The rate the point is judged at: what was actually sent, else the offered rate."""
        return self.offered_rps if self.arrival_rps is None else self.arrival_rps

    def p95(self, metric: Metric) -> float | None:
        """The observed p95 of a latency metric (TTFT, TPOT or E2E)."""
        return {Metric.TTFT: self.ttft_p95_s, Metric.TPOT: self.tpot_p95_s, Metric.E2E: self.e2e_p95_s}[metric]


class Trial(Strict):
    """A request to measure ``candidate`` at each offered rate, lowest first.

    A measurer skips the rates above one whose point does not pass the SLO
    (:func:`sweep.measure.verdicts.evaluate_point`): higher rates are then taken as
    failing (or invalid). It then bisects ``refine`` times between the highest
    passing and the lowest non-passing rate (:func:`sweep.measure.sampling.measure_rates`).
    """

    candidate: DeploymentCandidate
    offered_rates: tuple[PositiveFloat, ...] = Field(min_length=1)
    refine: int = Field(0, ge=0, le=8, description="bisections after the first failure")
    purpose: TrialPurpose = TrialPurpose.TARGET
    reason: str = Field("", description="why the strategy proposed it")

    @model_validator(mode="after")
    def _rates(self) -> Trial:
        _ascending(self.offered_rates, "offered_rates")
        return self


class QualityMeasurement(Strict):
    """The quality probe on one deployment: ``correct`` of ``items`` answers right
    (a failed request is graded wrong and counted in ``errors``); ``wrong``: their ids."""

    set: str
    items: PositiveInt
    correct: NonNegativeInt
    errors: NonNegativeInt = 0
    wrong: tuple[str, ...] = ()
    wall_time_s: NonNegativeFloat | None = Field(None, description="the probe, first request to last answer")

    @model_validator(mode="after")
    def _counts(self) -> QualityMeasurement:
        if self.correct > self.items or len(self.wrong) != self.items - self.correct:
            raise ValueError("need correct <= items and one wrong id per wrong answer")
        return self


class MeasuredResult(Strict):
    """What measuring one trial gave. Non-ok results carry a reason; ok ones a point;
    ``quality`` when the spec asks for it and the deployment answered the probe."""

    status: RunStatus
    reason: str | None = None
    points: tuple[LoadPoint, ...] = ()
    quality: QualityMeasurement | None = None
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
    def candidate(self) -> DeploymentCandidate:
        return self.trial.candidate

    @property
    def ok(self) -> bool:
        return self.result.status is RunStatus.OK
