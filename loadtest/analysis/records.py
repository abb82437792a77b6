"""Raw per-request records: one JSON line per request, written by the load generator.

Times are seconds. ``start_s`` and ``scheduled_s`` are offsets from the stage clock's
zero; ``ttft_s`` and ``e2e_s`` are measured from the moment the request was sent.

Sessions: ``session`` is the plan's session (a pool session cycled twice appears twice;
a replayed trace's own session), ``session_seq`` the session as sent, unique in the
stage; ``turn`` counts from 0; an agent step's requests (``fanout`` > 1) share their turn
and are told apart by ``branch``. ``cancel_after_s``: the client was to abandon the
request that long after sending it (``error_kind`` ``client_cancelled`` if it did).
``model``: the model the request named (its session's own, else the target's); ``None``
in records written before it was recorded. ``tenant`` and ``priority_class``: the tenant
that sent it and the class it asked for (``--tenant``; ``None`` without tenants).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from loadtest.errors import ParseError


class ErrorKind(enum.StrEnum):
    """Why a request failed."""

    HTTP_429 = "http_429"  # rate limited / overloaded (Retry-After recorded)
    HTTP_4XX = "http_4xx"  # other client errors
    HTTP_5XX = "http_5xx"  # server errors
    TIMEOUT = "timeout"  # no complete answer within the request timeout
    CONNECTION = "connection"  # refused, reset or closed before the answer completed
    STREAM_ERROR = "stream_error"  # an error event in the middle of an SSE stream
    PROTOCOL = "protocol"  # malformed body/chunk, or a stream without any content
    CANCELLED = "cancelled"  # still in flight when the run's hard stop came
    CLIENT_CANCELLED = "client_cancelled"  # abandoned on purpose (--cancel): not a failure


class TokenSource(enum.StrEnum):
    USAGE = "usage"  # the server's usage object
    TOKENIZER = "tokenizer"  # counted locally with the model's tokenizer
    NONE = "none"  # unknown


class RequestRecord(BaseModel):
    """Everything measured about one request."""

    model_config = ConfigDict(extra="forbid")

    id: int
    stage: int = 0
    session: int = 0
    turn: int = 0
    session_seq: int | None = None
    branch: int | None = None
    fanout: int | None = None
    user: int = 0
    scheduled_s: float | None = None
    start_s: float
    start_unix: float
    ok: bool
    status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    retry_after_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float
    itl_s: list[float] = []
    chunks: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    token_source: TokenSource = TokenSource.NONE
    expected_prompt_tokens: int | None = None
    requested_output_tokens: int | None = None
    finish_reason: str | None = None
    output_text: str | None = None
    cancel_after_s: float | None = None
    model: str | None = None
    tenant: str | None = None
    priority_class: str | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.e2e_s

    @property
    def arrival_lag_s(self) -> float | None:
        """How late the request left compared with its open-loop schedule."""
        return None if self.scheduled_s is None else max(0.0, self.start_s - self.scheduled_s)


def record_line(record: RequestRecord) -> str:
    """One JSONL line (without newline)."""
    return record.model_dump_json(exclude_none=True)


def parse_record_line(line: str) -> RequestRecord:
    try:
        return RequestRecord.model_validate_json(line)
    except ValidationError as exc:
        raise ParseError(f"bad request record: {exc.errors()[0]['msg']}: {line[:200]!r}") from None


def read_records(path: Path) -> list[RequestRecord]:
    """Every complete record of a JSONL file (a torn last line is ignored)."""
    if not path.exists():
        return []
    return list(iter_records(path.read_text(encoding="utf-8").splitlines(keepends=True)))


def iter_records(lines: Iterable[str]) -> Iterator[RequestRecord]:
    for line in lines:
        if not line.endswith("\n"):
            return
        if line.strip():
            yield parse_record_line(line)


class RecordTail:
    """Reads the records appended to a JSONL file since the last call (for live progress)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""

    def read_new(self) -> list[RequestRecord]:
        try:
            with self.path.open("r", encoding="utf-8") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
                self._offset = handle.tell()
        except FileNotFoundError:
            return []
        text = self._partial + chunk
        lines = text.splitlines(keepends=True)
        self._partial = lines.pop() if lines and not lines[-1].endswith("\n") else ""
        return list(iter_records(lines))
