"""Reading tool calls out of a choice's generated text, piece by piece (pure).

One reader per choice of a request with :class:`~serving.engine.protocol.ToolCalling`;
the engine feeds it each new piece of text and gets back what to send: content, and
tool-call deltas (the first of a call carries its id and name, later ones more of its
arguments). Three readers, one per ``tool_choice``:

- :class:`NamedReader` (a named function): the text, forced by the grammar to be the
  function's arguments, is streamed as the arguments of one call;
- :class:`RequiredReader` (``required``): the text, forced to be a JSON array of
  ``{"name", "parameters"}``, is scanned as it grows; each call is announced once its
  name is complete, then its arguments stream as the raw text of ``parameters``;
- :class:`ParserReader` (``auto``): the model family's parser
  (:class:`ToolParser`; vLLM's, in :mod:`serving.engine.vllm_tool_parser`) finds the calls
  in free text. A whole answer is parsed once at its end; a stream is parsed as it goes
  and reconciled with the parse of the whole text at its end.

Whatever cannot be read as a tool call is content, never dropped. A choice that made
calls and stopped by itself finishes with ``tool_calls`` (a named call keeps ``stop``,
as OpenAI reports it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from serving.engine.protocol import ToolCallDelta, ToolCalling


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class Piece:
    """What a reader gives back for one piece of text."""

    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str


@dataclass(frozen=True)
class Parsed:
    """A parser's reading of a whole text: the content around the calls, and the calls."""

    content: str
    calls: tuple[ParsedCall, ...] = ()


class ToolParser(Protocol):
    """A model family's tool-call format (one instance per choice: streaming keeps state)."""

    def parse(self, text: str) -> Parsed:
        """The whole text; text it cannot read as calls is content."""
        ...

    def parse_delta(self, previous: str, current: str, delta: str, previous_ids: Sequence[int],
                    current_ids: Sequence[int], delta_ids: Sequence[int]) -> Piece | None:
        """The next piece of a stream (None: nothing to send yet)."""
        ...


class ChoiceReader(Protocol):
    def read(self, text: str, token_ids: Sequence[int], finish_reason: str | None) -> Piece:
        """The next piece of text (``finish_reason`` set on the choice's last piece)."""
        ...


def reader_for(calling: ToolCalling, parser: Callable[[], ToolParser] | None,
               new_id: Callable[[], str] = new_call_id) -> ChoiceReader:
    """The reader of one choice. ``parser`` builds the family's parser (auto only)."""
    if calling.mode == "named":
        return NamedReader(calling.function or "", new_id)
    if calling.mode == "required":
        return RequiredReader(new_id, parallel=calling.parallel)
    if parser is None:
        raise ValueError("tool_choice auto needs the model's tool-call parser")
    return ParserReader(parser(), new_id, stream=calling.stream, parallel=calling.parallel)


def _finish(reason: str | None, called: bool) -> str | None:
    return "tool_calls" if called and reason == "stop" else reason


class NamedReader:
    """The text is the arguments of one call of ``function``."""

    def __init__(self, function: str, new_id: Callable[[], str]) -> None:
        self._function, self._new_id = function, new_id
        self._started = False

    def read(self, text: str, token_ids: Sequence[int], finish_reason: str | None) -> Piece:
        if not text and (self._started or finish_reason is None):
            return Piece(finish_reason=finish_reason)
        if self._started:
            return Piece(tool_calls=(ToolCallDelta(0, arguments=text),), finish_reason=finish_reason)
        self._started = True
        call = ToolCallDelta(0, id=self._new_id(), name=self._function, arguments=text)
        return Piece(tool_calls=(call,), finish_reason=finish_reason)


@dataclass
class _Scanned:
    name: str | None = None
    args_start: int | None = None
    args_end: int | None = None

    def arguments(self, text: str) -> str:
        if self.args_start is None:
            return ""
        end = len(text) if self.args_end is None else self.args_end
        return text[self.args_start:end].rstrip()


def scan_calls(text: str) -> list[_Scanned]:
    """The calls of a (possibly unfinished) JSON array ``[{"name": ..., "parameters":
    ...}, ...]``: each call's name once its string is complete, and where its
    ``parameters`` value starts and ends in ``text``."""
    calls: list[_Scanned] = []
    depth, in_string, escaped, string_start = 0, False, False, 0
    key: str | None = None  # the key just read at the call's level
    value_of: str | None = None  # the key whose value is being read
    expect_key = False
    current: _Scanned | None = None
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 2 and current is not None:
                    literal = text[string_start:i + 1]
                    if expect_key:
                        key, expect_key = json.loads(literal), False
                    elif value_of == "name":
                        current.name = json.loads(literal)
            continue
        if ch.isspace():
            continue
        if depth == 2 and current is not None and value_of == "parameters" and current.args_start is None:
            current.args_start = i
        if ch == '"':
            in_string, string_start = True, i
        elif ch in "{[":
            if depth == 1 and ch == "{":
                current = _Scanned()
                calls.append(current)
                expect_key, value_of = True, None
            depth += 1
        elif ch in "}]":
            if depth == 2 and current is not None:
                _end_value(current, value_of, i)
                current, value_of = None, None
            depth -= 1
        elif depth == 2 and current is not None:
            if ch == ":":
                value_of = key
            elif ch == ",":
                _end_value(current, value_of, i)
                value_of, expect_key = None, True
    return calls


def _end_value(call: _Scanned, key: str | None, at: int) -> None:
    if key == "parameters" and call.args_start is not None and call.args_end is None:
        call.args_end = at


class RequiredReader:
    """The text is a JSON array of calls; each is announced when its name is complete."""

    def __init__(self, new_id: Callable[[], str], *, parallel: bool = True) -> None:
        self._new_id, self._parallel = new_id, parallel
        self._text = ""
        self._sent: list[int] = []  # argument characters sent, per call

    def read(self, text: str, token_ids: Sequence[int], finish_reason: str | None) -> Piece:
        self._text += text
        deltas = []
        for i, call in enumerate(scan_calls(self._text)):
            if call.name is None or (i > 0 and not self._parallel):
                break
            args = call.arguments(self._text)
            if i == len(self._sent):
                deltas.append(ToolCallDelta(i, id=self._new_id(), name=call.name, arguments=args))
                self._sent.append(len(args))
            elif len(args) > self._sent[i]:
                deltas.append(ToolCallDelta(i, arguments=args[self._sent[i]:]))
                self._sent[i] = len(args)
        content = self._text if finish_reason is not None and not self._sent else ""
        return Piece(content, tuple(deltas), _finish(finish_reason, bool(self._sent)))


@dataclass
class _Sent:
    content: str = ""
    arguments: list[str] = field(default_factory=list)  # per call index


class ParserReader:
    """Free text read by the model family's parser."""

    def __init__(self, parser: ToolParser, new_id: Callable[[], str], *, stream: bool,
                 parallel: bool = True) -> None:
        self._parser, self._new_id = parser, new_id
        self._stream, self._parallel = stream, parallel
        self._text = ""
        self._ids: list[int] = []
        self._sent = _Sent()

    def read(self, text: str, token_ids: Sequence[int], finish_reason: str | None) -> Piece:
        previous, previous_ids = self._text, self._ids
        self._text, self._ids = previous + text, previous_ids + list(token_ids)
        content, deltas = "", []
        if self._stream and (text or token_ids):
            piece = self._parser.parse_delta(previous, self._text, text, previous_ids, self._ids, list(token_ids))
            if piece is not None:
                content = piece.text
                deltas = [self._record(d) for d in piece.tool_calls if self._parallel or d.index == 0]
        self._sent.content += content
        if finish_reason is not None:
            more_content, more_calls = self._reconcile(self._parser.parse(self._text))
            content += more_content
            deltas += more_calls
        called = bool(self._sent.arguments)
        return Piece(content, tuple(deltas), _finish(finish_reason, called))

    def _record(self, delta: ToolCallDelta) -> ToolCallDelta:
        sent = self._sent.arguments
        if delta.index == len(sent):  # a new call: make sure it has an id and a name
            sent.append("")
            if delta.id is None:
                delta = ToolCallDelta(delta.index, id=self._new_id(), name=delta.name, arguments=delta.arguments)
        if delta.index < len(sent):
            sent[delta.index] += delta.arguments
        return delta

    def _reconcile(self, parsed: Parsed) -> tuple[str, list[ToolCallDelta]]:
        """What the stream (or a whole answer) still owes, from the parse of the whole text:
        calls never sent, the rest of calls' arguments, and any content not sent (which
        is all the text when the parser found no call it could read)."""
        calls = parsed.calls if self._parallel else parsed.calls[:1]
        sent = self._sent
        deltas = []
        for i, call in enumerate(calls):
            if i >= len(sent.arguments):
                deltas.append(self._record(ToolCallDelta(i, id=self._new_id(), name=call.name,
                                                         arguments=call.arguments)))
            elif call.arguments.startswith(sent.arguments[i]) and len(call.arguments) > len(sent.arguments[i]):
                deltas.append(self._record(ToolCallDelta(i, arguments=call.arguments[len(sent.arguments[i]):])))
        owed = parsed.content if calls else self._text
        content = owed[len(sent.content):] if owed.startswith(sent.content) else ""
        sent.content += content
        return content, deltas
