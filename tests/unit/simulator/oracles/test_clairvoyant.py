"""The clairvoyant autoscaler: its plan holds what the arrivals need a start time ahead,
its arrivals are the cluster's own, and the simulated cluster follows the plan."""

import numpy as np

from loadtest.cli import build_parser, config_from_args
from serving.config.stack import AutoscalingSpec
from simulator.cluster import ClusterSim
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.oracles.clairvoyant import ReplicaPlan, clairvoyant_plan, first_stage_arrivals, run_clairvoyant
from simulator.traffic import stage_traffic, tokenizer_loader


def load_config(*args: str):
    return config_from_args(build_parser().parse_args(
        ["run", "--target", "http://simulated.invalid", "--no-metrics", *args]))


def test_the_plan_starts_replicas_a_start_time_before_the_load_and_drops_them_after():
    # 1 req/s for 100 s, then 10 req/s for 100 s, then 1 req/s; capacity 2.2 req/s per replica.
    arrivals = np.concatenate([np.arange(0, 100, 1.0), np.arange(100, 200, 0.1), np.arange(200, 300, 1.0)])
    plan = clairvoyant_plan(arrivals, capacity_rps=2.2, start_s=30.0, tick_s=1.0, duration_s=300.0,
                            min_replicas=1, max_replicas=8, window_s=10.0)
    assert plan.at(50.0) == 1
    assert plan.at(80.0) == 5  # 20 s before the step (start 30 s): 10 req/s needs 5, started in time
    assert plan.at(150.0) == 5
    assert plan.at(240.0) == 1  # the step is over: no hold-back


def test_the_plan_is_within_the_bounds():
    plan = clairvoyant_plan(np.arange(0, 10, 0.01), capacity_rps=1.0, start_s=5.0, tick_s=1.0, duration_s=10.0,
                            min_replicas=2, max_replicas=3)
    assert set(plan.targets.tolist()) <= {2, 3}
    assert ReplicaPlan(1.0, np.array([4, 5])).at(99.0) == 5


def test_the_clairvoyant_knows_the_arrivals_the_cluster_draws():
    config = load_config("--profile", "day:peak_rate=4,trough_rate=1", "--workload", "random:input_len=32,output_len=8",
                         "--duration", "120s", "--slo", "ttft_p95=2s")
    sim = SimulationConfig(hardware="cpu", model="smollm2-135m-instruct")
    plan = config.profile.next_stage([])
    load, _ = tokenizer_loader(config, None)
    cluster = ClusterSim(replica_setup(sim), sim, config, plan, stage_traffic(config, plan, load), seed=0)
    assert np.array_equal(first_stage_arrivals(config), cluster.arrivals)


def test_a_run_follows_the_plan():
    config = load_config("--profile", "day:peak_rate=6,trough_rate=0.5", "--workload", "random:input_len=32,output_len=8",
                         "--duration", "240s", "--slo", "ttft_p95=5s")
    base = SimulationConfig(hardware="cpu", model="smollm2-135m-instruct", replica_start_s=10.0)
    policy = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=4)
    run = run_clairvoyant(config, base, policy, capacity_rps=1.5)
    counts = [n for _, n in run.result.stages[0].replica_timeline]
    assert max(counts) > 1 and counts[-1] <= max(counts)
    assert run.gpu_hours > 0 and 0 <= run.slo_attainment <= 1
