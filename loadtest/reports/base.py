"""What a report format is, and the measured/warm-up phase of a record."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from loadtest.records import RequestRecord
from loadtest.summary import StageSummary, Summary


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
