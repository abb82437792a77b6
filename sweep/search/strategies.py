"""Search strategies, registered by name (pure).

A strategy decides the next trial from the results so far (guidellm's search between
its runs has the same shape). It is a pure function
of ``(space, history)`` (no hidden state), so a resumed sweep that replays its
persisted records gets the same decisions and reuses them instead of re-measuring.

``history`` holds the latest record of each candidate measured so far in this
sweep (one per candidate id). A strategy must never propose a trial that a
record in the history already covers (:func:`sweep.measure.verdicts.covers`);
the loop treats that as a bug and stops.

``grid`` measures every feasible candidate at the target. ``capacity-search`` (the
default, :mod:`sweep.search.capacity_search`) measures one replica, predicts the
replicas needed, and refines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from loadtest.errors import UnknownNameError
from loadtest.registry import Registry
from sweep.errors import UnknownStrategyError
from sweep.measure.results import RunRecord, Trial, TrialPurpose
from sweep.measure.verdicts import covers
from sweep.search.capacity_search import CapacitySearch
from sweep.spec.space import SearchSpace


class Strategy(Protocol):
    """Proposes the next trial, or ``None`` when the search is finished."""

    kind: ClassVar[str]

    def next_trial(self, space: SearchSpace, history: Sequence[RunRecord]) -> Trial | None: ...

    def notes(self, space: SearchSpace, history: Sequence[RunRecord]) -> tuple[str, ...]:
        """Human-readable lines on the search state, for the report."""
        ...


class GridStrategy:
    """Every feasible candidate once, in the space's order, at the target rates."""

    kind: ClassVar[str] = "grid"

    def next_trial(self, space: SearchSpace, history: Sequence[RunRecord]) -> Trial | None:
        by_id = {r.candidate.id: r for r in history}
        rates = space.target_rates()
        for index, candidate in enumerate(space.grid(), start=1):
            record = by_id.get(candidate.id)
            if record is None or not covers(record, rates, space.slo):
                return Trial(
                    candidate=candidate,
                    offered_rates=rates,
                    purpose=TrialPurpose.TARGET,
                    reason=f"grid {index}/{space.grid_size}",
                )
        return None

    def notes(self, space: SearchSpace, history: Sequence[RunRecord]) -> tuple[str, ...]:
        return (f"grid: every one of the {space.grid_size} feasible candidates is measured",)


def strategy_registry() -> Registry[Strategy]:
    """A fresh registry of the built-in strategies (``grid``, ``capacity-search``)."""
    return Registry("strategy", (CapacitySearch, GridStrategy))


def create_strategy(name: str, registry: Registry[Strategy] | None = None) -> Strategy:
    """An instance of the strategy registered as ``name``.

    Raises :class:`UnknownStrategyError` (listing the valid names) for an unknown one.
    """
    registry = registry or strategy_registry()
    try:
        cls = registry.get(name)
    except UnknownNameError as exc:
        raise UnknownStrategyError("strategy", name, exc.valid) from None
    return cls()
