"""Queue-depth autoscaling that looks ahead along the queue's trend.

A replica asked for now serves only after its start time (minutes for a large model)
plus Serve's upscale delay, so a policy reading the current queue is always that late
on a rising day. :func:`projected_load` fits a line to the total queue depth over the
last ``trend_window_s`` (least squares on Serve's look-back averages, one per tick)
and reads it ``trend_horizon_s`` ahead; the replica count is then that load over
``target_queue_per_replica``, exactly as :func:`serving.autoscaling.queue_depth.desired_replicas`
sizes the current one. A falling trend lowers the count too (Serve's downscale delay
still applies). With ``trend_horizon_s: 0`` (the default) the stack uses the plain
queue-depth policy.

Pure but for :class:`TrendPolicy`, which Serve calls with its ``AutoscalingContext``
and which keeps its samples in ``policy_state``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from serving.autoscaling.queue_depth import QUEUE_DEPTH_METRIC, QueueDepthPolicy

log = logging.getLogger("ray.serve")

MIN_TREND_SAMPLES = 3


def projected_load(samples: Sequence[tuple[float, float]], now: float, *, window_s: float,
                   horizon_s: float) -> float:
    """The load ``horizon_s`` after ``now`` along the trend of the ``(t, load)`` samples
    within ``window_s`` before ``now`` (the latest sample without enough of them); >= 0."""
    recent = [(t, y) for t, y in samples if now - window_s <= t <= now]
    if not recent:
        return 0.0
    latest = recent[-1][1]
    if len(recent) < MIN_TREND_SAMPLES or horizon_s <= 0:
        return max(latest, 0.0)
    n = len(recent)
    mean_t = sum(t for t, _ in recent) / n
    mean_y = sum(y for _, y in recent) / n
    spread = sum((t - mean_t) ** 2 for t, _ in recent)
    if spread <= 0:
        return max(latest, 0.0)
    slope = sum((t - mean_t) * (y - mean_y) for t, y in recent) / spread
    return max(mean_y + slope * (now + horizon_s - mean_t), 0.0)


class TrendPolicy(QueueDepthPolicy):
    """Serve autoscaling policy on the projected queue depth (see the module docstring)."""

    def __init__(self, target_queue_per_replica: float, trend_window_s: float, trend_horizon_s: float,
                 stabilize_downscale: bool = True, downscale_margin: float = 1.0) -> None:
        super().__init__(target_queue_per_replica, stabilize_downscale, downscale_margin)
        self.window_s = trend_window_s
        self.horizon_s = trend_horizon_s

    def __call__(self, ctx) -> tuple[int, dict]:
        state = dict(ctx.policy_state or {})
        try:
            metrics = (ctx.aggregated_metrics or {}).get(QUEUE_DEPTH_METRIC, {})
            now = float(ctx.current_time)
            samples = [s for s in state.get("samples", []) if s[0] >= now - self.window_s]
            samples.append((now, float(sum(metrics.values()))))
            state["samples"] = samples
            load = projected_load(samples, now, window_s=self.window_s, horizon_s=self.horizon_s)
            return self.decide([load] if metrics else [], ctx, state)
        except Exception:  # a raising policy stalls Serve's controller: never raise
            log.exception("serveout trend policy failed; keeping the replica count")
            return ctx.current_num_replicas, ctx.policy_state
