"""Stage figures from raw records: latency, throughput, tokens, SLOs, goodput (pure).

Measured requests are those that *started* inside the measured window (after the
warm-up, before the cool-down). Latency figures use the successful measured ones; a
failed request only counts in the error figures. TPOT of a request is
``(e2e - ttft) / (output_tokens - 1)`` (requests with one output token have none).
Rates divide by the window's length: ``[warm-up, duration - cool-down]`` for timed
runs (ending earlier if the last measured request ended earlier), or from the first
measured start to the last measured end for runs bounded by a request count.
``request_rate`` counts successful measured requests (by start); ``completed_rate``
counts successful requests completing inside the window (as vLLM does).

A stage's measurement is invalid (:func:`stage_validity`) when its arrivals left late,
the client's concurrency cap was hit, the generator was CPU-saturated or its event loop
lagged, or due arrivals were never sent; an invalid stage never passes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from loadtest.analysis.arrivals import arrivals_of
from loadtest.analysis.gaps import GapTable
from loadtest.analysis.records import RequestRecord, TokenSource
from loadtest.analysis.server_metrics import ServerSample, counter_delta
from loadtest.analysis.slo import Metric, Objective, evaluate, request_meets, verdict_confidence
from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import (
    GeneratorReport,
    Latency,
    RateSearchReport,
    RequestCounts,
    SLOReport,
    StageServer,
    StageSummary,
    SweepPoint,
    Throughput,
    Tokens,
    Validity,
    Window,
)
from loadtest.analysis.timeline import (
    bin_width,
    emissions_of,
    prompt_tokens_between,
    time_bins,
    tokens_between,
)
from loadtest.profiles import OpenLoad, StagePlan

MAX_LATE_FRACTION = 0.05  # more late arrivals than this: the schedule was not kept
LOOP_LAG_LIMIT_S = 0.1  # generator event-loop lag (p99) beyond which timings are suspect
MAX_DROPPED_FRACTION = 0.03  # due arrivals never sent: the offered rate was not delivered


def request_tpot(record: RequestRecord) -> float | None:
    """Time per output token after the first, or ``None`` when undefined."""
    if record.ttft_s is None or record.output_tokens is None or record.output_tokens < 2:
        return None
    return max(record.e2e_s - record.ttft_s, 0.0) / (record.output_tokens - 1)


def split_by_window(
    records: Sequence[RequestRecord], start: float, end: float
) -> tuple[list[RequestRecord], int, int]:
    """(measured records, started before the window, started at or after its end)."""
    measured = [r for r in records if start <= r.start_s < end]
    before = sum(1 for r in records if r.start_s < start)
    after = sum(1 for r in records if r.start_s >= end)
    return measured, before, after


def measured_window(
    measured: Sequence[RequestRecord], start: float, end: float, *, timed: bool
) -> Window:
    """The window the rates divide by (see the module docstring)."""
    if not measured:
        stop = start if math.isinf(end) else end
        return Window(start_s=start, end_s=stop, duration_s=max(stop - start, 0.0))
    last_end = max(r.end_s for r in measured)
    if timed:
        lo, hi = start, min(end, last_end)
    else:
        lo, hi = max(start, min(r.start_s for r in measured)), last_end
    return Window(start_s=lo, end_s=hi, duration_s=max(hi - lo, 0.0))


def latency_samples(ok: Sequence[RequestRecord], gaps: GapTable | None = None) -> dict[Metric, Sequence[float]]:
    """The raw latency samples of successful requests, by metric (``gaps``: their gaps,
    one row per record; default: each record's ``itl_s``). ITL's are an array."""
    return {
        Metric.TTFT: [r.ttft_s for r in ok if r.ttft_s is not None],
        Metric.ITL: (GapTable.of_records(ok) if gaps is None else gaps).values,
        Metric.TPOT: [t for r in ok if (t := request_tpot(r)) is not None],
        Metric.E2E: [r.e2e_s for r in ok],
    }


def latency_of(samples: dict[Metric, list[float]]) -> Latency:
    """Latency distributions with their bootstrap intervals."""
    return Latency(**{m.value: Distribution.of(samples[m], intervals=True) for m in samples})


def tokens_of(ok: Sequence[RequestRecord]) -> Tokens:
    sources = Counter(r.token_source for r in ok)
    return Tokens(
        prompt_total=sum(r.prompt_tokens or 0 for r in ok),
        output_total=sum(r.output_tokens or 0 for r in ok),
        from_usage=sources[TokenSource.USAGE],
        from_tokenizer=sources[TokenSource.TOKENIZER],
        unknown=sources[TokenSource.NONE],
        output_len=Distribution.of(r.output_tokens for r in ok if r.output_tokens is not None),
        output_len_mismatches=sum(
            1
            for r in ok
            if r.requested_output_tokens is not None
            and r.output_tokens is not None
            and r.output_tokens != r.requested_output_tokens
        ),
        prompt_len_mismatches=sum(
            1
            for r in ok
            if r.expected_prompt_tokens is not None
            and r.token_source is TokenSource.USAGE
            and r.prompt_tokens != r.expected_prompt_tokens
        ),
    )


def slo_report(
    objectives: Sequence[Objective],
    ok: Sequence[RequestRecord],
    samples: dict[Metric, list[float]],
    latency: Latency,
    counts: RequestCounts,
    window_s: float,
    gaps: GapTable | None = None,
) -> SLOReport:
    """Goodput and the verdicts (``gaps``: the ``ok`` records' gaps, one row per record;
    default: each record's ``itl_s``)."""
    if gaps is None or not any(o.metric is Metric.ITL for o in objectives):
        itls: Sequence[Sequence[float]] = [r.itl_s for r in ok] if gaps is None else [()] * len(ok)
    else:
        itls = [gaps.row(i) for i in range(len(ok))]
    good = sum(
        1
        for r, itl in zip(ok, itls)
        if request_meets(
            objectives, ttft=r.ttft_s, tpot=request_tpot(r), e2e=r.e2e_s, itl=itl, output_tokens=r.output_tokens
        )
    )
    if not objectives:  # goodput is only defined against objectives
        return SLOReport(good_requests=good)
    figures = {m: getattr(latency, m.value) for m in samples}
    results = evaluate(objectives, figures, counts.error_rate, samples=samples, measured=counts.measured)
    return SLOReport(
        objectives=results,
        passed=all(r.passed for r in results),
        confidence=verdict_confidence(results),
        good_requests=good,
        goodput_rps=good / window_s if window_s > 0 else None,
        goodput_fraction=good / counts.measured if counts.measured else None,
    )


def stage_server(samples: Sequence[ServerSample]) -> StageServer:
    """Counter increases and gauge peaks over a stage's scrapes."""
    queries = counter_delta(samples, "prefix_cache_queries_total")
    hits = counter_delta(samples, "prefix_cache_hits_total")

    def peak(field: str) -> float | None:
        values = [getattr(s, field) for s in samples if getattr(s, field) is not None]
        return max(values) if values else None

    return StageServer(
        prompt_tokens_delta=counter_delta(samples, "prompt_tokens_total"),
        generation_tokens_delta=counter_delta(samples, "generation_tokens_total"),
        prefix_cache_hit_rate=(hits / queries) if hits is not None and queries else None,
        queue_depth_max=peak("queue_depth"),
        kv_cache_usage_max=peak("kv_cache_usage_max"),
        replicas_ready_max=peak("replicas_ready"),
    )


def build_stage(
    records: Sequence[RequestRecord],
    *,
    plan: StagePlan,
    window: tuple[float, float],
    timed: bool,
    objectives: Sequence[Objective],
    started_unix: float,
    offset_s: float,
    generator: GeneratorReport,
    server_samples: Sequence[ServerSample] = (),
    max_error_rate: float | None = None,
    duration_s: float | None = None,
    max_requests: int | None = None,
    gaps: GapTable | None = None,
) -> StageSummary:
    """Every figure of one stage from its raw records. ``duration_s`` and ``max_requests``
    are the stage's load limits (they decide how many arrivals were due). ``gaps``: the
    records' inter-chunk gaps as one table (one row per record, in order; then their
    ``itl_s`` is not read), else each record's ``itl_s``."""
    gaps = GapTable.of_records(records) if gaps is None else gaps
    if len(gaps) != len(records):
        raise ValueError(f"{len(gaps)} gap rows for {len(records)} records")
    start, end = window
    ok_rows = np.fromiter((r.ok and start <= r.start_s < end for r in records), dtype=bool, count=len(records))
    ok_gaps = gaps.select(ok_rows)
    measured, before, after = split_by_window(records, *window)
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    win = measured_window(measured, *window, timed=timed)
    samples = latency_samples(ok, ok_gaps)
    latency = latency_of(samples)
    per_s = (lambda x: x / win.duration_s) if win.duration_s > 0 else (lambda x: None)
    emissions = emissions_of(records, gaps)
    out_tokens = tokens_between(records, win.start_s, win.end_s, emissions=emissions)
    in_tokens = prompt_tokens_between(records, win.start_s, win.end_s)
    completed = sum(1 for r in records if r.ok and win.start_s <= r.end_s <= win.end_s)
    throughput = Throughput(
        request_rate=per_s(len(ok)),
        completed_rate=per_s(completed),
        output_tokens_per_s=per_s(out_tokens),
        input_tokens_per_s=per_s(in_tokens),
        total_tokens_per_s=per_s(out_tokens + in_tokens),
    )
    all_output = sum(r.output_tokens or 0 for r in records if r.ok)
    if generator.cpu_seconds_load is not None and all_output:
        generator = generator.model_copy(
            update={"cpu_seconds_per_1k_tokens": generator.cpu_seconds_load / (all_output / 1000.0)}
        )
    counts = RequestCounts(
        sent=len(records),
        measured=len(measured),
        ok=len(ok),
        failed=len(failed),
        excluded_warmup=before,
        excluded_cooldown=after,
        errors=dict(sorted(Counter(r.error_kind for r in failed if r.error_kind).items())),
        error_rate=len(failed) / len(measured) if measured else None,
    )
    slo = slo_report(objectives, ok, samples, latency, counts, win.duration_s, ok_gaps)
    load = plan.load if isinstance(plan.load, OpenLoad) else None
    arrivals = arrivals_of(records, load, duration_s=duration_s if timed else None, max_requests=max_requests)
    span = max((r.end_s for r in records), default=0.0)
    stage = StageSummary(
        index=plan.index,
        label=plan.label,
        plan=plan,
        started_unix=started_unix,
        offset_s=offset_s,
        window=win,
        requests=counts,
        latency=latency,
        throughput=throughput,
        tokens=tokens_of(ok),
        slo=slo,
        arrivals=arrivals,
        generator=generator,
        server=stage_server(server_samples),
        timeline=time_bins(records, bin_width(span), emissions=emissions),
    )
    passed, reason = stage_verdict(stage, max_error_rate=max_error_rate)
    return stage.model_copy(update={"validity": stage_validity(stage), "passed": passed, "verdict_reason": reason})


def stage_validity(stage: StageSummary) -> Validity:
    """Whether the stage measured what it claims (see the module docstring)."""
    reasons = []
    a, g = stage.arrivals, stage.generator
    if a.scheduled and a.late / a.scheduled > MAX_LATE_FRACTION:
        reasons.append(f"{a.late / a.scheduled:.0%} of arrivals left more than {a.late_threshold_s * 1e3:.0f} ms late")
    if a.slot_waits:
        reasons.append(
            f"client concurrency cap hit: {a.slot_waits} arrivals waited for one of the "
            f"{a.max_concurrency or '?'} slots (raise max_concurrency)"
        )
    if g.saturated:
        cpu = "" if g.cpu_percent_p90 is None else f" (p90 {g.cpu_percent_p90:.0f}% of a core)"
        reasons.append(f"load generator CPU-saturated{cpu}")
    if g.loop_lag_p99_s is not None and g.loop_lag_p99_s > LOOP_LAG_LIMIT_S:
        reasons.append(
            f"generator event loop lagged (p99 {g.loop_lag_p99_s * 1e3:.0f} ms > {LOOP_LAG_LIMIT_S * 1e3:.0f} ms)"
        )
    if a.due and a.dropped / a.due > MAX_DROPPED_FRACTION:
        reasons.append(
            f"{a.dropped} of {a.due} due arrivals never sent (achieved {a.achieved_rate or 0:.3g} req/s)"
        )
    return Validity(valid=not reasons, reasons=tuple(reasons))


def stage_verdict(stage: StageSummary, *, max_error_rate: float | None) -> tuple[bool | None, str]:
    """Pass/fail of a stage: its SLOs and (when given) an error-rate bound; ``None`` when
    neither is set. An invalid measurement never passes: it fails with the reason
    ``"invalid measurement: ..."``."""
    validity = stage_validity(stage)
    invalid = "invalid measurement: " + "; ".join(validity.reasons) if not validity.valid else ""
    if stage.slo.passed is None and max_error_rate is None:
        return None, invalid
    if invalid:
        return False, invalid
    reasons = [f"{r.objective.key} missed" for r in stage.slo.objectives if not r.passed]
    if max_error_rate is not None:
        rate = stage.requests.error_rate
        if rate is None or rate > max_error_rate:
            reasons.append(f"error rate {rate if rate is not None else 1:.1%} > {max_error_rate:.1%}")
    return not reasons, "; ".join(reasons)


def achieved_rate(stage: StageSummary) -> float | None:
    """Arrivals per second actually sent (open loops), else measured requests per
    second of the measured window."""
    if stage.arrivals.achieved_rate is not None:
        return stage.arrivals.achieved_rate
    if stage.window.duration_s <= 0:
        return None
    return stage.requests.measured / stage.window.duration_s


def rate_search_report(stages: Sequence[StageSummary]) -> RateSearchReport:
    """The sweep's points (sorted by offered rate) and the best passing rate."""
    points = []
    for s in stages:
        if s.plan.offered_rate is None or not isinstance(s.plan.load, OpenLoad):
            continue
        points.append(
            SweepPoint(
                stage=s.index,
                offered_rate=s.plan.offered_rate,
                achieved_rate=achieved_rate(s),
                passed=bool(s.passed),
                reason=s.verdict_reason,
                valid=s.validity.valid,
                confidence=s.slo.confidence,
                goodput_rps=s.slo.goodput_rps,
                error_rate=s.requests.error_rate,
                ttft_p95=s.latency.ttft.p95,
                tpot_p95=s.latency.tpot.p95,
                e2e_p95=s.latency.e2e.p95,
            )
        )
    points.sort(key=lambda p: p.offered_rate)
    best = max((p for p in points if p.passed), key=lambda p: p.offered_rate, default=None)
    return RateSearchReport(
        points=tuple(points),
        max_rate_meeting_slo=best.offered_rate if best else None,
        achieved_rate_meeting_slo=best.achieved_rate if best else None,
    )
