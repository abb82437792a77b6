"""Exact order statistics from raw samples (pure).

Percentiles interpolate linearly between closest ranks (Hyndman & Fan type 7), the
definition ``numpy.percentile`` uses by default and vLLM's benchmark reports; they are
computed from every raw sample, never from histogram buckets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted, non-empty values."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    position = (n - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, n - 1)
    weight = position - lower
    low, high = sorted_values[lower], sorted_values[upper]
    if weight == 0.0 or low == high:
        return float(low)
    # numpy's formulation: stable at large magnitudes and exact at weight 1.
    if weight >= 0.5:
        return float(high - (high - low) * (1.0 - weight))
    return float(low + (high - low) * weight)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean with compensated summation (matches numpy to rounding)."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


class Distribution(BaseModel):
    """Summary of one latency (or other) sample set; all fields ``None`` when empty.

    Units are those of the samples (seconds for latencies).
    """

    model_config = ConfigDict(frozen=True)

    count: int = 0
    mean: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        """The distribution of ``values`` (NaN values are not allowed)."""
        data = sorted(float(v) for v in values)
        if not data:
            return cls()
        if any(math.isnan(v) for v in data):
            raise ValueError("NaN in samples")
        return cls(
            count=len(data),
            mean=mean(data),
            min=data[0],
            p50=percentile(data, 50.0),
            p90=percentile(data, 90.0),
            p95=percentile(data, 95.0),
            p99=percentile(data, 99.0),
            max=data[-1],
        )

    def stat(self, name: str) -> float | None:
        """One statistic by name: ``p50``, ``p90``, ``p95``, ``p99``, ``mean``, ``min``, ``max``."""
        if name not in {"p50", "p90", "p95", "p99", "mean", "min", "max"}:
            raise KeyError(name)
        return getattr(self, name)
