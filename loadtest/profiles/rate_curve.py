"""A rate that varies within one open-loop stage along a piecewise-linear curve (pure).

The curve is a tuple of knots ``(fraction of the stage's duration, requests/s)`` from
fraction 0 to 1; between knots the rate is linear, and two knots at the same fraction
make a step. A schedule follows it the way a linear ramp does: the load tester's
normalised schedule at the curve's mean rate (same count, same burstiness) is mapped
through the inverse of the curve's cumulative intensity, so the stage still sends
exactly ``mean x duration`` arrivals and only their timing follows the curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Knots = tuple[tuple[float, float], ...]
"""``(fraction of the duration in [0, 1], rate in requests/s)``, fractions non-decreasing."""

MEAN_TOLERANCE = 1e-6


def check_knots(knots: Sequence[tuple[float, float]]) -> None:
    """Raise ``ValueError`` (one line) unless ``knots`` is a usable curve."""
    if len(knots) < 2:
        raise ValueError("a rate curve needs at least two knots")
    fractions = [f for f, _ in knots]
    rates = [r for _, r in knots]
    if not all(math.isfinite(v) for v in (*fractions, *rates)):
        raise ValueError("rate curve knots must be finite numbers")
    if fractions[0] != 0.0 or fractions[-1] != 1.0:
        raise ValueError(f"a rate curve must run from fraction 0 to 1, not {fractions[0]:g} to {fractions[-1]:g}")
    if any(b < a for a, b in zip(fractions, fractions[1:])):
        raise ValueError("rate curve fractions must not decrease")
    if min(rates) < 0:
        raise ValueError(f"rates must be >= 0, got {min(rates):g}")
    if mean_rate(knots) <= 0:
        raise ValueError("a rate curve must offer some load (its mean rate is 0)")


def knot_arrays(knots: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """The knots' fractions and rates, as two float arrays."""
    array = np.asarray(knots, dtype=float).reshape(-1, 2)
    return array[:, 0], array[:, 1]


def mean_rate(knots: Sequence[tuple[float, float]]) -> float:
    """The curve's mean rate over the stage (requests/s)."""
    f, r = knot_arrays(knots)
    return float(np.sum(0.5 * (r[:-1] + r[1:]) * np.diff(f)))


def rate_at(knots: Sequence[tuple[float, float]], t_s: np.ndarray | float, duration_s: float) -> np.ndarray:
    """The offered rate at stage times ``t_s`` (requests/s)."""
    f, r = knot_arrays(knots)
    return np.interp(np.asarray(t_s, dtype=float) / duration_s, f, r)


def follow_curve(times: np.ndarray, knots: Sequence[tuple[float, float]], duration_s: float) -> np.ndarray:
    """Arrival offsets of a normalised schedule at the curve's mean rate over ``duration_s``,
    moved so their rate follows the curve (same order, same count)."""
    f, r = knot_arrays(knots)
    x = f * duration_s
    width = np.diff(x)
    slope = np.divide(np.diff(r), width, out=np.zeros_like(width), where=width > 0)
    cumulative = np.concatenate(([0.0], np.cumsum(0.5 * (r[:-1] + r[1:]) * width)))
    # Expected arrivals before each time on the flat schedule, in the curve's units.
    s = np.asarray(times, dtype=float) * (cumulative[-1] / duration_s)
    # The last segment starting at or before s: zero-width and zero-rate segments are skipped.
    i = np.clip(np.searchsorted(cumulative, s, side="right") - 1, 0, len(width) - 1)
    delta = np.maximum(s - cumulative[i], 0.0)
    r0, a = r[i], slope[i]
    denominator = r0 + np.sqrt(np.maximum(r0 * r0 + 2.0 * a * delta, 0.0))
    # Stable form of (-r0 + sqrt(r0^2 + 2 a delta)) / a, also right for a = 0.
    u = np.divide(2.0 * delta, denominator, out=np.zeros_like(delta), where=denominator > 0)
    return np.minimum(x[i] + np.minimum(u, width[i]), np.nextafter(duration_s, 0.0))
