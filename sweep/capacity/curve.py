"""The capacity model as users ask for it: traffic -> GPUs, "add a replica at X req/s",
and where more GPUs stop paying (pure; built on :class:`~sweep.capacity.model.ShapeCapacity`).

For one shape with headroom ``h`` (the share of capacity kept spare):

- N replicas carry ``carries(N) = capacity(N) x (1 - h)``; the (N+1)-th replica becomes
  necessary when the traffic exceeds ``carries(N)`` (:class:`ReplicaStep.add_next_above_rps`);
- the N-th replica's **marginal efficiency** is what it adds, ``capacity(N) -
  capacity(N - 1)``, over one replica's capacity ``c1``: 1.0 = it pays in full. More GPUs
  *stop paying* at the first N whose marginal efficiency falls below ``min_efficiency``
  (:func:`stops_paying_at`): from there each added replica costs a full replica and adds
  less than that share of one. (The scaling efficiency ``capacity(N) / (N c1)`` is the
  average over all N replicas; it falls more slowly.)

Across shapes, the **traffic -> GPUs curve** (:func:`traffic_curve`) is the cheapest
shape's replica count at each traffic level; it is a step function whose steps are the
shapes' ``carries(N)``, so it is evaluated exactly at those breakpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from sweep.capacity.model import ShapeCapacity, capacity_plan
from sweep.strict import Strict

DEFAULT_MIN_EFFICIENCY = 0.8  # a replica adding under 80% of one replica's capacity "stops paying"


class ReplicaStep(Strict):
    """N replicas of one shape: what they carry, cost, and what the N-th adds."""

    shape_id: str
    replicas: int = Field(ge=1)
    accelerators: int
    cost_per_hour: float
    capacity_rps: float = Field(description="capacity(N), no headroom")
    add_next_above_rps: float = Field(description="carries(N): above this traffic add replica N+1")
    scaling_efficiency: float | None = Field(None, description="capacity(N) / (N c1)")
    marginal_efficiency: float | None = Field(None, description="(capacity(N) - capacity(N-1)) / c1")
    pays: bool = Field(True, description="marginal efficiency >= the threshold (or unknown)")
    basis: str = ""


def replica_steps(model: ShapeCapacity, headroom: float = 0.0,
                  min_efficiency: float = DEFAULT_MIN_EFFICIENCY) -> tuple[ReplicaStep, ...]:
    """Every replica count of ``model`` the budget holds, from its smallest count that
    carries anything (counts below the smallest that met the SLO carry nothing)."""
    c1 = model.per_replica_rps
    steps, previous = [], 0.0
    for n in range(1, model.max_replicas + 1):
        capacity = model.capacity_rps(n)
        if capacity <= 0:
            continue
        marginal = None if c1 is None else (capacity - previous) / c1
        steps.append(ReplicaStep(
            shape_id=model.shape.id, replicas=n, accelerators=n * model.accelerators_per_replica,
            cost_per_hour=n * model.cost_per_replica_hour, capacity_rps=capacity,
            add_next_above_rps=capacity * (1 - headroom), scaling_efficiency=model.efficiency(n),
            marginal_efficiency=marginal, pays=marginal is None or n == 1 or marginal >= min_efficiency,
            basis=model.basis(n)))
        previous = capacity
    return tuple(steps)


def stops_paying_at(steps: Sequence[ReplicaStep]) -> ReplicaStep | None:
    """The first replica count whose added replica does not pay (``None``: all pay)."""
    return next((s for s in steps if not s.pays), None)


class CurvePoint(Strict):
    """From ``from_rps`` up to ``to_rps`` req/s, the cheapest shape needs this many GPUs."""

    from_rps: float
    to_rps: float
    shape_id: str
    replicas: int
    accelerators: int
    cost_per_hour: float


def traffic_curve(models: Sequence[ShapeCapacity], headroom: float = 0.0) -> tuple[CurvePoint, ...]:
    """The cheapest shape's replicas and accelerators for every traffic level the budget
    carries, as consecutive intervals ``(from_rps, to_rps]`` (ties: fewer accelerators,
    then the shape order of ``models``)."""
    breaks = sorted({s.add_next_above_rps for m in models for s in replica_steps(m, headroom)
                     if s.add_next_above_rps > 0})
    points: list[CurvePoint] = []
    low = 0.0
    for high in breaks:
        # The plan just above `low` holds up to `high` (no breakpoint in between).
        probe = low + (high - low) / 2 if high > low else high
        best = next((r for r in capacity_plan(models, probe, headroom) if r.feasible), None)
        if best is None or best.replicas is None or best.accelerators is None or best.cost_per_hour is None:
            break
        if points and (points[-1].shape_id, points[-1].replicas) == (best.shape_id, best.replicas):
            points[-1] = points[-1].model_copy(update={"to_rps": high})
        else:
            points.append(CurvePoint(from_rps=low, to_rps=high, shape_id=best.shape_id, replicas=best.replicas,
                                     accelerators=best.accelerators, cost_per_hour=best.cost_per_hour))
        low = high
    return tuple(points)


def accelerators_at(curve: Sequence[CurvePoint], traffic_rps: float) -> int | None:
    """GPUs the curve asks for at ``traffic_rps`` (``None``: beyond the budget)."""
    if traffic_rps <= 0 or not math.isfinite(traffic_rps):
        raise ValueError("traffic must be > 0 req/s")
    return next((p.accelerators for p in curve if p.from_rps < traffic_rps <= p.to_rps), None)
