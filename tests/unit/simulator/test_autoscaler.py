"""The simulator's copy of Serve's autoscaling loop: look-back average, delays and the
policy's downscale stabilisation (pure; no simulation)."""

from serving.config.stack import AutoscalingSpec
from simulator.autoscaler import ServeAutoscaler

SPEC = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=8, target_queue_per_replica=10,
                       upscale_delay_s=3, downscale_delay_s=5, look_back_period_s=0.5, metrics_interval_s=1,
                       downscale_margin=1.0)


def decisions(depths, *, current, spec=SPEC):
    scaler = ServeAutoscaler(spec)
    return [scaler.tick(float(t), depth, 0.0, current) for t, depth in enumerate(depths)]


def test_an_upscale_waits_for_the_upscale_delay_in_a_row():
    assert decisions([50, 50, 50, 50], current=2) == [None, None, None, 5]
    assert decisions([50, 50, 10, 50, 50, 50], current=2) == [None] * 6  # a quiet tick resets the delay


def test_a_due_downscale_goes_to_the_most_replicas_wanted_during_the_delay():
    # wants 4, 4, 1 (one quiet tick), 3, 3, 3 replicas of 6: stabilised, the downscale stops at 4
    assert decisions([40, 40, 10, 30, 30, 30], current=6)[-1] == 4
    unstabilized = SPEC.model_copy(update={"stabilize_downscale": False})
    assert decisions([40, 40, 10, 30, 30, 30], current=6, spec=unstabilized)[-1] == 3


def test_the_downscale_margin_reaches_the_simulated_policy():
    # 30 in flight on 6: 3 replicas carry the target (10) exactly, 4 carry 7.5 <= 0.8 x 10
    with_margin = SPEC.model_copy(update={"downscale_margin": 0.8})
    assert decisions([30] * 6, current=6, spec=with_margin)[-1] == 4
    assert decisions([30] * 6, current=6)[-1] == 3
