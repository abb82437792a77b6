"""Judging measurements against the SLO (pure).

Every objective gets a *ratio*, 1.0 being exactly at the limit and below 1.0 passing:

- latency objectives (p95 TTFT / TPOT / E2E, upper bounds): ``observed / limit``;
- the goodput objective (a lower bound): ``min_goodput_share / observed_share``.

The *margin* is ``1 - ratio``: the fraction of the limit left (negative = violated
by that fraction). A ratio is ``None`` when the figure could not be measured (no
successful request, or a goodput share of zero); that objective fails and counts as
infinitely far off. The *worst ratio* of a point is the largest of its ratios; the
"closest" failing configuration is the one with the smallest worst ratio.

Record level: rates are measured lowest first and a measurer may stop after a
failing point, so a rate above a failing one is taken as failing (load only makes
latency worse). That assumption is the only inference made here.
"""

from __future__ import annotations

import enum
import math

from loadtest.sweep.base import Strict
from loadtest.sweep.results import LoadPoint, RunRecord, RunStatus
from loadtest.sweep.spec import SloSpec


class Objective(enum.StrEnum):
    TTFT_P95 = "ttft_p95"
    TPOT_P95 = "tpot_p95"
    E2E_P95 = "e2e_p95"
    GOODPUT_SHARE = "goodput_share"


class ObjectiveVerdict(Strict):
    """One objective at one load point."""

    objective: Objective
    limit: float
    observed: float | None
    ratio: float | None
    passed: bool

    @property
    def margin(self) -> float | None:
        """Fraction of the limit left: 0.2 = 20% headroom, -0.1 = 10% over."""
        return None if self.ratio is None else 1.0 - self.ratio


class PointVerdict(Strict):
    """Every set objective at one load point."""

    offered_rps: float
    verdicts: tuple[ObjectiveVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

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


def _upper(objective: Objective, limit: float, observed: float | None) -> ObjectiveVerdict:
    ratio = None if observed is None else observed / limit
    passed = observed is not None and observed <= limit
    return ObjectiveVerdict(objective=objective, limit=limit, observed=observed, ratio=ratio, passed=passed)


def evaluate_point(point: LoadPoint, slo: SloSpec) -> PointVerdict:
    """Verdicts of one load point on every objective the SLO sets."""
    verdicts = []
    for objective, limit, observed in (
        (Objective.TTFT_P95, slo.ttft_p95, point.ttft_p95_s),
        (Objective.TPOT_P95, slo.tpot_p95, point.tpot_p95_s),
        (Objective.E2E_P95, slo.e2e_p95, point.e2e_p95_s),
    ):
        if limit is not None:
            verdicts.append(_upper(objective, limit, observed))
    if slo.min_goodput_share is not None:
        share = point.goodput_share
        ratio = None if not share else slo.min_goodput_share / share
        verdicts.append(
            ObjectiveVerdict(
                objective=Objective.GOODPUT_SHARE,
                limit=slo.min_goodput_share,
                observed=share,
                ratio=ratio,
                passed=share is not None and share >= slo.min_goodput_share,
            )
        )
    return PointVerdict(offered_rps=point.offered_rps, verdicts=tuple(verdicts))


class Outcome(enum.StrEnum):
    """A record's outcome at one offered rate."""

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


def outcome_at(record: RunRecord, rate: float, slo: SloSpec) -> Outcome:
    """PASS/FAIL when measured; FAIL when a lower measured rate failed or the
    candidate failed to deploy or crashed before that rate; UNKNOWN otherwise."""
    point = record.result.point_at(rate)
    if point is not None:
        return Outcome.PASS if evaluate_point(point, slo).passed else Outcome.FAIL
    lower_failed = any(
        p.offered_rps < rate and not evaluate_point(p, slo).passed for p in record.result.points
    )
    if lower_failed or record.result.status is not RunStatus.OK:
        return Outcome.FAIL
    return Outcome.UNKNOWN


def covers(record: RunRecord, rates: tuple[float, ...], slo: SloSpec) -> bool:
    """Whether ``record`` already answers a trial at ``rates`` (no need to measure again)."""
    return all(outcome_at(record, rate, slo) is not Outcome.UNKNOWN for rate in rates)


def capacity_point(record: RunRecord, slo: SloSpec) -> LoadPoint | None:
    """The point at the highest offered rate that met the SLO (``None`` if none did).

    Its offered rate is the candidate's measured *capacity at SLO*: a lower bound on
    the true capacity, exact to the spacing of the measured rates.
    """
    passing = [p for p in record.result.points if evaluate_point(p, slo).passed]
    return max(passing, key=lambda p: p.offered_rps, default=None)


def lowest_failing_rate(record: RunRecord, slo: SloSpec) -> float | None:
    """The lowest measured offered rate whose point failed the SLO."""
    failing = [p.offered_rps for p in record.result.points if not evaluate_point(p, slo).passed]
    return min(failing, default=None)
