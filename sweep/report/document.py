"""``sweep.json``: the versioned, documented report of a sweep (built purely).

Schema ``serveout.sweep`` version 3 (every field of :class:`SweepReport`):

- ``kind`` ("serveout.sweep"), ``schema_version`` (3), ``status``
  (``complete`` | ``partial`` while running | ``interrupted`` by Ctrl-C |
  ``aborted`` by the measurer), ``generated_at`` (ISO 8601, UTC);
- ``simulated``: true when every figure comes from the simulator (``sweep run --simulate``:
  the spec has a ``simulation`` section), none measured; always equal to the spec's, and
  taken from it when absent (reports written before the field existed);
- ``spec``: the sweep spec as run (``prices`` is the price file's path),
  ``prices``: the price table used, ``fingerprint``: the measurement fingerprint
  keying the persisted runs (:func:`sweep.spec.sweep_spec.measurement_fingerprint`);
- ``strategy``, ``grid_size`` (feasible candidates in the space), ``runs_needed``
  (candidates measured or reused for this answer), ``runs_measured`` (in this
  invocation), ``runs_reused`` (from the results folder), ``load_points``;
- ``infeasible``: nominal candidates left out, with the budget reason;
- ``runs``: one :class:`~sweep.analysis.rows.RunRow` per candidate in measurement
  order: candidate (tp, replicas, engine), status and reason, accelerators, cost
  per hour, every load point with its figures (samples, seeds, validity, bootstrap
  evidence) and per-objective verdicts (the load tester's
  :class:`~loadtest.analysis.slo.ObjectiveResult`: the objective with its metric,
  stat and threshold, observed, passed, 95% CI and confidence; ratio and margin are
  derived), the outcome at the target rate (pass | fail | invalid | error |
  unknown), capacity at SLO and the lowest failing rate, throughput (req/s,
  output tok/s), cost per million output tokens, cost per request and cost per
  million output characters (``null`` for synthetic workloads) at the target, and
  with a ``quality`` section the quality gate's verdict (``quality``: status
  reference | accepted | refused | unknown | simulated, the score with its Wilson
  interval, the reference's, the tolerance, answers changed, explanation);
- ``text_density`` (``null`` when no tokenizer was measured): characters and tokens
  of the bundled prompt sets per language and of the run's workload, with the
  model's tokenizer (:class:`~loadtest.workloads.text_density.TextDensities`);
- ``language_costs``: the answer's cost per million output tokens as a cost per
  million output characters in each measured language (:class:`~sweep.analysis.rows.LanguageCost`);
- ``scaling``: replica scaling and tensor-parallel scaling per accelerator
  (:mod:`sweep.analysis.rows`);
- ``answer``: kind (passing | closest | none), best and runner-up candidate ids,
  the best's verdicts, the keys of its failed objectives, the runs refused on quality
  (``refused``: no dearer than the answer, each ``candidate_id`` and ``why``), explanation;
- ``pareto``: candidate ids on the cost-per-million-tokens vs p95 E2E front;
- ``capacity``: the fitted capacity model per shape (:mod:`sweep.capacity.model`);
- ``notes``: the strategy's state per shape; ``assumptions``; ``warnings``.

Readers must check ``schema_version``; new optional fields may appear in version 3.
Older versions are not read (2 had the sweep's own verdict type; 1 predates validity,
repeats and capacity-based scaling); rerunning ``sweep run`` on the folder rebuilds
the report from its stored runs without measuring again.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from loadtest.workloads.text_density import TextDensities
from sweep.analysis.quality import RULE as QUALITY_RULE
from sweep.analysis.rows import LanguageCost, RunRow, ScalingRow, build_rows, language_costs, scaling_rows
from sweep.analysis.selection import CLOSEST_RULE, TIE_BREAK, Answer, choose, pareto_front
from sweep.capacity.model import ShapeCapacity, fit_capacity
from sweep.measure.results import RunRecord
from sweep.spec.economics import PriceTable
from sweep.spec.space import InfeasibleNote, SearchSpace
from sweep.spec.sweep_spec import SweepSpec, measurement_fingerprint
from sweep.strict import Strict

SCHEMA = "serveout.sweep"
SCHEMA_VERSION = 3


def assumptions(spec: SweepSpec) -> tuple[str, ...]:
    """What the search and the report take for granted, in words."""
    search = spec.search
    quality = () if spec.quality is None else (
        f"quality: {QUALITY_RULE} (tolerance {spec.quality.tolerance * 100:g} pts, reference "
        f"{spec.quality.reference}, {spec.quality.items or 'all'} item(s) of {spec.quality.set_name})",)
    return (
        "passing is monotone in load: a rate above a failing one is taken as failing",
        "fewer replicas never beat more: if N replicas fail at R, fewer fail too",
        "a one-replica probe predicts replica counts but bounds none: pooled replicas behind "
        "a least-loaded router can pass at R where one replica fails at R/N",
        "more replicas of a shape that failed to deploy fail to deploy too; a crash, a tool "
        "error or an invalid measurement says nothing about other counts",
        "an invalid measurement (arrivals late, client concurrency cap reached, generator "
        "CPU-saturated or lagging, achieved rate short of the offered one) is neither a pass nor a failure",
        f"a point within {search.boundary_margin:.0%} of a limit is measured again with new seeds "
        f"(up to {search.max_samples} samples); the median p95s and the pooled goodput decide",
        "each point is judged at the rate actually sent; capacities are the highest such rates "
        "meeting the SLO: lower bounds, exact to the spacing of the measured rates",
        f"ties between passing configurations: {TIE_BREAK}",
        f"closest when none passes: {CLOSEST_RULE}",
        *quality,
    )


class ReportStatus(enum.StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"
    INTERRUPTED = "interrupted"
    ABORTED = "aborted"


class SweepReport(Strict):
    """The whole of ``sweep.json`` (see the module docstring for the schema)."""

    kind: Literal["serveout.sweep"] = "serveout.sweep"
    schema_version: Literal[3] = 3
    status: ReportStatus
    generated_at: str
    simulated: bool = Field(False, description="every figure from the simulator, none measured")
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
    scaling: tuple[ScalingRow, ...] = ()
    capacity: tuple[ShapeCapacity, ...] = ()
    text_density: TextDensities | None = None
    language_costs: tuple[LanguageCost, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    warnings: tuple[str, ...] = Field((), description="e.g. unreadable files, invalid measurements")

    @model_validator(mode="before")
    @classmethod
    def _simulated_from_spec(cls, data: Any) -> Any:
        """Without ``simulated`` (a report written before the field existed), the spec says."""
        if not isinstance(data, dict) or "simulated" in data:
            return data
        spec = data.get("spec")
        simulated = spec.simulated if isinstance(spec, SweepSpec) else (
            isinstance(spec, dict) and spec.get("simulation") is not None)
        return {**data, "simulated": simulated}

    @model_validator(mode="after")
    def _simulated_as_the_spec(self) -> SweepReport:
        if self.simulated != self.spec.simulated:
            raise ValueError(f"simulated={self.simulated} contradicts the spec, which is "
                             f"{'simulated' if self.spec.simulated else 'measured'}")
        return self

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
    text_density: TextDensities | None = None,
) -> SweepReport:
    """The report of ``history`` (valid at any time: partial sweeps included), ``simulated``
    when the spec is; ``text_density`` (measured with the model's tokenizer) adds the costs per character."""
    counts = counts or RunCounts()
    workload = None if text_density is None else text_density.workload
    rows = build_rows(space, history, None if workload is None else workload.chars_per_token)
    invalid = tuple(
        f"{row.candidate_id} at {p.point.offered_rps:.3g} req/s: invalid measurement "
        f"({'; '.join(p.point.invalid_reasons)}), neither a pass nor a failure"
        for row in rows
        for p in row.points
        if not p.point.valid
    )
    answer = choose(rows)
    best = next((r for r in rows if r.candidate_id == answer.best), None)
    return SweepReport(
        status=status,
        generated_at=generated_at,
        simulated=space.spec.simulated,
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
        answer=answer,
        pareto=pareto_front(rows),
        scaling=scaling_rows(rows),
        capacity=fit_capacity(space, rows),
        text_density=text_density,
        language_costs=() if text_density is None else language_costs(best, text_density.languages),
        notes=tuple(notes),
        assumptions=assumptions(space.spec),
        warnings=(*warnings, *invalid),
    )
