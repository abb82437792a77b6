import subprocess
import sys
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from serving.autoscaling import QUEUE_DEPTH_METRIC, QueueDepthPolicy, autoscaling_config, desired_replicas
from serving.config.stack import AutoscalingSpec
from tests.paths import REPO


def want(depths, handle=0.0, target=4.0, current=1, lo=1, hi=4):
    return desired_replicas(depths, handle_requests=handle, target_per_replica=target,
                            current=current, min_replicas=lo, max_replicas=hi)


def test_scales_to_carry_the_target_queue_per_replica():
    assert want([4.0]) == 1
    assert want([9.0]) == 3
    assert want([6.0, 6.0]) == 3


def test_bounds_are_respected():
    assert want([100.0]) == 4
    assert want([0.0, 0.0], lo=1) == 1


def test_scale_to_zero_and_wake_up_from_handle_queue():
    assert want([0.0], lo=0) == 0
    assert want([], handle=3.0, current=0, lo=0) == 1


def test_no_metrics_yet_keeps_the_current_count():
    assert want([], current=2) == 2


@given(st.lists(st.floats(0, 1000), max_size=8), st.integers(0, 3), st.integers(1, 8))
def test_always_within_bounds(depths, lo, extra):
    hi = lo + extra
    assert lo <= want(depths, lo=lo, hi=hi, current=lo) <= hi


def ctx(metrics, *, current=1, lo=1, hi=3, requests=0.0):
    return SimpleNamespace(aggregated_metrics=metrics, total_num_requests=requests, current_num_replicas=current,
                           capacity_adjusted_min_replicas=lo, capacity_adjusted_max_replicas=hi, policy_state={})


def test_policy_reads_the_engine_metric():
    policy = QueueDepthPolicy(target_queue_per_replica=2.0)
    assert policy(ctx({QUEUE_DEPTH_METRIC: {"r1": 5.0}}))[0] == 3


def test_policy_never_raises():
    broken = SimpleNamespace(aggregated_metrics={QUEUE_DEPTH_METRIC: {"r1": "bad"}}, total_num_requests=None,
                             current_num_replicas=2, capacity_adjusted_min_replicas=1,
                             capacity_adjusted_max_replicas=3, policy_state={"k": 1})
    assert QueueDepthPolicy(2.0)(broken) == (2, {"k": 1})


def test_config_carries_delays_and_target():
    config = autoscaling_config(AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=2,
                                                target_queue_per_replica=3, upscale_delay_s=1, downscale_delay_s=2))
    assert (config.min_replicas, config.max_replicas, config.upscale_delay_s, config.downscale_delay_s) == (1, 2, 1, 2)
    assert config.policy.policy_kwargs == {"target_queue_per_replica": 3}


def test_the_policy_maths_imports_without_ray():
    # the simulator imports desired_replicas at module level: Ray (~3 s to import) must not come with it
    code = ("import sys; sys.modules['ray'] = None\n"  # any import of ray now fails
            "from serving.autoscaling import QUEUE_DEPTH_METRIC, QueueDepthPolicy, desired_replicas")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
