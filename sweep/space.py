"""The searchable space: shapes, feasible replica counts, the grid, and prices.

Built once from a spec and a price table; everything a strategy or the report needs
to know about candidates that is not a measurement.
"""

from __future__ import annotations

import itertools

from sweep.base import Strict
from sweep.candidate import (
    Candidate,
    EngineKnobs,
    Shape,
    check_feasibility,
    replicas_that_fit,
)
from sweep.economics import cost_per_hour
from sweep.prices import PriceTable
from sweep.spec import SloSpec, SweepSpec


class InfeasibleNote(Strict):
    """A candidate of the nominal space left out, and why."""

    candidate_id: str
    reason: str


class SearchSpace:
    """Candidates of a spec that fit its budget, in a deterministic order.

    Shapes are ordered by accelerators per replica, then TP size, then engine label.
    Replica counts of a shape run from ``space.replicas.min`` to ``space.replicas.max``
    (or as many as fit), keeping only feasible ones.
    """

    def __init__(self, spec: SweepSpec, prices: PriceTable) -> None:
        self.spec = spec
        self.prices = prices
        self.price = prices.hourly(spec.budget.accelerator)
        shapes = [
            Shape(tp=tp, engine=EngineKnobs(max_num_seqs=seqs, max_num_batched_tokens=mbt))
            for tp, seqs, mbt in itertools.product(
                spec.space.tensor_parallel, spec.space.max_num_seqs, spec.space.max_num_batched_tokens
            )
        ]
        shapes.sort(key=lambda s: (s.tp, s.engine.label))
        budget = spec.budget
        self._counts: dict[Shape, tuple[int, ...]] = {}
        notes: list[InfeasibleNote] = []
        for shape in shapes:
            fit = replicas_that_fit(shape.tp, budget)
            top = spec.space.replicas.max or max(fit, spec.space.replicas.min)
            counts = []
            for n in range(spec.space.replicas.min, top + 1):
                verdict = check_feasibility(shape.with_replicas(n), budget)
                if verdict.feasible:
                    counts.append(n)
                else:
                    notes.append(InfeasibleNote(candidate_id=shape.with_replicas(n).id, reason=str(verdict.reason)))
            if counts:
                self._counts[shape] = tuple(counts)
        self.shapes: tuple[Shape, ...] = tuple(self._counts)
        self.infeasible: tuple[InfeasibleNote, ...] = tuple(notes)

    @property
    def slo(self) -> SloSpec:
        return self.spec.slo

    @property
    def target_rps(self) -> float:
        return self.spec.target_rps

    def replica_counts(self, shape: Shape) -> tuple[int, ...]:
        """Feasible replica counts of ``shape`` in the space, ascending."""
        return self._counts.get(shape, ())

    def max_replicas(self, shape: Shape) -> int:
        """The most replicas of ``shape`` the budget holds (ignores the space's range)."""
        return replicas_that_fit(shape.tp, self.spec.budget)

    def grid(self) -> tuple[Candidate, ...]:
        """Every feasible candidate, shape by shape, replicas ascending."""
        return tuple(s.with_replicas(n) for s in self.shapes for n in self._counts[s])

    @property
    def grid_size(self) -> int:
        return sum(len(c) for c in self._counts.values())

    def accelerators(self, candidate: Candidate) -> int:
        return candidate.accelerators(self.spec.budget.accelerators_per_rank)

    def cost_per_hour(self, candidate: Candidate) -> float:
        return cost_per_hour(self.accelerators(candidate), self.price)

    def target_rates(self) -> tuple[float, ...]:
        """Rates of a target trial: the target, then ``target x extra factor``."""
        r = self.target_rps
        return tuple(sorted({r, *(r * f for f in self.spec.search.extra_rate_factors)}))
