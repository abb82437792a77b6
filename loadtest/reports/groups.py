"""The report tables per model, per tenant and per priority class, shared by
``report.md`` and the HTML report, and their lines of the console table (pure: a stage
in, text out). A tenant is shown by name, never by its key."""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.analysis.per_group import GroupFigures
from loadtest.analysis.per_tenant import TenantFigures
from loadtest.analysis.summary import StageSummary

MODEL_COLUMNS = ("requests", "share", "errors", "TTFT p50 (ms)", "TTFT p95 (ms)", "TPOT p50 (ms)", "E2E p95 (ms)",
                 "output tok/s")
WIDE_COLUMNS = ("requests", "share", "errors", "429", "TTFT p50 (ms)", "TTFT p95 (ms)", "ITL p95 (ms)",
                "TPOT p50 (ms)", "E2E p95 (ms)", "output tok/s", "goodput (req/s)")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def cells(g: GroupFigures, wide: bool) -> list[str]:
    """A group's figures, in the order of :data:`WIDE_COLUMNS` (else :data:`MODEL_COLUMNS`)."""
    head = [str(g.requests), f"{g.share:.1%}", str(g.errors), *([str(g.rate_limited)] if wide else [])]
    latency = [_ms(g.ttft.p50), _ms(g.ttft.p95), *([_ms(g.itl.p95)] if wide else []), _ms(g.tpot.p50), _ms(g.e2e.p95)]
    tail = [_number(g.output_tokens_per_s), *([_number(g.slo.goodput_rps)] if wide else [])]
    return head + latency + tail


def table(names: Sequence[str], columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table: the ``names`` columns left-aligned, the figures right-aligned."""
    align = ["---"] * len(names) + ["---:"] * len(columns)
    return [f"| {' | '.join([*names, *columns])} |", f"| {' | '.join(align)} |",
            *(f"| {' | '.join(row)} |" for row in rows)]


def model_lines(stage: StageSummary) -> list[str]:
    """The "Per model" table (empty unless the requests named more than one model)."""
    if len(stage.models) < 2:
        return []
    return [
        f"Per model: {len(stage.models)} models; share of the measured requests, failures, latency of "
        "the successful ones, output tokens streamed per second of the measured window.",
        "",
        *table(["model"], MODEL_COLUMNS, [[f"`{m.model}`", *cells(m, wide=False)] for m in stage.models]),
    ]


def verdict(t: TenantFigures) -> str:
    """A tenant's verdict on its own SLO: ``pass``, ``**FAIL**`` or ``-`` (none of its own)."""
    return "-" if t.slo.passed is None else ("pass" if t.slo.passed else "**FAIL**")


def tenant_lines(stage: StageSummary) -> list[str]:
    """The "Per tenant" and "Per priority class" tables and each tenant's own SLO (empty
    without tenants)."""
    if not stage.tenants:
        return []
    lines = [
        f"Per tenant: {len(stage.tenants)} tenants; share of the measured requests, failures (429: rate "
        "limited or shed), latency of the successful ones, output tokens streamed per second of the "
        "measured window, goodput (against the tenant's own SLO, else the run's) and the verdict on its own SLO.",
        "",
        *table(["tenant", "class"], [*WIDE_COLUMNS, "own SLO"],
               [[f"`{t.tenant}`", t.priority_class or "-", *cells(t, wide=True), verdict(t)] for t in stage.tenants]),
    ]
    judged = [(t, r) for t in stage.tenants for r in t.slo.objectives]
    if judged:
        lines += ["", *(f"- `{t.tenant}`: {r.objective.describe()}, observed {r.observed_text()}: "
                        f"{'pass' if r.passed else '**FAIL**'}" for t, r in judged)]  # fmt: skip
    if stage.classes:
        lines += ["", f"Per priority class ({len(stage.classes)}), all tenants together:", "",
                  *table(["class"], WIDE_COLUMNS, [[c.priority_class, *cells(c, wide=True)] for c in stage.classes])]
    return lines


def console_rows(stage: StageSummary) -> list[tuple[str, str]]:
    """The console table's rows per model, tenant and class: (label, text)."""
    rows = []
    if len(stage.models) > 1:
        rows.append(("models", "  ".join(f"{m.model} {m.share:.0%} TTFT p95 {_ms(m.ttft.p95)} ms" for m in stage.models)))
    for t in stage.tenants:
        own = "" if t.slo.passed is None else f", own SLO {'pass' if t.slo.passed else 'FAIL'}"
        rows.append((f"tenant {t.tenant}", f"{t.priority_class or '-'}: {t.requests} requests ({t.share:.0%}), "
                     f"{t.errors} errors ({t.rate_limited} 429), TTFT p95 {_ms(t.ttft.p95)} ms, E2E p95 "
                     f"{_ms(t.e2e.p95)} ms, {_number(t.output_tokens_per_s)} output tok/s{own}"))
    for c in stage.classes:
        rows.append((f"class {c.priority_class}", f"{c.requests} requests ({c.share:.0%}), {c.errors} errors "
                     f"({c.rate_limited} 429), TTFT p95 {_ms(c.ttft.p95)} ms, E2E p95 {_ms(c.e2e.p95)} ms"))
    return rows
