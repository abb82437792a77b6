"""What a load profile is: a strategy that proposes stages, one at a time.

A profile looks at the outcomes of the stages run so far and returns the next
:class:`StagePlan` or ``None`` when it is done (single-stage profiles stop after
one; the rate sweep keeps proposing until its search converges). A stage is either a
closed loop (a fixed number of users, each sending its next request when the last
one finished) or an open loop (arrivals on a schedule, independent of completions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal, Protocol, Union, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.errors import ConfigError
from loadtest.profiles.rate_curve import MEAN_TOLERANCE, Knots, check_knots, follow_curve, mean_rate


class ClosedLoad(BaseModel):
    """``users`` concurrent users, started over ``ramp_up_s`` seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["closed"] = "closed"
    users: int = Field(ge=1)
    ramp_up_s: float = Field(0.0, ge=0.0)


class OpenLoad(BaseModel):
    """Arrivals at ``start_rate`` rising linearly to ``end_rate`` (requests/s) over the
    stage; ``burstiness`` as in vLLM (``None``: evenly spaced). At most
    ``max_concurrency`` sessions are in flight (the client's cap, ``max_concurrency=N``
    in a profile spec); an arrival finding every slot busy leaves late, is counted as a
    slot wait and makes the stage's measurement invalid. ``rate_curve`` (knots of
    :mod:`loadtest.profiles.rate_curve`) makes the rate follow a curve over the stage;
    ``start_rate`` and ``end_rate`` are then its mean, so the stage's arrival count is
    ``mean x duration`` as for a constant rate (:meth:`follow_curve` moves the schedule)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["open"] = "open"
    start_rate: float = Field(gt=0.0)
    end_rate: float = Field(gt=0.0)
    burstiness: float | None = Field(1.0, gt=0.0)
    max_concurrency: int = Field(256, ge=1)
    rate_curve: Knots | None = None

    @model_validator(mode="after")
    def _curve(self) -> OpenLoad:
        if self.rate_curve is None:
            return self
        check_knots(self.rate_curve)
        mean = mean_rate(self.rate_curve)
        if self.start_rate != self.end_rate or abs(self.start_rate - mean) > MEAN_TOLERANCE * mean:
            raise ValueError(f"with a rate curve, start_rate and end_rate must be its mean ({mean:g} req/s)")
        return self

    @property
    def is_ramp(self) -> bool:
        """Whether the rate varies within the stage."""
        return self.start_rate != self.end_rate or self.rate_curve is not None

    def follow_curve(self, times: np.ndarray, duration_s: float | None) -> np.ndarray:
        """A schedule built at ``start_rate``/``end_rate`` moved onto the rate curve (as is without one)."""
        if self.rate_curve is None:
            return times
        if duration_s is None:
            raise ConfigError("a rate curve needs a duration")
        return follow_curve(times, self.rate_curve, duration_s)


class ReplayLoad(BaseModel):
    """Arrivals at the recorded times of a trace (``loadtest.profiles.replay``): ``requests``
    in all, the last ``span_s`` after the stage clock's zero, each request bound to its
    arrival (never cycled); at most ``max_concurrency`` in flight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["replay"] = "replay"
    requests: int = Field(ge=1)
    span_s: float = Field(ge=0.0)
    max_concurrency: int = Field(256, ge=1)


Load = Annotated[Union[ClosedLoad, OpenLoad, ReplayLoad], Field(discriminator="kind")]


class StagePlan(BaseModel):
    """One stage to run: its load and, for open loops, the offered rate it stands for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    label: str
    load: Load
    offered_rate: float | None = None

    @model_validator(mode="after")
    def _rate(self) -> StagePlan:
        if self.offered_rate is not None and self.offered_rate <= 0:
            raise ValueError("offered_rate must be > 0")
        return self

    def seed(self, run_seed: int) -> int:
        """This stage's seed (arrivals, prompts, cancels): the load tester and the
        simulator draw the same stage from it."""
        return run_seed + 1000 * self.index


class StageOutcome(BaseModel):
    """What a profile learns from a finished stage."""

    model_config = ConfigDict(frozen=True)

    plan: StagePlan
    passed: bool | None
    reason: str = ""
    achieved_rate: float | None = None


@runtime_checkable
class LoadProfile(Protocol):
    """The protocol every profile implements (profiles are pydantic models)."""

    kind: str
    needs_slo: ClassVar[bool]
    needs_duration: ClassVar[bool]
    searches_rate: ClassVar[bool]
    max_error_rate: float | None

    def next_stage(self, history: Sequence[StageOutcome]) -> StagePlan | None:
        """The next stage to run, or ``None`` when the profile is finished."""
        ...


class SingleStage:
    """Mixin for profiles that run exactly one stage built by ``_load()``."""

    needs_slo: ClassVar[bool] = False
    needs_duration: ClassVar[bool] = False
    searches_rate: ClassVar[bool] = False

    def _load(self) -> ClosedLoad | OpenLoad:  # pragma: no cover - overridden
        raise NotImplementedError

    def _label(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def next_stage(self, history: Sequence[StageOutcome]) -> StagePlan | None:
        if history:
            return None
        load = self._load()
        rate = load.end_rate if isinstance(load, OpenLoad) and not load.is_ramp else None
        return StagePlan(index=0, label=self._label(), load=load, offered_rate=rate)
