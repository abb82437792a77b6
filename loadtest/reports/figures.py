"""The named headline figures of a stage, shared by the tables, report.md and compare."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadtest.summary import StageSummary
from loadtest.units import format_seconds

LATENCY_STATS = ("p50", "p90", "p95", "p99", "mean", "max")
LATENCIES = ("ttft", "itl", "tpot", "e2e")


@dataclass(frozen=True)
class Figure:
    """A figure: its name, unit (``s``, ``/s``, ``%`` for fractions, ``% of a core``, ``n``,
    ``x``) and how to read it."""

    name: str
    unit: str
    get: Callable[[StageSummary], float | None]
    lower_is_better: bool = True

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


def _latency(metric: str, stat: str) -> Figure:
    return Figure(f"{metric.upper()} {stat}", "s", lambda s: getattr(getattr(s.latency, metric), stat))


LATENCY_FIGURES = tuple(_latency(m, st) for m in LATENCIES for st in LATENCY_STATS)

THROUGHPUT_FIGURES = (
    Figure("requests/s", "/s", lambda s: s.throughput.request_rate, lower_is_better=False),
    Figure("output tok/s", "/s", lambda s: s.throughput.output_tokens_per_s, lower_is_better=False),
    Figure("input tok/s", "/s", lambda s: s.throughput.input_tokens_per_s, lower_is_better=False),
    Figure("total tok/s", "/s", lambda s: s.throughput.total_tokens_per_s, lower_is_better=False),
    Figure("goodput req/s", "/s", lambda s: s.slo.goodput_rps, lower_is_better=False),
)

COUNT_FIGURES = (
    Figure("requests measured", "n", lambda s: s.requests.measured, lower_is_better=False),
    Figure("requests ok", "n", lambda s: s.requests.ok, lower_is_better=False),
    Figure("requests failed", "n", lambda s: s.requests.failed),
    Figure("error rate", "%", lambda s: s.requests.error_rate),
    Figure("generator CPU p90", "% of a core", lambda s: s.generator.cpu_percent_p90),
    Figure("generator CPU s / 1k tok", "x", lambda s: s.generator.cpu_seconds_per_1k_tokens),
)

ALL_FIGURES = LATENCY_FIGURES + THROUGHPUT_FIGURES + COUNT_FIGURES
