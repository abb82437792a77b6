"""Request traces read as they were recorded (pure: text in, rows out).

Formats (``format=auto`` tells them apart by their first line):

- ``mooncake``: JSONL, one request a line: ``timestamp`` (milliseconds), ``input_length``,
  ``output_length``, ``hash_ids`` (block hashes: two requests sharing the first ``k``
  ids share their first ``k`` blocks of tokens; Mooncake's blocks are 512 tokens).
  Lines with ``chat_id``, ``parent_chat_id``, ``turn`` (Alibaba's Qwen-Bailian traces:
  ``timestamp`` in seconds, 16-token blocks) or ``session_id`` (and an optional ``turn``)
  carry their session.
- ``burstgpt``: CSV with ``Timestamp`` (seconds), ``Request tokens``, ``Response tokens``
  (BurstGPT; a row with 0 response tokens is a failed request and is skipped, counted).
- ``azure``: CSV with ``TIMESTAMP`` (a date and time), ``ContextTokens``,
  ``GeneratedTokens`` (Azure's LLM inference traces).

A field the load tester does not use (``type``, ``Model``, ``Log Type``...) is named in
:attr:`Trace.ignored_fields`, never dropped unseen. Every problem is a
:class:`~loadtest.errors.ConfigError` naming the file and line.
"""

from __future__ import annotations

import csv
import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone

from loadtest.errors import ConfigError


class TraceFormat(enum.StrEnum):
    AUTO = "auto"
    MOONCAKE = "mooncake"
    BURSTGPT = "burstgpt"
    AZURE = "azure"


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One recorded request. ``t_s``: seconds since the trace's first row; ``session``:
    the trace's own session key (``None``: not given); ``turn``: 1 for a session's first."""

    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: str | None = None
    turn: int | None = None


@dataclass(frozen=True)
class Trace:
    """The rows of a trace file in time order, and what its reading left aside."""

    rows: tuple[TraceRow, ...]
    format: TraceFormat
    block_size: int | None  # the format's own block size (None: no block hashes)
    skipped: int = 0  # rows of failed requests (BurstGPT: 0 response tokens)
    ignored_fields: tuple[str, ...] = ()

    @property
    def has_sessions(self) -> bool:
        return any(r.session is not None for r in self.rows)


MOONCAKE_FIELDS = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
SESSION_FIELDS = frozenset({"chat_id", "parent_chat_id", "turn", "session_id"})
MOONCAKE_BLOCK = 512
BAILIAN_BLOCK = 16
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def detect_format(text: str, source: str) -> TraceFormat:
    """The format of a trace from its first non-blank line."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("{"):
        return TraceFormat.MOONCAKE
    header = [c.strip() for c in next(csv.reader([first]), [])]
    if all(c in header for c in BURSTGPT_COLUMNS):
        return TraceFormat.BURSTGPT
    if all(c in header for c in AZURE_COLUMNS):
        return TraceFormat.AZURE
    raise ConfigError(f"trace {source}: not a known trace format (Mooncake-style JSONL, or a CSV with the columns "
                      f"{', '.join(BURSTGPT_COLUMNS)} (BurstGPT) or {', '.join(AZURE_COLUMNS)} (Azure))")


def parse_trace(text: str, source: str, fmt: TraceFormat = TraceFormat.AUTO) -> Trace:
    """The trace in ``text`` (``source`` names it in errors), rows sorted by time."""
    fmt = detect_format(text, source) if fmt is TraceFormat.AUTO else fmt
    trace = {TraceFormat.MOONCAKE: _jsonl, TraceFormat.BURSTGPT: _burstgpt, TraceFormat.AZURE: _azure}[fmt](text, source)
    if not trace.rows:
        raise ConfigError(f"trace {source} holds no request")
    t0 = min(r.t_s for r in trace.rows)
    rows = sorted((_shift(r, t0) for r in trace.rows), key=lambda r: r.t_s)  # stable: ties keep file order
    return Trace(tuple(rows), trace.format, trace.block_size, trace.skipped, trace.ignored_fields)


def _shift(row: TraceRow, t0: float) -> TraceRow:
    return row if t0 == 0 else TraceRow(row.t_s - t0, row.input_tokens, row.output_tokens, row.hash_ids,
                                        row.session, row.turn)


def _count(value: object, where: str, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < minimum:
        raise ConfigError(f"{where}: {name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _time(value: object, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _jsonl(text: str, source: str) -> Trace:
    rows: list[TraceRow] = []
    ignored: set[str] = set()
    bailian = False
    parents: dict[object, object] = {}  # chat_id -> root chat id (Bailian sessions)
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"trace {source}, line {number}"
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(line, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in line]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        ignored.update(set(line) - MOONCAKE_FIELDS - SESSION_FIELDS)
        hashes = line.get("hash_ids") or []
        if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
            raise ConfigError(f"{where}: hash_ids must be a list of integers")
        session, turn = None, line.get("turn")
        if "chat_id" in line:
            bailian = True
            chat, parent = line["chat_id"], line.get("parent_chat_id", -1)
            root = chat if parent in (-1, None) else parents.get(parent, parent)
            parents[chat] = root
            session = str(root)
        elif "session_id" in line:
            session = str(line["session_id"])
        if turn is not None:
            turn = _count(turn, where, "turn", 1)
        rows.append(TraceRow(
            t_s=_time(line["timestamp"], where, "timestamp"),
            input_tokens=_count(line["input_length"], where, "input_length", 1),
            output_tokens=_count(line["output_length"], where, "output_length", 1),
            hash_ids=tuple(hashes), session=session, turn=turn,
        ))  # fmt: skip
    # Mooncake's timestamps are milliseconds, Bailian's seconds.
    if not bailian:
        rows = [TraceRow(r.t_s / 1000.0, r.input_tokens, r.output_tokens, r.hash_ids, r.session, r.turn) for r in rows]
    block = BAILIAN_BLOCK if bailian else MOONCAKE_BLOCK
    has_hashes = any(r.hash_ids for r in rows)
    return Trace(tuple(rows), TraceFormat.MOONCAKE, block if has_hashes else None, 0, tuple(sorted(ignored)))


def _csv_rows(text: str, source: str, columns: tuple[str, ...]):
    reader = csv.DictReader(text.splitlines())
    header = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(f"trace {source}: missing column(s) {', '.join(missing)}")
    reader.fieldnames = header
    ignored = tuple(sorted(set(header) - set(columns)))
    return ((n, {k: (v or "").strip() for k, v in row.items() if k}) for n, row in enumerate(reader, start=2)), ignored


def _number(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {name} must be a number, got {text!r}") from None
    return value


def _burstgpt(text: str, source: str) -> Trace:
    rows, skipped = [], 0
    lines, ignored = _csv_rows(text, source, BURSTGPT_COLUMNS)
    for number, row in lines:
        where = f"trace {source}, line {number}"
        t = _time(_number(row["Timestamp"], where, "Timestamp"), where, "Timestamp")
        tokens_in = _count(_number(row["Request tokens"], where, "Request tokens"), where, "Request tokens", 0)
        tokens_out = _count(_number(row["Response tokens"], where, "Response tokens"), where, "Response tokens", 0)
        if tokens_out == 0 or tokens_in == 0:
            skipped += 1
            continue
        rows.append(TraceRow(t, tokens_in, tokens_out))
    return Trace(tuple(rows), TraceFormat.BURSTGPT, None, skipped, ignored)


def _azure(text: str, source: str) -> Trace:
    rows = []
    lines, ignored = _csv_rows(text, source, AZURE_COLUMNS)
    for number, row in lines:
        where = f"trace {source}, line {number}"
        stamp = row["TIMESTAMP"]
        try:
            # Seven fractional digits (100 ns): Python's parser takes six.
            head, _, fraction = stamp.partition(".")
            at = datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp() + (float("0." + fraction) if fraction else 0.0)
        except ValueError:
            raise ConfigError(f"{where}: TIMESTAMP must be a date and time, got {stamp!r}") from None
        rows.append(TraceRow(at, _count(_number(row["ContextTokens"], where, "ContextTokens"), where, "ContextTokens", 1),
                             _count(_number(row["GeneratedTokens"], where, "GeneratedTokens"), where,
                                    "GeneratedTokens", 1)))  # fmt: skip
    return Trace(tuple(rows), TraceFormat.AZURE, None, 0, ignored)
