"""Per-run figures: verdicts, cost, capacity and throughput at SLO (pure).

Definitions used in every table and plot:

- *target point*: the load point at the target rate R; the SLO verdict, margins,
  p95s and cost per million output tokens of a run are those at R;
- *capacity at SLO*: the highest achieved rate of a valid point meeting the SLO,
  below every valid failure (:func:`sweep.verdicts.capacity_point`); a
  lower bound, bracketed above by ``fails_at_rps`` when a valid point failed;
- *throughput*: requests/s and output tokens/s achieved at that capacity point.

Scaling efficiencies are in :mod:`sweep.scaling`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sweep.base import Strict
from sweep.candidate import Candidate
from sweep.economics import cost_per_million_tokens
from sweep.results import LoadPoint, RunRecord, RunStatus, TrialPurpose, same_rate
from sweep.space import SearchSpace
from sweep.verdicts import (
    Outcome,
    PointVerdict,
    capacity_point,
    evaluate_point,
    lowest_failing_rate,
    outcome_at,
)


class PointRow(Strict):
    """One measured load point and its verdicts."""

    point: LoadPoint
    verdict: PointVerdict


class RunRow(Strict):
    """Everything the report says about one measured candidate."""

    candidate_id: str
    candidate: Candidate
    purpose: TrialPurpose
    proposed_because: str
    status: RunStatus
    reason: str | None
    accelerators: int
    cost_per_hour: float
    requested_rates: tuple[float, ...]
    points: tuple[PointRow, ...]
    outcome_at_target: Outcome
    target: PointRow | None
    capacity_rps: float | None
    fails_at_rps: float | None = None
    throughput_rps: float | None
    throughput_output_tokens_per_s: float | None
    cost_per_million_output_tokens: float | None
    wall_time_s: float | None
    artifacts: tuple[str, ...]

    @property
    def passes(self) -> bool:
        return self.outcome_at_target is Outcome.PASS

    @property
    def worst_ratio(self) -> float:
        """Worst normalised SLO ratio at the target (``inf`` when not measured there)."""
        return math.inf if self.target is None else self.target.verdict.worst_ratio

    @property
    def e2e_p95_s(self) -> float | None:
        return None if self.target is None else self.target.point.e2e_p95_s


def build_rows(space: SearchSpace, history: Sequence[RunRecord]) -> tuple[RunRow, ...]:
    """Rows for every record, in history order."""
    slo, r = space.slo, space.target_rps
    rows = []
    for rec in history:
        c = rec.candidate
        points = tuple(PointRow(point=p, verdict=evaluate_point(p, slo)) for p in rec.result.points)
        target = next((row for row in points if same_rate(row.point.offered_rps, r)), None)
        cap = capacity_point(rec, slo)
        cost = space.cost_per_hour(c)
        rows.append(
            RunRow(
                candidate_id=c.id,
                candidate=c,
                purpose=rec.trial.purpose,
                proposed_because=rec.trial.reason,
                status=rec.result.status,
                reason=rec.result.reason,
                accelerators=space.accelerators(c),
                cost_per_hour=cost,
                requested_rates=rec.trial.offered_rates,
                points=points,
                outcome_at_target=outcome_at(rec, r, slo),
                target=target,
                capacity_rps=None if cap is None else cap.rate_rps,
                fails_at_rps=lowest_failing_rate(rec, slo),
                throughput_rps=None if cap is None else cap.achieved_rps,
                throughput_output_tokens_per_s=None if cap is None else cap.output_tokens_per_s,
                cost_per_million_output_tokens=(
                    None if target is None else cost_per_million_tokens(cost, target.point.output_tokens_per_s)
                ),
                wall_time_s=rec.result.wall_time_s,
                artifacts=rec.result.artifacts,
            )
        )
    return tuple(rows)
