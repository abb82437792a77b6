"""Single-stage profiles: fixed concurrency, constant rate, Poisson and a linear ramp."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from loadtest.profiles.base import ClosedLoad, OpenLoad, SingleStage
from loadtest.units import Seconds


class _Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_error_rate: ClassVar[float | None] = None


class FixedConcurrency(SingleStage, _Profile):
    """Closed loop: ``users`` users each send their next request as soon as the last ends."""

    kind: Literal["concurrency"] = "concurrency"
    users: int = Field(8, ge=1, le=4096)
    ramp_up_s: Seconds = Field(0.0, ge=0.0)

    def _load(self) -> ClosedLoad:
        return ClosedLoad(users=self.users, ramp_up_s=self.ramp_up_s)

    def _label(self) -> str:
        return f"{self.users} users"


class ConstantRate(SingleStage, _Profile):
    """Open loop: evenly spaced arrivals at ``rate`` requests/s."""

    kind: Literal["constant"] = "constant"
    rate: float = Field(gt=0.0)
    max_concurrency: int = Field(256, ge=1, le=4096)

    def _load(self) -> OpenLoad:
        return OpenLoad(
            start_rate=self.rate, end_rate=self.rate, burstiness=None, max_concurrency=self.max_concurrency
        )

    def _label(self) -> str:
        return f"constant {self.rate:g} req/s"


class Poisson(SingleStage, _Profile):
    """Open loop: gamma inter-arrivals with mean ``1/rate``; ``burstiness`` 1 is Poisson,
    lower is burstier (vLLM's ``--burstiness``)."""

    kind: Literal["poisson"] = "poisson"
    rate: float = Field(gt=0.0)
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int = Field(256, ge=1, le=4096)

    def _load(self) -> OpenLoad:
        return OpenLoad(
            start_rate=self.rate,
            end_rate=self.rate,
            burstiness=self.burstiness,
            max_concurrency=self.max_concurrency,
        )

    def _label(self) -> str:
        return f"poisson {self.rate:g} req/s (burstiness {self.burstiness:g})"


class LinearRamp(SingleStage, _Profile):
    """Open loop: the arrival rate rises linearly from ``start_rate`` to ``end_rate`` over
    the run's duration (Poisson-like arrivals, ``burstiness`` as in ``poisson``)."""

    kind: Literal["ramp"] = "ramp"
    needs_duration: ClassVar[bool] = True
    start_rate: float = Field(gt=0.0)
    end_rate: float = Field(gt=0.0)
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int = Field(256, ge=1, le=4096)

    def _load(self) -> OpenLoad:
        return OpenLoad(
            start_rate=self.start_rate,
            end_rate=self.end_rate,
            burstiness=self.burstiness,
            max_concurrency=self.max_concurrency,
        )

    def _label(self) -> str:
        return f"ramp {self.start_rate:g} -> {self.end_rate:g} req/s"
