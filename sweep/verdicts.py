"""Judging measurements against the SLO (pure).

Every objective gets a *ratio*, 1.0 being exactly at the limit and below 1.0 passing:

- latency objectives (p95 TTFT / TPOT / E2E, upper bounds): ``observed / limit``;
- the goodput objective (a lower bound): ``min_goodput_share / observed_share``.

The *margin* is ``1 - ratio``: the fraction of the limit left (negative = violated
by that fraction). A ratio is ``None`` when the figure could not be measured (no
successful request, or a goodput share of zero); that objective fails and counts as
infinitely far off. The *worst ratio* of a point is the largest of its ratios; the
"closest" failing configuration is the one with the smallest worst ratio.

Each objective also gets a *confidence*: the share of bootstrap resamples of the
run's requests in which it holds (the load tester's figure for latencies; the load
tester's proportion bootstrap for the goodput share). A point's confidence is that
of its verdict, by the load tester's rule (:func:`loadtest.analysis.slo.verdict_confidence`):
for a pass the least sure objective's, for a failure the surest failed objective's
``1 - confidence``.

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
import functools
import math

import numpy as np

from loadtest.analysis.slo import verdict_confidence
from loadtest.analysis.stats import bootstrap_proportion
from sweep.base import Strict
from sweep.results import LoadPoint, RunRecord, RunStatus, same_rate
from sweep.spec import LATENCY_METRICS, Objective, SearchSettings, SloSpec

class Outcome(enum.StrEnum):
    """A point's or a record's outcome at one offered rate."""

    PASS = "pass"
    FAIL = "fail"
    INVALID = "invalid"
    ERROR = "error"
    UNKNOWN = "unknown"


class ObjectiveVerdict(Strict):
    """One objective at one load point."""

    objective: Objective
    limit: float
    observed: float | None
    ratio: float | None
    passed: bool
    confidence: float | None = None

    @property
    def margin(self) -> float | None:
        """Fraction of the limit left: 0.2 = 20% headroom, -0.1 = 10% over."""
        return None if self.ratio is None else 1.0 - self.ratio


class PointVerdict(Strict):
    """Every set objective at one load point, and whether the point can be trusted."""

    offered_rps: float
    rate_rps: float
    samples: int = 1
    verdicts: tuple[ObjectiveVerdict, ...]
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
        return max((math.inf if v.ratio is None else v.ratio) for v in self.verdicts)

    @property
    def misses(self) -> tuple[ObjectiveVerdict, ...]:
        """Verdicts of the failed objectives, worst first."""
        bad = [v for v in self.verdicts if not v.passed]
        bad.sort(key=lambda v: -(math.inf if v.ratio is None else v.ratio))
        return tuple(bad)

    @property
    def failed(self) -> tuple[Objective, ...]:
        """Failed objectives, worst first."""
        return tuple(v.objective for v in self.misses)

    @property
    def confidence(self) -> float | None:
        """Confidence in this verdict (``None``: invalid, or not known for every
        objective that decides it); the load tester's rule, applied to these verdicts
        (they carry the ``passed``, ``observed`` and ``confidence`` it reads)."""
        return verdict_confidence(self.verdicts) if self.valid else None  # type: ignore[arg-type]


@functools.lru_cache(maxsize=4096)  # deterministic (seeded), and judged again and again by the search
def share_confidence(good: int, sent: int, minimum: float) -> float | None:
    """Share of the load tester's bootstrap resamples of ``sent`` requests whose good
    share is at least ``minimum`` (``None`` with no request)."""
    resampled = bootstrap_proportion(good, sent)
    return None if resampled is None else float(np.mean(resampled >= minimum - 1e-12))


def _latency(objective: Objective, limit: float, point: LoadPoint) -> ObjectiveVerdict:
    observed = point.latency_p95(objective)
    evidence = point.evidence.get(objective)
    return ObjectiveVerdict(
        objective=objective, limit=limit, observed=observed,
        ratio=None if observed is None else observed / limit,
        passed=observed is not None and observed <= limit,
        confidence=None if evidence is None else evidence.confidence,
    )


def _goodput(minimum: float, point: LoadPoint) -> ObjectiveVerdict:
    share = point.goodput_share
    return ObjectiveVerdict(
        objective=Objective.GOODPUT_SHARE, limit=minimum, observed=share,
        ratio=None if not share else minimum / share,
        passed=share is not None and share >= minimum,
        confidence=share_confidence(point.requests_good, point.requests_sent, minimum),
    )


def evaluate_point(point: LoadPoint, slo: SloSpec) -> PointVerdict:
    """Verdicts of one load point on every objective the SLO sets."""
    verdicts = [
        _latency(objective, limit, point)
        for objective in LATENCY_METRICS
        if (limit := slo.limit(objective)) is not None
    ]
    if slo.min_goodput_share is not None:
        verdicts.append(_goodput(slo.min_goodput_share, point))
    return PointVerdict(
        offered_rps=point.offered_rps, rate_rps=point.rate_rps, samples=point.samples,
        verdicts=tuple(verdicts), invalid_reasons=point.invalid_reasons,
    )


def _budget_ratio(v: ObjectiveVerdict) -> float:
    """Where an objective stands on its own scale, 1.0 at the limit (``inf``: unmeasured)."""
    if v.observed is None or v.ratio is None:
        return math.inf
    if v.objective is Objective.GOODPUT_SHARE and v.limit < 1.0:
        return (1.0 - v.observed) / (1.0 - v.limit)
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
