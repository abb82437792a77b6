"""Candidates (TP size x replicas x engine settings) and their fit in the budget.

Accelerators used = ``tp * replicas * accelerators_per_rank``. A tensor-parallel
group must sit on one node, so the replicas of one shape that fit are
``nodes * floor(accelerators_per_node / (tp * accelerators_per_rank))`` (identical
groups pack exactly that way), further capped by the budget's total.
"""

from __future__ import annotations

from pydantic import Field, PositiveInt

from sweep.base import Strict
from sweep.spec import BudgetSpec


class EngineKnobs(Strict):
    """Engine settings that change capacity; ``None`` keeps the model spec's value."""

    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: int | None = Field(None, ge=16)

    @property
    def label(self) -> str:
        """Stable text form used in ids: ``seqs64-mbt8192`` or ``seqsdef-mbtdef``."""
        seqs = "def" if self.max_num_seqs is None else str(self.max_num_seqs)
        mbt = "def" if self.max_num_batched_tokens is None else str(self.max_num_batched_tokens)
        return f"seqs{seqs}-mbt{mbt}"


class Shape(Strict):
    """What one replica is: its tensor-parallel size and engine settings."""

    tp: PositiveInt
    engine: EngineKnobs = EngineKnobs()

    @property
    def id(self) -> str:
        return f"tp{self.tp}-{self.engine.label}"

    def with_replicas(self, replicas: int) -> Candidate:
        return Candidate(tp=self.tp, replicas=replicas, engine=self.engine)


class Candidate(Strict):
    """One deployable configuration."""

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


def check_feasibility(candidate: Candidate, budget: BudgetSpec) -> Feasibility:
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
