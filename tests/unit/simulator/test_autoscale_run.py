"""The autoscaling run: scale-ups read off the replica timeline against the queue,
the static-count search, the stack's policy, and the command end to end on a
compressed day (CPU profile, seconds of CPU)."""

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from loadtest.cli import build_parser, config_from_args
from serving.config.stack import AutoscalingSpec, RoutingPolicyName
from simulator.config import SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.autoscale_run import Series, run_autoscale, scale_ups_of, smallest_static, stack_policy
from tests.paths import REPO

POLICY = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=3, target_queue_per_replica=4.0,
                         upscale_delay_s=2.0, downscale_delay_s=30.0, look_back_period_s=5.0)
DAY = ["--profile", "day:peak_rate=8,trough_rate=0.5,peak_at=12h", "--workload", "random:input_len=64,output_len=32",
       "--duration", "240s", "--slo", "ttft_p95=1s"]


def load_config(*args: str):
    return config_from_args(build_parser().parse_args(["run", "--target", "http://simulated.invalid", "--no-metrics",
                                                       *args]))


def fake_result(timeline, start_s: float):
    return SimpleNamespace(setup=SimpleNamespace(replica_start_s=start_s),
                           stages=[SimpleNamespace(replica_timeline=tuple(timeline))])


def test_each_scale_up_is_decided_a_start_time_before_it_serves_within_its_queue_episode():
    t = np.arange(0.0, 600.0, 1.0)
    replicas = np.where(t < 100, 1, np.where(t < 400, 2, 4))
    in_flight = np.where((t >= 20) & (t < 130), 9, 2)  # over 4 x replicas from 20 s until the second replica helps
    in_flight = np.where((t >= 300) & (t < 460), 20, in_flight)
    series = Series(t, replicas, in_flight)
    timeline = [(0.0, 1), (100.0, 2), (400.0, 3), (400.0, 4), (500.0, 3)]  # two replicas ready at once
    ups = scale_ups_of(fake_result(timeline, 60.0), series, POLICY)
    assert [(u.decided_s, u.serving_s, u.added) for u in ups] == [(40.0, 100.0, 1), (340.0, 400.0, 2)]
    first, second = ups
    assert (first.over_target_since_s, first.back_under_target_s) == (20.0, 130.0)
    assert first.detect_lag_s == 20.0 and first.start_lag_s == 60.0 and first.over_target_s == 110.0
    assert (second.over_target_since_s, second.back_under_target_s) == (300.0, 460.0)


def test_a_scale_up_without_a_queue_episode_near_its_decision_has_no_lag_figures():
    t = np.arange(0.0, 300.0, 1.0)
    series = Series(t, np.ones_like(t, dtype=int), np.where(t < 10, 9, 0))  # over target long before
    (up,) = scale_ups_of(fake_result([(0.0, 1), (250.0, 2)], 60.0), series, POLICY)
    assert up.decided_s == 190.0 and up.over_target_since_s is None and up.detect_lag_s is None


@pytest.mark.parametrize("threshold", [1, 2, 3, 4, 5, 6])
def test_the_static_search_bisects_to_the_fewest_passing_replicas(threshold):
    tried = []

    def passes(n: int) -> bool:
        tried.append(n)
        return n >= threshold

    assert smallest_static(6, passes) == threshold
    assert tried[0] == 6 and len(tried) <= 4


def test_the_static_search_gives_up_when_even_max_fails():
    assert smallest_static(6, lambda n: False) is None


def test_the_stack_file_gives_the_deployments_policy():
    policy = stack_policy(REPO / "deploy/stacks/llama-3.3-70b-instruct-h200-3x8.yaml")
    assert policy.model == "llama-3.3-70b-instruct" and policy.routing is RoutingPolicyName.CACHE_AWARE
    assert (policy.autoscaling.min_replicas, policy.autoscaling.max_replicas) == (2, 6)
    assert policy.autoscaling.target_queue_per_replica == 112 and policy.max_in_flight == 2048


def test_a_bad_stack_file_is_a_config_error(tmp_path):
    path = tmp_path / "stack.yaml"
    path.write_text("autoscaling: {min_replicas: 4, max_replicas: 2}\n")
    with pytest.raises(SimulationConfigError, match="stack.yaml"):
        stack_policy(path)


def test_autoscale_needs_one_timed_stage_and_an_slo():
    sim = SimulationConfig(hardware="cpu", model="smollm2-135m-instruct")
    with pytest.raises(SimulationConfigError, match="--slo"):
        run_autoscale(load_config(*DAY[:-2]), sim, POLICY, statics=(1,))
    with pytest.raises(SimulationConfigError, match="single-stage"):
        run_autoscale(load_config("--profile", "sweep:rates=1,2", "--slo", "ttft_p95=1s", "--duration", "10s"), sim, POLICY)


def test_a_compressed_day_autoscaled_scales_up_and_spends_less_than_static_max():
    sim = SimulationConfig(hardware="cpu", model="smollm2-135m-instruct", replica_start_s=10.0)
    report = run_autoscale(load_config(*DAY), sim, POLICY, statics=(3, 1))
    auto, static_3, static_1 = report.runs
    assert [r.name for r in report.runs] == ["autoscaled 1..3", "static 3", "static 1"]
    assert report.time_scale == pytest.approx(86_400 / 240)
    assert auto.peak_replicas > 1 and auto.scale_ups
    assert auto.gpu_hours < static_3.gpu_hours
    assert static_3.mean_replicas == pytest.approx(3.0) and auto.mean_replicas < 3
    assert all(u.start_lag_s == 10.0 and 0 <= u.decided_s < 240 for u in auto.scale_ups)
    assert all(u.over_target_since_s <= u.decided_s for u in auto.scale_ups if u.over_target_since_s is not None)
    assert static_3.over_target_s <= static_1.over_target_s
    assert 0 <= auto.slo_attainment <= 1 and auto.ttft_p95_s > 0
    assert report.offered_rps.max() == pytest.approx(8.0, rel=0.01)


def test_the_command_writes_the_table_json_markdown_and_plot(tmp_path):
    stack = tmp_path / "stack.yaml"
    stack.write_text("model: smollm2-135m-instruct\nautoscaling: {enabled: true, min_replicas: 1, max_replicas: 2, "
                     "target_queue_per_replica: 4, upscale_delay_s: 2}\n")
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "simulator", "autoscale", "--hardware", "cpu", "--stack", str(stack),
                             "--replica-start", "10", "--static", "2", *DAY, "--quiet", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    assert "GPU-hours" in result.stdout and "COMPRESSED" in result.stdout
    data = json.loads((out / "autoscale.json").read_text())
    assert data["simulated"] and [r["run"] for r in data["runs"]] == ["autoscaled 1..2", "static 2"]
    assert data["time_scale"] == pytest.approx(360.0) and data["compression"].startswith("COMPRESSED")
    assert all(u["start_lag_s"] == 10.0 for u in data["scale_ups"])
    assert "SIMULATED" in (out / "autoscale.md").read_text().splitlines()[0]
    assert (out / "autoscale.png").stat().st_size > 10_000


def test_the_command_without_bounds_or_slo_is_one_line_and_exit_2(tmp_path):
    def autoscale_command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "simulator", "autoscale", "--hardware", "cpu", *args, "--quiet",
                               "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)

    no_bounds = autoscale_command(*DAY)
    assert no_bounds.returncode == 2 and "--autoscale" in no_bounds.stderr
    assert no_bounds.stderr.strip().count("\n") == 0
    no_slo = autoscale_command("--autoscale", "1..2", *DAY[:-2])
    assert no_slo.returncode == 2 and "--slo" in no_slo.stderr
