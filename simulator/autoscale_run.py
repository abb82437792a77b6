"""Autoscaling run: one load (typically a day-shaped rate curve, ``--profile day:...``)
simulated against serveout's queue-depth autoscaler and against static replica counts,
compared on GPU-hours, SLO attainment, TTFT p95 and scale-up lag.

Every run is :func:`simulator.simulate.simulate` on the same load config (same seed, so
the same arrivals). Figures per run: GPU-hours (the stage's replica-seconds x TP,
starting replicas included), SLO attainment (the summary's ``goodput_fraction``: the
share of measured requests meeting every per-request objective), the SLO verdict on the
figures (``slo.passed``; a measurement the load tester calls invalid, e.g. client slots
all busy, is flagged beside it, not failed), TTFT p95, and the time the queue stayed
over target: the requests in flight (admitted, not finished, from the records) above
``target_queue_per_replica`` x the serving replicas, the signal the policy scales on.

Scale-ups are read off the replica timeline: a replica serving from ``t`` was decided
at ``t - replica_start_s`` (the simulator starts every replica in exactly that time; a
replica stopped before it served is not seen). For each, the queue-over-target episode
around the decision gives the detection lag (over target -> decided: Serve's look-back
and upscale delay) and how long the queue stayed over target.

Static counts: ``statics`` if given, else MAX and the smallest count meeting the SLO,
found by bisection below MAX (each probe a full run: about log2(MAX) more runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loadtest.config import LoadTestConfig
from loadtest.profiles import DailyCycle, OpenLoad, RateTrace
from loadtest.profiles.rate_curve import rate_at
from serving.config.loading import read_stack_file
from serving.config.gateway import GatewaySpec
from serving.config.stack import AutoscalingSpec, RoutingPolicyName, RoutingSpec
from serving.errors import ConfigError as ServingConfigError
from simulator.config import SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.simulate import SimulationResult, simulate

SCHEMA = 1
SERIES_POINTS = 720  # samples of the day kept in autoscale.json


@dataclass(frozen=True)
class StackPolicy:
    """The parts of a stack file an autoscale run uses: its model, autoscaling policy, routing and gateway bound."""

    model: str | None
    autoscaling: AutoscalingSpec
    routing: RoutingPolicyName
    max_in_flight: int


def stack_policy(path: Path) -> StackPolicy:
    """The autoscaling policy (and model, routing, admission bound) of a stack YAML file."""
    try:
        raw = read_stack_file(path)
        return StackPolicy(model=raw.get("model"),
                           autoscaling=AutoscalingSpec.model_validate(raw.get("autoscaling") or {}),
                           routing=RoutingSpec.model_validate(raw.get("routing") or {}).policy,
                           max_in_flight=GatewaySpec.model_validate(raw.get("gateway") or {}).max_in_flight)
    except (ServingConfigError, ValueError) as exc:
        problem = " ".join(str(exc).split())
        raise SimulationConfigError(f"stack file {path}: {problem}") from None


@dataclass(frozen=True)
class ScaleUp:
    """One scale-up: decided, serving, and the queue-over-target episode around it (run seconds)."""

    decided_s: float
    serving_s: float
    added: int
    over_target_since_s: float | None
    back_under_target_s: float | None

    @property
    def start_lag_s(self) -> float:
        """Decided -> serving: the replica's start time."""
        return self.serving_s - self.decided_s

    @property
    def detect_lag_s(self) -> float | None:
        """Queue over target -> decided (Serve's look-back and upscale delay)."""
        return None if self.over_target_since_s is None else self.decided_s - self.over_target_since_s

    @property
    def over_target_s(self) -> float | None:
        """How long that episode kept the queue over target (None: still over at the end)."""
        if self.over_target_since_s is None or self.back_under_target_s is None:
            return None
        return self.back_under_target_s - self.over_target_since_s


@dataclass(frozen=True)
class Series:
    """A run on a regular grid: serving replicas and requests in flight."""

    t_s: np.ndarray
    replicas: np.ndarray
    in_flight: np.ndarray


@dataclass(frozen=True)
class RunFigures:
    """One run (autoscaled or static)."""

    name: str
    autoscaled: bool
    gpu_hours: float
    slo_attainment: float | None
    ttft_p95_s: float | None
    passed: bool | None
    invalid: str | None
    measured: int
    failed: int
    peak_replicas: int
    mean_replicas: float
    over_target_s: float
    scale_ups: tuple[ScaleUp, ...]
    wall_s: float
    replica_start_s: float
    series: Series = field(repr=False)


@dataclass(frozen=True)
class AutoscaleReport:
    """The autoscale run: its scenario, every run (the autoscaled one first) and the offered rate."""

    scenario: dict
    time_scale: float
    target_per_replica: float
    replica_start_s: float
    runs: tuple[RunFigures, ...]
    offered_rps: np.ndarray
    smallest_passing_static: int | None
    searched: bool

    @property
    def autoscaled(self) -> RunFigures:
        return self.runs[0]


def check_autoscalable(config: LoadTestConfig) -> None:
    """:class:`SimulationConfigError` unless ``config`` is one timed stage with an SLO."""
    if config.profile.searches_rate:
        raise SimulationConfigError(f"autoscale needs a single-stage profile (e.g. day:...), not {config.profile.kind!r}")
    if config.duration_s is None:
        raise SimulationConfigError("autoscale needs --duration (the length of the day)")
    if not config.slos:
        raise SimulationConfigError("autoscale needs --slo (SLO attainment is the share of requests meeting it)")


def time_scale(config: LoadTestConfig) -> float:
    """Seconds of the replayed curve per simulated second (1 = real time)."""
    profile = config.profile
    if isinstance(profile, (DailyCycle, RateTrace)) and config.duration_s is not None:
        return profile.time_scale(config.duration_s)
    return 1.0


def offered_rate(config: LoadTestConfig, t_s: np.ndarray) -> np.ndarray:
    """The offered arrival rate over the stage (zeros for a closed loop)."""
    load = config.profile.next_stage([]).load
    if not isinstance(load, OpenLoad):
        return np.zeros_like(t_s)
    if load.rate_curve is not None:
        return rate_at(load.rate_curve, t_s, config.duration_s)
    return load.start_rate + (load.end_rate - load.start_rate) * t_s / config.duration_s


def grid_of(config: LoadTestConfig, policy: AutoscalingSpec) -> np.ndarray:
    return np.arange(0.0, config.duration_s, policy.metrics_interval_s)


def run_series(result: SimulationResult, grid: np.ndarray) -> Series:
    """Serving replicas (the stage's replica timeline) and requests in flight (the records) on ``grid``."""
    timeline = np.array(result.stages[0].replica_timeline, dtype=float).reshape(-1, 2)
    at = np.searchsorted(timeline[:, 0], grid, side="right") - 1
    replicas = np.where(at >= 0, timeline[np.maximum(at, 0), 1], 0).astype(int)
    columns = result.stage_records[0].columns
    answered = ~np.isnan(columns.e2e_s)
    starts = np.sort(columns.start_s[answered])
    ends = np.sort(columns.end_s[answered])
    in_flight = np.searchsorted(starts, grid, side="right") - np.searchsorted(ends, grid, side="right")
    return Series(grid, replicas, in_flight)


def scale_ups_of(result: SimulationResult, series: Series, policy: AutoscalingSpec) -> tuple[ScaleUp, ...]:
    """Every scale-up of an autoscaled run, with the queue-over-target episode around it."""
    start = result.setup.replica_start_s
    over = series.in_flight > policy.target_queue_per_replica * series.replicas
    t = series.t_s
    began = np.flatnonzero(over & ~np.concatenate(([False], over[:-1])))
    # The policy must have wanted more for the upscale delay, over the look-back average.
    reach = policy.upscale_delay_s + policy.look_back_period_s + 2 * policy.metrics_interval_s
    ups = []
    timeline = list(dict(result.stages[0].replica_timeline).items())  # the last count at each instant
    for (_, before), (when, after) in zip(timeline, timeline[1:]):
        if after <= before:
            continue
        decided = when - start
        since = back = None
        earlier = began[t[began] <= decided]
        if len(earlier):
            first = earlier[-1]
            under = np.flatnonzero(~over[first:])
            end = t[first + under[0]] if len(under) else None
            if end is None or end >= decided - reach:
                since, back = float(t[first]), (None if end is None else float(end))
        ups.append(ScaleUp(decided, when, after - before, since, back))
    return tuple(ups)


def figures_of(name: str, result: SimulationResult, grid: np.ndarray, policy: AutoscalingSpec) -> RunFigures:
    stage = result.summary.headline
    series = run_series(result, grid)
    autoscaled = result.sim.autoscaling.enabled
    over = series.in_flight > policy.target_queue_per_replica * series.replicas
    figures = result.stages[0]
    return RunFigures(
        name=name, autoscaled=autoscaled, gpu_hours=figures.gpu_hours,
        slo_attainment=stage.slo.goodput_fraction, ttft_p95_s=stage.latency.ttft.p95, passed=stage.slo.passed,
        invalid=None if stage.validity.valid else "; ".join(stage.validity.reasons),
        measured=stage.requests.measured, failed=stage.requests.failed,
        peak_replicas=max(n for _, n in figures.replica_timeline),
        mean_replicas=figures.gpu_hours * 3600.0 / result.setup.tensor_parallel / max(figures.simulated_s, 1e-9),
        over_target_s=float(over.sum() * policy.metrics_interval_s),
        scale_ups=scale_ups_of(result, series, policy) if autoscaled else (),
        wall_s=result.wall_s, replica_start_s=result.setup.replica_start_s, series=series)


Progress = Callable[[str, float], None]


def run_autoscale(config: LoadTestConfig, base: SimulationConfig, policy: AutoscalingSpec, *,
           statics: Sequence[int] | None = None, progress: Progress | None = None) -> AutoscaleReport:
    """Simulate ``config`` autoscaled by ``policy`` (between its bounds) and at static counts.

    ``base`` is the cluster (hardware, model, TP, routing, admission, start time); its
    replica count and autoscaling are replaced per run. ``statics=None``: MAX and the
    smallest count meeting the SLO (bisection).
    """
    check_autoscalable(config)
    grid = grid_of(config, policy)
    policy = policy.model_copy(update={"enabled": True})

    def run(name: str, sim: SimulationConfig) -> RunFigures:
        tick = (lambda _plan, t: progress(name, t)) if progress is not None else None
        return figures_of(name, simulate(config, sim, progress=tick), grid, policy)

    autoscaled = run(f"autoscaled {policy.min_replicas}..{policy.max_replicas}",
                     base.model_copy(update={"replicas": max(policy.min_replicas, 1), "autoscaling": policy}))
    static_runs: dict[int, RunFigures] = {}

    def static(n: int) -> RunFigures:
        if n not in static_runs:
            static_runs[n] = run(f"static {n}", base.model_copy(update={"replicas": n,
                                                                         "autoscaling": AutoscalingSpec()}))
        return static_runs[n]

    if statics is None:
        smallest = smallest_static(policy.max_replicas, lambda n: bool(static(n).passed))
    else:
        for n in statics:
            static(n)
        smallest = min((n for n, r in static_runs.items() if r.passed), default=None)
    return AutoscaleReport(scenario=scenario_of(config, base, policy), time_scale=time_scale(config),
                        target_per_replica=policy.target_queue_per_replica,
                        replica_start_s=autoscaled.replica_start_s,
                        runs=(autoscaled, *(static_runs[n] for n in sorted(static_runs, reverse=True))),
                        offered_rps=offered_rate(config, grid), smallest_passing_static=smallest,
                        searched=statics is None)


def smallest_static(top: int, passes: Callable[[int], bool]) -> int | None:
    """The fewest replicas in ``1..top`` for which ``passes`` (assumed monotone): ``top``
    first, then bisection (about log2(top) more runs)."""
    if not passes(top):
        return None
    failing, passing = 0, top
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if passes(middle):
            passing = middle
        else:
            failing = middle
    return passing


def scenario_of(config: LoadTestConfig, base: SimulationConfig, policy: AutoscalingSpec) -> dict:
    plan = config.profile.next_stage([])
    return {
        "hardware": base.hardware, "model": base.model, "tensor_parallel": base.tensor_parallel,
        "routing": base.routing.policy.value, "max_in_flight": base.max_in_flight,
        "profile": plan.label, "workload": config.workload.kind, "duration_s": config.duration_s,
        "slo": [o.describe() for o in config.slos], "seed": config.seed,
        "policy": policy.model_dump(mode="json"),
    }
