"""The rate sweep: finds the highest arrival rate that still meets the SLO.

Search (pure, :func:`next_sweep_rate`): probe rates in ascending order (an explicit
list, or ``start_rate * growth**k`` up to ``max_rate``) until one fails, then bisect
between the highest passing and the lowest failing rate ``refine`` times. A stage
passes when every SLO passes, its error rate is at most ``max_error_rate`` and its
measurement is valid (the generator kept up with the schedule, below its concurrency
cap; see :func:`loadtest.analysis.metrics.stage_validity`); an invalid stage counts as failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadtest.profiles.base import OpenLoad, StageOutcome, StagePlan
from loadtest.units import Fraction

MAX_STAGES = 40


def probe_rates(
    *, rates: Sequence[float] | None, start_rate: float, growth: float, max_rate: float
) -> list[float]:
    """The ascending rates probed before refinement."""
    if rates:
        return sorted(set(rates))
    out = []
    rate = start_rate
    while rate < max_rate * (1 - 1e-9) and len(out) < MAX_STAGES:
        out.append(rate)
        rate *= growth
    out.append(max_rate)
    return out


def next_sweep_rate(
    history: Sequence[tuple[float, bool]], *, probes: Sequence[float], refine: int, min_step: float = 0.02
) -> float | None:
    """The next rate to try given ``(rate, passed)`` so far, or ``None`` when done."""
    probe_count = 0
    for rate, passed in history:
        probe_count += 1
        if not passed or probe_count == len(probes):
            break
    if all(p for _, p in history):
        # the next probe; after the last one, done: the answer is at least that probe
        return probes[probe_count] if probe_count < len(probes) else None
    if len(history) - probe_count >= refine:
        return None
    passing = [r for r, p in history if p]
    failing = [r for r, p in history if not p]
    high = min(failing)
    low = max((r for r in passing if r < high), default=0.0)
    if high - low <= min_step * high:
        return None
    return (low + high) / 2.0


class RateSweep(BaseModel):
    """Open-loop stages at increasing rates (each lasts the run's duration) to find the
    highest rate meeting the SLO; needs ``--slo``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["rate-sweep", "sweep"] = "rate-sweep"  # "sweep": the old name, read as "rate-sweep"
    needs_slo: ClassVar[bool] = True
    needs_duration: ClassVar[bool] = True
    searches_rate: ClassVar[bool] = True
    rates: tuple[float, ...] | None = None
    start_rate: float = Field(1.0, gt=0.0)
    growth: float = Field(2.0, gt=1.0)
    max_rate: float = Field(64.0, gt=0.0)
    refine: int = Field(2, ge=0, le=8)
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int = Field(256, ge=1, le=4096)
    max_error_rate: Fraction = Field(0.01, ge=0.0, le=1.0)

    @field_validator("kind")
    @classmethod
    def _current_name(cls, value: str) -> str:
        return "rate-sweep"

    @field_validator("rates", mode="before")
    @classmethod
    def _listify(cls, value: object) -> object:
        if isinstance(value, (str, float, int)):
            return (value,)
        return value

    @field_validator("rates")
    @classmethod
    def _positive(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None and (not value or any(r <= 0 for r in value)):
            raise ValueError("rates must be a non-empty list of positive numbers")
        return value

    def probes(self) -> list[float]:
        return probe_rates(
            rates=self.rates, start_rate=self.start_rate, growth=self.growth, max_rate=self.max_rate
        )

    def next_stage(self, history: Sequence[StageOutcome]) -> StagePlan | None:
        pairs = [(h.plan.offered_rate or 0.0, bool(h.passed)) for h in history]
        rate = next_sweep_rate(pairs, probes=self.probes(), refine=self.refine)
        if rate is None or len(history) >= MAX_STAGES:
            return None
        load = OpenLoad(
            start_rate=rate, end_rate=rate, burstiness=self.burstiness, max_concurrency=self.max_concurrency
        )
        return StagePlan(index=len(history), label=f"{rate:g} req/s", load=load, offered_rate=rate)
