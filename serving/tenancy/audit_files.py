"""The audit trail on disk: a writer's chain of rotated JSON-lines files, and checking them.

Each writer (one replica process) appends to ``audit-<writer>-<seq>.jsonl`` in the
audit folder, never to another writer's file, so several processes on one machine
need no lock. A file past ``max_file_bytes`` is closed and the chain goes on in the
next ``seq``, whose header carries the hash of the last line before it
(:mod:`serving.tenancy.audit_chain`). A writer that finds files of its own name (the
same process name started again) continues after the newest one.

Writes come in batches from the ledger's thread: each batch is written, flushed and
fsynced once, so a crash of the process loses at most the batch being written (its
last line may then be cut short, which ``serving audit verify`` reports).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from serving.tenancy.audit_chain import ChainBreak, FileVerdict, header_line, line_hash, record_line, verify_lines

log = logging.getLogger("serveout.audit")

_FILE = re.compile(r"^audit-(?P<writer>[A-Za-z0-9_.-]+)-(?P<seq>\d{5,})\.jsonl$")


def file_name(writer: str, seq: int) -> str:
    return f"audit-{writer}-{seq:05d}.jsonl"


def safe_writer(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "writer"


class AuditWriter:
    """Appends records to one writer's chain (not thread-safe: one thread writes)."""

    def __init__(self, folder: Path, writer: str, *, max_file_bytes: int) -> None:
        self.folder, self.writer, self.max_file_bytes = Path(folder), safe_writer(writer), max_file_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = None
        self._size = 0
        seq, prev = self._continue_after()
        self._open(seq, prev)

    def _continue_after(self) -> tuple[int, str | None]:
        mine = sorted(writer_files(self.folder).get(self.writer, []))
        if not mine:
            return 0, None
        seq, newest = mine[-1]
        lines = newest.read_bytes().decode("utf-8", errors="replace").split("\n")
        complete = [line for line in lines[:-1] if line]  # a cut last line is left out of the chain
        return seq + 1, line_hash(complete[-1]) if complete else None

    def _open(self, seq: int, prev: str | None) -> None:
        self.seq = seq
        self.path = self.folder / file_name(self.writer, seq)
        self._file = open(self.path, "x", encoding="utf-8")
        header = header_line(writer=self.writer, seq=seq, prev=prev, created=time.time())
        self._file.write(header + "\n")
        self._size = len(header.encode()) + 1
        self.last_hash = line_hash(header)

    def write(self, records: Iterable[dict]) -> None:
        """Append ``records`` (JSON-able dicts), rotating when a file is full; then flush
        and fsync once."""
        for fields in records:
            line = record_line(fields, self.last_hash)
            self._file.write(line + "\n")
            self._size += len(line.encode()) + 1
            self.last_hash = line_hash(line)
            if self._size >= self.max_file_bytes:
                self._rotate()
        self._sync()

    def _rotate(self) -> None:
        self._sync()
        self._file.close()
        log.info(json.dumps({"event": "audit_rotated", "file": str(self.path), "last_hash": self.last_hash}))
        self._open(self.seq + 1, self.last_hash)

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._sync()
            self._file.close()
            self._file = None


def writer_files(folder: Path) -> dict[str, list[tuple[int, Path]]]:
    """The audit files in ``folder`` by writer: (seq, path), sorted."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for path in sorted(Path(folder).glob("audit-*.jsonl")):
        match = _FILE.match(path.name)
        if match:
            found.setdefault(match["writer"], []).append((int(match["seq"]), path))
    return {w: sorted(files) for w, files in found.items()}


def verify_file(path: Path, *, expect_prev: str | None | object = ...) -> FileVerdict:
    data = Path(path).read_bytes().decode("utf-8", errors="replace")
    lines = data.split("\n")
    ends = data.endswith("\n")
    if ends:
        lines = lines[:-1]
    return verify_lines(lines, file=str(path), ends_with_newline=ends, expect_prev=expect_prev)


def verify_path(path: Path) -> tuple[list[FileVerdict], ChainBreak | None]:
    """Check a file, or every writer's rotated set in a folder (each file chained to the
    one before it, from ``seq`` 0 or the oldest kept). The verdicts, and the first break."""
    path = Path(path)
    if path.is_file():
        verdict = verify_file(path)
        return [verdict], verdict.broken
    if not path.is_dir():
        raise FileNotFoundError(f"no audit file or folder at {path}")
    verdicts: list[FileVerdict] = []
    first: ChainBreak | None = None
    for writer, files in writer_files(path).items():
        expect: str | None | object = ...
        for index, (seq, file) in enumerate(files):
            if index and seq != files[index - 1][0] + 1:
                verdicts.append(FileVerdict(str(file), None, 0, None, ChainBreak(
                    str(file), 1, f"file {seq - 1} of writer {writer} is missing")))
                first = first or verdicts[-1].broken
                break
            verdict = verify_file(file, expect_prev=expect)
            verdicts.append(verdict)
            if verdict.broken is not None:
                first = first or verdict.broken
                break
            expect = verdict.last_hash
    return verdicts, first
