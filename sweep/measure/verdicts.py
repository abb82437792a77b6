"""Judging measurements against the SLO (pure), with the load tester's objective model.

Each objective the SLO sets (:attr:`sweep.spec.sweep_spec.SloSpec.objectives`) gets the load
tester's verdict, a :class:`~loadtest.analysis.slo.ObjectiveResult`, whose *ratio* is
1.0 exactly at the limit and below 1.0 passing:

- latency objectives (p95 TTFT / TPOT / E2E, upper bounds): ``observed / limit``;
- the goodput share (a lower bound): ``min_goodput_share / observed_share``.

The *margin* is ``1 - ratio``: the fraction of the limit left (negative = violated
by that fraction). A ratio is ``None`` when the figure could not be measured (no
successful request, or a goodput share of zero); that objective fails and counts as
infinitely far off. The *worst ratio* of a point is the largest of its ratios; the
"closest" failing configuration is the one with the smallest worst ratio.

Each objective also gets a *confidence*: the share of bootstrap resamples of the
run's requests in which it holds (the load tester's figure for latencies; its
proportion bootstrap, :func:`~loadtest.analysis.slo.judge_share`, for the goodput
share). A point's confidence is that of its verdict, by the load tester's rule
(:func:`~loadtest.analysis.slo.verdict_confidence`): for a pass the least sure
objective's, for a failure the surest failed objective's ``1 - confidence``.

A point the load tester marked invalid is neither a pass nor a failure
(:attr:`Outcome.INVALID`). A point is *near the boundary* when its verdict hangs on
objectives within ``boundary_margin`` of their limits: a pass with any objective
there, a failure with every failed objective there. Each objective is measured on
its own scale: a latency by its ratio, the goodput share by its error budget
(``(1 - share) / (1 - minimum)``: 100% good against a 90% minimum is far from it,
89% is near). A point is *settled* when it is valid and not near the boundary, or
already combines ``max_samples`` samples.

Record level: rates are measured lowest first and a measurer stops after a point
that does not pass, so a rate above a failing one is taken as failing (load only
makes latency worse) and a rate above an invalid one as invalid.
"""

from __future__ import annotations

import enum
import math

from loadtest.analysis.slo import Metric, Objective, ObjectiveResult, judge_share, verdict_confidence
from sweep.measure.results import LoadPoint, RunRecord, RunStatus, same_rate
from sweep.spec.sweep_spec import SearchSettings, SloSpec
from sweep.strict import Strict


class Outcome(enum.StrEnum):
    """A point's or a record's outcome at one offered rate."""

    PASS = "pass"
    FAIL = "fail"
    INVALID = "invalid"
    ERROR = "error"
    UNKNOWN = "unknown"


def _ratio(result: ObjectiveResult) -> float:
    return math.inf if result.ratio is None else result.ratio


class PointVerdict(Strict):
    """Every set objective at one load point, and whether the point can be trusted."""

    offered_rps: float
    rate_rps: float
    samples: int = 1
    verdicts: tuple[ObjectiveResult, ...]
    invalid_reasons: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    @property
    def met(self) -> bool:
        """Every objective met (whether or not the measurement is valid)."""
        return all(v.passed for v in self.verdicts)

    @property
    def passed(self) -> bool:
        return self.valid and self.met

    @property
    def outcome(self) -> Outcome:
        if not self.valid:
            return Outcome.INVALID
        return Outcome.PASS if self.met else Outcome.FAIL

    @property
    def worst_ratio(self) -> float:
        """The largest ratio (``inf`` when an objective could not be measured)."""
        return max(_ratio(v) for v in self.verdicts)

    @property
    def misses(self) -> tuple[ObjectiveResult, ...]:
        """Verdicts of the failed objectives, worst first."""
        return tuple(sorted((v for v in self.verdicts if not v.passed), key=lambda v: -_ratio(v)))

    @property
    def failed(self) -> tuple[str, ...]:
        """Keys of the failed objectives (``"e2e_p95"``, ...), worst first."""
        return tuple(v.objective.key for v in self.misses)

    @property
    def confidence(self) -> float | None:
        """Confidence in this verdict (``None``: invalid, or not known for every
        objective that decides it); the load tester's rule."""
        return verdict_confidence(self.verdicts) if self.valid else None


def judge(objective: Objective, point: LoadPoint) -> ObjectiveResult:
    """The load tester's verdict on one objective at one load point: a p95 latency with
    the load tester's bootstrap evidence, or the goodput share from the point's counts."""
    if objective.metric is Metric.GOODPUT_SHARE:
        return judge_share(objective, point.requests_good, point.requests_sent)
    observed = point.p95(objective.metric)
    evidence = point.evidence.get(objective.key)
    return ObjectiveResult(
        objective=objective, observed=observed, passed=objective.holds(observed),
        **({} if evidence is None else evidence.model_dump()),
    )


def evaluate_point(point: LoadPoint, slo: SloSpec) -> PointVerdict:
    """Verdicts of one load point on every objective the SLO sets."""
    return PointVerdict(
        offered_rps=point.offered_rps, rate_rps=point.rate_rps, samples=point.samples,
        verdicts=tuple(judge(o, point) for o in slo.objectives), invalid_reasons=point.invalid_reasons,
    )


def _budget_ratio(v: ObjectiveResult) -> float:
    """Where an objective stands on its own scale, 1.0 at the limit (``inf``: unmeasured)."""
    if v.observed is None or v.ratio is None:
        return math.inf
    limit = v.objective.threshold
    if v.objective.metric is Metric.GOODPUT_SHARE and limit < 1.0:
        return (1.0 - v.observed) / (1.0 - limit)
    return v.ratio


def near_boundary(verdict: PointVerdict, margin: float) -> bool:
    """Whether the verdict hangs on objectives within ``margin`` of their limits (a
    coin toss for one sample; see the module docstring)."""
    deciding = verdict.verdicts if verdict.met else verdict.misses
    near = [abs(_budget_ratio(v) - 1.0) <= margin for v in deciding]
    return any(near) if verdict.met else all(near)


def settled(point: LoadPoint, slo: SloSpec, search: SearchSettings) -> bool:
    """No further sample is due: valid and clear of the boundary, or out of samples."""
    if point.samples >= search.max_samples:
        return True
    verdict = evaluate_point(point, slo)
    return verdict.valid and not near_boundary(verdict, search.boundary_margin)


def outcome_at(record: RunRecord, rate: float, slo: SloSpec) -> Outcome:
    """The record's outcome at an offered ``rate`` (see the module docstring):
    measured there, else FAIL/INVALID above a failing/invalid point, FAIL after a
    failed deploy, ERROR after a crash or tool error, UNKNOWN otherwise."""
    point = record.result.point_at(rate)
    if point is not None:
        return evaluate_point(point, slo).outcome
    if record.result.status is RunStatus.FAILED_TO_DEPLOY:
        return Outcome.FAIL
    if record.result.status is not RunStatus.OK:
        return Outcome.ERROR
    below = {evaluate_point(p, slo).outcome for p in record.result.points if p.offered_rps < rate}
    for outcome in (Outcome.FAIL, Outcome.INVALID):
        if outcome in below:
            return outcome
    return Outcome.UNKNOWN


def covers(record: RunRecord, rates: tuple[float, ...], slo: SloSpec) -> bool:
    """Whether ``record`` already answers a trial at ``rates`` (no need to measure again)."""
    return all(outcome_at(record, rate, slo) is not Outcome.UNKNOWN for rate in rates)


def fails_decisively(record: RunRecord, rate: float, slo: SloSpec, search: SearchSettings) -> bool:
    """A valid, settled failure at ``rate`` or below: the only kind a prune may rest on."""
    return any(
        (p.offered_rps < rate or same_rate(p.offered_rps, rate))
        and evaluate_point(p, slo).outcome is Outcome.FAIL
        and settled(p, slo, search)
        for p in record.result.points
    )


def lowest_failing_rate(record: RunRecord, slo: SloSpec) -> float | None:
    """The lowest rate (as achieved) of a valid failing point."""
    failing = [p.rate_rps for p in record.result.points if evaluate_point(p, slo).outcome is Outcome.FAIL]
    return min(failing, default=None)


def capacity_point(record: RunRecord, slo: SloSpec) -> LoadPoint | None:
    """The passing point at the highest achieved rate below every valid failure.

    Its :attr:`~LoadPoint.rate_rps` is the candidate's measured *capacity at SLO*: a
    lower bound on the true capacity, exact to the spacing of the measured rates.
    """
    ceiling = lowest_failing_rate(record, slo)
    passing = [
        p for p in record.result.points
        if evaluate_point(p, slo).passed and (ceiling is None or p.rate_rps < ceiling)
    ]
    return max(passing, key=lambda p: p.rate_rps, default=None)
