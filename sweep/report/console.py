"""The answer of a sweep on the console: its runs as a rich table, the reasons of
runs that did not measure, and the conclusion (pure rendering but for printing)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sweep.analysis.quality import NOT_MEASURED_SIMULATED, short_label
from sweep.analysis.rows import replica_efficiency
from sweep.report.document import SweepReport
from sweep.spec.sweep_spec import simulated_label


def answer_table(report: SweepReport) -> Table:
    """Every run of ``report`` with its figures at the target, marked when simulated."""
    kind = "SIMULATED sweep" if report.spec.simulated else "sweep"
    table = Table(title=f"{kind} {report.spec.name}: {report.status.value}, {report.runs_needed} runs "
                        f"of a {report.grid_size}-candidate grid",
                  caption="simulated, not measured (docs/simulator.md)" if report.spec.simulated else None)
    table.add_column("candidate", no_wrap=True)
    quality = report.spec.quality is not None
    for col in ("status", "accel.", "req/s", "out tok/s", "TTFT p95", "TPOT p95", "E2E p95",
                "cost/h", "cost / M tok", "scaling eff.", "SLO at target", *(("quality",) if quality else ())):
        table.add_column(col)
    for row in report.runs:
        t = row.target.point if row.target else None
        ms = lambda v: "-" if v is None else f"{v * 1000:.0f} ms"  # noqa: E731
        num = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
        scaling = replica_efficiency(report.scaling, row.candidate_id)
        table.add_row(
            row.candidate_id, row.status.value,
            str(row.accelerators), num(row.throughput_rps), num(row.throughput_output_tokens_per_s, "{:.0f}"),
            ms(t.ttft_p95_s if t else None), ms(t.tpot_p95_s if t else None), ms(t.e2e_p95_s if t else None),
            f"{row.cost_per_hour:.3f}", num(row.cost_per_million_output_tokens, "{:.3f}"),
            num(None if scaling is None else scaling.efficiency), row.outcome_at_target.value,
            *((short_label(row.quality),) if quality else ()))
    return table


def print_answer(report: SweepReport, out: Path, console: Console) -> None:
    """The table, why runs did not measure, the simulated label and the answer."""
    console.print(answer_table(report))
    for row in report.runs:
        if row.reason:
            console.print(f"[yellow]{row.candidate_id}[/] {row.status.value}: {row.reason}")
    if report.spec.simulated:
        from simulator.accuracy import band_for, margin_flags

        console.print(f"[bold yellow]{simulated_label(report.spec)}[/]")
        for flag in margin_flags(report.answer.verdicts, band_for(report.spec.hardware)):
            console.print(f"[yellow]near the limit:[/] {flag}")
    if report.spec.quality is not None and report.spec.simulated:
        console.print(f"[bold yellow]{NOT_MEASURED_SIMULATED}[/]: the quality gate was not applied")
    for refusal in report.answer.refused:
        console.print(f"[yellow]{refusal.candidate_id}[/] {refusal.why}", highlight=False)
    console.print(f"[bold]answer:[/] {report.answer.explanation}")
    best = report.run(report.answer.best) if report.answer.best else None
    if report.spec.adapters and best is not None:
        adapters = len(report.spec.adapters)
        console.print(f"{report.spec.model} and {adapters} adapter(s) on `{best.candidate_id}`: "
                      f"{best.cost_per_hour:.2f} {report.prices.currency}/h, "
                      f"{best.cost_per_hour / adapters:.2f} per adapter (report.md: each model's share)")
    console.print(f"sweep.json, report.md and plots/ in {out}")
