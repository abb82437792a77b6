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
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from loadtest.analysis.exact_sums import exact_products, exact_sum

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


def percentiles(values: np.ndarray, qs: Sequence[float], *, overwrite: bool = False) -> list[float]:
    """:func:`percentile` of each of ``qs`` (the same floats, one pass over the values;
    ``overwrite``: the values may be reordered, saving a copy)."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    return np.percentile(values, list(qs), method="linear", overwrite_input=overwrite).tolist()


def mean(values: Sequence[float] | np.ndarray) -> float:
    """Arithmetic mean with compensated summation (matches numpy to rounding)."""
    if len(values) == 0:
        raise ValueError("mean of no values")
    if isinstance(values, np.ndarray):  # fsum's float, without a Python float per value
        return exact_sum(values) / len(values)
    return math.fsum(values) / len(values)


@dataclass(frozen=True)
class Counted:
    """Samples given as values and how many times each occurs, in no order. A
    :class:`Distribution` and :func:`bootstrap` of them equal those of the values
    repeated (the simulator's ITL gaps: each engine step's gap, once per request that
    decoded across it: ~46M samples of an hour, ~450k distinct steps)."""

    values: np.ndarray
    counts: np.ndarray

    def sorted(self) -> SortedCounts:
        return SortedCounts(self)


class SortedCounts:
    """The sorted repetition of a :class:`Counted`, not materialised: element ``i`` is
    the value whose run of copies holds position ``i``."""

    def __init__(self, counted: Counted) -> None:
        order = np.argsort(counted.values, kind="stable")
        counts = np.asarray(counted.counts, dtype=np.int64)[order]
        keep = counts > 0
        self.values = np.asarray(counted.values, dtype=float)[order][keep]
        self.counts = counts[keep]
        self.ends = np.cumsum(self.counts)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The elements at ``positions`` (non-negative) of the sorted repetition."""
        return self.values[np.searchsorted(self.ends, positions, side="right")]

    def expand(self) -> np.ndarray:
        return np.repeat(self.values, self.counts)


def _sorted(data: np.ndarray) -> np.ndarray:
    """``data`` sorted (itself when it already is: a distribution's samples are sorted once)."""
    if len(data) > 1 and not (data[1:] >= data[:-1]).all():
        return np.sort(data)
    return data


def _take(data: np.ndarray | SortedCounts, positions: np.ndarray) -> np.ndarray:
    return data.take(positions) if isinstance(data, SortedCounts) else data[positions]


def bootstrap(
    values: Sequence[float] | np.ndarray | Counted | SortedCounts,
    stat: str,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray | None:
    """``stat`` (``p<q>``, ``min``, ``max`` or ``mean``) of ``resamples`` bootstrap
    resamples of ``values``; ``None`` when not computed (no values, or a mean of more
    than :data:`MAX_MEAN_BOOTSTRAP` values). Counted values resample as their sorted
    repetition."""
    if isinstance(values, Counted):
        values = values.sorted()
    data = values if isinstance(values, SortedCounts) else np.asarray(values, dtype=float)
    n = len(data)
    if n == 0 or (stat == "mean" and n > MAX_MEAN_BOOTSTRAP):
        return None
    rng = np.random.default_rng(seed)
    if stat == "mean":
        if isinstance(data, SortedCounts):
            data = data.expand()
        out = np.empty(resamples)
        batch = max(1, _BATCH_VALUES // n)
        for first in range(0, resamples, batch):
            size = min(batch, resamples - first)
            out[first : first + size] = data[rng.integers(0, n, size=(size, n))].mean(axis=1)
        return out
    if not isinstance(data, SortedCounts):
        data = _sorted(data)
    q = {"min": 0.0, "max": 100.0}.get(stat)
    q = float(stat[1:]) if q is None else q
    position = (n - 1) * q / 100.0
    k = math.floor(position) + 1  # the 1-based rank below the percentile
    weight = position - (k - 1)
    u = rng.beta(k, n - k + 1, size=resamples)
    low = _take(data, np.minimum((u * n).astype(np.int64), n - 1))
    if weight == 0.0 or k == n:
        return low
    u_next = u + (1.0 - u) * rng.beta(1, n - k, size=resamples)
    high = _take(data, np.minimum((u_next * n).astype(np.int64), n - 1))
    return low + (high - low) * weight


def linear_percentiles(data: SortedCounts, qs: Sequence[float]) -> list[float]:
    """:func:`percentiles` of a sorted repetition, by numpy's own steps for its
    ``linear`` method (``numpy.lib._function_base_impl._quantile``: virtual index,
    neighbours, ``_lerp``), so the same floats as on the materialised array."""
    n = len(data)
    quantiles = np.true_divide(np.asarray(qs, dtype=float), 100)
    virtual = (n - 1) * quantiles
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = n - 1  # numpy: index -1, and gamma from -1 (below: a == b, the gamma is moot)
    following[above] = n - 1
    gamma = virtual - np.where(above, -1.0, previous)
    a = data.take(previous.astype(np.intp))
    b = data.take(following.astype(np.intp))
    diff = b - a
    result = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=result, where=gamma >= 0.5)
    return result.tolist()


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


def intervals_of(samples: np.ndarray | SortedCounts) -> dict[str, tuple[float, float]]:
    """The 95% bootstrap interval of each of :data:`INTERVAL_STATS` that has one."""
    return {name: interval(resampled) for name in INTERVAL_STATS
            if (resampled := bootstrap(samples, name)) is not None}


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
    def of(cls, values: Iterable[float] | Counted, *, intervals: bool = False) -> Distribution:
        """The distribution of ``values`` (NaN values are not allowed), with the 95%
        bootstrap intervals of :data:`INTERVAL_STATS` when ``intervals``."""
        if isinstance(values, Counted):
            return cls._of_counted(values.sorted(), intervals=intervals)
        if isinstance(values, np.ndarray):
            array = np.sort(values.astype(float, copy=False))
        else:
            array = np.sort(np.fromiter(values, dtype=float))
        if not len(array):
            return cls()
        if np.isnan(array[-1]):  # NaN sorts last
            raise ValueError("NaN in samples")
        cis = intervals_of(array) if intervals else {}
        count, average, low, high = len(array), mean(array), float(array[0]), float(array[-1])
        p50, p90, p95, p99 = percentiles(array, (50.0, 90.0, 95.0, 99.0), overwrite=True)  # array is ours, used up
        return cls(count=count, mean=average, min=low, p50=p50, p90=p90, p95=p95, p99=p99, max=high, ci95=cis)

    @classmethod
    def _of_counted(cls, data: SortedCounts, *, intervals: bool) -> Distribution:
        n = len(data)
        if not n:
            return cls()
        if np.isnan(data.values[-1]):  # NaN sorts last
            raise ValueError("NaN in samples")
        cis = intervals_of(data) if intervals else {}
        average = math.fsum(exact_products(data.values, data.counts)) / n
        p50, p90, p95, p99 = linear_percentiles(data, (50.0, 90.0, 95.0, 99.0))
        return cls(count=n, mean=average, min=float(data.values[0]), p50=p50, p90=p90, p95=p95, p99=p99,
                   max=float(data.values[-1]), ci95=cis)

    def stat(self, name: str) -> float | None:
        """One statistic by name: ``p50``, ``p90``, ``p95``, ``p99``, ``mean``, ``min``, ``max``."""
        if name not in {"p50", "p90", "p95", "p99", "mean", "min", "max"}:
            raise KeyError(name)
        return getattr(self, name)
