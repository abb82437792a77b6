import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.engine.protocol import GenerationChunk, GenerationDelta, TokenLogprob, ToolCallDelta
from serving.openai.frames import (
    SSE_DONE,
    ChatFormat,
    CompletionFormat,
    ResponseAssembler,
    ResponseHeader,
    StreamEncoder,
)
from serving.openai.response_schemas import ChatCompletion, ChatCompletionChunk, Completion

HEADER = ResponseHeader(id="chatcmpl-1", model="m", created=1)


def chunk(*deltas, prompt=5, completion=0):
    return GenerationChunk(deltas=tuple(deltas), replica_id="r", prompt_tokens=prompt, completion_tokens=completion)


def events(strings):
    out = []
    for s in strings:
        assert s.startswith("data: ") and s.endswith("\n\n")
        out.append(s[6:-2] if s == SSE_DONE else json.loads(s[6:-2]))
    return out


def test_assembler_joins_text_per_choice_and_reports_usage():
    a = ResponseAssembler(ChatFormat(), HEADER, n=2)
    a.add(chunk(GenerationDelta(0, "Hel", 1), GenerationDelta(1, "Yo", 1), completion=2))
    a.add(chunk(GenerationDelta(0, "lo", 1, "stop"), GenerationDelta(1, "!", 1, "length"), completion=4))
    r = a.response()
    assert r["object"] == "chat.completion"
    assert [c["message"]["content"] for c in r["choices"]] == ["Hello", "Yo!"]
    assert [c["finish_reason"] for c in r["choices"]] == ["stop", "length"]
    assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def test_chat_stream_role_first_then_content_then_finish_usage_done():
    enc = StreamEncoder(ChatFormat(), HEADER, n=1, include_usage=True)
    out = enc.encode(chunk(GenerationDelta(0, "Hi", 1), completion=1))
    out += enc.encode(chunk(GenerationDelta(0, "", 0), completion=1))  # empty delta: dropped
    out += enc.encode(chunk(GenerationDelta(0, " there", 1, "stop"), completion=2))
    out += enc.finish()
    ev = events(out)
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}
    assert ev[1]["choices"][0] == {"index": 0, "delta": {"content": " there"}, "logprobs": None, "finish_reason": "stop"}
    assert ev[2]["choices"] == [] and ev[2]["usage"]["completion_tokens"] == 2
    assert ev[0]["usage"] is None
    assert ev[3] == "[DONE]" and len(ev) == 4


def test_stream_without_usage_has_no_usage_key():
    enc = StreamEncoder(ChatFormat(), HEADER, n=1, include_usage=False)
    ev = events(enc.encode(chunk(GenerationDelta(0, "a", 1, "stop"))) + enc.finish())
    assert "usage" not in ev[0] and ev[-1] == "[DONE]" and len(ev) == 2


def test_completion_stream_uses_text_completion_objects():
    enc = StreamEncoder(CompletionFormat(), HEADER, n=1, include_usage=False)
    ev = events(enc.encode(chunk(GenerationDelta(0, "abc", 1, "length"))))
    assert ev[0]["object"] == "text_completion"
    assert ev[0]["choices"][0] == {"index": 0, "text": "abc", "logprobs": None, "finish_reason": "length"}


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_cut_answer_is_never_shown_as_stop(reason):
    a = ResponseAssembler(CompletionFormat(), HEADER, n=1)
    a.add(chunk(GenerationDelta(0, "x", 1, reason)))
    assert a.response()["choices"][0]["finish_reason"] == reason


def test_an_answer_without_a_finish_reason_is_an_error_not_stop():
    a = ResponseAssembler(ChatFormat(), HEADER, n=2)
    a.add(chunk(GenerationDelta(0, "x", 1, "stop"), GenerationDelta(1, "y", 1)))
    assert [c["finish_reason"] for c in a.response()["choices"]] == ["stop", "error"]


def test_a_stream_cut_by_an_error_finishes_open_choices_with_error():
    enc = StreamEncoder(ChatFormat(), HEADER, n=2, include_usage=False)
    enc.encode(chunk(GenerationDelta(0, "a", 1, "stop"), GenerationDelta(1, "b", 1)))
    ev = events(enc.error({"error": {"message": "engine replica failed"}}))
    assert [e["choices"][0]["index"] for e in ev[:-2]] == [1]
    assert ev[0]["choices"][0]["finish_reason"] == "error"
    assert ev[-2]["error"]["message"] == "engine replica failed" and ev[-1] == "[DONE]"


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=1), index=st.integers(0, 3), include_usage=st.booleans(),
       chat=st.booleans(), request_id=st.text(min_size=1), model=st.text(min_size=1))
def test_the_pre_built_text_frame_is_the_same_bytes_as_the_general_one(text, index, include_usage, chat,
                                                                        request_id, model):
    fmt = ChatFormat() if chat else CompletionFormat()
    encoder = StreamEncoder(fmt, ResponseHeader(id=request_id, model=model, created=7), 4, include_usage)
    encoder.encode(GenerationChunk(tuple(GenerationDelta(i, "x", 1) for i in range(4)), "r", 1, 4))  # started
    fast = encoder.encode(GenerationChunk((GenerationDelta(index, text, 1),), "r", 1, 5))
    general = encoder._event([fmt.chunk_choice(index, text, None, False)])
    assert fast == [general]


# --- tool calls and logprobs (the shapes /openapi.json declares: checked against its models)

WEATHER_CALL = (ToolCallDelta(0, id="call_1", name="get_weather", arguments='{"ci'),)
LOGPROB = TokenLogprob("Hi", -0.25, (("Hi", -0.25), ("Hey", -1.5)))


def test_a_whole_answer_with_tool_calls_has_null_content_and_merged_calls():
    a = ResponseAssembler(ChatFormat(), HEADER, n=1)
    a.add(chunk(GenerationDelta(0, "", 1, tool_calls=WEATHER_CALL)))
    a.add(chunk(GenerationDelta(0, "", 2, "tool_calls", tool_calls=(ToolCallDelta(0, arguments='ty":"Oslo"}'),))))
    r = ChatCompletion.model_validate(a.response())
    message = r.choices[0].message
    assert message.content is None and r.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_1", "get_weather", '{"city":"Oslo"}')]


def test_a_streamed_tool_call_is_shaped_as_openai_streams_it():
    enc = StreamEncoder(ChatFormat(), HEADER, n=1, include_usage=True)
    out = enc.encode(chunk(GenerationDelta(0, "", 1, tool_calls=WEATHER_CALL)))
    out += enc.encode(chunk(GenerationDelta(0, "", 1, tool_calls=(ToolCallDelta(0, arguments='ty"}'),))))
    out += enc.encode(chunk(GenerationDelta(0, "", 0, "tool_calls")))
    out += enc.finish()
    ev = events(out)
    for e in ev[:-1]:
        ChatCompletionChunk.model_validate(e)
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}]}
    assert ev[1]["choices"][0]["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": 'ty"}'}}]}
    assert ev[2]["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_logprobs_whole_and_streamed():
    a = ResponseAssembler(ChatFormat(), HEADER, n=1)
    a.add(chunk(GenerationDelta(0, "Hi", 1, "stop", logprobs=(LOGPROB,))))
    content = ChatCompletion.model_validate(a.response()).choices[0].logprobs.content
    assert [(c.token, c.logprob, c.bytes) for c in content] == [("Hi", -0.25, [72, 105])]
    assert [(t.token, t.logprob) for t in content[0].top_logprobs] == [("Hi", -0.25), ("Hey", -1.5)]
    enc = StreamEncoder(ChatFormat(), HEADER, n=1, include_usage=False)
    enc.encode(chunk(GenerationDelta(0, "", 0)))
    ev = events(enc.encode(chunk(GenerationDelta(0, "Hi", 1, logprobs=(LOGPROB,)))))
    chunk_logprobs = ChatCompletionChunk.model_validate(ev[0]).choices[0].logprobs
    assert chunk_logprobs.content[0].token == "Hi"


def test_completion_logprobs_carry_text_offsets_across_the_stream():
    enc = StreamEncoder(CompletionFormat(), HEADER, n=1, include_usage=False)
    first = TokenLogprob("Hel", -0.5, (("Hel", -0.5),))
    second = TokenLogprob("lo", float("-inf"), ())
    ev = events(enc.encode(chunk(GenerationDelta(0, "Hel", 1, logprobs=(first,))))
                + enc.encode(chunk(GenerationDelta(0, "lo", 1, "length", logprobs=(second,)))))
    parsed = [Completion.model_validate(e).choices[0].logprobs for e in ev]
    assert [p.text_offset for p in parsed] == [[0], [3]]
    assert parsed[0].top_logprobs == [{"Hel": -0.5}] and parsed[1].token_logprobs == [-9999.0]  # JSON has no -inf
    a = ResponseAssembler(CompletionFormat(), HEADER, n=1)
    a.add(chunk(GenerationDelta(0, "Hello", 2, "length", logprobs=(first, second))))
    whole = Completion.model_validate(a.response()).choices[0].logprobs
    assert whole.tokens == ["Hel", "lo"] and whole.text_offset == [0, 3]


def test_plain_answers_match_the_declared_shapes():
    a = ResponseAssembler(ChatFormat(), HEADER, n=1)
    a.add(chunk(GenerationDelta(0, "Hello", 1, "stop")))
    ChatCompletion.model_validate(a.response())
    enc = StreamEncoder(ChatFormat(), HEADER, n=1, include_usage=True)
    out = enc.encode(chunk(GenerationDelta(0, "He", 1))) + enc.encode(chunk(GenerationDelta(0, "llo", 1)))
    out += enc.encode(chunk(GenerationDelta(0, "", 0, "stop"))) + enc.finish()
    for e in events(out)[:-1]:
        ChatCompletionChunk.model_validate(e)
    c = ResponseAssembler(CompletionFormat(), HEADER, n=1)
    c.add(chunk(GenerationDelta(0, "x", 1, "length")))
    Completion.model_validate(c.response())
