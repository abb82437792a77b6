"""Reading tool calls out of generated text, piece by piece (pure; the ``auto`` reader
runs over a FAKE parser that reads ``CALL name {json}`` lines)."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.engine.protocol import ToolCallDelta, ToolCalling
from serving.engine.tool_calls import (
    NamedReader,
    Parsed,
    ParsedCall,
    ParserReader,
    Piece,
    RequiredReader,
    reader_for,
    scan_calls,
)


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def feed(reader, pieces, reason="stop"):
    """Every piece through ``reader`` (the last with ``reason``): the content and the
    calls merged as a client merges deltas, and the finish reason."""
    content, calls, finish = "", [], None
    for i, text in enumerate(pieces):
        last = i == len(pieces) - 1
        piece = reader.read(text, [0] * len(text), reason if last else None)
        content += piece.text
        for d in piece.tool_calls:
            if d.index == len(calls):
                assert d.id and d.name, "a call's first delta names it"
                calls.append([d.id, d.name, d.arguments])
            else:
                assert d.id is None and d.name is None
                calls[d.index][2] += d.arguments
        finish = piece.finish_reason if last else finish
        if not last:
            assert piece.finish_reason is None
    return content, [(name, args) for _, name, args in calls], finish


def chars(text: str) -> list[str]:
    return list(text)


REQUIRED = '[{"name":"get_weather","parameters":{"city":"Paris","days":[1,2]}},{"name":"noop","parameters":{}}]'


def test_named_call_streams_the_text_as_its_arguments():
    content, calls, finish = feed(NamedReader("get_weather", ids()), ['{"ci', 'ty":', '"Paris"}'])
    assert content == "" and calls == [("get_weather", '{"city":"Paris"}')]
    assert finish == "stop"  # OpenAI reports a forced named call as stop


def test_named_call_with_no_text_still_names_the_function():
    _, calls, _ = feed(NamedReader("f", ids()), [""], reason="length")
    assert calls == [("f", "")]


@pytest.mark.parametrize("split", [chars, lambda t: [t], lambda t: [t[:7], t[7:30], t[30:]]])
def test_required_calls_come_out_however_the_text_is_split(split):
    content, calls, finish = feed(RequiredReader(ids()), split(REQUIRED))
    assert content == ""
    assert calls == [("get_weather", '{"city":"Paris","days":[1,2]}'), ("noop", "{}")]
    assert finish == "tool_calls"


@given(st.lists(st.integers(min_value=1, max_value=len(REQUIRED) - 1), unique=True, max_size=12))
def test_required_calls_do_not_depend_on_where_pieces_end(cuts):
    bounds = [0, *sorted(cuts), len(REQUIRED)]
    pieces = [REQUIRED[a:b] for a, b in zip(bounds, bounds[1:])]
    assert feed(RequiredReader(ids()), pieces)[1] == [
        ("get_weather", '{"city":"Paris","days":[1,2]}'), ("noop", "{}")]


def test_required_call_is_announced_only_once_its_name_is_complete():
    reader = RequiredReader(ids())
    assert reader.read('[{"name":"get_wea', [], None).tool_calls == ()
    first = reader.read('ther","parameters":{"ci', [], None).tool_calls
    assert first == (ToolCallDelta(0, id="call_0", name="get_weather", arguments='{"ci'),)


def test_strings_holding_braces_and_quotes_do_not_confuse_the_scan():
    text = '[{"name":"f","parameters":{"q":"a}\\"],{b"}}, {"name": "g", "parameters": "x,y"}]'
    scanned = scan_calls(text)
    assert [c.name for c in scanned] == ["f", "g"]
    assert [c.arguments(text) for c in scanned] == ['{"q":"a}\\"],{b"}', '"x,y"']


def test_without_parallel_calls_only_the_first_is_kept():
    assert feed(RequiredReader(ids(), parallel=False), [REQUIRED])[1] == [
        ("get_weather", '{"city":"Paris","days":[1,2]}')]


def test_text_that_is_no_call_array_is_returned_as_content():
    content, calls, finish = feed(RequiredReader(ids()), ["I cannot", " do that"])
    assert (content, calls, finish) == ("I cannot do that", [], "stop")


def test_a_cut_answer_keeps_its_finish_reason():
    content, calls, finish = feed(RequiredReader(ids()), ['[{"name":"f","parameters":{"a":'], reason="length")
    assert calls == [("f", '{"a":')] and finish == "length"


class FakeParser:
    """A FAKE family format: ``CALL name {json}`` lines; other text is content. Its
    streaming reading holds back everything from ``CALL`` on (and what may be its start)
    and sends a call once its line ends."""

    LINE = re.compile(r"CALL (\w+) (\{.*?\})\n")

    def __init__(self) -> None:
        self.sent_content = 0
        self.sent_calls = 0

    def parse(self, text: str) -> Parsed:
        calls = tuple(ParsedCall(name, args) for name, args in self.LINE.findall(text))
        if not calls:
            return Parsed(text)
        try:
            for call in calls:
                json.loads(call.arguments)
        except ValueError:
            return Parsed(text)
        return Parsed(text[:text.index("CALL")], calls)

    def parse_delta(self, previous, current, delta, previous_ids, current_ids, delta_ids):
        end = current.find("CALL")
        if end < 0:  # hold back what may be the start of "CALL"
            end = next((len(current) - k for k in (3, 2, 1) if current.endswith("CALL"[:k])), len(current))
        content = current[self.sent_content:end]
        self.sent_content += len(content)
        found = self.LINE.findall(current)[self.sent_calls:]
        calls = tuple(ToolCallDelta(self.sent_calls + i, name=name, arguments=args)
                      for i, (name, args) in enumerate(found))
        self.sent_calls += len(calls)
        return Piece(content, calls) if content or calls else None


@pytest.mark.parametrize("stream", [True, False])
def test_auto_calls_read_by_the_family_parser(stream):
    reader = ParserReader(FakeParser(), ids(), stream=stream)
    content, calls, finish = feed(reader, chars('Let me check.CALL get_weather {"city": "Oslo"}\n'))
    assert content == "Let me check." and calls == [("get_weather", '{"city": "Oslo"}')]
    assert finish == "tool_calls"


@pytest.mark.parametrize("stream", [True, False])
def test_auto_text_without_calls_is_content(stream):
    content, calls, finish = feed(ParserReader(FakeParser(), ids(), stream=stream), chars("Just text."))
    assert (content, calls, finish) == ("Just text.", [], "stop")


BROKEN = 'Sure.CALL get_weather {"city": Oslo}\n'  # its arguments are not JSON


def test_a_call_the_parser_cannot_read_comes_back_as_content():
    content, calls, finish = feed(ParserReader(FakeParser(), ids(), stream=False), chars(BROKEN))
    assert (content, calls, finish) == (BROKEN, [], "stop")


def test_a_stream_never_drops_text_of_a_call_the_whole_parse_cannot_read():
    # The stream already sent the call's pieces; the text the whole parse could not
    # read as a call follows as content, so none of it is lost.
    content, calls, _ = feed(ParserReader(FakeParser(), ids(), stream=True), chars(BROKEN))
    assert content == BROKEN and calls == [("get_weather", '{"city": Oslo}')]


def test_a_stream_that_ends_before_a_call_line_ends_gets_the_call_from_the_whole_text():
    class Late(FakeParser):  # streams content only: calls come from the whole text
        def parse_delta(self, *args):
            piece = super().parse_delta(*args)
            return Piece(piece.text) if piece is not None and piece.text else None

    content, calls, finish = feed(ParserReader(Late(), ids(), stream=True), ['Hi.CALL f {"a": 1}\n'])
    assert content == "Hi." and calls == [("f", '{"a": 1}')] and finish == "tool_calls"


def test_reader_for_picks_the_reader_of_the_tool_choice():
    assert isinstance(reader_for(ToolCalling(mode="named", function="f"), None), NamedReader)
    assert isinstance(reader_for(ToolCalling(mode="required"), None), RequiredReader)
    assert isinstance(reader_for(ToolCalling(mode="auto"), FakeParser), ParserReader)
    with pytest.raises(ValueError):
        reader_for(ToolCalling(mode="auto"), None)
