"""Autoscaling the engine deployment on engine queue depth.

Each replica reports ``engine_queue_depth`` (vLLM waiting + running requests) via
``record_autoscaling_stats``; Serve averages it over ``look_back_period_s`` and
calls :class:`QueueDepthPolicy` every tick. The policy asks for enough replicas that
each carries ``target_queue_per_replica``; Serve then applies ``upscale_delay_s`` /
``downscale_delay_s`` and the min/max bounds. Requests queued in the gateway's
handle while no replica exists (scale from zero) count as load too, so a deployment
at zero replicas wakes up.

Ray is imported only by :func:`autoscaling_config`: the policy maths
(:func:`desired_replicas`) loads without it (the simulator uses it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from serving.config.stack import AutoscalingSpec

if TYPE_CHECKING:
    from ray.serve.config import AutoscalingConfig

log = logging.getLogger("ray.serve")

QUEUE_DEPTH_METRIC = "engine_queue_depth"


def desired_replicas(
    queue_depths: Iterable[float], *, handle_requests: float, target_per_replica: float,
    current: int, min_replicas: int, max_replicas: int,
) -> int:
    """Replicas needed so each holds ``target_per_replica`` requests (pure).

    ``queue_depths`` are the replicas' engine waiting+running; ``handle_requests`` is
    Serve's own count of requests ongoing or queued at the handles (the only signal
    when no replica runs yet).
    """
    depths = list(queue_depths)
    load = max(sum(depths), handle_requests)
    if not depths and load == 0:
        return max(min(current, max_replicas), min_replicas)
    wanted = math.ceil(load / target_per_replica) if load > 0 else 0
    return max(min_replicas, min(max_replicas, wanted))


class QueueDepthPolicy:
    """Serve autoscaling policy (instantiated once by Serve with ``policy_kwargs``)."""

    def __init__(self, target_queue_per_replica: float) -> None:
        self.target = target_queue_per_replica

    def __call__(self, ctx) -> tuple[int, dict]:
        try:
            metrics = (ctx.aggregated_metrics or {}).get(QUEUE_DEPTH_METRIC, {})
            desired = desired_replicas(
                metrics.values(),
                handle_requests=float(ctx.total_num_requests or 0),
                target_per_replica=self.target,
                current=ctx.current_num_replicas,
                min_replicas=ctx.capacity_adjusted_min_replicas,
                max_replicas=ctx.capacity_adjusted_max_replicas,
            )
        except Exception:  # a raising policy stalls Serve's controller: never raise
            log.exception("serveout queue-depth policy failed; keeping the replica count")
            return ctx.current_num_replicas, ctx.policy_state
        return desired, ctx.policy_state


def autoscaling_config(spec: AutoscalingSpec) -> AutoscalingConfig:
    """The engine deployment's Serve ``autoscaling_config`` for ``spec``."""
    from ray.serve.config import AutoscalingConfig, AutoscalingPolicy

    return AutoscalingConfig(
        min_replicas=spec.min_replicas,
        initial_replicas=max(spec.min_replicas, 1) if spec.min_replicas == 0 else spec.min_replicas,
        max_replicas=spec.max_replicas,
        target_ongoing_requests=spec.target_queue_per_replica,
        upscale_delay_s=spec.upscale_delay_s,
        downscale_delay_s=spec.downscale_delay_s,
        downscale_to_zero_delay_s=spec.downscale_delay_s,
        look_back_period_s=spec.look_back_period_s,
        metrics_interval_s=spec.metrics_interval_s,
        policy=_policy(spec, AutoscalingPolicy),
    )


def _policy(spec: AutoscalingSpec, policy_class):
    """The queue-depth policy, or its trend variant when ``trend_horizon_s`` is set."""
    if spec.trend_horizon_s > 0:  # an import path: serving.autoscaling_trend imports this module
        return policy_class(policy_function="serving.autoscaling_trend:TrendPolicy", policy_kwargs={
            "target_queue_per_replica": spec.target_queue_per_replica,
            "trend_window_s": spec.trend_window_s, "trend_horizon_s": spec.trend_horizon_s})
    return policy_class(policy_function=QueueDepthPolicy,
                        policy_kwargs={"target_queue_per_replica": spec.target_queue_per_replica})
