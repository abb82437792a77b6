"""The hardware profile's in-stack constants: the serving path (a fixed time added to
every request's first token and end, nothing to the gaps between tokens) and the
slowdown of engine steps inside the stack."""

import numpy as np
import pytest

from loadtest.cli import build_parser, config_from_args
from serving.config.model_spec import ModelCatalog
from simulator.calibration import write_profile
from simulator.config import SimulationConfig
from simulator.hardware import Figure, load_hardware
from simulator.simulate import simulate
from simulator.step_time import StepShape, StepTimeModel
from tests.paths import MODELS


def test_the_serving_path_delays_the_first_token_and_the_end_but_not_the_gaps(tmp_path):
    config = config_from_args(build_parser().parse_args([
        "run", "--target", "http://simulated.invalid", "--no-metrics", "--profile", "poisson:rate=1",
        "--workload", "random:input_len=64,output_len=16", "--duration", "30s"]))
    cpu = load_hardware("cpu")
    paths = {ms: tmp_path / f"cpu-path-{ms:g}ms.yaml" for ms in (0.0, 25.0)}
    for ms, path in paths.items():
        write_profile(cpu.model_copy(update={"serving_path_ms": Figure(value=ms, source="test"),
                                             "serving_path_sigma": Figure(value=0.0, source="test")}), path)

    def run(hardware: str):
        return simulate(config, SimulationConfig(hardware=hardware, model="smollm2-135m-instruct")).records

    plain, with_path = run(str(paths[0.0])), run(str(paths[25.0]))
    assert [r.id for r in plain] == [r.id for r in with_path]
    assert [w.ttft_s - p.ttft_s for p, w in zip(plain, with_path)] == pytest.approx([0.025] * len(plain))
    assert [w.e2e_s - p.e2e_s for p, w in zip(plain, with_path)] == pytest.approx([0.025] * len(plain))
    assert np.allclose(np.concatenate([p.itl_s for p in plain]), np.concatenate([w.itl_s for w in with_path]))
    assert load_hardware(paths[25.0]).serving_path_s == pytest.approx(0.025)
    jittered = tmp_path / "cpu-path-jittered.yaml"
    write_profile(cpu.model_copy(update={"serving_path_ms": Figure(value=25.0, source="test")}), jittered)
    added = [w.ttft_s - p.ttft_s for p, w in zip(plain, run(str(jittered)))]
    assert len(set(np.round(added, 6))) > 1 and np.mean(added) == pytest.approx(0.025, rel=0.2)  # a mean-1 spread
    assert cpu.model_copy(update={"serving_path_ms": None}).serving_path_s == 0.0


def test_an_in_stack_slowdown_stretches_every_engine_step(tmp_path):
    config = config_from_args(build_parser().parse_args([
        "run", "--target", "http://simulated.invalid", "--no-metrics", "--profile", "concurrency:users=1",
        "--workload", "random:input_len=64,output_len=16", "--requests", "5"]))
    cpu = load_hardware("cpu").model_copy(update={"serving_path_ms": None, "in_stack_seq_us": None})
    paths = {k: tmp_path / f"cpu-x{k:g}.yaml" for k in (1.0, 2.0)}
    for k, path in paths.items():
        factor = Figure(value=k, source="test")
        write_profile(cpu.model_copy(update={"in_stack_slowdown": factor, "in_stack_compute_slowdown": factor}), path)

    def run(k: float):
        return simulate(config, SimulationConfig(hardware=str(paths[k]), model="smollm2-135m-instruct")).records

    plain, slowed = run(1.0), run(2.0)
    assert [s.ttft_s for s in slowed] == pytest.approx([2 * p.ttft_s for p in plain])
    assert np.concatenate([s.itl_s for s in slowed]) == pytest.approx(2 * np.concatenate([p.itl_s for p in plain]))


def test_the_in_stack_cost_per_sequence_adds_to_every_step_per_sequence():
    arch = ModelCatalog(MODELS).get("smollm2-135m-instruct").architecture
    cpu = load_hardware("cpu")
    plain, costly = (StepTimeModel(arch, cpu, tensor_parallel=1, dtype="float32", seq_s=s) for s in (0.0, 0.002))
    for shape in (StepShape(64, 3, 500, 4), StepShape(0, 4, 500, 4)):
        assert costly.step_time(shape) - plain.step_time(shape) == pytest.approx(4 * 0.002)
    assert costly.decode_time(4, 500) - plain.decode_time(4, 500) == pytest.approx(0.008)
    assert costly.decode_times(4, np.array([500.0, 504.0])) - plain.decode_times(4, np.array([500.0, 504.0])) \
        == pytest.approx([0.008, 0.008])
    with_cost = cpu.model_copy(update={"in_stack_seq_us": Figure(value=2000.0, source="test")})
    assert with_cost.step_seq_s == pytest.approx(0.002)
    assert cpu.model_copy(update={"in_stack_seq_us": None}).step_seq_s == 0.0


def test_replicas_on_a_cpu_share_its_cores_by_the_core_speedup():
    cpu = load_hardware("cpu").model_copy(update={"cores": 2, "in_stack_core_speedup": None})
    assert [cpu.rank_share(n) for n in (1, 2, 4)] == pytest.approx([1.0, 0.5, 0.5])  # linear; past the cores: as 2
    sublinear = cpu.model_copy(update={"in_stack_core_speedup": Figure(value=1.25, source="test")})
    assert sublinear.rank_share(1) == 1.0
    assert sublinear.rank_share(2) == pytest.approx(1 / 1.25)  # each replica's one core: 1 / 1.25 of both
    eight = cpu.model_copy(update={"cores": 8, "in_stack_core_speedup": Figure(value=4.5, source="test")})
    assert eight.rank_share(2) == pytest.approx((1 + 3 * 3.5 / 7) / 4.5)  # 4 cores each: 2.5 of 4.5
    assert load_hardware("h200").rank_share(8) == 1.0
