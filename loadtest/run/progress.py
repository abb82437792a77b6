"""Live progress of a run in the terminal (rich), fed by the orchestrator."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from loadtest.analysis.records import RequestRecord
from loadtest.analysis.server_metrics import ServerSample
from loadtest.analysis.stats import percentile
from loadtest.units import format_seconds

SATURATION_PERCENT = 85.0  # generator CPU (p90) at which its figures are flagged as untrustworthy

WINDOW_S = 10.0


@dataclass
class StageProgress:
    """Counters of the running stage, updated from tailed records."""

    label: str
    index: int
    duration_s: float | None
    max_requests: int | None
    elapsed_s: float = 0.0
    sent: int = 0
    ok: int = 0
    failed: int = 0
    in_flight: int = 0
    errors: Counter = field(default_factory=Counter)
    recent: deque = field(default_factory=deque)
    cpu_percent: float | None = None  # distributed: the busiest worker's
    server: ServerSample | None = None
    workers: int = 1

    def add(self, records: list[RequestRecord]) -> None:
        for r in records:
            self.sent += 1
            if r.ok:
                self.ok += 1
                self.recent.append(r)
            else:
                self.failed += 1
                if r.error_kind:
                    self.errors[r.error_kind.value] += 1
        horizon = self.elapsed_s - WINDOW_S
        while self.recent and self.recent[0].end_s < horizon:
            self.recent.popleft()

    def rolling(self) -> tuple[float | None, float | None, float | None]:
        """(output tokens/s, TTFT p95, E2E p95) over the last few seconds."""
        if not self.recent:
            return None, None, None
        tokens = sum(r.output_tokens or 0 for r in self.recent)
        span = min(WINDOW_S, max(self.elapsed_s, 1e-3))
        ttfts = sorted(r.ttft_s for r in self.recent if r.ttft_s is not None)
        e2es = sorted(r.e2e_s for r in self.recent)
        return (
            tokens / span,
            percentile(ttfts, 95) if ttfts else None,
            percentile(e2es, 95) if e2es else None,
        )


class ProgressView:
    """A rich ``Live`` panel; a no-op when disabled."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.enabled:
            self._live = Live(console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def update(self, stage: StageProgress) -> None:
        if self._live is not None:
            self._live.update(render(stage))

    def note(self, message: str) -> None:
        if self.enabled:
            self.console.print(message)


def render(p: StageProgress) -> Group:
    if p.duration_s:
        total, done = p.duration_s, min(p.elapsed_s, p.duration_s)
        bar_label = f"{done:5.1f} / {p.duration_s:g} s"
    elif p.max_requests:
        total, done = float(p.max_requests), float(min(p.sent, p.max_requests))
        bar_label = f"{p.sent} / {p.max_requests} requests"
    else:
        total, done, bar_label = 1.0, 0.0, ""
    header = Text.assemble(("stage ", "dim"), (f"{p.index}", "bold"), f"  {p.label}  ", (bar_label, "cyan"))
    table = Table.grid(padding=(0, 2))
    tok_s, ttft, e2e = p.rolling()
    errors = ", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())) or "none"
    table.add_row("requests", f"sent {p.sent}  ok {p.ok}  failed {p.failed}  in flight {p.in_flight}")
    table.add_row("errors", errors)
    table.add_row(
        f"last {WINDOW_S:g} s",
        f"output {tok_s:.0f} tok/s  TTFT p95 {format_seconds(ttft)}  E2E p95 {format_seconds(e2e)}"
        if tok_s is not None
        else "-",
    )
    cpu = "-" if p.cpu_percent is None else f"{p.cpu_percent:.0f}% of one core"
    if p.workers > 1 and p.cpu_percent is not None:
        cpu += f" (busiest of {p.workers} workers)"
    table.add_row("generator CPU", Text(cpu, style="bold red" if (p.cpu_percent or 0) >= SATURATION_PERCENT else ""))
    if p.server is not None:
        s = p.server
        facts = (
            ("queue {:g}", s.queue_depth),
            ("waiting {:g}", s.waiting),
            ("running {:g}", s.running),
            ("KV {:.0%}", s.kv_cache_usage),
            ("replicas {:g}", s.replicas_ready),
        )
        parts = [fmt.format(value) for fmt, value in facts if value is not None]
        table.add_row("server", "  ".join(parts) or "-")
    bar = Table.grid()
    bar.add_row(ProgressBar(total=total, completed=done, width=60))
    return Group(header, bar, table)
