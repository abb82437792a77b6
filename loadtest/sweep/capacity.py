"""The capacity model behind ``loadtest plan`` (pure).

For each shape (TP size + engine settings) the sweep measured:

- ``c1``: one replica's capacity at SLO, the highest offered rate (req/s) at which
  one replica met every objective;
- scaling efficiencies ``e_N = cap(N) / (N * c1)`` from runs of N replicas, where
  ``cap(N)`` is their highest passing offered rate.

The model is ``capacity(N) = N * c1 / (1 + a * (N - 1))``: each added replica
brings ``c1`` minus a contention share ``a`` (routing imbalance, shared gateway,
memory bandwidth on a shared node), the contention term of the Universal
Scalability Law. ``a`` is fitted by least squares through the origin on
``1/e_N - 1 = a * (N - 1)`` and clamped at 0. With no multi-replica run, ``a`` is
taken from the spec's ``assumed_scaling_efficiency`` e0 as the efficiency of two
replicas (``a = 1/e0 - 1``; 0 when e0 = 1) and the plan says it is assumed.
Capacity then grows monotonically in N towards ``c1 / a``.

For a traffic level T the plan needs the smallest N with ``capacity(N) >= T``; the
next replica is needed above ``capacity(N)``. Every measured capacity is a lower
bound (exact to the spacing of the measured rates), so plans err on the safe side.
Cost per million output tokens at T = cost per hour / (T * tokens per request *
3600) * 1e6, with tokens per request measured on the one-replica run.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from loadtest.sweep.base import Strict
from loadtest.sweep.candidate import Shape
from loadtest.sweep.economics import cost_per_million_tokens
from loadtest.sweep.figures import RunRow
from loadtest.sweep.space import SearchSpace

_EPS = 1e-9


class EfficiencyPoint(Strict):
    replicas: int = Field(ge=2)
    efficiency: float = Field(gt=0)


class ShapeCapacity(Strict):
    """The fitted capacity model of one shape (stored in sweep.json)."""

    shape: Shape
    accelerators_per_replica: int
    cost_per_replica_hour: float
    max_replicas: int = Field(ge=1, description="replicas the budget holds")
    per_replica_rps: float = Field(gt=0, description="c1, one replica's capacity at SLO")
    contention: float = Field(ge=0, description="a in capacity(N) = N c1 / (1 + a (N - 1))")
    efficiency_points: tuple[EfficiencyPoint, ...] = ()
    output_tokens_per_request: float = Field(gt=0)

    @property
    def efficiency_assumed(self) -> bool:
        return not self.efficiency_points

    def efficiency(self, replicas: int) -> float:
        return 1.0 / (1.0 + self.contention * (replicas - 1))

    def capacity_rps(self, replicas: int) -> float:
        """Traffic ``replicas`` replicas carry within the SLO, per the model."""
        return replicas * self.per_replica_rps * self.efficiency(replicas)

    def replicas_for(self, traffic_rps: float) -> int | None:
        """Smallest replica count carrying ``traffic_rps``; ``None`` beyond the budget."""
        return next(
            (n for n in range(1, self.max_replicas + 1) if self.capacity_rps(n) >= traffic_rps * (1 - _EPS)),
            None,
        )


class PlanRow(Strict):
    """What serving ``traffic_rps`` with one shape takes."""

    shape_id: str
    traffic_rps: float
    feasible: bool
    replicas: int | None = None
    accelerators: int | None = None
    cost_per_hour: float | None = None
    cost_per_million_output_tokens: float | None = None
    capacity_rps: float | None = Field(None, description="what those replicas carry")
    next_replica_at_rps: float | None = Field(None, description="above this, one more replica")
    reason: str = ""


def fit_contention(points: Sequence[EfficiencyPoint]) -> float:
    """Least-squares ``a`` of ``1/e - 1 = a (N - 1)`` through the origin, clamped at 0."""
    sxx = sum((p.replicas - 1) ** 2 for p in points)
    if sxx == 0:
        return 0.0
    sxy = sum((p.replicas - 1) * (1.0 / p.efficiency - 1.0) for p in points)
    return max(0.0, sxy / sxx)


def fit_capacity(space: SearchSpace, rows: Sequence[RunRow]) -> tuple[ShapeCapacity, ...]:
    """A model for every shape whose one-replica run met the SLO at some rate."""
    models = []
    assumed = space.spec.search.assumed_scaling_efficiency
    for shape in space.shapes:
        one = next((r for r in rows if r.candidate == shape.with_replicas(1)), None)
        if one is None or one.capacity_rps is None:
            continue
        c1 = one.capacity_rps
        points = tuple(
            EfficiencyPoint(replicas=r.candidate.replicas, efficiency=r.capacity_rps / (r.candidate.replicas * c1))
            for r in rows
            if r.candidate.shape == shape and r.candidate.replicas > 1 and r.capacity_rps is not None
        )
        tokens = (
            one.throughput_output_tokens_per_s / one.throughput_rps
            if one.throughput_rps and one.throughput_output_tokens_per_s
            else float(space.spec.traffic.workload.output_tokens)
        )
        models.append(
            ShapeCapacity(
                shape=shape,
                accelerators_per_replica=space.accelerators(shape.with_replicas(1)),
                cost_per_replica_hour=space.cost_per_hour(shape.with_replicas(1)),
                max_replicas=max(1, space.max_replicas(shape)),
                per_replica_rps=c1,
                contention=fit_contention(points) if points else 1.0 / assumed - 1.0,
                efficiency_points=points,
                output_tokens_per_request=tokens,
            )
        )
    return tuple(models)


def plan_for(model: ShapeCapacity, traffic_rps: float) -> PlanRow:
    """Replicas, accelerators and cost for ``traffic_rps`` with one shape."""
    n = model.replicas_for(traffic_rps)
    if n is None:
        top = model.capacity_rps(model.max_replicas)
        return PlanRow(
            shape_id=model.shape.id,
            traffic_rps=traffic_rps,
            feasible=False,
            reason=f"{model.max_replicas} replicas (the budget) carry only {top:.3g} req/s",
        )
    cost = n * model.cost_per_replica_hour
    return PlanRow(
        shape_id=model.shape.id,
        traffic_rps=traffic_rps,
        feasible=True,
        replicas=n,
        accelerators=n * model.accelerators_per_replica,
        cost_per_hour=cost,
        cost_per_million_output_tokens=cost_per_million_tokens(cost, traffic_rps * model.output_tokens_per_request),
        capacity_rps=model.capacity_rps(n),
        next_replica_at_rps=model.capacity_rps(n),
        reason="scaling assumed, not measured (no multi-replica run met the SLO)" if model.efficiency_assumed else "",
    )


def plan(models: Sequence[ShapeCapacity], traffic_rps: float) -> tuple[PlanRow, ...]:
    """One row per shape; feasible rows first, cheapest first (then fewer accelerators)."""
    if traffic_rps <= 0:
        raise ValueError("traffic must be > 0 req/s")
    rows = [plan_for(m, traffic_rps) for m in models]
    order = {m.shape.id: i for i, m in enumerate(models)}
    return tuple(
        sorted(
            rows,
            key=lambda r: (not r.feasible, r.cost_per_hour or 0.0, r.accelerators or 0, order[r.shape_id]),
        )
    )
