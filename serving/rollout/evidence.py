"""What one version served during a step, and its confidence intervals (pure).

Counts come from the gateway's Prometheus series (requests by status, the TTFT and TPOT
histograms); a window is the difference of two scrapes. A p95's interval is read off
the histogram by order statistics: among ``n`` observations the true 95th percentile
lies, with 95% confidence, between the ranks ``n q -/+ z sqrt(n q (1 - q))``, and the
buckets holding those ranks bound it (conservatively: a bucket's lower and upper edge)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95% interval."""

    value: float
    low: float
    high: float

    def describe(self, unit: str = "") -> str:
        if unit == "%":
            return f"{self.value:.1%} [{self.low:.1%}, {self.high:.1%}]"
        return f"{self.value:.3g}{unit} [{self.low:.3g}, {self.high:.3g}]"


def wilson(successes: int, trials: int, z: float = Z95) -> Interval:
    """The Wilson score interval of a proportion (no trials: the whole [0, 1])."""
    if trials <= 0:
        return Interval(0.0, 0.0, 1.0)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


Buckets = tuple[tuple[float, float], ...]
"""A histogram as cumulative ``(upper edge, count)`` pairs, ascending, ending at +Inf."""


@dataclass(frozen=True)
class VersionCounts:
    """One version's cumulative series (or a window of them)."""

    requests: int = 0
    errors: int = 0
    ttft: Buckets = ()
    tpot: Buckets = ()
    in_flight: int = 0

    def since(self, before: "VersionCounts") -> "VersionCounts":
        """The window from ``before`` to this scrape (a replica restarted: counts from 0)."""
        if self.requests < before.requests:
            return self
        return VersionCounts(self.requests - before.requests, self.errors - before.errors,
                             _minus(self.ttft, before.ttft), _minus(self.tpot, before.tpot), self.in_flight)

    @property
    def error_rate(self) -> Interval:
        return wilson(self.errors, self.requests)


@dataclass(frozen=True)
class Evidence:
    """Both versions' windows for one step, and the quality probe's scores (correct,
    items) when it ran."""

    stable: VersionCounts
    canary: VersionCounts
    quality: dict[str, tuple[int, int]] = field(default_factory=dict)  # "stable" / "canary"


def _minus(after: Buckets, before: Buckets) -> Buckets:
    if not before:
        return after
    earlier = dict(before)
    return tuple((edge, count - earlier.get(edge, 0.0)) for edge, count in after)


def quantile(buckets: Buckets, q: float = 0.95, z: float = Z95) -> Interval | None:
    """The ``q`` quantile of a cumulative histogram with its 95% interval (None: no
    observations). The point is the upper edge of the bucket holding rank ``n q``."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    n = buckets[-1][1]
    spread = z * math.sqrt(n * q * (1 - q))
    rank = max(1.0, math.ceil(n * q))
    low_rank, high_rank = max(1.0, math.floor(n * q - spread)), min(n, math.ceil(n * q + spread) + 1)
    return Interval(_upper_edge(buckets, rank), _lower_edge(buckets, low_rank), _upper_edge(buckets, high_rank))


def _upper_edge(buckets: Buckets, rank: float) -> float:
    return next(edge for edge, count in buckets if count >= rank)


def _lower_edge(buckets: Buckets, rank: float) -> float:
    previous = 0.0
    for edge, count in buckets:
        if count >= rank:
            return previous
        previous = edge
    return previous
