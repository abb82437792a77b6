"""The report sections of sessions, agent steps, cancellation and GPU energy,
shared by ``report.md`` and the HTML report (pure: a stage in, Markdown lines out)."""

from __future__ import annotations

from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import StageSummary


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def turn_label(turn: int, pooled: bool) -> str:
    """Turns are numbered from 1 in reports (from 0 in records)."""
    return f"{turn + 1}+" if pooled else str(turn + 1)


def session_lines(stage: StageSummary) -> list[str]:
    """Sessions, turns and agent steps (empty when the stage has none)."""
    s = stage.sessions
    if s is None:
        return []
    lines = [
        f"Sessions: {s.sessions} ({s.complete} with every request ok), turns per session mean "
        f"{s.turns.mean or 0:.2f} (max {s.turns.max or 0:.0f}); session time p50 {_s(s.duration.p50)} s, "
        f"p95 {_s(s.duration.p95)} s; think time p50 {_s(s.think.p50)} s ({s.think.count} gaps).",
        "",
        "| turn | requests | ok | TTFT p50 (ms) | TTFT p95 (ms) | E2E p50 (ms) | E2E p95 (ms) | think p50 (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in s.by_turn:
        lines.append(f"| {turn_label(t.turn, t.pooled)} | {t.requests} | {t.ok} | {_ms(t.ttft.p50)} | "
                     f"{_ms(t.ttft.p95)} | {_ms(t.e2e.p50)} | {_ms(t.e2e.p95)} | {_s(t.think.p50)} |")  # fmt: skip
    if (f := s.fanout) is not None:
        lines += [
            "",
            f"Agent steps (fan-out): {f.steps} steps of {f.requests} requests (width mean {f.width.mean or 0:.1f}), "
            f"{f.complete} with every branch ok; step time p50 {_s(f.step_time.p50)} s, p95 "
            f"{_s(f.step_time.p95)} s; straggler gap (last branch's end - first's) p50 {_s(f.straggler.p50)} s, "
            f"p95 {_s(f.straggler.p95)} s.",
        ]
    return lines


def cancel_text(stage: StageSummary) -> str | None:
    r = stage.requests
    if not r.cancel_planned and not r.cancelled:
        return None
    settled = stage.server.settled
    check = "" if settled is None else (
        f" The server's in-flight gauge returned to zero ({_s(stage.server.settled_after_s)} s after the stage)."
        if settled else f" **The server still counted {stage.server.in_flight_after:g} request(s) in flight.**")
    return (f"Client cancellation: {r.cancel_planned} requests were to be abandoned, {r.cancelled} were "
            f"(the others finished first); not counted as failures.{check}")


def gpu_text(stage: StageSummary) -> str | None:
    g = stage.gpu
    if g is None:
        return None
    energy = "-" if g.energy_j is None else f"{g.energy_j:.0f} J (from {g.energy_from})"
    per_j = "-" if g.output_tokens_per_joule is None else f"{g.output_tokens_per_joule:.3g}"
    util = "-" if g.utilization_mean is None else f"{g.utilization_mean:.0%}"
    power = "-" if g.power_mean_w is None else f"{g.power_mean_w:.0f} W mean, {g.power_max_w:.0f} W max"
    return (f"GPUs ({g.gpus}, {g.source}): {power}; energy over the measured window {energy}; "
            f"{per_j} output tokens per joule; utilisation {util}; memory used max "
            f"{'-' if g.memory_used_max_mib is None else f'{g.memory_used_max_mib:.0f} MiB'}.")


def distribution_cells(d: Distribution, scale: float = 1e3) -> list[str]:
    return ["-" if v is None else f"{v * scale:.1f}" for v in (d.p50, d.p95, d.p99)]
