"""``report.md``: a human-readable report of a run with its plots embedded."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from loadtest.analysis.records import RequestRecord
from loadtest.analysis.summary import StageSummary, Summary
from loadtest.reports.base import arrivals_text, point_verdict, run_verdict, validity_text
from loadtest.reports.figures import LATENCIES, LATENCY_STATS, THROUGHPUT_FIGURES
from loadtest.reports.plots import plot_names
from loadtest.reports.groups import model_lines, tenant_lines
from loadtest.reports.sections import cancel_text, gpu_text, session_lines
from loadtest.units import format_seconds


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def latency_table(stage: StageSummary) -> list[str]:
    lines = [
        "| metric (ms) | count | " + " | ".join(LATENCY_STATS) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in LATENCY_STATS) + " |",
    ]
    for metric in LATENCIES:
        dist = getattr(stage.latency, metric)
        cells = " | ".join(_ms(dist.stat(st)) for st in LATENCY_STATS)
        lines.append(f"| {metric.upper()} | {dist.count} | {cells} |")
    return lines


def stage_section(stage: StageSummary) -> list[str]:
    r, t, g = stage.requests, stage.tokens, stage.generator
    errors = ", ".join(f"{k.value}: {v}" for k, v in r.errors.items()) or "none"
    lines = [f"**{invalid}**", ""] if (invalid := validity_text(stage)) is not None else []
    if (arrivals := arrivals_text(stage)) is not None:
        lines += [arrivals, ""]
    lines += [
        f"Measured window {stage.window.start_s:.1f}-{stage.window.end_s:.1f} s "
        f"({stage.window.duration_s:.1f} s). Requests: {r.sent} sent, {r.measured} measured, {r.ok} ok, "
        f"{r.failed} failed ({errors}); {r.excluded_warmup} in warm-up and {r.excluded_cooldown} in "
        "cool-down excluded.",
        "",
        *latency_table(stage),
        "",
        "| throughput | value |",
        "| --- | ---: |",
    ]
    for figure in THROUGHPUT_FIGURES:
        lines.append(f"| {figure.name} | {figure.format(figure.get(stage))} |")
    lines += [
        "",
        f"Tokens: {t.prompt_total} prompt, {t.output_total} output (from usage: {t.from_usage}, "
        f"tokenizer: {t.from_tokenizer}, unknown: {t.unknown}); output length mismatches: "
        f"{t.output_len_mismatches}.",
        "",
    ]
    for groups in (model_lines(stage), tenant_lines(stage)):
        if groups:
            lines += [*groups, ""]
    for extra in (cancel_text(stage), gpu_text(stage)):
        if extra is not None:
            lines += [extra, ""]
    if sessions := session_lines(stage):
        lines += [*sessions, ""]
    if stage.slo.objectives:
        lines += ["| objective | observed | 95% CI, confidence | verdict |", "| --- | ---: | --- | --- |"]
        for result in stage.slo.objectives:
            o = result.objective
            verdict = "pass" if result.passed else "**FAIL**"
            lines.append(f"| {o.describe()} | {result.observed_text()} | {result.interval_text() or '-'} | {verdict} |")
        fraction = stage.slo.goodput_fraction
        confidence = stage.slo.confidence
        lines += [
            "",
            *([f"Verdict confidence: {confidence:.0%}.", ""] if confidence is not None else []),
            f"Goodput: {stage.slo.good_requests} requests met every objective "
            f"({'-' if fraction is None else f'{fraction:.1%}'} of measured), "
            f"{stage.slo.goodput_rps or 0:.3g} req/s.",
            "",
        ]
    cpu = "-" if g.cpu_percent_p90 is None else f"{g.cpu_percent_p90:.0f}%"
    per_k = "-" if g.cpu_seconds_per_1k_tokens is None else f"{g.cpu_seconds_per_1k_tokens:.3f} s"
    wait = "" if g.cpu_wait_s is None else f", {g.cpu_wait_s:.2f} s waiting for a CPU (other processes)"
    lines.append(
        f"Load generator: {g.cpu_seconds_load or 0:.1f} CPU s during the load, p90 {cpu} of one core, "
        f"{per_k} CPU per 1,000 streamed tokens, event-loop lag p99 "
        f"{_ms(g.loop_lag_p99_s)} ms{wait}{', at real-time priority' if g.realtime else ''}"
        f"{' — **SATURATED**' if g.saturated else ''}."
    )
    sv = stage.server
    if sv.generation_tokens_delta is not None or sv.queue_depth_max is not None:
        facts = (
            ("generation tokens +{:.0f}", sv.generation_tokens_delta),
            ("prompt tokens +{:.0f}", sv.prompt_tokens_delta),
            ("prefix-cache hit rate {:.1%}", sv.prefix_cache_hit_rate),
            ("max queue depth {:.0f}", sv.queue_depth_max),
            ("max KV cache use {:.0%}", sv.kv_cache_usage_max),
            ("max ready replicas {:.0f}", sv.replicas_ready_max),
        )
        parts = [fmt.format(value) for fmt, value in facts if value is not None]
        lines += ["", "Server (from /metrics over the stage): " + ", ".join(parts) + "."]
    return lines


def render_markdown(summary: Summary, plots: Sequence[str] = ()) -> str:
    c = summary.config
    started = datetime.fromtimestamp(summary.started_unix, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    verdict = run_verdict(summary)
    verdict = f"**{verdict}**" if summary.passed is False else verdict
    lines = [
        f"# Load test report{' (simulated)' if summary.simulated else ''}{': ' + c.label if c.label else ''}",
        "",
        f"- started: {started}, wall time {summary.ended_unix - summary.started_unix:.0f} s",
        f"- target: `{c.target.url}` model `{c.target.model}`, endpoint {c.target.endpoint.value}, "
        f"{'streamed' if c.target.stream else 'not streamed'}, exact output lengths: {c.target.exact_output}",
        *([f"- model mix: `{c.model_mix.describe()}`"] if c.model_mix is not None else []),
        *([f"- tenants: `{c.tenants.describe()}`"] if c.tenants is not None else []),
        f"- profile: `{c.profile.model_dump_json(exclude_defaults=False)}`",
        f"- workload: `{c.workload.model_dump_json()}`",
        f"- duration: {c.duration_s or '-'} s, max requests: {c.max_requests or '-'}, warm-up {c.warmup_s:g} s, "
        f"cool-down {c.cooldown_s:g} s, seed {c.seed}",
        f"- SLO: {', '.join(o.describe() for o in c.slos) or 'none'} — verdict: {verdict}",
        "",
    ]
    if summary.warnings:
        lines += ["## Warnings", ""] + [f"- **{w}**" for w in summary.warnings] + [""]
    if summary.sweep is not None:
        best = summary.sweep.max_rate_meeting_slo
        lines += [
            "## Rate sweep",
            "",
            f"Highest offered rate meeting the SLO: **{'none' if best is None else f'{best:g} req/s'}**"
            + ("" if summary.sweep.achieved_rate_meeting_slo is None
               else f" ({summary.sweep.achieved_rate_meeting_slo:.3g} req/s achieved)") + ".",
            "",
            "| offered req/s | achieved req/s | goodput req/s | TTFT p95 | TPOT p95 | E2E p95 | errors | verdict |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for p in summary.sweep.points:
            err = "-" if p.error_rate is None else f"{p.error_rate:.1%}"
            lines.append(
                f"| {p.offered_rate:g} | {p.achieved_rate or 0:.3g} | {p.goodput_rps or 0:.3g} | "
                f"{format_seconds(p.ttft_p95)} | {format_seconds(p.tpot_p95)} | {format_seconds(p.e2e_p95)} | "
                f"{err} | {point_verdict(p)} |"
            )
        lines.append("")
    for stage in summary.stages:
        title = "Results" if len(summary.stages) == 1 else f"Stage {stage.index}: {stage.label}"
        marker = " (headline)" if len(summary.stages) > 1 and stage.index == summary.headline_stage else ""
        lines += [f"## {title}{marker}", "", *stage_section(stage), ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    lines += [
        "Definitions: TTFT = time to the first content chunk; ITL = every gap between content chunks; "
        "TPOT = (E2E - TTFT) / (output tokens - 1) per request; percentiles are exact (linear "
        "interpolation over all samples); failed requests are excluded from latency figures. "
        "Requests/s (started) counts successful requests by start time, requests/s (completed) by "
        "completion inside the window. Intervals are 95% bootstrap intervals; a confidence is the "
        "share of bootstrap resamples in which the objective holds.",
        "",
    ]
    return "\n".join(lines)


class MarkdownReport:
    """``report.md``."""

    kind = "markdown"

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
        path = out_dir / "report.md"
        present = [n for n in plot_names(summary) if (out_dir / n).exists()]
        path.write_text(render_markdown(summary, present), encoding="utf-8")
        return [path]
