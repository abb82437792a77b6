"""Autoscaling the engine deployment on engine queue depth.

Each replica reports ``engine_queue_depth`` (vLLM waiting + running requests) via
``record_autoscaling_stats``; Serve averages it over ``look_back_period_s`` and
calls :class:`QueueDepthPolicy` every tick. The policy asks for enough replicas that
each carries ``target_queue_per_replica`` (fewer only where each would carry at most
``downscale_margin`` of it); Serve then applies ``upscale_delay_s`` /
``downscale_delay_s`` and the min/max bounds; when a downscale is due, the count it
reaches is the most replicas the policy asked for during the delay
(:func:`stabilized_downscale`), not one quiet tick's. Requests queued in the gateway's
handle while no replica exists (scale from zero) count as load too, so a deployment
at zero replicas wakes up.

Ray is imported only by :func:`autoscaling_config`: the policy maths
(:func:`replica_decision`) loads without it (the simulator uses it).
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
DOWNSCALE_PEAK_STATE = "serveout_downscale_peak"


def desired_replicas(
    queue_depths: Iterable[float], *, handle_requests: float, target_per_replica: float,
    current: int, min_replicas: int, max_replicas: int, downscale_margin: float = 1.0,
) -> int:
    """Replicas needed so each holds ``target_per_replica`` requests (pure).

    ``queue_depths`` are the replicas' engine waiting+running; ``handle_requests`` is
    Serve's own count of requests ongoing or queued at the handles (the only signal
    when no replica runs yet). Fewer than ``current`` only down to a count that would
    carry at most ``downscale_margin`` x the target each: a replica's queue grows faster
    than its load near saturation, so a count that just fits the target after a
    downscale is soon over it again (scale down, scale up, pay the start time).
    """
    depths = list(queue_depths)
    load = max(sum(depths), handle_requests)
    if not depths and load == 0:
        return max(min(current, max_replicas), min_replicas)

    def carrying(per_replica: float) -> int:
        wanted = math.ceil(load / per_replica) if load > 0 else 0
        return max(min_replicas, min(max_replicas, wanted))

    wanted = carrying(target_per_replica)
    if wanted < current:
        wanted = min(current, carrying(target_per_replica * downscale_margin))
    return wanted


def stabilized_downscale(wanted: int, *, current: int, peak: int | None) -> tuple[int, int | None]:
    """Scale-down stabilisation (pure): ``(count to ask for, peak to carry to the next tick)``.

    While ``wanted < current`` the policy asks for the most replicas it wanted since it
    first asked for fewer than ``current``; Serve's downscale delay counts from that same
    tick, so a due downscale reaches the highest count the load needed during the delay
    instead of one quiet tick's (a dip of the queue would otherwise stop replicas the
    next minute needs; Kubernetes' HPA stabilises its scale-down the same way). Asking
    for ``current`` or more ends the streak (``peak`` None).
    """
    if wanted >= current:
        return wanted, None
    peak = wanted if peak is None or peak >= current else max(peak, wanted)
    return peak, peak


def replica_decision(
    queue_depths: Iterable[float], *, handle_requests: float, target_per_replica: float, current: int,
    min_replicas: int, max_replicas: int, downscale_margin: float, stabilize_downscale: bool, state: dict,
) -> tuple[int, dict]:
    """The policy's whole decision (pure): :func:`desired_replicas`, then (when enabled)
    :func:`stabilized_downscale` with its peak carried in ``state`` (Serve's
    ``policy_state``). Serve's policies and the simulator's autoscaler both call this."""
    wanted = desired_replicas(queue_depths, handle_requests=handle_requests, target_per_replica=target_per_replica,
                              current=current, min_replicas=min_replicas, max_replicas=max_replicas,
                              downscale_margin=downscale_margin)
    if not stabilize_downscale:
        return wanted, state
    asked, peak = stabilized_downscale(wanted, current=current, peak=state.get(DOWNSCALE_PEAK_STATE))
    return asked, {**state, DOWNSCALE_PEAK_STATE: peak}


class QueueDepthPolicy:
    """Serve autoscaling policy (instantiated once by Serve with ``policy_kwargs``)."""

    def __init__(self, target_queue_per_replica: float, stabilize_downscale: bool = True,
                 downscale_margin: float = 1.0) -> None:
        self.target = target_queue_per_replica
        self.stabilize_downscale = stabilize_downscale
        self.downscale_margin = downscale_margin

    def __call__(self, ctx) -> tuple[int, dict]:
        try:
            metrics = (ctx.aggregated_metrics or {}).get(QUEUE_DEPTH_METRIC, {})
            return self.decide(metrics.values(), ctx, dict(ctx.policy_state or {}))
        except Exception:  # a raising policy stalls Serve's controller: never raise
            log.exception("serveout queue-depth policy failed; keeping the replica count")
            return ctx.current_num_replicas, ctx.policy_state

    def decide(self, queue_depths: Iterable[float], ctx, state: dict) -> tuple[int, dict]:
        """The count for ``queue_depths`` (margin and stabilisation applied) and the new state."""
        return replica_decision(
            queue_depths,
            handle_requests=float(ctx.total_num_requests or 0),
            target_per_replica=self.target,
            current=ctx.target_num_replicas,  # Serve's delays compare with the target too
            min_replicas=ctx.capacity_adjusted_min_replicas,
            max_replicas=ctx.capacity_adjusted_max_replicas,
            downscale_margin=self.downscale_margin,
            stabilize_downscale=self.stabilize_downscale,
            state=state,
        )


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


def policy_kwargs(spec: AutoscalingSpec) -> dict:
    """The keyword arguments Serve builds the policy with (the app builder's and the
    rendered manifests' alike): the trend variant's when ``trend_horizon_s`` is set."""
    kwargs = {"target_queue_per_replica": spec.target_queue_per_replica,
              "stabilize_downscale": spec.stabilize_downscale, "downscale_margin": spec.downscale_margin}
    if spec.trend_horizon_s > 0:
        kwargs |= {"trend_window_s": spec.trend_window_s, "trend_horizon_s": spec.trend_horizon_s}
    return kwargs


def _policy(spec: AutoscalingSpec, policy_class):
    """The queue-depth policy, or its trend variant when ``trend_horizon_s`` is set."""
    if spec.trend_horizon_s > 0:  # an import path: serving.autoscaling.trend imports this module
        return policy_class(policy_function="serving.autoscaling.trend:TrendPolicy", policy_kwargs=policy_kwargs(spec))
    return policy_class(policy_function=QueueDepthPolicy, policy_kwargs=policy_kwargs(spec))
