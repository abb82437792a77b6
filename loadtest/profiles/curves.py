"""Single-stage open-loop profiles whose rate follows a curve over the run's duration:
a daily cycle (``day``) and a recorded rate trace (``trace``).

The curve is laid over ``--duration``: rates are kept, time is scaled. A ``day`` run of
``--duration 24h`` is real time, ``--duration 2h`` is a day compressed 12 times
(:meth:`time_scale`); a trace likewise spans the duration. One stage, so one cluster
lives through the whole curve (an autoscaler acts on it). Arrivals are the load
tester's schedule at the curve's mean rate, moved onto the curve
(:mod:`loadtest.profiles.rate_curve`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.errors import ConfigError
from loadtest.profiles.base import OpenLoad, SingleStage
from loadtest.profiles.rate_curve import Knots, check_knots, mean_rate
from loadtest.units import Seconds

DAY_S = 86_400.0
KNOTS_PER_DAY = 96  # every 15 minutes of the day; linear between them (error < 0.1% of the swing)


class _CurveProfile(SingleStage, BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_error_rate: ClassVar[float | None] = None
    needs_duration: ClassVar[bool] = True
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int = Field(256, ge=1, le=4096)

    def knots(self) -> Knots:  # pragma: no cover - overridden
        raise NotImplementedError

    def time_scale(self, duration_s: float) -> float:  # pragma: no cover - overridden
        """Seconds of the curve per second of the run (1: real time; 12: compressed 12 times)."""
        raise NotImplementedError

    def _load(self) -> OpenLoad:
        knots = self.knots()
        mean = mean_rate(knots)
        return OpenLoad(start_rate=mean, end_rate=mean, burstiness=self.burstiness,
                        max_concurrency=self.max_concurrency, rate_curve=knots)


class DailyCycle(_CurveProfile):
    """Open loop: a daily cycle laid over the run's duration (``days`` whole days; a
    shorter duration compresses them), the rate a raised cosine from ``trough_rate`` up
    to ``peak_rate`` at ``peak_at`` o'clock (Poisson-like arrivals, ``burstiness`` as in
    ``poisson``)."""

    kind: Literal["day"] = "day"
    peak_rate: float = Field(gt=0.0)
    trough_rate: float = Field(ge=0.0)
    peak_at: Seconds = Field(14 * 3600.0, ge=0.0, lt=DAY_S)
    days: int = Field(1, ge=1, le=28)

    @model_validator(mode="after")
    def _order(self) -> DailyCycle:
        if self.trough_rate > self.peak_rate:
            raise ValueError(f"trough_rate ({self.trough_rate:g}) must not exceed peak_rate ({self.peak_rate:g})")
        return self

    def rate_at_hour(self, hour: np.ndarray | float) -> np.ndarray:
        """The rate at ``hour`` o'clock (requests/s)."""
        phase = 2.0 * math.pi * (np.asarray(hour, dtype=float) * 3600.0 - self.peak_at) / DAY_S
        return self.trough_rate + (self.peak_rate - self.trough_rate) * 0.5 * (1.0 + np.cos(phase))

    def knots(self) -> Knots:
        fractions = np.linspace(0.0, 1.0, KNOTS_PER_DAY * self.days + 1)
        rates = self.rate_at_hour((fractions * 24.0 * self.days) % 24.0)
        return tuple(zip(fractions.tolist(), rates.tolist()))

    def time_scale(self, duration_s: float) -> float:
        return DAY_S * self.days / duration_s

    def _label(self) -> str:
        days = f", {self.days} days" if self.days > 1 else ""
        return f"day {self.trough_rate:g}..{self.peak_rate:g} req/s (peak at {self.peak_at / 3600:g}h{days})"


class RateTrace(_CurveProfile):
    """Open loop: the rates of a CSV file of ``time_s,rate`` rows laid over the run's
    duration (``interpolate=linear`` between rows, or ``step``: each rate holds until the
    next row; the last row ends the trace). ``points`` holds the rows read from ``path``."""

    kind: Literal["trace"] = "trace"
    path: Path
    interpolate: Literal["linear", "step"] = "linear"
    points: tuple[tuple[float, float], ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("points") and data.get("path"):
            return {**data, "points": read_rate_trace(Path(data["path"]))}
        return data

    @model_validator(mode="after")
    def _usable(self) -> RateTrace:
        """:class:`ConfigError` (one line) unless the rows make a usable curve."""
        points, where = self.points, f"trace {self.path}"
        if len(points) < 2:
            raise ConfigError(f"{where}: needs at least two rows of time_s,rate (the last one ends the trace)")
        if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
            raise ConfigError(f"{where}: time_s must increase from row to row")
        try:
            check_knots(self.knots())
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return self

    def knots(self) -> Knots:
        t0, span = self.points[0][0], self.span_s
        fractions = [(t - t0) / span for t, _ in self.points]
        rates = [r for _, r in self.points]
        if self.interpolate == "linear":
            return tuple(zip(fractions, rates))
        steps: list[tuple[float, float]] = []
        for i in range(len(rates) - 1):
            steps += [(fractions[i], rates[i]), (fractions[i + 1], rates[i])]
        return tuple(steps)

    @property
    def span_s(self) -> float:
        """How long the trace lasts (its first row to its last)."""
        return self.points[-1][0] - self.points[0][0]

    def time_scale(self, duration_s: float) -> float:
        return self.span_s / duration_s

    def _label(self) -> str:
        return f"trace {self.path.name} ({len(self.points)} rows, {self.interpolate})"


def read_rate_trace(path: Path) -> tuple[tuple[float, float], ...]:
    """The ``(time_s, rate)`` rows of a trace CSV (an optional header row, ``#`` comments
    and blank lines skipped); :class:`ConfigError` with a one-line message if unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"trace {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    rows: list[tuple[float, float]] = []
    first = True
    for line_no, fields in enumerate(csv.reader(text.splitlines()), start=1):
        if not fields or not "".join(fields).strip() or fields[0].lstrip().startswith("#"):
            continue
        header, first = first and not any(_is_number(f) for f in fields), False
        if header:
            continue
        if len(fields) != 2:
            raise ConfigError(f"trace {path}, line {line_no}: expected two columns time_s,rate, got {len(fields)}")
        try:
            time_s, rate = float(fields[0]), float(fields[1])
        except ValueError:
            raise ConfigError(f"trace {path}, line {line_no}: time_s and rate must be numbers, "
                              f"got {','.join(f.strip() for f in fields)!r}") from None
        if not (math.isfinite(time_s) and math.isfinite(rate) and rate >= 0):
            raise ConfigError(f"trace {path}, line {line_no}: time_s must be finite and rate finite and >= 0, "
                              f"got {time_s:g},{rate:g}")
        if rows and time_s <= rows[-1][0]:
            raise ConfigError(f"trace {path}, line {line_no}: time_s {time_s:g} is not after the previous "
                              f"row's {rows[-1][0]:g}")
        rows.append((time_s, rate))
    return tuple(rows)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
