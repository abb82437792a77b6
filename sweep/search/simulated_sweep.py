"""The search against the simulator: a whole simulated sweep (``sweep run --simulate``,
``sweep plan --spec --simulate``) and one replica type's simulated capacity (``sweep mix``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadtest.workloads.text_density import TextDensities
from serving.config.model_spec import ModelCatalog
from sweep.capacity.model import EfficiencyPoint, MeasuredCount, ShapeCapacity, fit_contention
from sweep.measure.results import RunRecord, RunStatus, Trial, TrialPurpose
from sweep.measure.simulated import SimulatedMeasurer, check_simulable
from sweep.measure.verdicts import capacity_point, lowest_failing_rate
from sweep.report.document import SweepReport
from sweep.report.folder import ResultsFolder
from sweep.search.loop import SweepObserver, run_sweep
from sweep.search.capacity_search import probe_rates
from sweep.spec.economics import PriceTable
from sweep.spec.space import SearchSpace, Shape
from sweep.spec.sweep_spec import SweepSpec


def run_simulated_sweep(spec: SweepSpec, prices: PriceTable, folder: ResultsFolder, catalog: ModelCatalog,
                        models_dir: Path, *, observer: SweepObserver | None = None,
                        on_phase: Callable[[str], None] = lambda _: None, retry_failed: bool = False,
                        text_density: TextDensities | None = None) -> SweepReport:
    """:func:`~sweep.search.loop.run_sweep` of a simulated spec (resumes from ``folder`` as a real one does)."""
    if not spec.simulated:
        raise ValueError("run_simulated_sweep needs a simulated spec (sweep.spec.sweep_spec.as_simulated)")
    check_simulable(spec, catalog)
    measurer = SimulatedMeasurer(spec, catalog, models_dir, on_phase=on_phase)
    return run_sweep(spec, prices, measurer, folder, observer=observer, retry_failed=retry_failed,
                     text_density=text_density)


def replica_capacity(spec: SweepSpec, prices: PriceTable, shape: Shape, catalog: ModelCatalog,
                     models_dir: Path) -> tuple[float | None, str]:
    """One replica of ``shape``'s simulated capacity at the SLO (req/s) and how it was
    found: the capacity search's own probe (per-replica rates ``R/n`` up the ladder, then
    ``probe_refine`` bisections), on the simulated spec's hardware; ``None`` when the
    simulator refuses the shape or it fails at every probe rate."""
    space = SearchSpace(spec, prices)
    trial = Trial(candidate=shape.with_replicas(1), offered_rates=probe_rates(space, shape),
                  refine=spec.search.probe_refine, purpose=TrialPurpose.PROBE)
    result = SimulatedMeasurer(spec, catalog, models_dir).measure(trial)
    if result.status is not RunStatus.OK:
        return None, result.reason or result.status.value
    point = capacity_point(RunRecord(trial=trial, result=result), spec.slo)
    if point is None:
        return None, f"one replica misses the SLO even at {trial.offered_rates[0]:.3g} req/s"
    return point.rate_rps, f"{len(result.points)} simulated load points"
def simulated_count(spec: SweepSpec, prices: PriceTable, capacity: ShapeCapacity, replicas: int,
                    catalog: ModelCatalog, models_dir: Path) -> MeasuredCount:
    """``replicas`` replicas of ``capacity``'s shape, simulated at the one-replica probe's
    per-replica rates times ``replicas`` (then ``probe_refine`` bisections): what they
    carry within the SLO and the lowest rate at which they fail."""
    space = SearchSpace(spec, prices)
    shape = capacity.shape
    trial = Trial(candidate=shape.with_replicas(replicas),
                  offered_rates=tuple(r * replicas for r in probe_rates(space, shape)),
                  refine=spec.search.probe_refine, purpose=TrialPurpose.PROBE)
    result = SimulatedMeasurer(spec, catalog, models_dir).measure(trial)
    if result.status is not RunStatus.OK:
        return MeasuredCount(replicas=replicas)
    record = RunRecord(trial=trial, result=result)
    point = capacity_point(record, spec.slo)
    return MeasuredCount(replicas=replicas, passes_at_rps=point.rate_rps if point else None,
                         fails_at_rps=lowest_failing_rate(record, spec.slo))


def with_simulated_counts(spec: SweepSpec, prices: PriceTable, capacity: ShapeCapacity, traffic_rps: float,
                          headroom: float, catalog: ModelCatalog, models_dir: Path,
                          on_count: Callable[[str, int], None] = lambda *_: None,
                          simulate_count: Callable[[int], MeasuredCount] | None = None) -> ShapeCapacity:
    """``capacity`` with every replica count a plan for ``traffic_rps`` needs simulated
    instead of extrapolated: counts up to the one carrying the traffic and the next one
    (the add-a-replica threshold), each simulated once; the contention is then fitted on
    those counts, never assumed. ``simulate_count`` is the seam unit tests fake."""
    simulate_count = simulate_count or (lambda n: simulated_count(spec, prices, capacity, n, catalog, models_dir))
    measured = {m.replicas: m for m in capacity.measured}
    current = capacity
    while True:
        needed = current.replicas_for(traffic_rps, headroom) or current.max_replicas
        missing = [n for n in range(1, min(needed + 1, current.max_replicas) + 1) if n not in measured]
        if not missing:
            return current
        for n in missing:
            on_count(capacity.shape.id, n)
            measured[n] = simulate_count(n)
        counts = tuple(m for _, m in sorted(measured.items()) if m.passes_at_rps or m.fails_at_rps)
        c1 = measured.get(1).passes_at_rps if 1 in measured else None
        points = tuple(EfficiencyPoint(replicas=m.replicas, efficiency=m.passes_at_rps / (m.replicas * c1))
                       for m in counts if c1 and m.replicas > 1 and m.passes_at_rps)
        current = capacity.model_copy(update={
            "measured": counts, "contention": fit_contention(points) if points else capacity.contention,
            "contention_assumed": not points and capacity.contention_assumed})
