"""The named headline figures of a stage, shared by the tables, report.md and compare.

Each figure may say how noisy it is: the relative half-width of its 95% interval in that
stage. Latency percentiles take it from their bootstrap intervals; rates and counts from
counting noise (``1.96 / sqrt(n)`` for ``n`` counted requests: tokens come in requests,
so the request count sets their noise too); the error rate from its binomial interval.
Figures without a noise estimate (max, generator CPU) have none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from loadtest.analysis.summary import StageSummary
from loadtest.units import format_seconds

LATENCY_STATS = ("p50", "p90", "p95", "p99", "mean", "max")
LATENCIES = ("ttft", "itl", "tpot", "e2e")
Z95 = 1.96


@dataclass(frozen=True)
class Figure:
    """A figure: its name, unit (``s``, ``/s``, ``%`` for fractions, ``% of a core``, ``n``,
    ``x``), how to read it and (optionally) its relative 95% half-width in a stage."""

    name: str
    unit: str
    get: Callable[[StageSummary], float | None]
    lower_is_better: bool = True
    noise: Callable[[StageSummary], float | None] = lambda _: None

    def format(self, value: float | None) -> str:
        if value is None:
            return "-"
        if self.unit == "s":
            return format_seconds(value)
        if self.unit == "%":
            return f"{value:.1%}"
        if self.unit == "% of a core":
            return f"{value:.0f}%"
        if self.unit == "n":
            return f"{value:.0f}"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def counting_noise(n: float | None) -> float | None:
    """Relative 95% half-width of a count of ``n`` independent events."""
    return Z95 / math.sqrt(n) if n else None


def _latency(metric: str, stat: str) -> Figure:
    def noise(s: StageSummary) -> float | None:
        dist = getattr(s.latency, metric)
        value, ci = dist.stat(stat), dist.ci95.get(stat)
        return (ci[1] - ci[0]) / 2 / abs(value) if ci and value else None

    return Figure(f"{metric.upper()} {stat}", "s", lambda s: getattr(getattr(s.latency, metric), stat), noise=noise)


def _error_noise(s: StageSummary) -> float | None:
    p, n = s.requests.error_rate, s.requests.measured
    return Z95 * math.sqrt(p * (1 - p) / n) / p if p and n else None


def _completed(s: StageSummary) -> float | None:
    rate = s.throughput.completed_rate
    return None if rate is None else rate * s.window.duration_s


def _ok(s: StageSummary) -> float | None:
    return counting_noise(s.requests.ok)


LATENCY_FIGURES = tuple(_latency(m, st) for m in LATENCIES for st in LATENCY_STATS)

THROUGHPUT_FIGURES = (
    Figure("requests/s (started)", "/s", lambda s: s.throughput.request_rate, False, _ok),
    Figure("requests/s (completed)", "/s", lambda s: s.throughput.completed_rate, False,
           lambda s: counting_noise(_completed(s))),
    Figure("output tok/s", "/s", lambda s: s.throughput.output_tokens_per_s, False, _ok),
    Figure("input tok/s", "/s", lambda s: s.throughput.input_tokens_per_s, False, _ok),
    Figure("total tok/s", "/s", lambda s: s.throughput.total_tokens_per_s, False, _ok),
    Figure("goodput req/s", "/s", lambda s: s.slo.goodput_rps, False, lambda s: counting_noise(s.slo.good_requests)),
)  # fmt: skip

COUNT_FIGURES = (
    Figure("requests measured", "n", lambda s: s.requests.measured, False,
           lambda s: counting_noise(s.requests.measured)),
    Figure("requests ok", "n", lambda s: s.requests.ok, False, _ok),
    Figure("requests failed", "n", lambda s: s.requests.failed, noise=lambda s: counting_noise(s.requests.failed)),
    Figure("error rate", "%", lambda s: s.requests.error_rate, noise=_error_noise),
    Figure("generator CPU p90", "% of a core", lambda s: s.generator.cpu_percent_p90),
    Figure("generator CPU s / 1k tok", "x", lambda s: s.generator.cpu_seconds_per_1k_tokens),
)  # fmt: skip

ALL_FIGURES = LATENCY_FIGURES + THROUGHPUT_FIGURES + COUNT_FIGURES
