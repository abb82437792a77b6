"""Per-run figures: verdicts, cost, capacity, throughput at SLO and scaling efficiency (pure).

Definitions used in every table and plot:

- *target point*: the load point at the target rate R; the SLO verdict, margins,
  p95s, cost per million output tokens and cost per request of a run are those at R;
- *cost per million output characters*: the cost per million output tokens over the
  characters per token of the workload's text (its prompt sets' density, measured with
  the model's tokenizer; the load tester does not keep output text, so the model's
  answers are taken to be as dense as the prompts in their language); ``None`` for
  synthetic workloads, whose token strings are no language;
- *capacity at SLO*: the highest achieved rate of a valid point meeting the SLO,
  below every valid failure (:func:`sweep.measure.verdicts.capacity_point`); a
  lower bound, bracketed above by ``fails_at_rps`` when a valid point failed;
- *throughput*: requests/s and output tokens/s achieved at that capacity point;
- *scaling efficiency*: achieved speed-up over ideal linear speed-up (below);
- *quality*: the quality gate's verdict on the run's answers (:mod:`sweep.analysis.quality`).

The speed-up is capacity over capacity: the highest rate meeting the SLO with more
units, over that with the base. Two comparisons:

- **replicas**: N replicas of a shape against one replica of it (ideal N);
- **tensor parallel, per accelerator**: one TP-k replica against one replica of the
  smallest measured TP size with the same engine settings (ideal: the ratio of
  accelerators, e.g. 2 for TP2 against TP1).

A measured capacity is only known within its bracket (highest pass, lowest valid
failure), so each efficiency comes with the range the brackets allow: ``low`` uses
the unit's lower and the base's upper end, ``high`` the other way round; ``None``
where a bracket is open (no failure was measured), which is common at the target
when a run only had to pass there.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

from loadtest.workloads.text_density import TextDensity
from sweep.analysis.quality import QualityVerdict, judge_quality
from sweep.measure.results import LoadPoint, RunRecord, RunStatus, TrialPurpose, same_rate
from sweep.measure.verdicts import (
    Outcome,
    PointVerdict,
    capacity_point,
    evaluate_point,
    lowest_failing_rate,
    outcome_at,
)
from sweep.spec.economics import cost_per_million_chars, cost_per_million_tokens, cost_per_request, scaling_efficiency
from sweep.spec.space import DeploymentCandidate, SearchSpace
from sweep.strict import Strict


class PointRow(Strict):
    """One measured load point and its verdicts."""

    point: LoadPoint
    verdict: PointVerdict


class RunRow(Strict):
    """Everything the report says about one measured candidate."""

    candidate_id: str
    candidate: DeploymentCandidate
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
    cost_per_request: float | None = None
    cost_per_million_output_chars: float | None = None
    wall_time_s: float | None
    artifacts: tuple[str, ...]
    quality: QualityVerdict | None = None

    @property
    def passes(self) -> bool:
        """Meets the SLO at the target (latency and goodput; quality apart: :attr:`admitted`)."""
        return self.outcome_at_target is Outcome.PASS

    @property
    def admitted(self) -> bool:
        """Meets the SLO and the quality gate admits it (no ``quality`` section: the SLO alone)."""
        return self.passes and (self.quality is None or self.quality.admits)

    @property
    def worst_ratio(self) -> float:
        """Worst normalised SLO ratio at the target (``inf`` when not measured there)."""
        return math.inf if self.target is None else self.target.verdict.worst_ratio

    @property
    def e2e_p95_s(self) -> float | None:
        return None if self.target is None else self.target.point.e2e_p95_s


def build_rows(
    space: SearchSpace, history: Sequence[RunRecord], chars_per_token: float | None = None
) -> tuple[RunRow, ...]:
    """Rows for every record, in history order; ``chars_per_token`` of the workload's
    text (``None``: synthetic) turns costs per token into costs per character."""
    slo, r = space.slo, space.target_rps
    quality = judge_quality(space, history)
    rows = []
    for rec in history:
        c = rec.candidate
        points = tuple(PointRow(point=p, verdict=evaluate_point(p, slo)) for p in rec.result.points)
        target = next((row for row in points if same_rate(row.point.offered_rps, r)), None)
        cap = capacity_point(rec, slo)
        cost = space.cost_per_hour(c)
        per_million = None if target is None else cost_per_million_tokens(cost, target.point.output_tokens_per_s)
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
                cost_per_million_output_tokens=per_million,
                cost_per_request=None if target is None else cost_per_request(cost, target.point.achieved_rps),
                cost_per_million_output_chars=cost_per_million_chars(per_million, chars_per_token),
                wall_time_s=rec.result.wall_time_s,
                artifacts=rec.result.artifacts,
                quality=quality.get(c.id),
            )
        )
    return tuple(rows)


class LanguageCost(Strict):
    """One run's cost per million output tokens as a cost per million output characters
    of one language's text (the language's measured characters per token)."""

    candidate_id: str
    language: str
    chars_per_token: float
    cost_per_million_output_tokens: float
    cost_per_million_output_chars: float


def language_costs(row: RunRow | None, languages: Sequence[TextDensity]) -> tuple[LanguageCost, ...]:
    """``row``'s cost per character in each measured language (none without a cost)."""
    if row is None or row.cost_per_million_output_tokens is None:
        return ()
    per_million = row.cost_per_million_output_tokens
    return tuple(
        LanguageCost(
            candidate_id=row.candidate_id, language=d.language, chars_per_token=d.chars_per_token,
            cost_per_million_output_tokens=per_million,
            cost_per_million_output_chars=cost_per_million_chars(per_million, d.chars_per_token),
        )
        for d in languages
        if d.chars_per_token is not None
    )  # fmt: skip


class ScalingKind(enum.StrEnum):
    REPLICAS = "replicas"
    TENSOR_PARALLEL = "tensor-parallel"


class ScalingRow(Strict):
    """One run's scaling against its base run."""

    kind: ScalingKind
    candidate_id: str
    base_id: str
    accelerators: int
    base_accelerators: int
    capacity_rps: float
    base_capacity_rps: float
    speedup: float
    ideal_speedup: float
    efficiency: float
    efficiency_low: float | None = None
    efficiency_high: float | None = None


def _row(kind: ScalingKind, run: RunRow, base: RunRow, ideal: float) -> ScalingRow | None:
    cap, base_cap = run.capacity_rps, base.capacity_rps
    if cap is None or base_cap is None or base_cap <= 0:
        return None
    low = None if base.fails_at_rps is None else scaling_efficiency(cap, ideal, base.fails_at_rps)
    high = None if run.fails_at_rps is None else scaling_efficiency(run.fails_at_rps, ideal, base_cap)
    return ScalingRow(
        kind=kind, candidate_id=run.candidate_id, base_id=base.candidate_id,
        accelerators=run.accelerators, base_accelerators=base.accelerators,
        capacity_rps=cap, base_capacity_rps=base_cap, speedup=cap / base_cap, ideal_speedup=ideal,
        efficiency=scaling_efficiency(cap, ideal, base_cap), efficiency_low=low, efficiency_high=high,
    )


def scaling_rows(rows: Sequence[RunRow]) -> tuple[ScalingRow, ...]:
    """Replica scaling of every multi-replica run, then TP scaling of every one-replica
    run above the smallest TP size (rows without both capacities are left out)."""
    singles = {r.candidate.shape: r for r in rows if r.candidate.replicas == 1 and r.capacity_rps is not None}
    out = []
    for run in rows:
        base = singles.get(run.candidate.shape)
        if run.candidate.replicas > 1 and base is not None:
            out.append(_row(ScalingKind.REPLICAS, run, base, run.candidate.replicas))
    for shape, run in singles.items():
        peers = [s for s in singles if s.engine == shape.engine and s.tp < shape.tp]
        if peers:
            base = singles[min(peers, key=lambda s: s.tp)]
            out.append(_row(ScalingKind.TENSOR_PARALLEL, run, base, run.accelerators / base.accelerators))
    return tuple(r for r in out if r is not None)


def replica_efficiency(scaling: Sequence[ScalingRow], candidate_id: str) -> ScalingRow | None:
    """The replica-scaling row of one candidate, if any."""
    return next((s for s in scaling if s.kind is ScalingKind.REPLICAS and s.candidate_id == candidate_id), None)
