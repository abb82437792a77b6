"""The OpenAI features applications use, through the real stack with the official SDK:
structured outputs, tools (named, required, auto, a tool-result turn, streamed calls),
logprobs and logit_bias, the 400s of bad schemas and tool choices, and /openapi.json.

The default model is tiny (135M): guided decoding is what makes a forced answer valid,
so those tests check validity, not the model's judgement. ``auto`` is checked with a
prompt greedy decoding answers in the Hermes format (the model repeats it), and with
text the parser cannot read (it comes back as content).
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.integration.metrics_reading import by_label, settled
from tests.integration.settings import MODEL

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city", "parameters": CITY}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time of a city", "parameters": CITY}}
ASK = [{"role": "user", "content": "What is the weather in Hanoi?"}]
ECHO_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Hanoi"}}\n</tool_call>'
ECHO_UNREADABLE = '<tool_call>\nget_weather(city="Hanoi")\n</tool_call>'  # not the Hermes JSON


def repeat(text: str) -> list[dict]:
    return [{"role": "user", "content": f"Repeat exactly this text and nothing else: {text}"}]


class Allergy(BaseModel):
    substance: str
    severe: bool


class PatientRecord(BaseModel):
    name: str
    age: int
    allergies: list[Allergy] = Field(max_length=3)  # a bound the grammar enforces (the model repeats itself)


NOTE = ("Clinic note: Maria Lopez, 52 years old, came in for a check-up. She is severely allergic "
        "to penicillin and mildly allergic to pollen.")


def post(stack, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{stack.url}{path}", json=body, timeout=120)


def error_of(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    return error


# --- 1. structured outputs -------------------------------------------------------------


def test_parse_with_a_pydantic_model_returns_the_model(openai_client):
    reply = openai_client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": f"Extract the patient record. {NOTE}"}],
        response_format=PatientRecord, temperature=0, max_tokens=200)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, PatientRecord)  # the SDK validated it against the model
    assert PatientRecord.model_validate_json(choice.message.content) == choice.message.parsed


def test_json_object_mode_answers_a_json_object(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Give the name and age of John Smith, 45, as JSON."}],
        response_format={"type": "json_object"}, temperature=0, max_tokens=100)
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_a_streamed_json_schema_answer_follows_the_schema(openai_client):
    schema = PatientRecord.model_json_schema()
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Extract the patient record. {NOTE}"}],
        response_format={"type": "json_schema", "json_schema": {"name": "record", "schema": schema, "strict": True}},
        temperature=0, max_tokens=200, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_guided_json_has_no_free_whitespace_to_spend_the_budget_on(openai_client):
    # Seen on bare vLLM: `{"zz_code"` then newlines until max_tokens. The engine runs
    # with compact JSON, so the answer closes well inside the budget.
    schema = {"type": "object", "properties": {"zz_code": {"type": "string", "maxLength": 8}},
              "required": ["zz_code"], "additionalProperties": False}
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Invent a short code."}], temperature=0, max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "code", "schema": schema}})
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    assert "\n" not in reply.choices[0].message.content


# --- 2. tools ----------------------------------------------------------------------------


def test_a_named_tool_call_has_arguments_of_the_declared_shape(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    choice = reply.choices[0]
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_time" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), CITY)  # an object, never a bare string
    assert choice.message.content is None and choice.finish_reason == "stop"  # as OpenAI reports it


def test_required_tool_calls_are_valid_calls_of_defined_tools(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
        temperature=0, max_tokens=64)
    choice = reply.choices[0]
    (call,) = choice.message.tool_calls
    assert call.function.name in {"get_weather", "get_time"}
    jsonschema.validate(json.loads(call.function.arguments), CITY)
    assert choice.finish_reason == "tool_calls"


def test_a_streamed_tool_call_arrives_in_openai_shaped_deltas(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=64,
        stream=True)
    deltas, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            finish = choice.finish_reason or finish
    first, rest = deltas[0], deltas[1:]
    assert first.id and first.type == "function" and first.function.name == "get_weather"
    assert rest and all(d.id is None and d.function.name is None for d in rest if d.index == first.index)
    arguments = "".join(d.function.arguments or "" for d in deltas if d.index == first.index)
    jsonschema.validate(json.loads(arguments), CITY)
    assert finish == "tool_calls"


def test_the_sdks_stream_helper_assembles_a_parsed_tool_call(openai_client):
    tool = openai.pydantic_function_tool(Allergy, name="record_allergy", description="Record one allergy")
    with openai_client.chat.completions.stream(
            model=MODEL, messages=[{"role": "user", "content": NOTE}], tools=[tool],
            tool_choice={"type": "function", "function": {"name": "record_allergy"}},
            temperature=0, max_tokens=64) as stream:
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, Allergy)


def test_auto_reads_a_hermes_tool_call_out_of_the_models_text(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=repeat(ECHO_CALL), tools=[WEATHER], temperature=0, max_tokens=64)
    choice = reply.choices[0]
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Hanoi"})
    assert choice.finish_reason == "tool_calls" and not choice.message.content


def test_auto_streams_the_same_call(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=repeat(ECHO_CALL), tools=[WEATHER], temperature=0, max_tokens=64, stream=True)
    deltas, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            finish = choice.finish_reason or finish
    assert deltas[0].function.name == "get_weather" and deltas[0].id
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Hanoi"}
    assert finish == "tool_calls"


def test_a_tool_call_the_parser_cannot_read_comes_back_as_content(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=repeat(ECHO_UNREADABLE), tools=[WEATHER], temperature=0, max_tokens=64)
    choice = reply.choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content == ECHO_UNREADABLE and choice.finish_reason == "stop"


def test_a_streamed_tool_call_the_parser_cannot_read_comes_back_as_content(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=repeat(ECHO_UNREADABLE), tools=[WEATHER], temperature=0, max_tokens=64, stream=True)
    content, calls = "", []
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            calls.extend(choice.delta.tool_calls or [])
    assert content == ECHO_UNREADABLE and calls == []  # held back while it might be a call, then sent


def test_tool_choice_none_answers_in_text(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=24)
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].message.content


def test_a_tool_result_turn_is_rendered_into_the_prompt(openai_client):
    first = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    message = first.choices[0].message
    call = message.tool_calls[0]
    history = [*ASK, message, {"role": "tool", "tool_call_id": call.id, "content": "31 C and humid, light rain"}]
    second = openai_client.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER], temperature=0, max_tokens=48)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # The call and its result are part of the prompt (tokenised once, with the tools).
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 20


def test_tools_are_tokenised_once_with_the_prompt_by_the_router(openai_client, base_stack):
    plain = openai_client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=4)

    def planned() -> dict[str, float]:
        return by_label(base_stack.url, "serveout_planned_requests_total", "source")

    before = settled(planned)
    with_tools = openai_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=32)
    after = settled(planned)
    assert after.get("router", 0) - before.get("router", 0) == 1
    assert after.get("replica", 0) == before.get("replica", 0)  # not tokenised again
    # Admission and the key's token budget see the tools' tokens: they are prompt tokens.
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 100


# --- 3. logprobs and biases --------------------------------------------------------------


def test_chat_logprobs_with_top_alternatives(openai_client):
    reply = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert choice.finish_reason == "stop"
    assert len(content) == reply.usage.completion_tokens - 1  # the end-of-sequence token is no text
    assert "".join(t.token for t in content) == choice.message.content
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        assert token.top_logprobs[0].token == token.token  # greedy: the chosen token ranks first
        assert bytes(token.bytes).decode("utf-8", "replace") == token.token


def test_streamed_chat_logprobs_cover_every_token(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=10,
        logprobs=True, stream=True, stream_options={"include_usage": True})
    tokens, usage = [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.logprobs is not None:
                tokens.extend(choice.logprobs.content)
    assert len(tokens) == usage.completion_tokens and all(t.top_logprobs == [] for t in tokens)


def test_completion_logprobs(openai_client):
    reply = openai_client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4,
                                             temperature=0, logprobs=2)
    logprobs = reply.choices[0].logprobs
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.text_offset) == 4
    assert all(len(top) == 2 for top in logprobs.top_logprobs)


def test_logit_bias_forbids_and_forces_tokens(openai_client, base_stack):
    def token_id(text: str) -> int:
        (token,) = post(base_stack, "/tokenize", {"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["tokens"]
        return token

    paris, banana = token_id(" Paris"), token_id(" banana")
    prompt = "The capital of France is"
    plain = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0)
    assert plain.choices[0].text.startswith(" Paris")
    forbidden = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0,
                                                 logit_bias={str(paris): -100})
    assert not forbidden.choices[0].text.startswith(" Paris")
    forced = openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0,
                                              logit_bias={str(banana): 100})
    assert forced.choices[0].text == " banana" * 3


# --- 5. bad input: a 400 that names the problem ------------------------------------------


def json_schema_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fields, param, words", [
    ({"response_format": json_schema_format({"type": "object", "properties": {"a": {"type": "strin"}}})},
     "response_format.json_schema.schema", "not a valid JSON schema"),
    ({"response_format": json_schema_format({"type": "array", "items": {"type": "string"}, "uniqueItems": True})},
     "response_format.json_schema.schema", "`uniqueItems`"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_stock_price"}}},
     "tool_choice", "`get_stock_price`, which is not in tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7}}}}}], "tool_choice": "required"},
     "tools.0.function.parameters", "`multipleOf`"),
    # Passes the gateway's check; the engine's grammar compiler refuses it (its 400 comes back).
    ({"response_format": json_schema_format({"type": "array", "minItems": 2})},
     "response_format", "the engine refused the request"),
    ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "grammar ends the answer"),
    ({"top_logprobs": 3}, "top_logprobs", "logprobs"),
    ({"logit_bias": {"not-a-token": 5}}, "logit_bias", "token ids"),
])
def test_bad_structured_output_and_tool_requests_are_400s_naming_the_problem(base_stack, fields, param, words,
                                                                            stream):
    body = {"model": MODEL, "messages": ASK, "max_tokens": 8, "stream": stream, **fields}
    error = error_of(post(base_stack, CHAT, body))
    assert error["param"] == param and words in error["message"]


def test_the_sdk_sees_a_bad_request_error(openai_client):
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER], max_tokens=8,
            tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err.value.status_code == 400 and "nope" in err.value.message


# --- 6. a truthful OpenAPI document ------------------------------------------------------


def test_openapi_declares_the_bodies_through_the_stack(base_stack):
    doc = httpx.get(f"{base_stack.url}/openapi.json", timeout=30).json()
    chat = doc["paths"][CHAT]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ChatCompletionRequest")
    assert chat["responses"]["200"]["content"]["text/event-stream"]["schema"]["$ref"].endswith("/ChatCompletionChunk")
    request = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert {"response_format", "tools", "tool_choice", "logprobs", "top_logprobs", "logit_bias"} <= request.keys()
