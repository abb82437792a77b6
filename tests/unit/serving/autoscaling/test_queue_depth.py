import subprocess
import sys
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from serving.autoscaling.queue_depth import (
    QUEUE_DEPTH_METRIC,
    QueueDepthPolicy,
    autoscaling_config,
    desired_replicas,
    stabilized_downscale,
)
from serving.config.stack import AutoscalingSpec
from tests.paths import REPO


def want(depths, handle=0.0, target=4.0, current=1, lo=1, hi=4, margin=1.0):
    return desired_replicas(depths, handle_requests=handle, target_per_replica=target,
                            current=current, min_replicas=lo, max_replicas=hi, downscale_margin=margin)


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


def test_a_downscale_stops_where_each_replica_keeps_the_margin():
    # 4 replicas carrying 9 in all: 3 would carry 3 each (= target 4 x margin 0.75), 2 would carry 4.5
    assert want([9.0], current=4, margin=0.75) == 3
    assert want([9.0], current=4, margin=1.0) == 3
    assert want([7.0], current=4, margin=0.75) == 3  # 2 would carry 3.5 > 3
    assert want([7.0], current=4, margin=1.0) == 2


def test_the_margin_never_scales_up_or_holds_more_than_the_current_count():
    assert want([7.0], current=2, margin=0.5) == 2  # 2 carry 3.5 <= target: no upscale for the margin
    assert want([9.0], current=2, margin=0.5) == 3  # over target: up as without a margin


def test_no_metrics_yet_keeps_the_current_count():
    assert want([], current=2) == 2


@given(st.lists(st.floats(0, 1000), max_size=8), st.integers(0, 3), st.integers(1, 8))
def test_always_within_bounds(depths, lo, extra):
    hi = lo + extra
    assert lo <= want(depths, lo=lo, hi=hi, current=lo) <= hi


def ctx(metrics, *, current=1, lo=1, hi=3, requests=0.0):
    return SimpleNamespace(aggregated_metrics=metrics, total_num_requests=requests, current_num_replicas=current,
                           target_num_replicas=current, capacity_adjusted_min_replicas=lo,
                           capacity_adjusted_max_replicas=hi, policy_state={})


def test_policy_reads_the_engine_metric():
    policy = QueueDepthPolicy(target_queue_per_replica=2.0)
    assert policy(ctx({QUEUE_DEPTH_METRIC: {"r1": 5.0}}))[0] == 3


def asked_for(wanted_per_tick, current):
    """The counts a stabilised policy asks for, tick by tick, at a fixed current count."""
    peak, asked = None, []
    for wanted in wanted_per_tick:
        count, peak = stabilized_downscale(wanted, current=current, peak=peak)
        asked.append(count)
    return asked


def test_a_downscale_asks_for_the_most_replicas_wanted_since_the_streak_began():
    # a quiet tick (2) within a streak that needed 5 must not take the count to 2
    assert asked_for([5, 4, 2, 4], current=6) == [5, 5, 5, 5]


def test_wanting_the_current_count_or_more_ends_the_streak():
    assert asked_for([5, 6, 3, 8, 2], current=6) == [5, 6, 3, 8, 2]


def test_a_peak_from_before_a_downscale_does_not_hold_the_new_count():
    count, peak = stabilized_downscale(4, current=6, peak=None)
    assert (count, peak) == (4, 4)
    # Serve scaled down to 4: the old peak (4) must not pin the count at 4 forever
    assert stabilized_downscale(3, current=4, peak=peak) == (3, 3)


def test_the_policy_keeps_its_peak_in_the_policy_state():
    policy = QueueDepthPolicy(target_queue_per_replica=2.0)
    state: dict = {}
    asked = []
    for depth in (8.0, 2.0, 8.0):  # wants 4, 1, 4 of current 6
        context = ctx({QUEUE_DEPTH_METRIC: {"r1": depth}}, current=6, hi=8)
        context.policy_state = state
        count, state = policy(context)
        asked.append(count)
    assert asked == [4, 4, 4]
    unstabilized = QueueDepthPolicy(target_queue_per_replica=2.0, stabilize_downscale=False)
    assert unstabilized(ctx({QUEUE_DEPTH_METRIC: {"r1": 2.0}}, current=6, hi=8))[0] == 1


def test_policy_never_raises():
    broken = SimpleNamespace(aggregated_metrics={QUEUE_DEPTH_METRIC: {"r1": "bad"}}, total_num_requests=None,
                             current_num_replicas=2, capacity_adjusted_min_replicas=1,
                             capacity_adjusted_max_replicas=3, policy_state={"k": 1})
    assert QueueDepthPolicy(2.0)(broken) == (2, {"k": 1})


def test_config_carries_delays_and_target():
    config = autoscaling_config(AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=2,
                                                target_queue_per_replica=3, upscale_delay_s=1, downscale_delay_s=2))
    assert (config.min_replicas, config.max_replicas, config.upscale_delay_s, config.downscale_delay_s) == (1, 2, 1, 2)
    assert config.policy.policy_kwargs == {"target_queue_per_replica": 3, "stabilize_downscale": True,
                                           "downscale_margin": 0.8}


def test_the_policy_maths_imports_without_ray():
    # the simulator imports desired_replicas at module level: Ray (~3 s to import) must not come with it
    code = ("import sys; sys.modules['ray'] = None\n"  # any import of ray now fails
            "from serving.autoscaling.queue_depth import QUEUE_DEPTH_METRIC, QueueDepthPolicy, desired_replicas")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
