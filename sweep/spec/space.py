"""The searchable space: candidates, their fit in the budget, the grid and its prices.

A candidate is TP size x replicas x engine settings (the engine's dtype among them). Accelerators used = ``tp *
replicas * accelerators_per_rank``. A tensor-parallel group must sit on one node, so
the replicas of one shape that fit are ``nodes * floor(accelerators_per_node / (tp *
accelerators_per_rank))`` (identical groups pack exactly that way), further capped by
the budget's total. :class:`SearchSpace` is built once from a spec and a price table:
everything a strategy or the report needs to know about candidates that is not a
measurement.
"""

from __future__ import annotations

import itertools

from pydantic import Field, PositiveInt

from serving.config.model_spec import Dtype
from sweep.errors import SpecError
from sweep.spec.economics import PriceTable, cost_per_hour
from sweep.spec.quality import FIRST
from sweep.spec.sweep_spec import BudgetSpec, SloSpec, SweepSpec
from sweep.strict import Strict


class EngineKnobs(Strict):
    """Engine settings that change capacity; ``None`` keeps the model spec's value."""

    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: int | None = Field(None, ge=16)
    max_loras: PositiveInt | None = Field(None, description="LoRA adapter slots per engine batch")
    dtype: Dtype | None = Field(None, description="the engine's dtype; None = the model spec's")

    @property
    def label(self) -> str:
        """Stable text form used in ids: ``seqs64-mbt8192``, ``seqsdef-mbtdef``, with
        adapter slots set ``seqs64-mbtdef-loras4``, with a dtype ``seqsdef-mbtdef-bfloat16``
        (unset: the ids of before)."""
        seqs = "def" if self.max_num_seqs is None else str(self.max_num_seqs)
        mbt = "def" if self.max_num_batched_tokens is None else str(self.max_num_batched_tokens)
        return (f"seqs{seqs}-mbt{mbt}" + ("" if self.max_loras is None else f"-loras{self.max_loras}")
                + ("" if self.dtype is None else f"-{self.dtype.value}"))


class Shape(Strict):
    """What one replica is: its tensor-parallel size and engine settings."""

    tp: PositiveInt
    engine: EngineKnobs = EngineKnobs()

    @property
    def id(self) -> str:
        return f"tp{self.tp}-{self.engine.label}"

    def with_replicas(self, replicas: int) -> DeploymentCandidate:
        return DeploymentCandidate(tp=self.tp, replicas=replicas, engine=self.engine)


class DeploymentCandidate(Strict):
    """One deployable configuration: TP size x replicas x engine settings (the sweep's
    *candidate*; not the router's ``serving.routing.core.Candidate``, a replica and its queue)."""

    tp: PositiveInt
    replicas: PositiveInt
    engine: EngineKnobs = EngineKnobs()

    @property
    def shape(self) -> Shape:
        return Shape(tp=self.tp, engine=self.engine)

    @property
    def id(self) -> str:
        """Stable, human-readable key, e.g. ``tp2-r3-seqs64-mbtdef`` (used as a file name)."""
        return f"tp{self.tp}-r{self.replicas}-{self.engine.label}"

    def accelerators(self, accelerators_per_rank: int = 1) -> int:
        return self.tp * self.replicas * accelerators_per_rank


class Feasibility(Strict):
    """Whether a candidate fits the budget, and why not."""

    feasible: bool
    reason: str | None = None


def replicas_that_fit(tp: int, budget: BudgetSpec) -> int:
    """How many TP-``tp`` replicas the budget holds (0 when one group exceeds a node)."""
    group = tp * budget.accelerators_per_rank
    if group > budget.accelerators_per_node:
        return 0
    packed = budget.nodes * (budget.accelerators_per_node // group)
    return min(packed, budget.total // group)


def check_feasibility(candidate: DeploymentCandidate, budget: BudgetSpec) -> Feasibility:
    """Check per-node fit of a TP group, the total budget and node packing."""
    kind = budget.accelerator.value
    group = candidate.tp * budget.accelerators_per_rank
    if group > budget.accelerators_per_node:
        return Feasibility(
            feasible=False,
            reason=f"a TP-{candidate.tp} group needs {group} {kind} on one node; "
            f"nodes have {budget.accelerators_per_node}",
        )
    used = candidate.accelerators(budget.accelerators_per_rank)
    if used > budget.total:
        return Feasibility(
            feasible=False, reason=f"needs {used} {kind}; the budget is {budget.total}"
        )
    fit = replicas_that_fit(candidate.tp, budget)
    if candidate.replicas > fit:
        return Feasibility(
            feasible=False,
            reason=f"only {fit} TP-{candidate.tp} groups fit on {budget.nodes} node(s) "
            f"of {budget.accelerators_per_node} {kind}",
        )
    return Feasibility(feasible=True)


def nominal_shapes(spec: SweepSpec) -> list[Shape]:
    """Every shape of the space's lists, in the lists' order (the budget not applied)."""
    space = spec.space
    return [
        Shape(tp=tp, engine=EngineKnobs(max_num_seqs=seqs, max_num_batched_tokens=mbt, max_loras=loras, dtype=dtype))
        for tp, seqs, mbt, loras, dtype in itertools.product(
            space.tensor_parallel, space.max_num_seqs, space.max_num_batched_tokens, space.max_loras, space.dtype,
        )
    ]


def reference_shape(spec: SweepSpec) -> Shape | None:
    """The shape whose answers the quality gate compares with (``None`` without a
    ``quality`` section): ``first``, the shape of every list's first value, or the shape
    of a candidate or shape id of the space; :class:`SpecError` for anything else."""
    if spec.quality is None:
        return None
    shapes = [s for s in nominal_shapes(spec) if replicas_that_fit(s.tp, spec.budget) > 0]
    wanted = spec.quality.reference
    if wanted == FIRST:
        first = nominal_shapes(spec)[0]
        if first not in shapes:
            raise SpecError(f"quality.reference first ({first.id}) does not fit the budget: name another")
        return first
    for shape in shapes:
        top = spec.space.replicas.max or replicas_that_fit(shape.tp, spec.budget)
        if wanted == shape.id or any(wanted == shape.with_replicas(n).id for n in range(1, top + 1)):
            return shape
    listed = ", ".join(s.with_replicas(spec.space.replicas.min).id for s in shapes[:6])
    raise SpecError(f"quality.reference {wanted!r} is not a candidate of the space; "
                    f"name one (e.g. {listed}) or a shape id, or `first`")


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
        shapes = nominal_shapes(spec)
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

    def grid(self) -> tuple[DeploymentCandidate, ...]:
        """Every feasible candidate, shape by shape, replicas ascending."""
        return tuple(s.with_replicas(n) for s in self.shapes for n in self._counts[s])

    @property
    def grid_size(self) -> int:
        return sum(len(c) for c in self._counts.values())

    def accelerators(self, candidate: DeploymentCandidate) -> int:
        return candidate.accelerators(self.spec.budget.accelerators_per_rank)

    def cost_per_hour(self, candidate: DeploymentCandidate) -> float:
        return cost_per_hour(self.accelerators(candidate), self.price)

    def target_rates(self) -> tuple[float, ...]:
        """Rates of a target trial: the target, then ``target x extra factor``."""
        r = self.target_rps
        return tuple(sorted({r, *(r * f for f in self.spec.search.extra_rate_factors)}))
