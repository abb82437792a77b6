"""The simulated :class:`~sweep.search.loop.Measure`: each candidate through the simulator.

``sweep run SPEC --simulate`` runs the same spec, search, verdicts, rows, economics,
selection and report as a real sweep; only the measurer differs. Instead of deploying
a candidate with serving's app builder and load-testing it, :class:`SimulatedMeasurer`
hands the same :class:`~loadtest.config.LoadTestConfig` (:func:`sweep.measure.load_test.loadtest_config`)
to :func:`simulator.simulate.simulate` with the candidate's
:class:`~simulator.config.SimulationConfig` (:func:`sweep.measure.deployment.simulation_config_for`)
and reads its summary with the same :func:`~sweep.measure.load_test.load_point`. Load points
are taken through :func:`sweep.measure.sampling.measure_rates`, as a real measurer does
(new seeds near a limit).

A combination the simulator refuses (TP not dividing the heads, a KV cache that cannot
hold one sequence) is recorded as failed-to-deploy, as vLLM refusing to start would be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from serving.config.model_spec import ModelCatalog
from serving.errors import ConfigError as ServingConfigError
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.errors import SimulationConfigError, SimulatorError
from simulator.hardware import load_hardware
from sweep.errors import ModelUnavailableError, SpecError
from sweep.measure.deployment import simulation_config_for
from sweep.measure.load_test import load_point, loadtest_config
from sweep.measure.results import LoadPoint, MeasuredResult, RunStatus, Trial
from sweep.measure.sampling import measure_rates
from sweep.spec.sweep_spec import SweepSpec

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
