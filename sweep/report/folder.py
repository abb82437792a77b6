"""The results folder: one JSON file per finished candidate, plus the report.

Layout::

    <folder>/
      sweep.json                         the report (sweep.report.document), rewritten
                                         after every run; valid at any moment
      report.md, plots/*.png             rendered from sweep.json
      runs/<fingerprint>/<candidate>.json  one finished trial (StoredRun)

Every file is written atomically (a temporary file in the same folder, fsync,
``os.replace``), so a killed sweep leaves either the old or the new file, plus at
worst a stray ``.*.tmp`` that loading ignores and :meth:`ResultsFolder.clean` removes.
Runs are keyed by the measurement fingerprint (a different traffic/SLO/model never
reuses them, and never overwrites them) and the stable candidate id.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from sweep.errors import ResultsFolderError
from sweep.measure.results import MeasuredResult, RunRecord, Trial
from sweep.report.document import SCHEMA, SCHEMA_VERSION, SweepReport
from sweep.strict import Strict

REPORT_NAME = "sweep.json"


class StoredRun(Strict):
    """The file of one finished trial (schema ``serveout.sweep.run`` version 2: load
    points with validity, evidence and samples)."""

    kind: Literal["serveout.sweep.run"] = "serveout.sweep.run"
    schema_version: Literal[2] = 2
    fingerprint: str
    candidate_id: str
    recorded_at: str
    trial: Trial
    result: MeasuredResult

    @property
    def record(self) -> RunRecord:
        return RunRecord(trial=self.trial, result=self.result)


class LoadedRuns(Strict):
    """Runs read back from a folder, and the files that were skipped (with why)."""

    records: tuple[RunRecord, ...] = ()
    skipped: tuple[str, ...] = ()

    def by_id(self) -> dict[str, RunRecord]:
        return {r.candidate.id: r for r in self.records}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ResultsFolder:
    """Reads and writes one sweep's results folder."""

    def __init__(self, root: Path) -> None:
        if root.exists() and not root.is_dir():
            raise ResultsFolderError(f"results folder {root} is a file")
        self.root = root

    @property
    def report_path(self) -> Path:
        return self.root / REPORT_NAME

    def runs_dir(self, fingerprint: str) -> Path:
        return self.root / "runs" / fingerprint

    def run_path(self, fingerprint: str, candidate_id: str) -> Path:
        return self.runs_dir(fingerprint) / f"{candidate_id}.json"

    def save_run(self, record: RunRecord, fingerprint: str, recorded_at: str | None = None) -> Path:
        """Persist one finished trial (replacing an older file of the same candidate)."""
        stored = StoredRun(
            fingerprint=fingerprint,
            candidate_id=record.candidate.id,
            recorded_at=recorded_at or now_iso(),
            trial=record.trial,
            result=record.result,
        )
        path = self.run_path(fingerprint, record.candidate.id)
        atomic_write_text(path, stored.model_dump_json(indent=2))
        return path

    def load_runs(self, fingerprint: str) -> LoadedRuns:
        """Every readable run of ``fingerprint``; broken files are skipped and listed."""
        folder = self.runs_dir(fingerprint)
        if not folder.is_dir():
            return LoadedRuns()
        records, skipped = [], []
        for path in sorted(folder.glob("*.json")):
            try:
                stored = StoredRun.model_validate_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, ValidationError) as exc:
                first = str(exc).splitlines()[0]
                skipped.append(f"{path.name}: unreadable, will be measured again ({first})")
                continue
            if stored.fingerprint != fingerprint or stored.candidate_id != stored.trial.candidate.id:
                skipped.append(f"{path.name}: fingerprint or candidate id does not match its place")
                continue
            if path.stem != stored.candidate_id:
                skipped.append(f"{path.name}: file name does not match candidate {stored.candidate_id}")
                continue
            records.append(stored.record)
        return LoadedRuns(records=tuple(records), skipped=tuple(skipped))

    def write_report(self, report: SweepReport) -> Path:
        atomic_write_text(self.report_path, report.model_dump_json(indent=2))
        return self.report_path

    def write_text(self, name: str, text: str) -> Path:
        """Atomically write a text file (e.g. ``report.md``) inside the folder."""
        path = self.root / name
        atomic_write_text(path, text)
        return path

    def read_report(self) -> SweepReport:
        """The folder's ``sweep.json``; :class:`ResultsFolderError` when missing or foreign."""
        try:
            raw = json.loads(self.report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ResultsFolderError(f"cannot read {self.report_path}: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("kind") != SCHEMA:
            raise ResultsFolderError(f"{self.report_path} is not a serveout sweep report")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise ResultsFolderError(
                f"{self.report_path} has schema version {raw.get('schema_version')!r}; this version reads "
                f"{SCHEMA_VERSION} (`sweep run SPEC --out {self.root}` rebuilds it from the stored runs)"
            )
        try:
            return SweepReport.model_validate(raw)
        except ValidationError as exc:
            raise ResultsFolderError(f"invalid {self.report_path}: {exc}") from exc

    def clean(self) -> int:
        """Remove stray temporary files left by a killed writer; returns how many."""
        if not self.root.is_dir():
            return 0
        stray = [p for p in self.root.rglob(".*.tmp") if p.is_file()]
        for path in stray:
            path.unlink(missing_ok=True)
        return len(stray)
