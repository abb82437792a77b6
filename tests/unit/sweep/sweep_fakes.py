"""Fakes and builders for the sweep's unit tests.

``FakeClusterMeasurer`` is a FAKE: a toy world where a shape's N replicas carry
``N * c / (1 + a (N - 1))`` req/s within the SLO (times ``pooling_gain`` for N >= 2:
replicas sharing one router's queue) and a per-shape TPOT floor may make it fail at
any load. It takes its load points through the sweep's own sampling driver. It
exists only to drive the pure search and loop in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from serving.config.model_spec import AcceleratorKind, Dtype
from sweep.measure.results import LoadPoint, MeasuredResult, QualityMeasurement, RunRecord, RunStatus, Trial
from sweep.measure.sampling import measure_rates
from sweep.spec.economics import Price, PriceTable
from sweep.spec.quality import QualitySpec
from sweep.spec.sweep_spec import BudgetSpec, ReplicaRange, SearchSettings, SloSpec, SpaceSpec, SweepSpec
from sweep.spec.traffic import LoadProfileSpec, TrafficSpec, WorkloadSpec

SLO = SloSpec(ttft_p95=1.0, tpot_p95=0.05, e2e_p95=10.0, min_goodput_share=0.9)


def price(per_hour: float) -> Price:
    return Price(per_hour=per_hour, source="a test price, not a quote", as_of="2025-01")


PRICES = PriceTable(
    per_accelerator_hour={AcceleratorKind.CPU: price(0.05), AcceleratorKind.H200: price(4.0),
                          AcceleratorKind.B300: price(7.0)}
)


def make_spec(
    *,
    rate: float = 10.0,
    tp: tuple[int, ...] = (1,),
    replicas_max: int | None = None,
    accelerator: AcceleratorKind = AcceleratorKind.H200,
    nodes: int = 3,
    per_node: int = 8,
    per_rank: int = 1,
    strategy: str = "capacity-search",
    assumed_efficiency: float = 1.0,
    extra_rate_factors: tuple[float, ...] = (),
    max_num_seqs: tuple[int | None, ...] = (None,),
    slo: SloSpec = SLO,
    probe_refine: int = 0,
    dtype: tuple[Dtype | None, ...] = (None,),
    quality: QualitySpec | None = None,
) -> SweepSpec:
    return SweepSpec(
        name="test",
        model="test-model",
        traffic=TrafficSpec(
            profile=LoadProfileSpec(rate_rps=rate),
            workload=WorkloadSpec(input_tokens=128, output_tokens=100),
            duration_s=60,
        ),
        slo=slo,
        space=SpaceSpec(
            tensor_parallel=tp, replicas=ReplicaRange(max=replicas_max), max_num_seqs=max_num_seqs, dtype=dtype
        ),
        budget=BudgetSpec(
            accelerator=accelerator, nodes=nodes, accelerators_per_node=per_node, accelerators_per_rank=per_rank
        ),
        search=SearchSettings(
            strategy=strategy, assumed_scaling_efficiency=assumed_efficiency, extra_rate_factors=extra_rate_factors,
            probe_refine=probe_refine,
        ),
        quality=quality,
    )


def graded(items: int, correct: int, *, errors: int = 0) -> QualityMeasurement:
    """A quality measurement whose first ``items - correct`` items (``q0``, ``q1``, ...) are wrong."""
    return QualityMeasurement(set="test-set", items=items, correct=correct, errors=errors,
                              wrong=tuple(f"q{i}" for i in range(items - correct)))


def passing_point(rate: float, *, e2e: float = 2.0, tokens: float = 100.0) -> LoadPoint:
    sent = max(1, round(rate * 60))
    return LoadPoint(
        offered_rps=rate, duration_s=60, requests_sent=sent, requests_ok=sent, requests_good=sent,
        achieved_rps=rate, output_tokens_per_s=rate * tokens, ttft_p95_s=0.2, tpot_p95_s=0.02,
        e2e_p95_s=e2e, goodput_rps=rate,
    )


def failing_point(rate: float, *, e2e: float = 20.0, achieved: float | None = None) -> LoadPoint:
    sent = max(1, round(rate * 60))
    got = rate if achieved is None else achieved
    return LoadPoint(
        offered_rps=rate, duration_s=60, requests_sent=sent, requests_ok=sent, requests_good=sent // 2,
        achieved_rps=got, output_tokens_per_s=got * 100, ttft_p95_s=3.0, tpot_p95_s=0.04,
        e2e_p95_s=e2e, goodput_rps=got / 2,
    )


def record(trial: Trial, *points: LoadPoint, status: RunStatus = RunStatus.OK, reason: str | None = None) -> RunRecord:
    return RunRecord(trial=trial, result=MeasuredResult(status=status, reason=reason, points=points))


@dataclass
class FakeClusterMeasurer:
    """FAKE measurer over a toy capacity world (see the module docstring)."""

    slo: SloSpec
    per_replica_rps: dict[int, float]
    contention: float = 0.0
    pooling_gain: float = 1.0
    tpot_floor_s: dict[int, float] = field(default_factory=dict)
    deploy_failures: dict[str, str] = field(default_factory=dict)
    crashes: dict[str, str] = field(default_factory=dict)
    tool_errors: dict[str, str] = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    output_tokens: int = 100
    calls: list[Trial] = field(default_factory=list)
    load_tests: int = 0

    def capacity(self, tp: int, replicas: int) -> float:
        gain = self.pooling_gain if replicas > 1 else 1.0
        return gain * replicas * self.per_replica_rps[tp] / (1 + self.contention * (replicas - 1))

    def point(self, tp: int, replicas: int, rate: float) -> LoadPoint:
        cap = self.capacity(tp, replicas)
        u = rate / cap
        floor = self.tpot_floor_s.get(tp, 0.5 * (self.slo.tpot_p95 or 1.0))
        sent = max(1, round(rate * 60))
        achieved = min(rate, cap)
        good = sent if u <= 1 and floor <= (self.slo.tpot_p95 or math.inf) else sent // 3
        scale = 0.5 * u if u <= 1 else 1.5 * u
        return LoadPoint(
            offered_rps=rate, duration_s=60, requests_sent=sent, requests_ok=sent, requests_good=good,
            achieved_rps=achieved, output_tokens_per_s=achieved * self.output_tokens,
            ttft_p95_s=scale * (self.slo.ttft_p95 or 1.0), tpot_p95_s=floor,
            e2e_p95_s=scale * (self.slo.e2e_p95 or 10.0), goodput_rps=good / 60,
        )

    def measure(self, trial: Trial) -> MeasuredResult:
        self.calls.append(trial)
        c = trial.candidate
        if c.id in self.deploy_failures:
            return MeasuredResult(status=RunStatus.FAILED_TO_DEPLOY, reason=self.deploy_failures[c.id])
        if c.id in self.crashes:
            return MeasuredResult(status=RunStatus.CRASHED, reason=self.crashes[c.id])
        if c.id in self.tool_errors:
            return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=self.tool_errors[c.id])

        def take(rate: float, seed: int) -> LoadPoint:
            self.load_tests += 1
            return self.point(c.tp, c.replicas, rate)

        points = measure_rates(trial, 0, self.slo, self.search, take)
        return MeasuredResult(status=RunStatus.OK, points=points, wall_time_s=1.0)


@dataclass
class FakeQualityMeasurer:
    """FAKE measurer: each dtype's own toy world (``worlds``), each ok result graded
    ``correct[dtype]`` right of ``items``."""

    worlds: dict[Dtype | None, FakeClusterMeasurer]
    correct: dict[Dtype | None, int]
    items: int = 100

    def measure(self, trial: Trial) -> MeasuredResult:
        dtype = trial.candidate.engine.dtype
        result = self.worlds[dtype].measure(trial)
        if result.status is not RunStatus.OK:
            return result
        return result.model_copy(update={"quality": graded(self.items, self.correct[dtype])})


@dataclass
class InterruptingMeasurer:
    """FAKE measurer that delegates and raises KeyboardInterrupt on call number ``at``."""

    inner: FakeClusterMeasurer
    at: int
    calls: int = 0

    def measure(self, trial: Trial) -> MeasuredResult:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.inner.measure(trial)


def fixed_clock() -> str:
    return "2025-01-01T00:00:00+00:00"
