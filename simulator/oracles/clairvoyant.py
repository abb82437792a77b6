"""A clairvoyant autoscaler: it knows every arrival and the replica start time.

At each tick it holds (serving or starting) the replicas the arrivals will need at any
moment of the next start time: ``need(t) = ceil(arrivals in [t - w/2, t + w/2) / (w x
capacity))`` within the bounds, and ``target(t) = max need over [t, t + start + tick]``,
so every replica serves exactly when the load it is needed for arrives and stops as
soon as it is not (no look-back, no delays, no guessing). Its one unknown is how many
requests per second a replica carries within the SLO (``capacity``): the caller runs
the schedule (:func:`run_clairvoyant`, simulated in full) at a few capacities and
takes the fewest GPU-hours whose SLO attainment is no lower than a real policy's
(``benchmarks/routing_oracle.py``). That is the yardstick for the policy's GPU-hours
at the same attainment: within this family of schedules (replicas in proportion to
the arrival rate, exactly on time), none reaching it costs less.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadtest.analysis.arrivals import stage_arrivals
from loadtest.config import LoadTestConfig
from loadtest.profiles import OpenLoad
from serving.config.stack import AutoscalingSpec
from simulator.cluster import ClusterSim
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.errors import SimulationConfigError
from simulator.simulate import SimulationResult, simulate

DEFAULT_WINDOW_S = 30.0


def first_stage_arrivals(config: LoadTestConfig) -> np.ndarray:
    """The first stage's arrival times, drawn exactly as :class:`ClusterSim` draws them."""
    plan = config.profile.next_stage([])
    load = plan.load
    if not isinstance(load, OpenLoad) or config.duration_s is None:
        raise SimulationConfigError("the clairvoyant autoscaler needs an open-loop profile and a duration")
    return np.asarray(stage_arrivals(load, seed=plan.seed(config.seed), duration_s=config.duration_s,
                                     count=config.max_requests), dtype=float)


@dataclass(frozen=True)
class ReplicaPlan:
    """Target replica counts (serving + starting) on a regular grid of ticks."""

    tick_s: float
    targets: np.ndarray

    def at(self, t: float) -> int:
        i = min(max(int(t / self.tick_s + 1e-9), 0), len(self.targets) - 1)
        return int(self.targets[i])


def clairvoyant_plan(arrivals: np.ndarray, *, capacity_rps: float, start_s: float, tick_s: float,
                     duration_s: float, min_replicas: int, max_replicas: int,
                     window_s: float = DEFAULT_WINDOW_S) -> ReplicaPlan:
    """The schedule of the module docstring for one capacity (requests/s per replica)."""
    if capacity_rps <= 0 or tick_s <= 0 or window_s <= 0:
        raise ValueError("capacity, tick and window must be > 0")
    grid = np.arange(0.0, duration_s + start_s + tick_s, tick_s)
    arrivals = np.sort(arrivals)
    counts = (np.searchsorted(arrivals, grid + window_s / 2) - np.searchsorted(arrivals, grid - window_s / 2))
    need = np.clip(np.ceil(counts / (window_s * capacity_rps) - 1e-9), max(min_replicas, 1), max_replicas)
    ahead = int(math.ceil((start_s + tick_s) / tick_s))
    padded = np.concatenate([need, np.full(ahead, need[-1])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, ahead + 1)[: len(need)]
    return ReplicaPlan(tick_s, windows.max(axis=1).astype(int))


class PlannedAutoscaler:
    """Serve's autoscaler replaced by a plan: the planned count at every tick, at once."""

    def __init__(self, plan: ReplicaPlan) -> None:
        self.plan = plan

    def tick(self, now: float, total_depth: float, handle_requests: float, current: int) -> int | None:
        target = self.plan.at(now)
        return target if target != current else None


def planned_cluster(plan: ReplicaPlan) -> Callable[..., ClusterSim]:
    """A :class:`ClusterSim` factory (for :func:`simulate`) scaling by ``plan``."""

    def build(*args, **kwargs) -> ClusterSim:
        cluster = ClusterSim(*args, **kwargs)
        cluster.autoscaler = PlannedAutoscaler(plan)
        return cluster

    return build


@dataclass(frozen=True)
class ClairvoyantRun:
    capacity_rps: float
    result: SimulationResult

    @property
    def gpu_hours(self) -> float:
        return self.result.stages[0].gpu_hours

    @property
    def slo_attainment(self) -> float:
        return self.result.summary.headline.slo.goodput_fraction or 0.0


def run_clairvoyant(config: LoadTestConfig, base: SimulationConfig, policy: AutoscalingSpec,
                    capacity_rps: float, *, arrivals: np.ndarray | None = None,
                    window_s: float = DEFAULT_WINDOW_S) -> ClairvoyantRun:
    """Simulate ``config`` on ``base``'s cluster scaled by the clairvoyant plan at ``capacity_rps``."""
    arrivals = first_stage_arrivals(config) if arrivals is None else arrivals
    start = base.replica_start_s if base.replica_start_s is not None else replica_setup(base).replica_start_s
    plan = clairvoyant_plan(arrivals, capacity_rps=capacity_rps, start_s=start, tick_s=policy.metrics_interval_s,
                            duration_s=config.duration_s, min_replicas=policy.min_replicas,
                            max_replicas=policy.max_replicas, window_s=window_s)
    sim = base.model_copy(update={"replicas": plan.at(0.0),
                                  "autoscaling": policy.model_copy(update={"enabled": True, "min_replicas": 1})})
    return ClairvoyantRun(capacity_rps, simulate(config, sim, cluster=planned_cluster(plan)))
