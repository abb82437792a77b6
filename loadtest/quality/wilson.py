"""The Wilson score interval of a proportion (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95% interval."""


@dataclass(frozen=True)
class Interval:
    """A proportion's estimate and its confidence interval, all in [0, 1]."""

    score: float
    low: float
    high: float


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> Interval:
    """The Wilson score interval of ``successes`` out of ``trials`` (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or all
    successes: 20 of 20 gives [0.839, 1]."""
    if trials < 1:
        raise ValueError("a score needs at least one trial")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be within 0..{trials}, got {successes}")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z / (1 + z2 / trials) * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(score=p, low=low, high=high)
