"""Report formats, registered by name (``--reports json,csv,markdown,plots,html``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loadtest.analysis.records import RequestRecord
from loadtest.analysis.summary import Summary
from loadtest.registry import Registry
from loadtest.reports.base import ReportFormat
from loadtest.reports.files import CsvReport, JsonReport
from loadtest.reports.html import HtmlReport
from loadtest.reports.markdown import MarkdownReport
from loadtest.reports.plots import PlotsReport

REPORT_CLASSES = (JsonReport, CsvReport, PlotsReport, MarkdownReport, HtmlReport)  # plots before report.md


def report_registry() -> Registry:
    """The registry of report formats."""
    return Registry("report format", REPORT_CLASSES)


def write_reports(
    summary: Summary, records: Sequence[RequestRecord], out_dir: Path, kinds: Sequence[str] | None = None
) -> list[Path]:
    """Write the named formats (default: all) into ``out_dir``; returns the files written."""
    registry = report_registry()
    chosen = [registry.get(k) for k in (kinds or registry.names())]
    if JsonReport not in chosen:
        chosen.insert(0, JsonReport)  # summary.json is always written
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for cls in chosen:
        report: ReportFormat = cls()
        written.extend(report.write(summary, records, out_dir))
    return written


__all__ = ["ReportFormat", "report_registry", "write_reports"]
