"""Ray Serve's autoscaling loop around serveout's queue-depth policy, in simulated time.

Every ``metrics_interval_s`` the replicas' engine queue depth (waiting + running) is
sampled; Serve averages it over ``look_back_period_s`` and asks the policy
(:func:`serving.autoscaling.queue_depth.replica_decision`, the real one) for a replica count. A
change is applied only after the policy has asked for more (fewer) replicas for
``upscale_delay_s`` (``downscale_delay_s``) in a row, as Serve's controller does; a due downscale goes to
the most replicas asked for during the delay (the policy's own stabilisation). A new
replica serves after the hardware's ``replica_start_s``; a removed one stops taking
requests at once and finishes what it holds.
"""

from __future__ import annotations

from collections import deque

from serving.autoscaling.queue_depth import replica_decision
from serving.autoscaling.trend import projected_load
from serving.config.stack import AutoscalingSpec


class ServeAutoscaler:
    """Decides the target replica count from queue-depth samples."""

    def __init__(self, spec: AutoscalingSpec) -> None:
        self.spec = spec
        self._samples: deque[tuple[float, float]] = deque()
        self._averages: deque[tuple[float, float]] = deque()
        self._up_since: float | None = None
        self._down_since: float | None = None
        self._state: dict = {}  # the policy's own (its downscale peak), as Serve keeps it

    def tick(self, now: float, total_depth: float, handle_requests: float, current: int) -> int | None:
        """Record a sample; the new target when a change is due, else ``None``."""
        spec = self.spec
        self._samples.append((now, total_depth))
        while self._samples and self._samples[0][0] < now - spec.look_back_period_s:
            self._samples.popleft()
        average = sum(d for _, d in self._samples) / len(self._samples)
        if spec.trend_horizon_s > 0:  # serving.autoscaling.trend.TrendPolicy: the projected average
            self._averages.append((now, average))
            while self._averages[0][0] < now - spec.trend_window_s:
                self._averages.popleft()
            average = projected_load(self._averages, now, window_s=spec.trend_window_s,
                                     horizon_s=spec.trend_horizon_s)
        wanted, self._state = replica_decision(
            [average], handle_requests=handle_requests, target_per_replica=spec.target_queue_per_replica,
            current=current, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
            downscale_margin=spec.downscale_margin, stabilize_downscale=spec.stabilize_downscale, state=self._state)
        if wanted > current:
            self._down_since = None
            self._up_since = now if self._up_since is None else self._up_since
            if now - self._up_since >= spec.upscale_delay_s:
                self._up_since = None
                return wanted
        elif wanted < current:
            self._up_since = None
            self._down_since = now if self._down_since is None else self._down_since
            if now - self._down_since >= spec.downscale_delay_s:
                self._down_since = None
                return wanted
        else:
            self._up_since = self._down_since = None
        return None
