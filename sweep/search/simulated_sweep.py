"""The search against the simulator: a whole simulated sweep (``sweep run --simulate``,
``sweep plan --spec --simulate``) and one replica type's simulated capacity (``sweep mix``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadtest.workloads.text_density import TextDensities
from serving.config.model_spec import ModelCatalog
from sweep.measure.results import RunRecord, RunStatus, Trial, TrialPurpose
from sweep.measure.simulated import SimulatedMeasurer, check_simulable
from sweep.measure.verdicts import capacity_point
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
