"""Exact order statistics from raw samples, and their bootstrap intervals (pure).

Percentiles are ``numpy.percentile``'s default ``linear`` method (Hyndman & Fan type 7,
what vLLM's benchmark reports), computed from every raw sample, never from histogram
buckets.

Bootstrap (seeded, so deterministic): a percentile's resampled values are drawn exactly
in distribution without materialising the resamples. The k-th smallest of n draws from
the sample is ``sorted[floor(n * U)]`` with ``U`` the k-th smallest of n uniforms, a
Beta(k, n - k + 1) variable, and the next one above it is ``U + (1 - U) * Beta(1, n - k)``;
so each resample costs O(1) whatever the sample size. A mean is resampled directly
(O(n) per resample, so only up to :data:`MAX_MEAN_BOOTSTRAP` values). Intervals are the
2.5th and 97.5th percentiles of 1,000 resampled statistics. The bootstrap treats samples
as independent: correlated ones (the gaps of one stream, requests queued behind each
other) make the interval narrower than the truth.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
MAX_MEAN_BOOTSTRAP = 20_000
INTERVAL_STATS = ("p50", "p90", "p95", "p99", "mean")
_BATCH_VALUES = 2_000_000  # resampled values held in memory at once (means)


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of non-empty values (numpy's ``linear`` method)."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    return float(np.percentile(values, q, method="linear"))


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean with compensated summation (matches numpy to rounding)."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def bootstrap(
    values: Sequence[float] | np.ndarray,
    stat: str,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray | None:
    """``stat`` (``p<q>``, ``min``, ``max`` or ``mean``) of ``resamples`` bootstrap
    resamples of ``values``; ``None`` when not computed (no values, or a mean of more
    than :data:`MAX_MEAN_BOOTSTRAP` values)."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0 or (stat == "mean" and n > MAX_MEAN_BOOTSTRAP):
        return None
    rng = np.random.default_rng(seed)
    if stat == "mean":
        out = np.empty(resamples)
        batch = max(1, _BATCH_VALUES // n)
        for first in range(0, resamples, batch):
            size = min(batch, resamples - first)
            out[first : first + size] = data[rng.integers(0, n, size=(size, n))].mean(axis=1)
        return out
    data = np.sort(data)
    q = {"min": 0.0, "max": 100.0}.get(stat)
    q = float(stat[1:]) if q is None else q
    position = (n - 1) * q / 100.0
    k = math.floor(position) + 1  # the 1-based rank below the percentile
    weight = position - (k - 1)
    u = rng.beta(k, n - k + 1, size=resamples)
    low = data[np.minimum((u * n).astype(np.int64), n - 1)]
    if weight == 0.0 or k == n:
        return low
    u_next = u + (1.0 - u) * rng.beta(1, n - k, size=resamples)
    high = data[np.minimum((u_next * n).astype(np.int64), n - 1)]
    return low + (high - low) * weight


def bootstrap_proportion(
    hits: int, n: int, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> np.ndarray | None:
    """Bootstrap resamples of the proportion ``hits / n`` (binomial draws)."""
    if n <= 0:
        return None
    return np.random.default_rng(seed).binomial(n, hits / n, size=resamples) / n


def interval(resampled: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of resampled statistics."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(resampled, [tail, 1.0 - tail])
    return float(low), float(high)


class Distribution(BaseModel):
    """Summary of one latency (or other) sample set; all fields ``None`` when empty.

    Units are those of the samples (seconds for latencies). ``ci95`` holds 95% bootstrap
    intervals by stat name, when asked for (latency distributions).
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
    ci95: dict[str, tuple[float, float]] = {}

    @classmethod
    def of(cls, values: Iterable[float], *, intervals: bool = False) -> Distribution:
        """The distribution of ``values`` (NaN values are not allowed), with the 95%
        bootstrap intervals of :data:`INTERVAL_STATS` when ``intervals``."""
        array = np.sort(np.fromiter(values, dtype=float))
        if not len(array):
            return cls()
        if np.isnan(array[-1]):  # NaN sorts last
            raise ValueError("NaN in samples")
        cis = {}
        if intervals:
            for name in INTERVAL_STATS:
                if (resampled := bootstrap(array, name)) is not None:
                    cis[name] = interval(resampled)
        data = array.tolist()
        return cls(
            count=len(data),
            mean=mean(data),
            min=data[0],
            p50=percentile(array, 50.0),
            p90=percentile(array, 90.0),
            p95=percentile(array, 95.0),
            p99=percentile(array, 99.0),
            max=data[-1],
            ci95=cis,
        )

    def stat(self, name: str) -> float | None:
        """One statistic by name: ``p50``, ``p90``, ``p95``, ``p99``, ``mean``, ``min``, ``max``."""
        if name not in {"p50", "p90", "p95", "p99", "mean", "min", "max"}:
            raise KeyError(name)
        return getattr(self, name)
