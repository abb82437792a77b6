"""`sweep run --simulate`: the simulated measurer behind the same loop, search, rows,
selection and report as a real sweep; every output labelled simulated."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loadtest.workloads.text_density import TextDensities, TextDensity
from serving.config.model_spec import ModelCatalog
from simulator.config import SimulationConfig
from sweep.measure.results import LoadPoint, RunStatus
from sweep.measure.deployment import GATEWAY_MAX_IN_FLIGHT
from sweep.measure.simulated import SimulatedMeasurer
from sweep.report.folder import ResultsFolder
from sweep.search.loop import run_sweep
from sweep.spec.sweep_spec import as_simulated, measurement_fingerprint
from tests.paths import MODELS
from tests.unit.sweep.sweep_fakes import PRICES, FakeClusterMeasurer, fixed_clock, make_spec

MODEL = "llama-3.3-70b-instruct"  # the H200 spec: its architecture is in models/, no weights needed


def h200_spec(**kwargs):
    return make_spec(**kwargs).model_copy(update={"model": MODEL})


@dataclass
class FakeSimulator:
    """FAKE simulated load test: the toy capacity world of FakeClusterMeasurer, keyed by
    the SimulationConfig the measurer builds (it records every one)."""

    world: FakeClusterMeasurer
    seen: list[SimulationConfig] = field(default_factory=list)

    def __call__(self, sim: SimulationConfig, rate: float, seed: int) -> LoadPoint:
        self.seen.append(sim)
        return self.world.point(sim.tensor_parallel or 1, sim.replicas, rate)


def simulated_sweep(tmp_path: Path, spec, world: FakeClusterMeasurer):
    fake = FakeSimulator(world)
    measurer = SimulatedMeasurer(spec, ModelCatalog(MODELS), MODELS, simulate_point=fake)
    report = run_sweep(spec, PRICES, measurer, ResultsFolder(tmp_path), clock=fixed_clock, plots=False)
    return report, fake


def test_the_simulated_sweep_answers_like_the_same_world_measured(tmp_path: Path):
    """The selection uses the simulated rows exactly as measured ones: same world, same answer."""
    spec = h200_spec(rate=10.0, tp=(2, 4), max_num_seqs=(128,))
    world = dict(per_replica_rps={2: 2.0, 4: 4.5}, contention=0.05, search=spec.search)
    measured = run_sweep(spec, PRICES, FakeClusterMeasurer(spec.slo, **world), ResultsFolder(tmp_path / "real"),
                         clock=fixed_clock, plots=False)
    simulated, fake = simulated_sweep(tmp_path / "sim", as_simulated(spec), FakeClusterMeasurer(spec.slo, **world))
    assert simulated.answer.kind.value == "passing"
    assert simulated.answer.best == measured.answer.best
    assert [r.candidate_id for r in simulated.runs] == [r.candidate_id for r in measured.runs]
    best = simulated.run(simulated.answer.best)
    assert best is not None and best.cost_per_million_output_tokens is not None
    assert {s.hardware for s in fake.seen} == {"h200"}
    assert {s.max_in_flight for s in fake.seen} == {GATEWAY_MAX_IN_FLIGHT}
    assert all(s.engine is not None and s.engine.max_num_seqs == 128 for s in fake.seen)


def test_every_output_of_a_simulated_sweep_says_so(tmp_path: Path):
    spec = as_simulated(h200_spec(rate=4.0, tp=(4,)))
    report, _ = simulated_sweep(tmp_path, spec, FakeClusterMeasurer(spec.slo, per_replica_rps={4: 3.0}))
    stored = ResultsFolder(tmp_path).read_report()
    assert stored.spec.simulated and stored.warnings[0].startswith("SIMULATED, not measured")
    assert (tmp_path / "report.md").read_text().startswith("# SIMULATED sweep")
    measured = run_sweep(spec.model_copy(update={"simulation": None}), PRICES,
                         FakeClusterMeasurer(spec.slo, per_replica_rps={4: 3.0}), ResultsFolder(tmp_path / "real"),
                         clock=fixed_clock, plots=False)
    assert not any("SIMULATED" in w for w in measured.warnings)
    assert (tmp_path / "real" / "report.md").read_text().startswith("# Sweep")


def test_a_combination_the_simulator_refuses_is_a_failed_deploy(tmp_path: Path):
    """64 attention heads do not split over TP 3: recorded like vLLM refusing to start."""
    spec = as_simulated(h200_spec(rate=4.0, tp=(3,), per_node=8))
    report, fake = simulated_sweep(tmp_path, spec, FakeClusterMeasurer(spec.slo, per_replica_rps={3: 3.0}))
    assert report.runs[0].status is RunStatus.FAILED_TO_DEPLOY
    assert "attention heads" in (report.runs[0].reason or "")
    assert fake.seen == []


def test_simulated_results_never_stand_in_for_measured_ones():
    spec = h200_spec()
    assert measurement_fingerprint(as_simulated(spec)) != measurement_fingerprint(spec)
    assert measurement_fingerprint(as_simulated(spec, "b300")) != measurement_fingerprint(as_simulated(spec))
    assert as_simulated(spec).hardware == "h200"  # the budget's accelerator kind
    assert as_simulated(as_simulated(spec, "h200-fitted.yaml")).hardware == "h200-fitted.yaml"


def test_run_sweep_hands_the_measured_text_density_to_the_report(tmp_path: Path):
    """Before: run_sweep had no way to pass it, so every report said "not measured"."""
    vi = TextDensity(name="vi", language="vi", prompts=3, characters=300, tokens=150)
    densities = TextDensities(tokenizer="fake-tokenizer", languages=(vi,))
    spec = h200_spec(rate=4.0, tp=(4,))
    report = run_sweep(spec, PRICES, FakeClusterMeasurer(spec.slo, per_replica_rps={4: 3.0}), ResultsFolder(tmp_path),
                       clock=fixed_clock, plots=False, text_density=densities)
    assert report.text_density == densities
    assert report.language_costs and report.language_costs[0].language == "vi"
    assert ResultsFolder(tmp_path).read_report().text_density == densities


def test_a_simulated_plan_simulates_every_count_it_needs_instead_of_assuming_contention():
    from sweep.capacity.model import MeasuredCount, ShapeCapacity
    from sweep.search.simulated_sweep import with_simulated_counts
    from sweep.spec.space import Shape

    base = ShapeCapacity(shape=Shape(tp=2), accelerators_per_replica=2, cost_per_replica_hour=12.6, max_replicas=12,
                         measured=(MeasuredCount(replicas=1, passes_at_rps=2.5),), contention=0.111,
                         contention_assumed=True, output_tokens_per_request=256)
    asked: list[int] = []

    def fake_count(n: int) -> MeasuredCount:  # a fake simulation: linear scaling, 2.5 req/s per replica
        asked.append(n)
        return MeasuredCount(replicas=n, passes_at_rps=2.5 * n, fails_at_rps=2.5 * n * 1.2)

    plan = with_simulated_counts(None, None, base, 20.0, 0.1, None, None, simulate_count=fake_count)
    # 9 replicas carry 20 / 0.9 = 22.2 req/s, 10 is the next step; the assumed curve asked for more at first
    assert set(range(2, 11)) <= set(asked) and asked == sorted(set(asked))  # each count simulated once
    assert not plan.contention_assumed and plan.contention == 0.0
    assert plan.replicas_for(20.0, 0.1) == 9 and plan.basis(9) == "measured"
    assert base.replicas_for(20.0, 0.1) != 9  # the assumed contention had it wrong
