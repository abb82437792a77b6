"""The trend variant of queue-depth autoscaling: the projection, Serve's policy call,
and the config that selects it (Serve's and the rendered manifests' alike)."""

from types import SimpleNamespace

import pytest

from serving.autoscaling.queue_depth import QUEUE_DEPTH_METRIC, autoscaling_config
from serving.autoscaling.trend import TrendPolicy, projected_load
from serving.config.stack import AutoscalingSpec
from serving.manifests.serve_config import TREND_POLICY, _policy


def test_a_rising_queue_is_read_ahead_along_its_line():
    samples = [(t, 10.0 + 2.0 * t) for t in range(0, 61)]  # +2 per second
    assert projected_load(samples, 60.0, window_s=30.0, horizon_s=100.0) == pytest.approx(130.0 + 200.0)


def test_without_a_horizon_or_enough_samples_it_is_the_latest_load():
    samples = [(0.0, 5.0), (1.0, 9.0)]
    assert projected_load(samples, 1.0, window_s=60.0, horizon_s=100.0) == 9.0
    assert projected_load(samples * 3, 1.0, window_s=60.0, horizon_s=0.0) == 9.0
    assert projected_load([], 1.0, window_s=60.0, horizon_s=10.0) == 0.0


def test_a_falling_queue_never_projects_below_zero():
    samples = [(t, 100.0 - 5.0 * t) for t in range(10)]
    assert projected_load(samples, 9.0, window_s=60.0, horizon_s=1000.0) == 0.0


def context(depth: float, now: float, state: dict) -> SimpleNamespace:
    return SimpleNamespace(aggregated_metrics={QUEUE_DEPTH_METRIC: {"r1": depth}}, total_num_requests=depth,
                           current_num_replicas=1, target_num_replicas=1, capacity_adjusted_min_replicas=1,
                           capacity_adjusted_max_replicas=10, current_time=now, policy_state=state)


def test_serve_calls_keep_the_samples_in_the_policy_state():
    policy = TrendPolicy(target_queue_per_replica=10.0, trend_window_s=60.0, trend_horizon_s=30.0)
    state: dict = {}
    desired = 1
    for t in range(20):
        desired, state = policy(context(5.0 + t, float(t), state))
    # now 24 in queue, rising 1/s: 54 in 30 s -> 6 replicas (the plain policy asks for 3)
    assert desired == 6
    assert len(state["samples"]) == 20


def test_a_broken_context_keeps_the_replica_count():
    policy = TrendPolicy(10.0, 60.0, 30.0)
    ctx = SimpleNamespace(aggregated_metrics=None, current_time="not a time", current_num_replicas=3, policy_state={})
    assert policy(ctx)[0] == 3


def test_the_horizon_selects_the_trend_policy_in_serve_and_in_the_manifests():
    plain = AutoscalingSpec(enabled=True, max_replicas=4)
    trend = plain.model_copy(update={"trend_horizon_s": 200.0})
    assert autoscaling_config(plain).policy.policy_function.endswith("QueueDepthPolicy")
    assert autoscaling_config(trend).policy.policy_function == "serving.autoscaling.trend:TrendPolicy"
    assert _policy(trend)["policy_function"] == TREND_POLICY
    assert _policy(trend)["policy_kwargs"]["trend_horizon_s"] == 200.0
