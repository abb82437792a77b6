"""What a report format is, the measured/warm-up phase of a record, and the sentences
every report shows about a stage's arrivals and validity."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from loadtest.analysis.records import RequestRecord
from loadtest.analysis.summary import StageSummary, Summary, SweepPoint


@runtime_checkable
class ReportFormat(Protocol):
    """Writes some files for a finished run into ``out_dir`` and returns their paths."""

    kind: str

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]: ...


def phase(summary: Summary, record: RequestRecord) -> str:
    """``warmup``, ``measured`` or ``cooldown`` for a record."""
    start, end = summary.config.measured_window
    if record.start_s < start:
        return "warmup"
    if record.start_s >= end:
        return "cooldown"
    return "measured"


def measured_ok(summary: Summary, stage: StageSummary, records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The successful measured records of one stage."""
    return [r for r in records if r.stage == stage.index and r.ok and phase(summary, r) == "measured"]


def arrivals_text(stage: StageSummary) -> str | None:
    """How an open-loop stage kept its schedule, in one sentence (``None``: closed loop)."""
    a = stage.arrivals
    if a.max_concurrency is None and not a.scheduled:
        return None
    due = "" if a.due is None else f"{a.due} due, "
    offered = "" if stage.plan.offered_rate is None else f" (offered {stage.plan.offered_rate:g})"
    achieved = "-" if a.achieved_rate is None else f"{a.achieved_rate:.3g}"
    cap = "" if a.max_concurrency is None else (
        f"; client concurrency cap {a.max_concurrency}: {a.slot_waits} arrivals waited for a free slot"
    )
    return (
        f"Arrivals: {due}{a.scheduled} sent, {a.dropped} dropped at the end of the duration; "
        f"achieved {achieved} req/s{offered}; {a.late} left more than {a.late_threshold_s * 1e3:.0f} ms late{cap}."
    )


def validity_text(stage: StageSummary) -> str | None:
    """``None`` for a valid measurement, else why it is invalid."""
    v = stage.validity
    return None if v.valid else "INVALID MEASUREMENT: " + "; ".join(v.reasons)


def verdict_word(passed: bool | None, valid: bool) -> str:
    """``pass``, ``fail``, ``invalid`` or ``-`` (no verdict)."""
    if not valid:
        return "invalid"
    return {None: "-", True: "pass", False: "fail"}[passed]


def run_verdict(summary: Summary) -> str:
    """The run's verdict: ``PASS``, ``FAIL``, ``INVALID`` or ``no SLO set``."""
    if summary.passed is None:
        return "no SLO set"
    valid = summary.sweep is not None or summary.headline.validity.valid  # a sweep judges its points
    return verdict_word(summary.passed, valid).upper()


def point_verdict(point: SweepPoint) -> str:
    """A sweep point's verdict for a table: ``pass (92% sure)``, ``fail: <reason>``, ..."""
    word = verdict_word(point.passed, point.valid)
    sure = "" if point.confidence is None or not point.valid else f" ({point.confidence:.0%} sure)"
    return f"{word}{sure}" if point.passed else f"{word}{sure}: {point.reason}"
