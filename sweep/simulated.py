"""The simulated :class:`~sweep.loop.Measure`: each candidate through the simulator.

``sweep run SPEC --simulate`` runs the same spec, search, verdicts, rows, economics,
selection and report as a real sweep; only the measurer differs. Instead of deploying
a candidate with serving's app builder and load-testing it, :class:`SimulatedMeasurer`
hands the same :class:`~loadtest.config.LoadTestConfig` (:func:`sweep.measurer.loadtest_config`)
to :func:`simulator.simulate.simulate` with a :class:`~simulator.config.SimulationConfig`
of the candidate (the spec's model on the spec's hardware profile, the candidate's TP,
replica count and engine settings, the gateway's admission bound) and reads its
summary with the same :func:`~sweep.measurer.load_point`. Load points are taken through
:func:`sweep.sampling.measure_rates`, as a real measurer does (new seeds near a limit).

A combination the simulator refuses (TP not dividing the heads, a KV cache that cannot
hold one sequence) is recorded as failed-to-deploy, as vLLM refusing to start would be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from loadtest.workloads.text_density import TextDensities
from serving.config.model_spec import ModelCatalog
from serving.errors import ConfigError as ServingConfigError
from simulator.config import SimulationConfig
from simulator.engine import replica_setup
from simulator.errors import SimulationConfigError, SimulatorError
from simulator.hardware import load_hardware
from sweep.capacity import EfficiencyPoint, MeasuredCount, ShapeCapacity, fit_contention
from sweep.economics import PriceTable
from sweep.errors import ModelUnavailableError, SpecError
from sweep.loop import SweepObserver, run_sweep
from sweep.measurer import GATEWAY_MAX_IN_FLIGHT, load_point, loadtest_config
from sweep.report import SweepReport
from sweep.results import LoadPoint, MeasuredResult, RunRecord, RunStatus, Trial, TrialPurpose
from sweep.results_folder import ResultsFolder
from sweep.sampling import measure_rates
from sweep.search import probe_rates
from sweep.space import Candidate, SearchSpace, Shape
from sweep.spec import SweepSpec
from sweep.verdicts import capacity_point, lowest_failing_rate

SIMULATED_TARGET = "http://simulated.invalid"  # never contacted: the simulator answers

# One simulated load test: the cluster, the rate (req/s) and the arrival seed -> its point.
SimulatePoint = Callable[[SimulationConfig, float, int], LoadPoint]


def check_simulable(spec: SweepSpec, catalog: ModelCatalog) -> None:
    """Fail before simulating: :class:`ModelUnavailableError` for a model the catalog does
    not list, :class:`SpecError` for one without architecture figures or an unknown
    hardware profile."""
    try:
        model = catalog.get(spec.model)
    except ServingConfigError as exc:
        raise ModelUnavailableError(str(exc)) from None
    if model.architecture is None:
        raise SpecError(f"model {spec.model!r} has no `architecture:` section: the simulator needs it "
                        "(layers, hidden size, heads; docs/simulator.md)")
    try:
        load_hardware(spec.hardware)
    except SimulationConfigError as exc:
        raise SpecError(f"--simulate: {exc}") from None


def simulation_config_for(candidate: Candidate, spec: SweepSpec, catalog: ModelCatalog,
                          models_dir: Path) -> SimulationConfig:
    """The simulated deployment of one candidate (what :func:`~sweep.measurer.stack_config_for`
    deploys for real): the model spec's engine with the candidate's knobs."""
    model = catalog.get(spec.model)
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    return SimulationConfig(
        hardware=spec.hardware, model=spec.model, replicas=candidate.replicas, tensor_parallel=candidate.tp,
        engine=model.engine.model_copy(update=knobs), max_in_flight=GATEWAY_MAX_IN_FLIGHT, models_dir=models_dir,
    )


def simulator_point(spec: SweepSpec) -> SimulatePoint:
    """The real :data:`SimulatePoint`: one load test of the spec's traffic, simulated.
    Every candidate sees the same prompts at a given rate and seed: they are prepared
    once (a :class:`~simulator.traffic.TrafficCache` shared by the points)."""
    from simulator.simulate import simulate
    from simulator.traffic import TrafficCache

    cache = TrafficCache()

    def take(sim: SimulationConfig, rate: float, seed: int) -> LoadPoint:
        result = simulate(loadtest_config(spec, SIMULATED_TARGET, rate, seed), sim, traffic_cache=cache)
        return load_point(result.summary.headline, rate)

    return take


class SimulatedMeasurer:
    """Measures trials with the simulator (``simulate_point`` is the seam unit tests fake)."""

    def __init__(self, spec: SweepSpec, catalog: ModelCatalog, models_dir: Path, *,
                 simulate_point: SimulatePoint | None = None,
                 on_phase: Callable[[str], None] = lambda _: None) -> None:
        self.spec, self.catalog, self.models_dir = spec, catalog, models_dir
        self.simulate_point = simulate_point or simulator_point(spec)
        self.on_phase = on_phase

    def measure(self, trial: Trial) -> MeasuredResult:
        started = time.monotonic()
        sim = simulation_config_for(trial.candidate, self.spec, self.catalog, self.models_dir)
        try:
            replica_setup(sim)
        except SimulationConfigError as exc:
            return MeasuredResult(status=RunStatus.FAILED_TO_DEPLOY, reason=f"simulator refuses: {exc}",
                                  wall_time_s=time.monotonic() - started)

        def take(rate: float, seed: int) -> LoadPoint:
            self.on_phase(f"simulating {rate:g} req/s (seed {seed})")
            return self.simulate_point(sim, rate, seed)

        try:
            points = measure_rates(trial, self.spec.traffic.seed, self.spec.slo, self.spec.search, take)
        except SimulatorError as exc:
            return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=f"simulation failed: {exc}",
                                  wall_time_s=time.monotonic() - started)
        return MeasuredResult(status=RunStatus.OK, points=points, wall_time_s=time.monotonic() - started)


def run_simulated_sweep(spec: SweepSpec, prices: PriceTable, folder: ResultsFolder, catalog: ModelCatalog,
                        models_dir: Path, *, observer: SweepObserver | None = None,
                        on_phase: Callable[[str], None] = lambda _: None, retry_failed: bool = False,
                        text_density: TextDensities | None = None) -> SweepReport:
    """:func:`~sweep.loop.run_sweep` of a simulated spec (resumes from ``folder`` as a real one does)."""
    if not spec.simulated:
        raise ValueError("run_simulated_sweep needs a simulated spec (sweep.spec.as_simulated)")
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
