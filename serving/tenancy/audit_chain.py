"""The audit trail's hash chain (pure: lines in, verdicts out).

A file is a header line, then one JSON line per request. Every line after the header
carries ``prev``: the SHA-256 (hex) of the line before it, as written (its bytes
without the newline), so the first record is chained to its file's header. A header
carries ``prev`` too: the hash of the last line of the writer's previous file (None
for a chain's first file), so the chain continues across rotated files. Altering,
inserting or removing a line breaks the link of the line after it; a line cut short
(a crash while writing) is not valid JSON.

Not detected by the chain alone: the newest record of a chain, or the newest files,
being removed or altered (nothing comes after them); the ledger logs each file's last
hash when it rotates, which anchors everything before it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

FORMAT = "serveout-audit/1"


def line_hash(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


def header_line(*, writer: str, seq: int, prev: str | None, created: float) -> str:
    return json.dumps({"format": FORMAT, "writer": writer, "seq": seq, "prev": prev,
                       "created": round(created, 3)}, separators=(",", ":"))


def record_line(fields: dict, prev: str) -> str:
    """One record: ``fields`` then ``prev`` (JSON, one line; non-ASCII kept as is)."""
    return json.dumps({**fields, "prev": prev}, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ChainBreak:
    """The first line that does not hold: 1-based ``line`` in ``file``; ``truncated``
    when it is the file's last line, cut short (a crash while writing)."""

    file: str
    line: int
    reason: str
    truncated: bool = False

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class FileVerdict:
    """A checked file: its header, its records, the hash of its last line, or a break."""

    file: str
    header: dict | None
    records: int
    last_hash: str | None
    broken: ChainBreak | None = None


def verify_lines(lines: Iterable[str], *, file: str, ends_with_newline: bool = True,
                 expect_prev: str | None | object = ...) -> FileVerdict:
    """Check one file's lines (without newlines). ``expect_prev``: what the header's
    ``prev`` must be (the previous file's last hash; ``...``: not checked)."""
    lines = list(lines)
    if not lines:
        return FileVerdict(file, None, 0, None, ChainBreak(file, 1, "empty file: no header"))
    last_index = len(lines) - 1
    header, prev, records = None, None, 0
    for index, line in enumerate(lines):
        number = index + 1
        cut = index == last_index and not ends_with_newline
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except ValueError:
            reason = "cut short (a crash while writing it?)" if cut else "not a JSON object"
            return FileVerdict(file, header, records, prev, ChainBreak(file, number, reason, truncated=cut))
        if index == 0:
            if data.get("format") != FORMAT:
                return FileVerdict(file, None, 0, None, ChainBreak(file, 1, f"not a header of {FORMAT}"))
            header = data
            if expect_prev is not ... and data.get("prev") != expect_prev:
                return FileVerdict(file, header, 0, None, ChainBreak(
                    file, 1, "header does not chain to the previous file's last record "
                    "(a file before it was altered, removed or cut)"))
        elif data.get("prev") != prev:
            what = "the header" if index == 1 else f"line {index}"
            return FileVerdict(file, header, records, prev, ChainBreak(
                file, number, f"prev is not the SHA-256 of {what}: {what} was altered, or a line "
                "was inserted or removed here"))
        else:
            records += 1
        prev = line_hash(line)
    if not ends_with_newline:
        return FileVerdict(file, header, records, prev, ChainBreak(
            file, len(lines), "last line has no newline (cut short while writing?)", truncated=True))
    return FileVerdict(file, header, records, prev)
