"""Service-level objectives: parsing, run verdicts and per-request checks (pure).

Syntax: ``ttft_p95=500ms,tpot_p95=50ms,e2e_p95=10s,error_rate=1%``. A latency
objective is ``<metric>_<stat>=<duration>`` with metric one of ``ttft``, ``itl``,
``tpot``, ``e2e`` and stat one of ``p50``, ``p90``, ``p95``, ``p99``, ``mean``,
``max``; ``error_rate=<fraction>`` bounds the failed share of measured requests.
Every objective of that syntax is an upper bound (observed <= threshold passes).

A *goodput share* objective (:attr:`Metric.GOODPUT_SHARE`, the sweep's
``min_goodput_share``) is a lower bound on the share of measured requests that met
every per-request objective; it is judged from counts (:func:`judge_share`), not set
with ``--slo``.

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
import functools
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from loadtest.analysis.gaps import GapTable
from loadtest.analysis.stats import Distribution, bootstrap, bootstrap_proportion, interval, mean, percentile
from loadtest.errors import ConfigError, SLOError
from loadtest.units import format_seconds, parse_duration, parse_fraction


class Metric(enum.StrEnum):
    TTFT = "ttft"
    ITL = "itl"
    TPOT = "tpot"
    E2E = "e2e"
    ERROR_RATE = "error_rate"
    GOODPUT_SHARE = "goodput_share"


class Stat(enum.StrEnum):
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"
    MEAN = "mean"
    MAX = "max"


STREAM_ONLY = frozenset({Metric.TTFT, Metric.ITL, Metric.TPOT})
SHARES = frozenset({Metric.ERROR_RATE, Metric.GOODPUT_SHARE})  # fractions of the measured requests


class Objective(BaseModel):
    """One bound: an upper bound in seconds on a latency statistic or a fraction on the
    error rate, or a lower bound on the goodput share (a fraction)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: Metric
    stat: Stat | None = None
    threshold: float

    @property
    def key(self) -> str:
        return self.metric.value if self.stat is None else f"{self.metric.value}_{self.stat.value}"

    @property
    def lower_bound(self) -> bool:
        """Whether the observed figure must be at least the threshold (else at most)."""
        return self.metric is Metric.GOODPUT_SHARE

    def holds(self, observed: float | None) -> bool:
        """Whether ``observed`` meets the bound (an unmeasured figure never does)."""
        if observed is None:
            return False
        return observed >= self.threshold if self.lower_bound else observed <= self.threshold

    def ratio(self, observed: float | None) -> float | None:
        """How far ``observed`` stands from the bound: 1.0 at the threshold, above 1.0
        failing by that factor (``observed / threshold``, for a lower bound ``threshold /
        observed``); ``None`` when unmeasured or, for a lower bound, zero."""
        if observed is None:
            return None
        if self.lower_bound:
            return self.threshold / observed if observed > 0 else None
        return observed / self.threshold

    def format(self, value: float) -> str:
        """A figure of this objective for people: a percentage for shares, else a duration."""
        return f"{value:.2%}" if self.metric in SHARES else format_seconds(value)

    def describe(self) -> str:
        return f"{self.key} {'>=' if self.lower_bound else '<='} {self.format(self.threshold)}"


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

    @property
    def ratio(self) -> float | None:
        """The observed figure against the threshold (:meth:`Objective.ratio`)."""
        return self.objective.ratio(self.observed)

    @property
    def margin(self) -> float | None:
        """``1 - ratio``: the share of the threshold left (0.2 = 20% headroom, -0.1 = 10% over)."""
        ratio = self.ratio
        return None if ratio is None else 1.0 - ratio

    def observed_text(self) -> str:
        """``observed`` for people: a percentage for shares, a duration otherwise."""
        return "-" if self.observed is None else self.objective.format(self.observed)

    def interval_text(self) -> str:
        """``"95% CI 430.0 ms-530.0 ms, holds in 62% of resamples"``, or ``""``."""
        parts = []
        if self.ci_low is not None and self.ci_high is not None:
            parts.append(f"95% CI {self.objective.format(self.ci_low)}-{self.objective.format(self.ci_high)}")
        if self.confidence is not None:
            parts.append(f"holds in {self.confidence:.0%} of resamples")
        return ", ".join(parts)


class SLOReport(BaseModel):
    """Verdicts; ``passed`` and the goodput figures are ``None`` when no objective was set.
    Goodput counts the successful measured requests meeting every per-request objective.
    ``confidence``: how sure ``passed`` is (see :func:`verdict_confidence`)."""

    model_config = ConfigDict(frozen=True)

    objectives: tuple[ObjectiveResult, ...] = ()
    passed: bool | None = None
    confidence: float | None = None
    good_requests: int = 0
    goodput_rps: float | None = None
    goodput_fraction: float | None = None


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
        valid_metrics = [m.value for m in Metric if m not in SHARES]
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
            assert objective.stat is not None, "a goodput share is judged from counts (judge_share)"
            observed = latencies[objective.metric].stat(objective.stat.value)
            if samples is not None and observed is not None:
                resampled = bootstrap(samples[objective.metric], objective.stat.value)
        results.append(_verdict(objective, observed, resampled))
    return tuple(results)


@functools.lru_cache(maxsize=4096)  # seeded, so deterministic; a sweep judges the same counts again and again
def judge_share(objective: Objective, count: int, measured: int) -> ObjectiveResult:
    """The verdict on a share objective (error rate, goodput share) when ``count`` of
    ``measured`` requests are counted, with the proportion bootstrap's interval and
    confidence (unmeasured, so failing, without a measured request)."""
    if objective.metric not in SHARES:
        raise ValueError(f"{objective.key} is not a share of requests")
    if measured <= 0:
        return _verdict(objective, None, None)
    return _verdict(objective, count / measured, bootstrap_proportion(count, measured))


def _verdict(objective: Objective, observed: float | None, resampled: np.ndarray | None) -> ObjectiveResult:
    extra = {}
    if resampled is not None:
        low, high = interval(resampled)
        holds = resampled >= objective.threshold if objective.lower_bound else resampled <= objective.threshold
        extra = {"ci_low": low, "ci_high": high, "confidence": float(np.mean(holds))}
    return ObjectiveResult(objective=objective, observed=observed, passed=objective.holds(observed), **extra)


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
    itl: Sequence[float] | np.ndarray,
    output_tokens: int | None,
) -> bool:
    """Whether one successful request meets every per-request objective.

    A TPOT objective is met by a request with a single output token (no TPOT), as in
    vLLM's goodput, but never by one whose output token count is unknown; a missing
    TTFT or E2E never meets its objective.
    """
    for objective in objectives:
        metric = objective.metric
        if metric in SHARES:
            continue
        if metric is Metric.ITL:
            if len(itl) == 0:
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


def requests_meet(
    objectives: Sequence[Objective],
    *,
    ttft: np.ndarray,
    tpot: np.ndarray,
    e2e: np.ndarray,
    itls: GapTable | None,
    output_known: np.ndarray,
) -> np.ndarray:
    """:func:`request_meets` of many successful requests at once (arrays, ``NaN`` for a
    missing TTFT or TPOT; ``itls``: their gaps, needed with an ITL objective)."""
    meets = np.ones(len(e2e), dtype=bool)
    for objective in objectives:
        metric, threshold = objective.metric, objective.threshold
        if metric in SHARES:
            continue
        if metric is Metric.ITL:
            if itls is None:
                raise ValueError("an ITL objective needs the requests' gaps")
            assert objective.stat is not None
            stat = objective.stat
            meets &= np.array([len(row) == 0 or not _request_stat(row, stat) > threshold for row in itls.rows()],
                              dtype=bool)
        elif metric is Metric.TPOT:
            meets &= output_known & ~(tpot > threshold)  # NaN (no TPOT) compares false: met
        else:
            value = ttft if metric is Metric.TTFT else e2e
            meets &= ~np.isnan(value) & ~(value > threshold)
    return meets


def _request_stat(values: Sequence[float] | np.ndarray, stat: Stat) -> float:
    if stat is Stat.MAX:
        return float(max(values) if isinstance(values, list) else np.max(values))
    if stat is Stat.MEAN:
        return mean(values)
    return percentile(np.sort(np.asarray(values, dtype=float)), float(stat.value[1:]))
