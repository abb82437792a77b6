"""The final rich table printed after a run."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from loadtest.analysis.summary import StageSummary, Summary
from loadtest.reports.base import arrivals_text, point_verdict, run_verdict, validity_text
from loadtest.reports.figures import LATENCIES, LATENCY_STATS, THROUGHPUT_FIGURES
from loadtest.reports.groups import console_rows
from loadtest.reports.sections import cancel_text, gpu_text, turn_label
from loadtest.units import format_seconds


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def stage_table(stage: StageSummary, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("latency (ms)")
    table.add_column("n", justify="right")
    for stat in LATENCY_STATS:
        table.add_column(stat, justify="right")
    for metric in LATENCIES:
        dist = getattr(stage.latency, metric)
        table.add_row(metric.upper(), str(dist.count), *(_ms(dist.stat(s)) for s in LATENCY_STATS))
    return table


def facts(stage: StageSummary) -> Table:
    grid = Table.grid(padding=(0, 2))
    r, g = stage.requests, stage.generator
    errors = ", ".join(f"{k.value} {v}" for k, v in r.errors.items()) or "none"
    grid.add_row("requests", f"{r.measured} measured: {r.ok} ok, {r.failed} failed ({errors}); {r.sent} sent in all")
    grid.add_row("throughput", "  ".join(f"{f.name} {f.format(f.get(stage))}" for f in THROUGHPUT_FIGURES))
    if (arrivals := arrivals_text(stage)) is not None:
        grid.add_row("arrivals", arrivals)
    if (cancels := cancel_text(stage)) is not None:
        grid.add_row("cancelled", cancels.replace("**", ""))
    if (energy := gpu_text(stage)) is not None:
        grid.add_row("GPU", energy)
    for label, text in console_rows(stage):
        grid.add_row(label, text)
    if (s := stage.sessions) is not None:
        turns = "  ".join(f"{turn_label(t.turn, t.pooled)}: {_ms(t.ttft.p50)}" for t in s.by_turn)
        grid.add_row("sessions", f"{s.sessions}, time p50 {format_seconds(s.duration.p50)}; TTFT p50 (ms) by turn {turns}")
    for result in stage.slo.objectives:
        o = result.objective
        detail = f" ({text})" if (text := result.interval_text()) else ""
        grid.add_row(
            "SLO",
            Text.assemble(
                f"{o.describe()}: {result.observed_text()}{detail} ",
                ("pass", "green") if result.passed else ("FAIL", "bold red"),
            ),
        )
    if stage.slo.confidence is not None:
        grid.add_row("confidence", f"{stage.slo.confidence:.0%} (how sure the SLO verdict is; see docs/loadtest.md)")
    cpu = "-" if g.cpu_percent_p90 is None else f"p90 {g.cpu_percent_p90:.0f}% of one core"
    per_k = "" if g.cpu_seconds_per_1k_tokens is None else f", {g.cpu_seconds_per_1k_tokens:.3f} CPU s / 1k tokens"
    rt = ", real-time priority" if g.realtime else ""
    grid.add_row("generator", Text(f"{cpu}{per_k}{rt}", style="bold red" if g.saturated else ""))
    if (invalid := validity_text(stage)) is not None:
        grid.add_row("measurement", Text(invalid, style="bold red"))
    return grid


def summary_renderable(summary: Summary) -> Group:
    parts: list = []
    if summary.sweep is not None:
        sweep = Table(title="rate sweep", title_justify="left")
        for col in ("offered req/s", "achieved", "goodput", "TTFT p95", "TPOT p95", "E2E p95", "verdict"):
            sweep.add_column(col, justify="right" if col != "verdict" else "left")
        for p in summary.sweep.points:
            sweep.add_row(
                f"{p.offered_rate:g}", f"{p.achieved_rate or 0:.3g}", f"{p.goodput_rps or 0:.3g}",
                format_seconds(p.ttft_p95), format_seconds(p.tpot_p95), format_seconds(p.e2e_p95),
                Text(point_verdict(p), "green" if p.passed else "red"),
            )  # fmt: skip
        parts.append(sweep)
        best = summary.sweep.max_rate_meeting_slo
        achieved = summary.sweep.achieved_rate_meeting_slo
        at = "" if achieved is None else f" offered ({achieved:.3g} achieved)"
        parts.append(Text(f"highest rate meeting the SLO: {'none' if best is None else f'{best:g} req/s{at}'}", style="bold"))
    stage = summary.headline
    title = "results" if len(summary.stages) == 1 else f"headline stage {stage.index}: {stage.label}"
    parts += [stage_table(stage, title), facts(stage)]
    if summary.passed is not None:
        parts.append(Text(f"SLO verdict: {run_verdict(summary)}", style="bold green" if summary.passed else "bold red"))
    if summary.warnings:
        parts.append(Panel("\n".join(f"• {w}" for w in summary.warnings), title="warnings", border_style="red"))
    return Group(*parts)
