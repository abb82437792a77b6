"""SSE decoding and OpenAI stream timing: split chunks, comments, usage, errors."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.client.sse import SSEDecoder, SSEEvent, StreamTimer, parse_chunk
from loadtest.errors import ParseError


def chat_chunk(content=None, role=None, finish=None):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return json.dumps({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}})

STREAM = (
    ": keep-alive\n\n"
    f"data: {chat_chunk(content='', role='assistant')}\n\n"
    f"data: {chat_chunk('Xin chào')}\n\n"
    ": ping\n\n"
    f"data: {chat_chunk(' thế')}\n\n"
    f"data: {chat_chunk(' giới', finish='length')}\n\n"
    f"data: {USAGE}\n\n"
    "data: [DONE]\n\n"
).encode()


def decode_all(chunks):
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


def test_whole_stream():
    events = decode_all([STREAM])
    assert len(events) == 6
    assert events[-1].data == "[DONE]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_any_split_gives_the_same_events(cuts):
    points = sorted(set(cuts))
    pieces = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)])]
    assert decode_all(pieces) == decode_all([STREAM])


def test_byte_by_byte_with_multibyte_utf8():
    events = decode_all([bytes([b]) for b in STREAM])
    assert parse_chunk(events[1].data).text == "Xin chào"


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings(newline):
    raw = f"event: message{newline}data: a{newline}data: b{newline}id: 7{newline}{newline}data: c{newline}{newline}"
    events = decode_all([raw.encode()])
    assert events == [SSEEvent(data="a\nb", event="message", id="7"), SSEEvent(data="c", id="7")]


def test_crlf_split_between_chunks_is_one_line_ending():
    events = decode_all([b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n"])
    assert [e.data for e in events] == ["x", "y"]


def test_comments_only_produce_nothing():
    assert decode_all([b": ping\n\n: ping\n\n"]) == []


def test_unterminated_last_event_is_kept():
    assert [e.data for e in decode_all([b"data: [DONE]"])] == ["[DONE]"]


def test_data_without_space_and_bom():
    assert decode_all(["\ufeffdata:x\n\n".encode()]) == [SSEEvent(data="x")]


def test_parse_chunk_kinds():
    assert parse_chunk("[DONE]").done
    role = parse_chunk(chat_chunk(content="", role="assistant"))
    assert role.text == "" and role.has_choices
    usage = parse_chunk(USAGE)
    assert usage.usage.prompt_tokens == 12 and usage.usage.completion_tokens == 3 and not usage.has_choices
    completion = parse_chunk(json.dumps({"choices": [{"text": "hi", "finish_reason": None}]}))
    assert completion.text == "hi"
    assert parse_chunk(json.dumps({"error": {"message": "boom", "type": "x"}})).error == "boom"
    assert parse_chunk(json.dumps({"object": "error", "message": "bad"})).error == "bad"
    with pytest.raises(ParseError):
        parse_chunk("{not json")
    with pytest.raises(ParseError):
        parse_chunk("[1, 2]")


def test_tool_call_arguments_count_as_generated_text():
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    more = {"index": 0, "function": {"arguments": '{"city"'}}
    timer = StreamTimer()
    for at, calls in ((0.1, [first]), (0.2, [more]), (0.3, [{"index": 0, "function": {"arguments": ':"Oslo"}'}}])):
        timer.on_event(SSEEvent(json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})), at)
    assert timer.ttft == pytest.approx(0.2)  # the name alone is no generated token
    assert timer.output_text == '{"city":"Oslo"}' and timer.chunks == 2
    assert parse_chunk(json.dumps({"choices": [{"delta": {"tool_calls": "junk"}}]})).text == ""


def test_stream_timer_ttft_skips_role_chunk_and_gaps():
    timer = StreamTimer()
    times = [0.30, 0.31, 0.35, 0.42, 0.43, 0.44]
    for event, at in zip(decode_all([STREAM]), times):
        timer.on_event(event, at)
    assert timer.ttft == pytest.approx(0.31)
    assert timer.gaps == pytest.approx([0.04, 0.07])
    assert timer.chunks == 3
    assert timer.output_text == "Xin chào thế giới"
    assert timer.usage.completion_tokens == 3
    assert timer.finish_reason == "length"
    assert timer.done and timer.error is None


def test_stream_timer_error_mid_stream():
    timer = StreamTimer()
    timer.on_event(SSEEvent(chat_chunk("a")), 0.1)
    timer.on_event(SSEEvent(json.dumps({"error": {"message": "engine died", "code": 500}})), 0.2)
    assert timer.error == "engine died"
    assert timer.ttft == pytest.approx(0.1)
