"""StreamReader's fast path against the general path (SSEDecoder + StreamTimer.on_event).

The reference is the general path fed the same chunks at the same times; the fast
path must give the same events at the same times and the same timer state, on normal
and odd streams, however the bytes are cut into chunks.
"""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.client.sse import SSEDecoder, StreamReader, StreamTimer, parse_chunk, parse_chunk_bytes
from loadtest.errors import ParseError


def content(text, finish=None):
    return json.dumps({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


PAYLOADS = [
    content(""),
    content("Xin chào"),
    content(" world", finish="length"),
    json.dumps({"choices": [{"text": "completion", "finish_reason": None}]}),
    json.dumps({"choices": [{"delta": {"reasoning_content": "think", "content": "!"}}]}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}),
    json.dumps({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}),
    json.dumps({"error": {"message": "engine died", "code": 500}}),
    json.dumps({"object": "error", "message": "bad"}),
    '{"choices": [{"delta": {"content": "nan"}}], "x": NaN}',  # json accepts, msgspec refuses
    '{"choices": [{"delta": {"content": "big"}}], "x": 1e400}',
    '{"choices": [{"delta": {"content": "\\ud800 lone"}}]}',
    '{"choices": [{"delta": {"content": "raw \u00e9"}}]}',
    "[DONE]",
    " [DONE] ",
    "{not json",
    "[1, 2]",
    "",
]

# One SSE line (without its line ending) of an odd server.
ODD_LINES = [": keep-alive", "event: message", "id: 7", "id", "retry: 100", "data:" + content("no space"),
             "\ufeffdata: " + content("bom"), "data", "data: " + content("x") + "\0", ""]


@st.composite
def streams(draw):
    """A byte stream: mostly ``data: {json}`` events, with odd lines, endings and bytes."""
    parts = ["\ufeff"] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 8))):
        ending = draw(st.sampled_from(["\n", "\n", "\r\n", "\r"]))
        kind = draw(st.sampled_from(["data", "data", "data", "odd", "multi", "text"]))
        if kind == "data":
            parts.append(f"data: {draw(st.sampled_from(PAYLOADS))}{ending}{ending}")
        elif kind == "odd":
            parts.append(draw(st.sampled_from(ODD_LINES)) + ending)
        elif kind == "multi":
            parts.append(f"data: {draw(st.sampled_from(PAYLOADS))}{ending}data: {{}}{ending}{ending}")
        else:
            parts.append(f"data: {content(draw(st.text(max_size=5)))}{ending}{ending}")
    raw = "".join(parts).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        raw = raw.replace(b"chunk", b"chunk\xff", 1)  # invalid UTF-8 inside a line
    if draw(st.booleans()):
        raw = raw.replace(b"\ndata: ", b"\n\xe2\x82data: ", 1)  # a cut UTF-8 sequence opens a line
    if draw(st.booleans()):
        raw = raw.rstrip(b"\r\n")  # an unterminated last line
    return raw


def readline_chunks(raw):
    """The chunks ``readline(b"\\n")`` gives, then the unterminated rest."""
    lines = raw.split(b"\n")
    return [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def cut(raw, points):
    points = sorted(set(points))
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)]) if a < b]


def run(feed, close, chunks):
    """Feed every chunk at time i, close at the end; the raised ParseError, if any."""
    try:
        for at, chunk in enumerate(chunks):
            feed(chunk, at)
        close(len(chunks))
    except ParseError as exc:
        return str(exc)
    return None


def reference(chunks, timer):
    decoder = SSEDecoder()

    def feed(chunk, at):
        for event in decoder.feed(chunk):
            timer.on_event(event, at)

    def close(at):
        for event in decoder.close():
            timer.on_event(event, at)

    return run(feed, close, chunks)


def fast(chunks, timer):
    reader = StreamReader(timer)
    return run(reader.feed, reader.close, chunks), reader.fast_events


class FakeRecordingTimer(StreamTimer):
    """A fake timer that records each event's data and time instead of parsing it."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_event(self, event, at):
        self.seen.append((event.data, at))

    def on_data(self, data, at):
        self.seen.append((data.decode("utf-8", "replace"), at))


def assert_same(chunks):
    ref_events, fast_events = FakeRecordingTimer(), FakeRecordingTimer()
    reference(chunks, ref_events)
    fast(chunks, fast_events)
    assert fast_events.seen == ref_events.seen
    ref, got = StreamTimer(), StreamTimer()
    ref_error = reference(chunks, ref)
    fast_error, fast_count = fast(chunks, got)
    assert (fast_error, vars(got)) == (ref_error, vars(ref))
    return fast_count


@settings(max_examples=300, deadline=None)
@given(streams())
def test_readline_chunks_give_the_same_events_and_timings(raw):
    assert_same(readline_chunks(raw))


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(0, 2000), max_size=20), st.booleans())
def test_any_split_gives_the_same_events_and_timings(raw, points, at_line_ends):
    ends = [i + 1 for i, byte in enumerate(raw) if byte in b"\n\x82"] if at_line_ends else []
    assert_same(cut(raw, [p % (len(raw) + 1) for p in points] + ends))


def vllm_stream():
    payloads = [content(""), content("Hello"), content(" there", finish="stop"),
                json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}), "[DONE]"]
    return "".join(f"data: {p}\n\n" for p in payloads).encode()


def test_a_normal_stream_takes_the_fast_path_line_by_line_and_whole():
    raw = vllm_stream()
    assert assert_same(readline_chunks(raw)) == 5
    assert assert_same(cut(raw, [i for i in range(len(raw)) if raw[i - 2 : i] == b"\n\n"])) == 5
    timer = StreamTimer()
    fast(readline_chunks(raw), timer)
    assert (timer.output_text, timer.chunks, timer.done_at) == ("Hello there", 2, 9)


def test_odd_streams_take_the_general_path():
    for raw in (vllm_stream().replace(b"\n", b"\r"), b"data: a\ndata: b\n\n", b"event: x\ndata: [DONE]\n\n"):
        assert assert_same(readline_chunks(raw)) == 0


def test_a_cut_utf8_sequence_before_a_data_line_is_decoded_as_the_spec_says():
    line = f"data: {content('a')}\n".encode()
    timer = StreamTimer()
    assert assert_same([line, b"\n", b"\xe2\x82", line, b"\n"]) == 1
    fast([line, b"\n", b"\xe2\x82", line, b"\n"], timer)
    assert timer.chunks == 1  # the second line's field is "\ufffddata", not "data"


def test_a_line_cut_in_two_falls_back_then_returns_to_the_fast_path():
    raw = vllm_stream()
    chunks = readline_chunks(raw)
    chunks[2:3] = [chunks[2][:10], chunks[2][10:]]
    assert assert_same(chunks) == 4


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
CHOICE = st.fixed_dictionaries({}, optional={
    "delta": st.fixed_dictionaries({}, optional={"content": JSON, "reasoning_content": JSON, "reasoning": JSON}) | JSON,
    "text": JSON, "finish_reason": JSON})
CHUNK = st.fixed_dictionaries({}, optional={
    "choices": st.lists(CHOICE, max_size=3) | JSON, "usage": JSON, "error": JSON, "object": st.just("error") | JSON,
    "message": JSON})


@settings(max_examples=300, deadline=None)
@given(CHUNK | JSON, st.booleans())
def test_parse_chunk_bytes_matches_parse_chunk(value, ascii_only):
    data = json.dumps(value, ensure_ascii=ascii_only)

    def outcome(parse, arg):
        try:
            return parse(arg)
        except ParseError as exc:
            return str(exc)

    assert outcome(parse_chunk_bytes, data.encode()) == outcome(parse_chunk, data)
