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
from collections.abc import Mapping, Sequence

import numpy as np

from loadtest.analysis.arrivals import arrivals_of
from loadtest.analysis.columns import NONE, SOURCES, RecordColumns
from loadtest.analysis.gpu import gpu_stage
from loadtest.analysis.group_figures import class_figures, model_figures, tenant_figures
from loadtest.analysis.per_tenant import tenant_misses
from loadtest.analysis.records import ErrorKind, RequestRecord, TokenSource
from loadtest.analysis.server_metrics import ServerSample, counter_delta
from loadtest.analysis.sessions import session_report
from loadtest.analysis.samples import client_cancelled, latency_samples, slo_report
from loadtest.analysis.slo import Metric, Objective
from loadtest.analysis.stats import Counted, Distribution
from loadtest.analysis.summary import (
    GeneratorReport,
    GpuSample,
    Latency,
    RateSearchReport,
    RequestCounts,
    StageServer,
    StageSummary,
    SweepPoint,
    Throughput,
    Tokens,
    Validity,
    Window,
)
from loadtest.analysis.timeline import bin_width, emissions_of, prompt_tokens_between, scan_emissions, time_bins
from loadtest.profiles import OpenLoad, ReplayLoad, StagePlan

MAX_LATE_FRACTION = 0.05  # more late arrivals than this: the schedule was not kept
LOOP_LAG_LIMIT_S = 0.1  # generator event-loop lag (p99) beyond which timings are suspect
MAX_DROPPED_FRACTION = 0.03  # due arrivals never sent: the offered rate was not delivered


def request_tpot(record: RequestRecord) -> float | None:
    """Time per output token after the first, or ``None`` when undefined."""
    if record.ttft_s is None or record.output_tokens is None or record.output_tokens < 2:
        return None
    return max(record.e2e_s - record.ttft_s, 0.0) / (record.output_tokens - 1)


def split_by_window(records: RecordColumns, start: float, end: float) -> tuple[RecordColumns, int, int]:
    """(measured records, started before the window, started at or after its end)."""
    starts = records.start_s
    measured = records.take((starts >= start) & (starts < end))
    return measured, int((starts < start).sum()), int((starts >= end).sum())


def measured_window(measured: RecordColumns, start: float, end: float, *, timed: bool) -> Window:
    """The window the rates divide by (see the module docstring)."""
    if not len(measured):
        stop = start if math.isinf(end) else end
        return Window(start_s=start, end_s=stop, duration_s=max(stop - start, 0.0))
    last_end = float(measured.end_s.max())
    if timed:
        lo, hi = start, min(end, last_end)
    else:
        lo, hi = max(start, float(measured.start_s.min())), last_end
    return Window(start_s=lo, end_s=hi, duration_s=max(hi - lo, 0.0))


def latency_of(samples: dict[Metric, np.ndarray | Counted]) -> Latency:
    """Latency distributions with their bootstrap intervals."""
    return Latency(**{m.value: Distribution.of(samples[m], intervals=True) for m in samples})


def tokens_of(ok: RecordColumns) -> Tokens:
    output, prompt = ok.output_tokens, ok.prompt_tokens
    sources = np.bincount(ok.token_source, minlength=len(SOURCES))
    known_output = output != NONE
    usage = ok.token_source == SOURCES.index(TokenSource.USAGE)
    return Tokens(
        prompt_total=int(prompt[prompt != NONE].sum()),
        output_total=int(output[known_output].sum()),
        from_usage=int(sources[SOURCES.index(TokenSource.USAGE)]),
        from_tokenizer=int(sources[SOURCES.index(TokenSource.TOKENIZER)]),
        unknown=int(sources[SOURCES.index(TokenSource.NONE)]),
        output_len=Distribution.of(output[known_output]),
        output_len_mismatches=int(
            ((ok.requested_output_tokens != NONE) & known_output & (output != ok.requested_output_tokens)).sum()
        ),
        prompt_len_mismatches=int(
            ((ok.expected_prompt_tokens != NONE) & usage & (prompt != ok.expected_prompt_tokens)).sum()
        ),
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
    records: Sequence[RequestRecord] | RecordColumns,
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
    gpu_samples: Sequence[GpuSample] = (),
    gpu_source: str = "",
    tenant_objectives: Mapping[str, Sequence[Objective]] | None = None,
) -> StageSummary:
    """Every figure of one stage from its raw records (or their :class:`RecordColumns`).
    ``duration_s`` and ``max_requests`` are the stage's load limits (they decide how many
    arrivals were due); ``gpu_samples``: the run's GPU telemetry (run seconds);
    ``tenant_objectives``: tenants' own SLOs (:mod:`loadtest.analysis.per_tenant`)."""
    columns = RecordColumns.of(records)
    measured, before, after = split_by_window(columns, *window)
    ok = measured.take(measured.ok)
    abandoned = client_cancelled(measured)
    failed = len(measured) - len(ok) - abandoned
    win = measured_window(measured, *window, timed=timed)
    window_of = (win.start_s, win.end_s)
    samples = latency_samples(ok)
    latency = latency_of(samples)
    per_s = (lambda x: x / win.duration_s) if win.duration_s > 0 else (lambda x: None)
    span = float(columns.end_s.max()) if len(columns) else 0.0
    width = bin_width(span)
    bins = (width, max(1, math.ceil(span / width)))
    out_tokens, bin_tokens = scan_emissions(emissions_of(columns), window=(win.start_s, win.end_s), bins=bins)
    in_tokens = prompt_tokens_between(columns, win.start_s, win.end_s)
    all_ok = columns.ok
    ends = columns.end_s
    completed = int((all_ok & (ends >= win.start_s) & (ends <= win.end_s)).sum())
    throughput = Throughput(
        request_rate=per_s(len(ok)),
        completed_rate=per_s(completed),
        output_tokens_per_s=per_s(out_tokens),
        input_tokens_per_s=per_s(in_tokens),
        total_tokens_per_s=per_s(out_tokens + in_tokens),
    )
    outputs = columns.output_tokens
    all_output = int(outputs[all_ok & (outputs != NONE)].sum())
    if generator.cpu_seconds_load is not None and all_output:
        generator = generator.model_copy(
            update={"cpu_seconds_per_1k_tokens": generator.cpu_seconds_load / (all_output / 1000.0)}
        )
    failed_kinds = (k for k, good in zip(measured.error_kind, measured.ok.tolist())
                    if not good and k and k is not ErrorKind.CLIENT_CANCELLED)
    counts = RequestCounts(
        sent=len(columns),
        measured=len(measured),
        ok=len(ok),
        failed=failed,
        excluded_warmup=before,
        excluded_cooldown=after,
        errors=dict(sorted(Counter(failed_kinds).items())),
        error_rate=failed / (len(measured) - abandoned) if len(measured) > abandoned else None,
        cancelled=abandoned,
        cancel_planned=0 if measured.cancel_after_s is None else int((~np.isnan(measured.cancel_after_s)).sum()),
    )
    slo = slo_report(objectives, ok, samples, {m: getattr(latency, m.value) for m in samples}, counts.error_rate,
                     counts.measured, win.duration_s)
    load = plan.load if isinstance(plan.load, (OpenLoad, ReplayLoad)) else None
    arrivals = arrivals_of(columns, load, duration_s=duration_s if timed else None, max_requests=max_requests)
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
        timeline=time_bins(columns, width, tokens=bin_tokens),
        sessions=session_report(measured),
        models=model_figures(columns, measured, window_of, objectives),
        tenants=tenant_figures(columns, measured, window_of, objectives, tenant_objectives),
        classes=class_figures(columns, measured, window_of, objectives),
        gpu=gpu_stage(gpu_samples, start=offset_s + win.start_s, end=offset_s + win.end_s, output_tokens=out_tokens,
                      total_tokens=out_tokens + in_tokens, source=gpu_source) if gpu_samples else None,
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
    """Pass/fail of a stage: its SLOs, its tenants' own SLOs and (when given) an error-rate
    bound; ``None`` when none is set. An invalid measurement never passes: it fails with the reason
    ``"invalid measurement: ..."``."""
    validity = stage_validity(stage)
    invalid = "invalid measurement: " + "; ".join(validity.reasons) if not validity.valid else ""
    if stage.slo.passed is None and max_error_rate is None and all(t.slo.passed is None for t in stage.tenants):
        return None, invalid
    if invalid:
        return False, invalid
    reasons = [f"{r.objective.key} missed" for r in stage.slo.objectives if not r.passed]
    reasons += tenant_misses(stage.tenants)
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
