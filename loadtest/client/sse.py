"""Server-sent events and OpenAI streaming chunks (pure).

:class:`SSEDecoder` turns arbitrary byte chunks into events following the WHATWG
rules (any line ending, comments, multi-line ``data``, split UTF-8). :class:`StreamTimer`
consumes the events of one OpenAI stream with their arrival times and yields the
request's TTFT, inter-chunk gaps, usage and mid-stream error. :class:`StreamReader` joins
the two with a fast path for the usual ``data: {json}`` + blank line shape.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from loadtest.errors import ParseError

_decode_json = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event (``data`` lines joined with ``\\n``)."""

    data: str
    event: str | None = None
    id: str | None = None


class SSEDecoder:
    """Incremental SSE decoder: ``feed`` bytes, get the completed events."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending_cr = False
        self._first = True
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk`` and return every event it completes."""
        text = self._text.decode(chunk)
        if self._first and text:
            text = text.removeprefix("\ufeff")
            self._first = False
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]
        self._pending_cr = False
        self._buffer += text
        events: list[SSEEvent] = []
        while True:
            cut = _first_line_end(self._buffer)
            if cut is None:
                break
            end, width = cut
            if self._buffer[end] == "\r" and end + 1 == len(self._buffer):
                # "\r" at the end: a following "\n" belongs to the same line ending.
                self._pending_cr = True
            line = self._buffer[:end]
            self._buffer = self._buffer[end + width :]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: the unterminated last line is processed and pending data is
        dispatched (the spec discards it; being lenient keeps a sloppy server's last
        chunk countable)."""
        self._buffer += self._text.decode(b"", final=True)
        events: list[SSEEvent] = []
        if self._buffer:
            event = self._line(self._buffer)
            self._buffer = ""
            if event is not None:
                events.append(event)
        event = self._line("")
        if event is not None:
            events.append(event)
        return events

    def bypass(self) -> bool:
        """Whether a whole line may skip this decoder: nothing (line, field, data, UTF-8
        byte) is pending. If so the stream counts as started (a later BOM is kept)."""
        if self._buffer or self._data or self._event is not None or self._pending_cr:
            return False
        if self._text.getstate()[0]:
            return False
        self._first = False
        return True

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            if not self._data:
                self._event = None
                return None
            event = SSEEvent(data="\n".join(self._data), event=self._event, id=self._id)
            self._data, self._event = [], None
            return event
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def _first_line_end(buffer: str) -> tuple[int, int] | None:
    positions = [p for p in (buffer.find("\r"), buffer.find("\n")) if p >= 0]
    if not positions:
        return None
    end = min(positions)
    width = 2 if buffer.startswith("\r\n", end) else 1
    return end, width


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None
    completion_tokens: int | None


class ChunkInfo(NamedTuple):
    """What one ``data:`` payload of an OpenAI stream carries (a tuple: cheap to build)."""

    done: bool = False
    text: str = ""
    has_choices: bool = False
    usage: Usage | None = None
    error: str | None = None
    finish_reason: str | None = None


def parse_chunk(data: str) -> ChunkInfo:
    """Interpret one ``data:`` payload (chat or completions). Raises :class:`ParseError`."""
    if data.strip() == "[DONE]":
        return ChunkInfo(done=True)
    try:
        body = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ParseError(f"stream chunk is not JSON: {data[:120]!r}") from exc
    if not isinstance(body, dict):
        raise ParseError(f"stream chunk is not a JSON object: {data[:120]!r}")
    return _interpret(body)


def parse_chunk_bytes(data: bytes) -> ChunkInfo:
    """:func:`parse_chunk` of ``data`` decoded as UTF-8 (errors replaced), with the same
    result, but a JSON object is decoded by msgspec straight from the bytes; anything
    msgspec refuses or that is not an object takes the :func:`parse_chunk` route."""
    try:
        body = _decode_json(data)
    except msgspec.MsgspecError:
        body = None
    if not isinstance(body, dict):
        return parse_chunk(data.decode("utf-8", "replace"))
    return _interpret(body)


def _interpret(body: dict) -> ChunkInfo:
    if "error" in body or body.get("object") == "error":
        error = _error_text(body)
        if error is not None:
            return ChunkInfo(error=error)
    choices = body.get("choices")
    if not isinstance(choices, list):  # absent, null or malformed: no choices
        choices = []
    text_parts: list[str] = []
    finish = None
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                value = delta.get(key)
                if isinstance(value, str):
                    text_parts.append(value)
            calls = delta.get("tool_calls")
            if calls:
                text_parts.extend(_arguments(calls))
        elif isinstance(choice.get("text"), str):
            text_parts.append(choice["text"])
        finish = choice.get("finish_reason") or finish
    return ChunkInfo(
        text="".join(text_parts),
        has_choices=bool(choices),
        usage=parse_usage(body.get("usage")),
        finish_reason=finish,
    )


def _arguments(calls: object) -> list[str]:
    """The argument text of streamed tool-call deltas: generated tokens, like content."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            out.append(arguments)
    return out


def parse_usage(value: object) -> Usage | None:
    """The token counts of an OpenAI ``usage`` object (``None`` if ``value`` is not one)."""
    if not isinstance(value, dict):
        return None
    return Usage(_int(value.get("prompt_tokens")), _int(value.get("completion_tokens")))


def _error_text(body: dict) -> str | None:
    error = body.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str):
        return error
    if body.get("object") == "error":
        return str(body.get("message") or body)
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class StreamTimer:
    """Timing state of one streamed response; times are seconds since the request was sent.

    TTFT is the arrival of the first chunk with non-empty content (role-only and
    usage-only chunks do not count; a tool call's arguments count as content); every
    later content chunk adds one gap.
    """

    ttft: float | None = None
    last_content: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    text: list[str] = field(default_factory=list)
    usage: Usage | None = None
    error: str | None = None
    finish_reason: str | None = None
    done: bool = False
    done_at: float | None = None

    def on_event(self, event: SSEEvent, at: float) -> None:
        """Account for one event that arrived ``at`` seconds after sending."""
        self._account(parse_chunk(event.data), at)

    def on_data(self, data: bytes, at: float) -> None:
        """:meth:`on_event` for an event whose ``data`` is ``data`` (UTF-8 bytes)."""
        self._account(parse_chunk_bytes(data), at)

    def _account(self, info: ChunkInfo, at: float) -> None:
        if info.done:
            self.done = True
            if self.done_at is None:
                self.done_at = at
            return
        if info.error is not None:
            self.error = info.error
            return
        if info.usage is not None:
            self.usage = info.usage
        if info.finish_reason:
            self.finish_reason = info.finish_reason
        if not info.text:
            return
        self.chunks += 1
        self.text.append(info.text)
        if self.ttft is None:
            self.ttft = at
        else:
            assert self.last_content is not None
            self.gaps.append(at - self.last_content)
        self.last_content = at

    @property
    def output_text(self) -> str:
        return "".join(self.text)


class StreamReader:
    """One OpenAI SSE stream's bytes into a :class:`StreamTimer`: :meth:`feed` each chunk
    with its arrival time, then :meth:`close`.

    Fast path: while the decoder has nothing pending, a ``data: `` line ended by ``\\n`` or
    ``\\r\\n`` and then the blank line (in one chunk, or in two as ``readline`` gives
    them) goes straight to :meth:`StreamTimer.on_data`. Everything else (other line
    endings, fields, comments, multi-line data, a line split across chunks) goes through
    :class:`SSEDecoder` and :meth:`StreamTimer.on_event`; the timings are the same.
    """

    def __init__(self, timer: StreamTimer | None = None) -> None:
        self.timer = timer if timer is not None else StreamTimer()
        self.fast_events = 0
        self._decoder = SSEDecoder()
        self._line = b""  # a fast-path data line waiting for its blank line
        self._payload = b""

    def feed(self, chunk: bytes, at: float) -> None:
        """Account for ``chunk``, which arrived ``at`` seconds after sending."""
        if self._line:
            if chunk == b"\n" or chunk == b"\r\n":
                self._line = b""
                self.fast_events += 1
                self.timer.on_data(self._payload, at)
                return
            self._flush(at)
        elif chunk[:6] == b"data: " and self._decoder.bypass():
            fast = _data_line(chunk)
            if fast is not None:
                payload, complete = fast
                if complete:
                    self.fast_events += 1
                    self.timer.on_data(payload, at)
                else:
                    self._line, self._payload = chunk, payload
                return
        self._slow(self._decoder.feed(chunk), at)

    def close(self, at: float) -> None:
        """End of stream (see :meth:`SSEDecoder.close`)."""
        self._flush(at)
        self._slow(self._decoder.close(), at)

    def _flush(self, at: float) -> None:
        if self._line:
            self._slow(self._decoder.feed(self._line), at)
            self._line = b""

    def _slow(self, events: list[SSEEvent], at: float) -> None:
        for event in events:
            self.timer.on_event(event, at)


def _data_line(chunk: bytes) -> tuple[bytes, bool] | None:
    """``(payload, whole event)`` if ``chunk`` (which starts with ``data: ``) is one line
    ended by ``\\n`` or ``\\r\\n``, optionally followed by the blank line; else ``None``."""
    if chunk[-1:] != b"\n":
        return None
    before = chunk[-2:-1]
    if before == b"\n":
        payload, complete = chunk[6:-2], True
    elif before != b"\r":
        payload, complete = chunk[6:-1], False
    elif chunk[-4:] == b"\r\n\r\n":
        payload, complete = chunk[6:-4], True
    else:
        payload, complete = chunk[6:-2], False
    if b"\n" in payload or b"\r" in payload:
        return None
    return payload, complete
