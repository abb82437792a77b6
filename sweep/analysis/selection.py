"""The answer: the cheapest configuration meeting the SLO, or the closest one (pure).

Rules:

- *Passing* = validly measured at the target rate R and meeting every objective
  there (an invalid measurement is never a pass), and, with a ``quality`` section,
  admitted by the quality gate (:mod:`sweep.analysis.quality`). A cheaper run that meets
  the SLO but is refused on quality is listed with the reason (``Answer.refused``).
- Among passing runs the order is: lower cost per hour, then fewer accelerators,
  then lower p95 E2E at R (unmeasured last), then candidate id (alphabetical), so
  the choice is deterministic. The first is the answer, the second the runner-up.
- If none passes, the *closest* is the run validly measured at R with the smallest worst
  normalised ratio (``max`` over objectives of observed/limit, or
  min_share/observed_share for goodput: 1.05 = 5% over its limit), then lower cost,
  fewer accelerators, candidate id. Its failed objectives are reported worst first; a
  closest that meets the SLO was refused on quality, and the explanation says so.

The Pareto front is over runs validly measured at R: cost per million output tokens versus
a p95 latency (E2E by default); a run is on it when no other run is at least as good
on both and better on one.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

from pydantic import Field

from loadtest.analysis.slo import Metric, ObjectiveResult
from sweep.analysis.rows import RunRow
from sweep.spec.sweep_spec import P95_LIMITS
from sweep.strict import Strict

TIE_BREAK = "lower cost per hour, then fewer accelerators, then lower p95 E2E, then candidate id"
CLOSEST_RULE = "smallest worst normalised SLO ratio, then lower cost, fewer accelerators, candidate id"


class AnswerKind(enum.StrEnum):
    PASSING = "passing"
    CLOSEST = "closest"
    NONE = "none"


class Refusal(Strict):
    """A run that met the SLO and that the quality gate refused, and why."""

    candidate_id: str
    why: str


class Answer(Strict):
    """The sweep's conclusion."""

    kind: AnswerKind
    best: str | None = None
    runner_up: str | None = None
    verdicts: tuple[ObjectiveResult, ...] = ()
    failed: tuple[str, ...] = Field((), description="keys of the failed objectives, worst first")
    refused: tuple[Refusal, ...] = Field((), description="runs meeting the SLO, no dearer than the answer, "
                                                         "refused on quality")
    explanation: str


def _inf(value: float | None) -> float:
    return math.inf if value is None else value


def passing_order(rows: Sequence[RunRow]) -> list[RunRow]:
    """Passing rows (the SLO met and quality admitted), best first (see :data:`TIE_BREAK`)."""
    passing = [r for r in rows if r.admitted and r.target is not None]
    return sorted(passing, key=lambda r: (r.cost_per_hour, r.accelerators, _inf(r.e2e_p95_s), r.candidate_id))


def closest_order(rows: Sequence[RunRow]) -> list[RunRow]:
    """Rows validly measured at the target, closest to passing first (see :data:`CLOSEST_RULE`)."""
    measured = [r for r in rows if r.target is not None and r.target.verdict.valid]
    return sorted(measured, key=lambda r: (r.worst_ratio, r.cost_per_hour, r.accelerators, r.candidate_id))


def refusals(rows: Sequence[RunRow], up_to_cost: float | None = None) -> tuple[Refusal, ...]:
    """Runs meeting the SLO that the quality gate refused (no dearer than ``up_to_cost``
    when given), cheapest first."""
    refused = [r for r in rows if r.passes and not r.admitted and r.quality is not None
               and (up_to_cost is None or r.cost_per_hour <= up_to_cost)]
    refused.sort(key=lambda r: (r.cost_per_hour, r.accelerators, r.candidate_id))
    return tuple(Refusal(candidate_id=r.candidate_id, why=r.quality.explanation) for r in refused
                 if r.quality is not None)


def choose(rows: Sequence[RunRow]) -> Answer:
    """The cheapest passing run and the runner-up, or the closest failing one."""
    passing = passing_order(rows)
    if passing:
        best = passing[0]
        assert best.target is not None
        runner = passing[1].candidate_id if len(passing) > 1 else None
        refused = refusals(rows, best.cost_per_hour)
        quality = "" if best.quality is None else f"; {best.quality.explanation}"
        return Answer(
            kind=AnswerKind.PASSING,
            best=best.candidate_id,
            runner_up=runner,
            verdicts=best.target.verdict.verdicts,
            refused=refused,
            explanation=f"{best.candidate_id} is the cheapest of {len(passing)} passing "
            f"configuration(s) at {best.cost_per_hour:.4g}/h{quality}; ties: {TIE_BREAK}"
            + (f"; {len(refused)} as cheap or cheaper refused on quality" if refused else ""),
        )
    closest = closest_order(rows)
    if not closest:
        invalid = sum(1 for r in rows if r.target is not None and not r.target.verdict.valid)
        why = f" ({invalid} measurement(s) there were invalid)" if invalid else ""
        return Answer(
            kind=AnswerKind.NONE, explanation=f"no configuration was validly measured at the target rate{why}"
        )
    best = closest[0]
    assert best.target is not None
    refused = refusals(rows)
    if best.passes and best.quality is not None:
        why = f"it meets the SLO but {best.quality.explanation}"
        head = "no configuration meets the SLO and keeps quality"
    else:
        why = "; ".join(describe_miss(v) for v in best.target.verdict.misses)
        head = "no configuration meets the SLO"
    return Answer(
        kind=AnswerKind.CLOSEST,
        best=best.candidate_id,
        runner_up=closest[1].candidate_id if len(closest) > 1 else None,
        verdicts=best.target.verdict.verdicts,
        failed=best.target.verdict.failed,
        refused=refused,
        explanation=f"{head}; closest is {best.candidate_id} ({why})",
    )


def describe_miss(verdict: ObjectiveResult) -> str:
    """One failed objective in words, e.g. ``e2e_p95 54.6 s > 12 s, 355.0% over``."""
    name, limit, seen = verdict.objective.key, verdict.objective.threshold, verdict.observed
    if verdict.objective.lower_bound:
        return f"goodput share {0.0 if seen is None else seen:.0%} < {limit:.0%}"
    if seen is None:
        return f"{name} not measured (no successful request)"
    return f"{name} {seen:.3g} s > {limit:.3g} s, {(seen / limit - 1) * 100:.1f}% over"


def _latency(row: RunRow, metric: Metric) -> float | None:
    """The target's p95 of ``metric`` (``None`` when not validly measured there)."""
    if row.target is None or not row.target.verdict.valid:
        return None
    return row.target.point.p95(metric)


def pareto_front(rows: Sequence[RunRow], latency: Metric = Metric.E2E) -> tuple[str, ...]:
    """Candidate ids on the cost-per-million-tokens vs p95 latency front, cheapest first."""
    if latency not in P95_LIMITS.values():
        raise ValueError(f"the Pareto front is over a p95 latency ({', '.join(P95_LIMITS.values())})")
    pts = [
        (r.cost_per_million_output_tokens, lat, r.candidate_id)
        for r in rows
        if r.cost_per_million_output_tokens is not None and (lat := _latency(r, latency)) is not None
    ]
    front = [
        p
        for p in pts
        if not any(q[0] <= p[0] and q[1] <= p[1] and (q[0] < p[0] or q[1] < p[1]) for q in pts)
    ]
    return tuple(p[2] for p in sorted(front))
