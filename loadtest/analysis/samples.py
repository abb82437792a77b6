"""The figures any set of requests has, a stage's or a group's (pure): latency samples,
client cancellations, goodput and SLO verdicts.

:func:`loadtest.analysis.metrics.build_stage` computes a stage's from them, and
:mod:`loadtest.analysis.per_group` those of each model, tenant or priority class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from loadtest.analysis.columns import NONE, RecordColumns
from loadtest.analysis.records import ErrorKind
from loadtest.analysis.slo import Metric, Objective, SLOReport, evaluate, requests_meet, verdict_confidence
from loadtest.analysis.stats import MAX_MEAN_BOOTSTRAP, Counted, Distribution


def tpots(ok: RecordColumns) -> tuple[np.ndarray, np.ndarray]:
    """Which records have a TPOT (``(e2e - ttft) / (output_tokens - 1)``) and, for those,
    its value."""
    defined = ~np.isnan(ok.ttft_s) & (ok.output_tokens >= 2)
    values = np.maximum(ok.e2e_s[defined] - ok.ttft_s[defined], 0.0) / (ok.output_tokens[defined] - 1)
    return defined, values


def latency_samples(ok: RecordColumns) -> dict[Metric, np.ndarray | Counted]:
    """The raw latency samples of successful requests, by metric, in record order; but
    ITL samples whose rows share gaps (the simulator's: tens of millions of samples over
    far fewer values) come :class:`Counted` when there are more than
    :data:`MAX_MEAN_BOOTSTRAP` (every figure of that many sorts them, none resamples
    their mean)."""
    ttft = ok.ttft_s[~np.isnan(ok.ttft_s)]
    gaps = ok.gaps
    shared = gaps.total > max(len(gaps.values), MAX_MEAN_BOOTSTRAP)
    itl = gaps.value_counts() if shared else gaps.flat()
    return {Metric.TTFT: ttft, Metric.ITL: itl, Metric.TPOT: tpots(ok)[1], Metric.E2E: ok.e2e_s}


def client_cancelled(c: RecordColumns) -> int:
    """Requests the client abandoned on purpose (``--cancel``): neither ok nor failed."""
    return sum(k is ErrorKind.CLIENT_CANCELLED for k in c.error_kind)


def good_requests(objectives: Sequence[Objective], ok: RecordColumns) -> int:
    """Successful requests meeting every per-request objective (:func:`requests_meet`)."""
    defined, values = tpots(ok)
    tpot = np.full(len(ok), np.nan)
    tpot[defined] = values
    itls = ok.gaps if any(o.metric is Metric.ITL for o in objectives) else None
    meets = requests_meet(objectives, ttft=ok.ttft_s, tpot=tpot, e2e=ok.e2e_s, itls=itls,
                          output_known=ok.output_tokens != NONE)
    return int(meets.sum())


def slo_report(
    objectives: Sequence[Objective],
    ok: RecordColumns,
    samples: dict[Metric, np.ndarray | Counted],
    figures: Mapping[Metric, Distribution],
    error_rate: float | None,
    measured: int,
    window_s: float,
) -> SLOReport:
    """The verdicts on ``objectives`` of ``measured`` requests (``ok``: the successful
    ones, their ``samples`` and latency ``figures``) and their goodput over ``window_s``."""
    good = good_requests(objectives, ok)
    if not objectives:  # goodput is only defined against objectives
        return SLOReport(good_requests=good)
    results = evaluate(objectives, dict(figures), error_rate, samples=samples, measured=measured)
    return SLOReport(
        objectives=results,
        passed=all(r.passed for r in results),
        confidence=verdict_confidence(results),
        good_requests=good,
        goodput_rps=good / window_s if window_s > 0 else None,
        goodput_fraction=good / measured if measured else None,
    )
