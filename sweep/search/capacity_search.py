"""The ``capacity-search`` strategy, the default: probe one replica, predict, refine (pure).

A *shape* is one replica's configuration (TP size + engine settings). R is the
target rate. The search runs in phases, a pure function of the history:

1. **Probe** every shape (cheapest first): deploy one replica and load it at the
   per-replica rates ``R/n`` for ``n`` = 1, then growing by ``ladder_factor`` up to
   the shape's largest replica count (ascending; the measurer stops at the first
   rate that does not pass), then bisect ``probe_refine`` times below that rate.
   The highest passing achieved rate is one replica's capacity at SLO, ``c1``. If
   one replica passes at R, the shape needs one replica.
2. **Refine** the shapes best-first by cost: for each, the next replica count is
   the prediction ``ceil(R / (c1 * e))`` (``e``: the lowest scaling efficiency
   measured for that shape, above 1 when pooling helps, else
   ``assumed_scaling_efficiency``; without a ``c1`` the largest open count),
   clamped into the still-open counts of ``[lo, upper]``:

   - ``lo`` = one more than the largest count that failed *at R* decisively (valid
     and settled, :func:`~sweep.measure.verdicts.fails_decisively`): fewer
     replicas never beat more. The probe bounds nothing below R: N replicas
     behind a least-loaded router pool their queues and can pass at R where one
     replica fails at R/N, so a one-replica failure only feeds the prediction.
   - ``upper`` = one less than the smallest count that passed (stop raising a
     count once the SLO is met), capped by the space/budget and below any count
     that failed to deploy (more replicas of that shape would not deploy either).
   - counts already tried are not proposed again; a crash, a tool error or an
     invalid measurement at a count says nothing about the others.
   - counts that cost more per hour than the best passing candidate so far are
     skipped (they cannot beat it; equal cost may still win the tie-break). With a
     ``quality`` section only a candidate the quality gate admits is a best passing one.

   Each run removes at least one count from the open ones, so the search ends.
3. **Closest**: if nothing passes and no run was validly measured at the target
   rate, measure one configuration at R, the biggest of the most capable shape, so
   the report can name the closest (:func:`closest_fallback`).

Assumptions (documented in the report): passing is monotone in load (a higher rate
never passes where a lower one failed) and in replicas within a shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sweep.analysis.quality import judge_quality
from sweep.measure.results import RunRecord, RunStatus, Trial, TrialPurpose
from sweep.measure.verdicts import Outcome, capacity_point, covers, evaluate_point, fails_decisively, outcome_at
from sweep.spec.space import SearchSpace, Shape

_EPS = 1e-9


def ladder(max_replicas: int, factor: float) -> tuple[int, ...]:
    """Replica counts whose per-replica share ``R/n`` a probe measures: 1, then x factor."""
    counts = [1]
    while counts[-1] < max_replicas:
        counts.append(min(max_replicas, max(counts[-1] + 1, math.ceil(counts[-1] * factor - _EPS))))
    return tuple(counts)


def probe_rates(space: SearchSpace, shape: Shape) -> tuple[float, ...]:
    """Ascending per-replica rates ``R/n`` of a shape's one-replica probe."""
    counts = space.replica_counts(shape)
    top = max(counts) if counts else 1
    rates = {space.target_rps / n for n in ladder(top, space.spec.search.ladder_factor)}
    return tuple(sorted(rates))


def best_passing_cost(space: SearchSpace, history: Sequence[RunRecord]) -> float | None:
    """Cost per hour of the cheapest candidate that met the SLO at the target so far and
    that the quality gate admits (one refused, or not yet judged, prunes nothing)."""
    quality = judge_quality(space, history)
    costs = [
        space.cost_per_hour(r.candidate)
        for r in history
        if outcome_at(r, space.target_rps, space.slo) is Outcome.PASS
        and (r.candidate.id not in quality or quality[r.candidate.id].admits)
    ]
    return min(costs, default=None)


@dataclass(frozen=True)
class ShapeState:
    """What the history says about one shape, and its next replica count (if any)."""

    shape: Shape
    next_replicas: int | None
    note: str


def _deploy_limit(shape: Shape, counts: Sequence[int], by_id: Mapping[str, RunRecord]) -> int:
    """The largest count below every count of ``shape`` that failed to deploy."""
    broken = [
        rec.candidate.replicas for rec in by_id.values()
        if rec.candidate.shape == shape and rec.result.status is RunStatus.FAILED_TO_DEPLOY
    ]
    return max((n for n in counts if n < min(broken, default=n + 1)), default=0)


def shape_state(
    space: SearchSpace, shape: Shape, by_id: Mapping[str, RunRecord], best: float | None
) -> ShapeState:
    """Phase-2 state of ``shape`` (see the module docstring for the rules)."""
    r, slo, search = space.target_rps, space.slo, space.spec.search
    probe = by_id.get(shape.with_replicas(1).id)
    if probe is None:
        return ShapeState(shape, None, "not probed: one replica costs more than the best passing")
    if probe.result.status is RunStatus.FAILED_TO_DEPLOY:
        return ShapeState(shape, None, f"one replica failed to deploy: {probe.result.reason}")
    if outcome_at(probe, r, slo) is Outcome.PASS:
        return ShapeState(shape, None, "one replica meets the SLO at the target rate")
    cap = capacity_point(probe, slo)
    c1 = None if cap is None else cap.rate_rps
    counts = space.replica_counts(shape)
    lo, pass_min, tried, efficiencies = 1, None, set(), []
    for record in by_id.values():
        n = record.candidate.replicas
        if record.candidate.shape != shape:
            continue
        tried.add(n)
        if outcome_at(record, r, slo) is Outcome.PASS:
            pass_min = n if pass_min is None else min(pass_min, n)
        elif fails_decisively(record, r, slo, search):
            lo = max(lo, n + 1)
        if n > 1 and c1 is not None and (point := capacity_point(record, slo)) is not None:
            efficiencies.append(point.rate_rps / (n * c1))
    efficiency = min(efficiencies, default=search.assumed_scaling_efficiency)
    predicted = None if c1 is None else max(1, math.ceil(r / (c1 * efficiency) - _EPS))
    hi_cap = _deploy_limit(shape, counts, by_id)
    upper = hi_cap if pass_min is None else min(hi_cap, pass_min - 1)
    open_counts = [n for n in counts if lo <= n <= upper and n not in tried]
    affordable = [
        n for n in open_counts if best is None or space.cost_per_hour(shape.with_replicas(n)) <= best
    ]
    if c1 is None:
        known = "c1 unknown (one replica passed at no valid probe rate), predicted: the largest open count"
    else:
        known = f"c1={c1:.3g} req/s, e={efficiency:.2f}, predicted {predicted}"
    if not affordable:
        if open_counts:
            why = "the remaining counts cost more than the best passing candidate"
        elif pass_min is not None:
            why = f"the smallest passing count is {pass_min}"
        else:
            why = f"no untried count in [{lo}, {upper}] (space/budget limit, failures at R, failed deploys)"
        return ShapeState(shape, None, f"done: {why}; {known}")
    target = affordable[-1] if predicted is None else min(max(predicted, affordable[0]), affordable[-1])
    chosen = next(n for n in affordable if n >= target)
    bounds = f"fails at R <= {lo - 1}" + ("" if pass_min is None else f", passes at {pass_min}")
    return ShapeState(shape, chosen, f"{known}; {bounds}; try {chosen}")


def closest_fallback(space: SearchSpace, by_id: Mapping[str, RunRecord]) -> Trial | None:
    """When nothing was measured at the target, one run there so a closest can be named.

    The candidate is the largest untried replica count (below any failed deploy of
    its shape) of the shape with the most estimated capacity (count x c1), ties
    broken by the probe's worst ratio at its lowest rate, then fewer accelerators,
    then shape order.
    """
    r, slo = space.target_rps, space.slo
    if any((p := rec.result.point_at(r)) is not None and p.valid for rec in by_id.values()):
        return None
    picks = []
    for index, shape in enumerate(space.shapes):
        probe = by_id.get(shape.with_replicas(1).id)
        if probe is None or not probe.ok:
            continue
        limit = _deploy_limit(shape, space.replica_counts(shape), by_id)
        untried = [n for n in space.replica_counts(shape) if n <= limit and shape.with_replicas(n).id not in by_id]
        if not untried:
            continue
        n = untried[-1]
        cap = capacity_point(probe, slo)
        estimate = 0.0 if cap is None else n * cap.rate_rps
        floor = evaluate_point(probe.result.points[0], slo).worst_ratio
        picks.append((-estimate, floor, space.accelerators(shape.with_replicas(n)), index, shape.with_replicas(n)))
    if not picks:
        return None
    candidate = min(picks, key=lambda p: p[:4])[4]
    return Trial(
        candidate=candidate,
        offered_rates=space.target_rates(),
        purpose=TrialPurpose.TARGET,
        reason="nothing passes: measure the biggest configuration at the target to name the closest",
    )


class CapacitySearch:
    """Probe one replica per shape, predict the replicas needed, measure around it."""

    kind: ClassVar[str] = "capacity-search"

    def next_trial(self, space: SearchSpace, history: Sequence[RunRecord]) -> Trial | None:
        by_id = {rec.candidate.id: rec for rec in history}
        best = best_passing_cost(space, history)
        for shape in space.shapes:
            one = shape.with_replicas(1)
            rates = probe_rates(space, shape)
            record = by_id.get(one.id)
            if record is not None and covers(record, rates, space.slo):
                continue
            if best is not None and space.cost_per_hour(one) > best:
                continue
            return Trial(
                candidate=one,
                offered_rates=rates,
                refine=space.spec.search.probe_refine,
                purpose=TrialPurpose.PROBE,
                reason=f"probe one replica at {len(rates)} per-replica rate(s) up to the target",
            )
        options = []
        for index, shape in enumerate(space.shapes):
            state = shape_state(space, shape, by_id, best)
            if state.next_replicas is not None:
                candidate = shape.with_replicas(state.next_replicas)
                options.append((space.cost_per_hour(candidate), index, candidate, state.note))
        if not options:
            return closest_fallback(space, by_id)
        _, _, candidate, note = min(options, key=lambda o: (o[0], o[1]))
        return Trial(
            candidate=candidate, offered_rates=space.target_rates(), purpose=TrialPurpose.TARGET, reason=note
        )

    def notes(self, space: SearchSpace, history: Sequence[RunRecord]) -> tuple[str, ...]:
        by_id = {rec.candidate.id: rec for rec in history}
        best = best_passing_cost(space, history)
        return tuple(f"{s.id}: {shape_state(space, s, by_id, best).note}" for s in space.shapes)
