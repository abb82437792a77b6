"""Machine-readable outputs: ``summary.json``, ``records.jsonl`` and ``requests.csv``."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from loadtest.analysis.metrics import request_tpot
from loadtest.analysis.records import RequestRecord, record_line
from loadtest.analysis.summary import Summary, save_summary
from loadtest.reports.base import phase

CSV_COLUMNS = (
    "stage", "id", "session", "turn", "user", "phase", "scheduled_s", "start_s", "start_unix", "ok",
    "status", "error_kind", "error", "retry_after_s", "ttft_s", "e2e_s", "tpot_s", "itl_mean_s",
    "itl_max_s", "chunks", "prompt_tokens", "output_tokens", "token_source", "expected_prompt_tokens",
    "requested_output_tokens", "finish_reason",
)  # fmt: skip


class JsonReport:
    """``summary.json`` (the versioned summary) and ``records.jsonl`` (raw records)."""

    kind = "json"

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
        summary_path = out_dir / "summary.json"
        save_summary(summary, summary_path)
        records_path = out_dir / "records.jsonl"
        with records_path.open("w", encoding="utf-8") as handle:
            for r in records:
                handle.write(record_line(r.model_copy(update={"output_text": None})) + "\n")
        return [summary_path, records_path]


def csv_row(summary: Summary, r: RequestRecord) -> dict[str, object]:
    gaps = r.itl_s
    return {
        "stage": r.stage,
        "id": r.id,
        "session": r.session,
        "turn": r.turn,
        "user": r.user,
        "phase": phase(summary, r),
        "scheduled_s": r.scheduled_s,
        "start_s": round(r.start_s, 6),
        "start_unix": round(r.start_unix, 6),
        "ok": int(r.ok),
        "status": r.status,
        "error_kind": r.error_kind.value if r.error_kind else "",
        "error": r.error or "",
        "retry_after_s": r.retry_after_s,
        "ttft_s": r.ttft_s,
        "e2e_s": round(r.e2e_s, 6),
        "tpot_s": request_tpot(r) if r.ok else None,
        "itl_mean_s": sum(gaps) / len(gaps) if gaps else None,
        "itl_max_s": max(gaps) if gaps else None,
        "chunks": r.chunks,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "token_source": r.token_source.value,
        "expected_prompt_tokens": r.expected_prompt_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "finish_reason": r.finish_reason or "",
    }


class CsvReport:
    """``requests.csv``: one row per request (every stage, warm-up and cool-down included,
    with a ``phase`` column)."""

    kind = "csv"

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
        path = out_dir / "requests.csv"
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for r in sorted(records, key=lambda r: (r.stage, r.start_s)):
                writer.writerow({k: ("" if v is None else v) for k, v in csv_row(summary, r).items()})
        return [path]
