"""Open-loop arrival schedules (pure; numpy random generators with explicit seeds).

Inter-arrival gaps follow vLLM's benchmark: gamma-distributed with shape
``burstiness`` and mean ``1 / rate`` (burstiness 1 is a Poisson process, lower is
burstier, higher is more regular); ``burstiness=None`` means evenly spaced arrivals.
The first arrival is at t = 0. A linear rate ramp maps a unit-rate process through the
inverse of its cumulative intensity, so the counts follow the ramp exactly in
expectation.
"""

from __future__ import annotations

import math

import numpy as np

from loadtest.errors import ConfigError

MAX_ARRIVALS = 2_000_000


def unit_process(count: int, burstiness: float | None, rng: np.random.Generator) -> np.ndarray:
    """``count`` arrival times of a unit-rate renewal process starting at 0."""
    if count <= 0:
        return np.zeros(0)
    if burstiness is None:
        return np.arange(count, dtype=float)
    if burstiness <= 0:
        raise ConfigError(f"burstiness must be > 0, got {burstiness}")
    gaps = rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=count - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def ramp_cumulative(t: np.ndarray | float, start_rate: float, end_rate: float, span_s: float):
    """Expected arrivals by time ``t`` for a rate rising linearly over ``span_s``."""
    slope = (end_rate - start_rate) / span_s
    return start_rate * t + 0.5 * slope * np.square(t)


def _ramp_inverse(s: np.ndarray, start_rate: float, end_rate: float, span_s: float) -> np.ndarray:
    slope = (end_rate - start_rate) / span_s
    if abs(slope) < 1e-12:
        return s / start_rate
    disc = np.maximum(start_rate * start_rate + 2.0 * slope * s, 0.0)
    # Stable form of (-r0 + sqrt(r0^2 + 2 a s)) / a.
    return 2.0 * s / (start_rate + np.sqrt(disc))


def schedule(
    *,
    start_rate: float,
    end_rate: float | None = None,
    burstiness: float | None,
    seed: int,
    duration_s: float | None = None,
    count: int | None = None,
) -> np.ndarray:
    """Sorted arrival offsets (seconds) within ``duration_s`` and/or capped at ``count``.

    ``end_rate`` (a linear ramp over ``duration_s``) defaults to ``start_rate``.
    """
    end = start_rate if end_rate is None else end_rate
    if start_rate < 0 or end < 0 or (start_rate == 0 and end == 0):
        raise ConfigError(f"arrival rates must be >= 0 and not both 0 ({start_rate}, {end})")
    if duration_s is None and count is None:
        raise ConfigError("an open-loop schedule needs a duration or a request count")
    if end != start_rate and duration_s is None:
        raise ConfigError("a rate ramp needs a duration")
    if duration_s is not None:
        expected = float(ramp_cumulative(duration_s, start_rate, end, duration_s))
        needed = int(expected + 10.0 * math.sqrt(expected + 1.0) / min(burstiness or 1.0, 1.0) + 10)
        if count is not None:
            needed = min(needed, count)
    else:
        assert count is not None
        needed = count
    if needed > MAX_ARRIVALS:
        raise ConfigError(f"schedule of {needed} arrivals is too large (max {MAX_ARRIVALS})")
    rng = np.random.default_rng(seed)
    while True:
        unit = unit_process(needed, burstiness, rng)
        if end == start_rate:
            times = unit / start_rate
        else:
            times = _ramp_inverse(unit, start_rate, end, duration_s)  # type: ignore[arg-type]
        if duration_s is None:
            return times
        inside = times[times < duration_s]
        if len(inside) < len(times) or (count is not None and len(inside) >= count):
            return inside[:count] if count is not None else inside
        needed *= 2  # the draw ran short of the duration: draw again, longer
        if needed > MAX_ARRIVALS:
            raise ConfigError("schedule too large")
        rng = np.random.default_rng(seed)
