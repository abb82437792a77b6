"""Service-level objectives: parsing, run verdicts and per-request checks (pure).

Syntax: ``ttft_p95=500ms,tpot_p95=50ms,e2e_p95=10s,error_rate=1%``. A latency
objective is ``<metric>_<stat>=<duration>`` with metric one of ``ttft``, ``itl``,
``tpot``, ``e2e`` and stat one of ``p50``, ``p90``, ``p95``, ``p99``, ``mean``,
``max``; ``error_rate=<fraction>`` bounds the failed share of measured requests.
Every objective is an upper bound (observed <= threshold passes).

For goodput each latency objective also applies to every single request: its TTFT,
TPOT or E2E must be <= the threshold whatever the stat; for ITL the request's own
stat over its inter-chunk gaps is compared (a request with no gap meets it).

Each verdict carries the 95% bootstrap interval of its observed statistic and a
confidence: the fraction of bootstrap resamples in which the objective holds (see
:mod:`loadtest.analysis.stats`). Near the threshold a single sample is a coin toss; the
confidence says how much of one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from loadtest.errors import ConfigError, SLOError
from loadtest.analysis.stats import Distribution, bootstrap, bootstrap_proportion, interval, mean, percentile
from loadtest.units import format_seconds, parse_duration, parse_fraction


class Metric(enum.StrEnum):
    TTFT = "ttft"
    ITL = "itl"
    TPOT = "tpot"
    E2E = "e2e"
    ERROR_RATE = "error_rate"


class Stat(enum.StrEnum):
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"
    MEAN = "mean"
    MAX = "max"


STREAM_ONLY = frozenset({Metric.TTFT, Metric.ITL, Metric.TPOT})


class Objective(BaseModel):
    """One upper bound: seconds for latency metrics, a fraction for ``error_rate``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: Metric
    stat: Stat | None = None
    threshold: float

    @property
    def key(self) -> str:
        return self.metric.value if self.stat is None else f"{self.metric.value}_{self.stat.value}"

    def describe(self) -> str:
        if self.metric is Metric.ERROR_RATE:
            return f"{self.key} <= {self.threshold:.2%}"
        return f"{self.key} <= {format_seconds(self.threshold)}"


class ObjectiveResult(BaseModel):
    """The verdict on one objective. ``observed`` is ``None`` when nothing could be measured
    (then the objective fails). ``ci_low``/``ci_high``: the 95% bootstrap interval of the
    observed statistic; ``confidence``: the fraction of bootstrap resamples in which the
    objective holds (all ``None`` when not computed)."""

    model_config = ConfigDict(frozen=True)

    objective: Objective
    observed: float | None
    passed: bool
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None

    def _format(self, value: float) -> str:
        if self.objective.metric is Metric.ERROR_RATE:
            return f"{value:.2%}"
        return format_seconds(value)

    def observed_text(self) -> str:
        """``observed`` for people: a percentage for the error rate, a duration otherwise."""
        return "-" if self.observed is None else self._format(self.observed)

    def interval_text(self) -> str:
        """``"95% CI 430.0 ms-530.0 ms, holds in 62% of resamples"``, or ``""``."""
        parts = []
        if self.ci_low is not None and self.ci_high is not None:
            parts.append(f"95% CI {self._format(self.ci_low)}-{self._format(self.ci_high)}")
        if self.confidence is not None:
            parts.append(f"holds in {self.confidence:.0%} of resamples")
        return ", ".join(parts)


def parse_slos(text: str | None) -> tuple[Objective, ...]:
    """Parse an SLO string; an empty or ``None`` string means no objectives."""
    if text is None or not text.strip():
        return ()
    objectives: list[Objective] = []
    seen: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise SLOError(f"SLO {item!r} needs a threshold, e.g. ttft_p95=500ms")
        if key in seen:
            raise SLOError(f"SLO {key!r} given twice")
        seen.add(key)
        objectives.append(_parse_one(key, value.strip()))
    return tuple(objectives)


def _parse_one(key: str, value: str) -> Objective:
    try:
        if key == Metric.ERROR_RATE.value:
            return Objective(metric=Metric.ERROR_RATE, threshold=parse_fraction(value))
        metric_name, _, stat_name = key.rpartition("_")
        valid_metrics = [m.value for m in Metric if m is not Metric.ERROR_RATE]
        if metric_name not in valid_metrics or stat_name not in [s.value for s in Stat]:
            raise SLOError(
                f"unknown SLO {key!r}; use <metric>_<stat> with metric in {valid_metrics} "
                f"and stat in {[s.value for s in Stat]}, or error_rate"
            )
        threshold = parse_duration(value)
    except ConfigError as exc:
        raise SLOError(str(exc)) from None
    if threshold <= 0:
        raise SLOError(f"SLO {key!r} threshold must be > 0")
    return Objective(metric=Metric(metric_name), stat=Stat(stat_name), threshold=threshold)


def check_applicable(objectives: Sequence[Objective], *, streaming: bool) -> None:
    """Raise :class:`SLOError` for objectives a non-streamed run cannot measure."""
    if streaming:
        return
    bad = [o.key for o in objectives if o.metric in STREAM_ONLY]
    if bad:
        raise SLOError(f"{', '.join(bad)} need streamed responses (drop --no-stream)")


def evaluate(
    objectives: Sequence[Objective],
    latencies: Mapping[Metric, Distribution],
    error_rate: float | None,
    *,
    samples: Mapping[Metric, Sequence[float]] | None = None,
    measured: int | None = None,
) -> tuple[ObjectiveResult, ...]:
    """Verdicts of the run figures against every objective; with the raw latency
    ``samples`` and the ``measured`` request count, each verdict gets its bootstrap
    interval and confidence."""
    results = []
    for objective in objectives:
        resampled = None
        if objective.metric is Metric.ERROR_RATE:
            observed = error_rate
            if error_rate is not None and measured:
                resampled = bootstrap_proportion(round(error_rate * measured), measured)
        else:
            assert objective.stat is not None
            observed = latencies[objective.metric].stat(objective.stat.value)
            if samples is not None and observed is not None:
                resampled = bootstrap(samples[objective.metric], objective.stat.value)
        passed = observed is not None and observed <= objective.threshold
        extra = {}
        if resampled is not None:
            low, high = interval(resampled)
            extra = {"ci_low": low, "ci_high": high, "confidence": float(np.mean(resampled <= objective.threshold))}
        results.append(ObjectiveResult(objective=objective, observed=observed, passed=passed, **extra))
    return tuple(results)


def verdict_confidence(results: Sequence[ObjectiveResult]) -> float | None:
    """How sure the overall verdict is. A pass: the lowest objective confidence (all
    objectives hold together at most that often). A fail: the highest share of resamples
    in which a failed objective fails (at least that often). ``None`` when unknown."""
    if not results:
        return None
    if all(r.passed for r in results):
        confidences = [r.confidence for r in results if r.confidence is not None]
        return min(confidences) if len(confidences) == len(results) else None
    failing = [
        1.0 if r.observed is None else 1.0 - r.confidence
        for r in results
        if not r.passed and (r.observed is None or r.confidence is not None)
    ]
    return max(failing) if failing else None


def request_meets(
    objectives: Sequence[Objective],
    *,
    ttft: float | None,
    tpot: float | None,
    e2e: float | None,
    itl: Sequence[float],
    output_tokens: int | None,
) -> bool:
    """Whether one successful request meets every per-request objective.

    A TPOT objective is met by a request with a single output token (no TPOT), as in
    vLLM's goodput, but never by one whose output token count is unknown; a missing
    TTFT or E2E never meets its objective.
    """
    for objective in objectives:
        metric = objective.metric
        if metric is Metric.ERROR_RATE:
            continue
        if metric is Metric.ITL:
            if not itl:
                continue
            assert objective.stat is not None
            value = _request_stat(itl, objective.stat)
        elif metric is Metric.TPOT:
            if output_tokens is None:
                return False
            if tpot is None:
                continue
            value = tpot
        else:
            value = ttft if metric is Metric.TTFT else e2e
            if value is None:
                return False
        if value > objective.threshold:
            return False
    return True


def _request_stat(values: Sequence[float], stat: Stat) -> float:
    if stat is Stat.MAX:
        return max(values)
    if stat is Stat.MEAN:
        return mean(values)
    return percentile(sorted(values), float(stat.value[1:]))
