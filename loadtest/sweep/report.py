"""``sweep.json``: the versioned, documented report of a sweep (built purely).

Schema ``serveout.sweep`` version 1 (every field of :class:`SweepReport`):

- ``kind`` ("serveout.sweep"), ``schema_version`` (1), ``status``
  (``complete`` | ``partial`` while running | ``interrupted`` by Ctrl-C |
  ``aborted`` by the measurer), ``generated_at`` (ISO 8601, UTC);
- ``spec``: the sweep spec as run (``prices`` is the price file's path),
  ``prices``: the price table used, ``fingerprint``: the measurement fingerprint
  keying the persisted runs (:func:`loadtest.sweep.spec.measurement_fingerprint`);
- ``strategy``, ``grid_size`` (feasible candidates in the space), ``runs_needed``
  (candidates measured or reused for this answer), ``runs_measured`` (in this
  invocation), ``runs_reused`` (from the results folder), ``load_points``;
- ``infeasible``: nominal candidates left out, with the budget reason;
- ``runs``: one :class:`~loadtest.sweep.figures.RunRow` per candidate in measurement
  order: candidate (tp, replicas, engine), status and reason, accelerators, cost
  per hour, every load point with its figures and per-objective verdicts (limit,
  observed, ratio, passed), the outcome at the target rate, capacity at SLO,
  throughput (req/s, output tok/s), cost per million output tokens at the target,
  scaling efficiency;
- ``answer``: kind (passing | closest | none), best and runner-up candidate ids,
  the best's verdicts (margin = 1 - ratio), failed objectives, explanation;
- ``pareto``: candidate ids on the cost-per-million-tokens vs p95 E2E front;
- ``capacity``: the fitted capacity model per shape (:mod:`loadtest.sweep.capacity`);
- ``notes``: the strategy's state per shape; ``assumptions``; ``warnings``.

Readers must check ``schema_version``; new optional fields may appear in version 1.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from loadtest.sweep.base import Strict
from loadtest.sweep.capacity import ShapeCapacity, fit_capacity
from loadtest.sweep.figures import RunRow, build_rows
from loadtest.sweep.prices import PriceTable
from loadtest.sweep.results import RunRecord
from loadtest.sweep.selection import CLOSEST_RULE, TIE_BREAK, Answer, choose, pareto_front
from loadtest.sweep.space import InfeasibleNote, SearchSpace
from loadtest.sweep.spec import SweepSpec, measurement_fingerprint

SCHEMA = "serveout.sweep"
SCHEMA_VERSION = 1

ASSUMPTIONS = (
    "passing is monotone in load: a rate above a failing one is taken as failing",
    "replicas do not beat perfect scaling: if one replica fails at R/N, N replicas fail at R",
    "more replicas of a shape that failed to deploy or crashed fail the same way",
    "capacities are lower bounds, exact to the spacing of the measured rates",
    f"ties between passing configurations: {TIE_BREAK}",
    f"closest when none passes: {CLOSEST_RULE}",
)


class ReportStatus(enum.StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"
    INTERRUPTED = "interrupted"
    ABORTED = "aborted"


class SweepReport(Strict):
    """The whole of ``sweep.json`` (see the module docstring for the schema)."""

    kind: Literal["serveout.sweep"] = "serveout.sweep"
    schema_version: Literal[1] = 1
    status: ReportStatus
    generated_at: str
    spec: SweepSpec
    prices: PriceTable
    fingerprint: str
    strategy: str
    grid_size: int
    runs_needed: int
    runs_measured: int
    runs_reused: int
    load_points: int
    infeasible: tuple[InfeasibleNote, ...] = ()
    runs: tuple[RunRow, ...] = ()
    answer: Answer
    pareto: tuple[str, ...] = ()
    capacity: tuple[ShapeCapacity, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ASSUMPTIONS
    warnings: tuple[str, ...] = Field((), description="e.g. unreadable files, saturated generator")

    def run(self, candidate_id: str) -> RunRow | None:
        return next((r for r in self.runs if r.candidate_id == candidate_id), None)


class RunCounts(Strict):
    """How the history was obtained in this invocation."""

    measured: int = 0
    reused: int = 0


def build_report(
    space: SearchSpace,
    strategy: str,
    history: Sequence[RunRecord],
    *,
    status: ReportStatus,
    generated_at: str,
    counts: RunCounts | None = None,
    notes: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> SweepReport:
    """The report of ``history`` (valid at any time: partial sweeps included)."""
    counts = counts or RunCounts()
    rows = build_rows(space, history)
    saturated = tuple(
        f"{row.candidate_id}: the load generator was saturated at {p.point.offered_rps:.3g} req/s; "
        "those figures are not trustworthy"
        for row in rows
        for p in row.points
        if p.point.generator_saturated
    )
    return SweepReport(
        status=status,
        generated_at=generated_at,
        spec=space.spec,
        prices=space.prices,
        fingerprint=measurement_fingerprint(space.spec),
        strategy=strategy,
        grid_size=space.grid_size,
        runs_needed=len(rows),
        runs_measured=counts.measured,
        runs_reused=counts.reused,
        load_points=sum(len(r.points) for r in rows),
        infeasible=space.infeasible,
        runs=rows,
        answer=choose(rows),
        pareto=pareto_front(rows),
        capacity=fit_capacity(space, rows),
        notes=tuple(notes),
        warnings=(*warnings, *saturated),
    )
