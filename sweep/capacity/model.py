"""The capacity model and the capacity plan behind ``sweep plan``: when to add replicas (pure).

For each shape (TP size + engine settings) the sweep measured, per replica count N:
the highest achieved rate meeting the SLO (a lower bound on N's capacity) and the
lowest achieved rate of a valid failure (an upper bound), where measured.

The model ``capacity(N)``:

- at and between the counts that met the SLO: the measured capacities, joined by
  straight lines (a super-linear gain, e.g. replicas pooling their queues behind a
  least-loaded router, is kept as measured, never clamped to linear);
- beyond the largest such count K: ``cap(K) * (N / K) * u(N) / u(K)`` with the
  contention curve of the Universal Scalability Law ``u(N) = 1 / (1 + a (N - 1))``;
  ``a`` is fitted by least squares through the origin on ``1/e_N - 1 = a (N - 1)``
  over the measured efficiencies ``e_N = cap(N) / (N c1)`` and clamped at 0 (a
  super-linear gain is held, not extrapolated upwards); with no multi-replica
  measurement ``a`` comes from the spec's ``assumed_scaling_efficiency`` e0 as the
  efficiency of two replicas (``a = 1/e0 - 1``) and the capacity plan says it is assumed;
- below the smallest count that met the SLO: nothing (not measured to carry anything);
- then bounded by the measurements themselves: never below what N or fewer
  replicas carried, and never up to a rate at which N or more replicas failed.

For traffic T and a headroom h (the share of capacity kept spare), the capacity plan takes
the smallest N carrying ``T / (1 - h)`` strictly below every rate at which N or
more replicas were measured failing, so it never recommends a configuration that
was measured failing at that traffic. The next replica must be added when the
traffic exceeds ``capacity(N) * (1 - h)``. Cost per million output tokens at T =
cost per hour / (T * tokens per request * 3600) * 1e6.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from sweep.analysis.rows import RunRow
from sweep.spec.economics import cost_per_million_tokens
from sweep.spec.space import SearchSpace, Shape
from sweep.strict import Strict

_EPS = 1e-9
DEFAULT_HEADROOM = 0.1  # the share of capacity a capacity plan keeps spare unless told otherwise


class EfficiencyPoint(Strict):
    replicas: int = Field(ge=2)
    efficiency: float = Field(gt=0)


class MeasuredCount(Strict):
    """What the sweep measured for one replica count (achieved rates, req/s)."""

    replicas: int = Field(ge=1)
    passes_at_rps: float | None = Field(None, gt=0, description="highest rate meeting the SLO")
    fails_at_rps: float | None = Field(None, gt=0, description="lowest rate of a valid failure")


class ShapeCapacity(Strict):
    """The capacity model of one shape (stored in sweep.json; see the module docstring)."""

    shape: Shape
    accelerators_per_replica: int
    cost_per_replica_hour: float
    max_replicas: int = Field(ge=1, description="replicas the budget holds")
    measured: tuple[MeasuredCount, ...] = Field(min_length=1)
    contention: float = Field(ge=0, description="a of the contention curve beyond the measurements")
    contention_assumed: bool = False
    output_tokens_per_request: float = Field(gt=0)

    def _anchors(self) -> list[tuple[int, float]]:
        return sorted((m.replicas, m.passes_at_rps) for m in self.measured if m.passes_at_rps is not None)

    @property
    def per_replica_rps(self) -> float | None:
        """c1: one replica's measured capacity."""
        return next((cap for n, cap in self._anchors() if n == 1), None)

    @property
    def largest_measured(self) -> int:
        """The largest replica count that met the SLO."""
        return max((n for n, _ in self._anchors()), default=0)

    def _model(self, replicas: int) -> float:
        anchors = self._anchors()
        if not anchors or replicas < anchors[0][0]:
            return 0.0
        for (n0, c0), (n1, c1) in zip(anchors, anchors[1:], strict=False):
            if n0 <= replicas <= n1:
                return c0 + (c1 - c0) * (replicas - n0) / (n1 - n0)
        k, cap_k = anchors[-1]
        u = lambda n: 1.0 / (1.0 + self.contention * (n - 1))  # noqa: E731
        return cap_k * replicas / k * u(replicas) / u(k)

    def fails_at_rps(self, replicas: int) -> float | None:
        """The lowest rate at which ``replicas`` or more replicas were measured failing."""
        rates = [m.fails_at_rps for m in self.measured if m.replicas >= replicas and m.fails_at_rps is not None]
        return min(rates, default=None)

    def capacity_rps(self, replicas: int) -> float:
        """Traffic ``replicas`` replicas carry within the SLO, per the model."""
        floor = max((m.passes_at_rps for m in self.measured
                     if m.replicas <= replicas and m.passes_at_rps is not None), default=0.0)
        ceiling = self.fails_at_rps(replicas)
        value = max(self._model(replicas), floor)
        return value if ceiling is None else min(value, ceiling)

    def carries(self, replicas: int, traffic_rps: float) -> bool:
        """Within the model's capacity and strictly below every measured failure."""
        ceiling = self.fails_at_rps(replicas)
        return self.capacity_rps(replicas) >= traffic_rps * (1 - _EPS) and (ceiling is None or traffic_rps < ceiling)

    def efficiency(self, replicas: int) -> float | None:
        """capacity(N) / (N c1): 1.0 = linear scaling (``None`` without c1)."""
        c1 = self.per_replica_rps
        return None if c1 is None else self.capacity_rps(replicas) / (replicas * c1)

    def replicas_for(self, traffic_rps: float, headroom: float = 0.0) -> int | None:
        """Smallest replica count carrying ``traffic_rps`` with ``headroom`` spare; ``None``
        beyond the budget."""
        need = traffic_rps / (1.0 - headroom)
        return next((n for n in range(1, self.max_replicas + 1) if self.carries(n, need)), None)

    def basis(self, replicas: int) -> str:
        """Where capacity(N) comes from, in words."""
        anchors = [n for n, _ in self._anchors()]
        if replicas in anchors:
            return "measured"
        if anchors and anchors[0] < replicas < anchors[-1]:
            return "interpolated between measured counts"
        if self.contention_assumed:
            return "extrapolated with the assumed scaling efficiency (no multi-replica run met the SLO)"
        return f"extrapolated beyond {anchors[-1]} replicas (contention a={self.contention:.3g})"


class CapacityPlanRow(Strict):
    """One shape's row of a capacity plan: what serving ``traffic_rps`` with it takes."""

    shape_id: str
    traffic_rps: float
    headroom: float = 0.0
    feasible: bool
    replicas: int | None = None
    accelerators: int | None = None
    cost_per_hour: float | None = None
    cost_per_million_output_tokens: float | None = None
    capacity_rps: float | None = Field(None, description="what those replicas carry")
    next_replica_at_rps: float | None = Field(None, description="add a replica when traffic exceeds this")
    next_accelerators: int | None = Field(None, description="accelerators after adding it (None: budget full)")
    reason: str = ""


def fit_contention(points: Sequence[EfficiencyPoint]) -> float:
    """Least-squares ``a`` of ``1/e - 1 = a (N - 1)`` through the origin, clamped at 0."""
    sxx = sum((p.replicas - 1) ** 2 for p in points)
    if sxx == 0:
        return 0.0
    sxy = sum((p.replicas - 1) * (1.0 / p.efficiency - 1.0) for p in points)
    return max(0.0, sxy / sxx)


def _measured(rows: Sequence[RunRow]) -> tuple[MeasuredCount, ...]:
    return tuple(
        MeasuredCount(replicas=r.candidate.replicas, passes_at_rps=r.capacity_rps, fails_at_rps=r.fails_at_rps)
        for r in sorted(rows, key=lambda r: r.candidate.replicas)
        if r.capacity_rps is not None or r.fails_at_rps is not None
    )


def fit_capacity(space: SearchSpace, rows: Sequence[RunRow]) -> tuple[ShapeCapacity, ...]:
    """A model for every shape that met the SLO at some replica count and rate."""
    models = []
    assumed_a = 1.0 / space.spec.search.assumed_scaling_efficiency - 1.0
    for shape in space.shapes:
        mine = [r for r in rows if r.candidate.shape == shape]
        passing = sorted((r for r in mine if r.capacity_rps is not None), key=lambda r: r.candidate.replicas)
        if not passing:
            continue
        base = passing[0]
        c1 = base.capacity_rps if base.candidate.replicas == 1 else None
        points = () if c1 is None else tuple(
            EfficiencyPoint(replicas=r.candidate.replicas, efficiency=r.capacity_rps / (r.candidate.replicas * c1))
            for r in passing[1:]
            if r.capacity_rps is not None
        )
        tokens = (
            base.throughput_output_tokens_per_s / base.throughput_rps
            if base.throughput_rps and base.throughput_output_tokens_per_s
            else float(space.spec.traffic.workload.output_tokens)
        )
        models.append(
            ShapeCapacity(
                shape=shape,
                accelerators_per_replica=space.accelerators(shape.with_replicas(1)),
                cost_per_replica_hour=space.cost_per_hour(shape.with_replicas(1)),
                max_replicas=max(1, space.max_replicas(shape)),
                measured=_measured(mine),
                contention=fit_contention(points) if points else assumed_a,
                contention_assumed=not points,
                output_tokens_per_request=tokens,
            )
        )
    return tuple(models)


def capacity_plan_row(model: ShapeCapacity, traffic_rps: float, headroom: float = 0.0) -> CapacityPlanRow:
    """Replicas, accelerators and cost for ``traffic_rps`` with one shape."""
    common = {"shape_id": model.shape.id, "traffic_rps": traffic_rps, "headroom": headroom}
    n = model.replicas_for(traffic_rps, headroom)
    if n is None:
        top = model.capacity_rps(model.max_replicas) * (1 - headroom)
        return CapacityPlanRow(
            **common, feasible=False,
            reason=f"{model.max_replicas} replicas (the budget) carry only {top:.3g} req/s with "
            f"{headroom:.0%} headroom",
        )
    cost = n * model.cost_per_replica_hour
    capacity = model.capacity_rps(n)
    return CapacityPlanRow(
        **common, feasible=True, replicas=n, accelerators=n * model.accelerators_per_replica, cost_per_hour=cost,
        cost_per_million_output_tokens=cost_per_million_tokens(cost, traffic_rps * model.output_tokens_per_request),
        capacity_rps=capacity,
        next_replica_at_rps=capacity * (1 - headroom),
        next_accelerators=(n + 1) * model.accelerators_per_replica if n < model.max_replicas else None,
        reason=model.basis(n),
    )


def capacity_plan(
    models: Sequence[ShapeCapacity], traffic_rps: float, headroom: float = 0.0
) -> tuple[CapacityPlanRow, ...]:
    """The capacity plan for ``traffic_rps``: one row per shape; feasible rows first,
    cheapest first (then fewer accelerators)."""
    if traffic_rps <= 0 or not math.isfinite(traffic_rps):
        raise ValueError("traffic must be > 0 req/s")
    if not 0.0 <= headroom < 1.0:
        raise ValueError("headroom must be within [0, 1)")
    rows = [capacity_plan_row(m, traffic_rps, headroom) for m in models]
    order = {m.shape.id: i for i, m in enumerate(models)}
    return tuple(
        sorted(rows, key=lambda r: (not r.feasible, r.cost_per_hour or 0.0, r.accelerators or 0, order[r.shape_id]))
    )
