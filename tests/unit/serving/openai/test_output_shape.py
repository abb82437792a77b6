"""Structured outputs, tools and logprobs planned once, with the prompt (the real tokenizer
of the default model with the tools template its spec names)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from serving.config.chat_templates import CHATML_HERMES_TOOLS
from serving.errors import InvalidRequestError
from serving.openai.output_shape import output_shape_of, required_calls_schema
from serving.openai.validation import generation_request
from serving.openai.schemas import ChatCompletionRequest, ChatMessage, CompletionRequest
from serving.openai.tokenization import PromptTokenizer

MODEL = "smollm2-135m-instruct"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NOOP = {"type": "function", "function": {"name": "noop"}}
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def tools_tokenizer(default_model_path):
    return PromptTokenizer(default_model_path, CHATML_HERMES_TOOLS)


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": MODEL, "messages": USER, **fields})


def output(**fields):
    return output_shape_of(chat(**fields), supports_tools=True, model=MODEL)


def refused(param: str, **fields) -> str:
    with pytest.raises(InvalidRequestError) as err:
        output(**fields)
    assert err.value.param == param
    return err.value.message


def test_plain_chat_has_no_constraint():
    assert output() == output_shape_of(chat(), supports_tools=False, model=MODEL)
    assert output().guided is None and output().tool_calling is None and output().tools is None


def test_json_object_and_json_schema_become_guided_decoding():
    assert output(response_format={"type": "json_object"}).guided.json_object
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert json.loads(output(response_format=fmt).guided.json_schema) == schema
    assert output(response_format={"type": "text"}).guided is None


def test_an_unenforceable_response_schema_is_refused_naming_it():
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "multipleOf": 3}}}
    assert "`multipleOf`" in refused("response_format.json_schema.schema", response_format=fmt)


def test_tools_default_to_auto_read_by_the_family_parser():
    plan = output(tools=[WEATHER], stream=True)
    assert plan.tool_calling.mode == "auto" and plan.tool_calling.stream
    assert json.loads(plan.tool_calling.tools_json) == [WEATHER] == plan.tools
    assert plan.guided is None


def test_tool_choice_none_renders_the_tools_but_reads_no_calls():
    plan = output(tools=[WEATHER], tool_choice="none")
    assert plan.tools == [WEATHER] and plan.tool_calling is None


def test_a_named_function_forces_its_parameters_as_an_object():
    plan = output(tools=[WEATHER, NOOP], tool_choice={"type": "function", "function": {"name": "noop"}})
    assert plan.tool_calling.mode == "named" and plan.tool_calling.function == "noop"
    # No parameters: still an object, never a bare string.
    assert json.loads(plan.guided.json_schema) == {"type": "object", "properties": {}}


def test_parameters_without_a_type_are_typed_as_an_object():
    untyped = {"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": "string"}}}}}
    plan = output(tools=[untyped], tool_choice={"type": "function", "function": {"name": "f"}})
    assert json.loads(plan.guided.json_schema)["type"] == "object"


def test_required_forces_an_array_of_calls_of_defined_functions():
    plan = output(tools=[WEATHER, NOOP], tool_choice="required", parallel_tool_calls=False)
    schema = json.loads(plan.guided.json_schema)
    assert plan.tool_calling.mode == "required" and not plan.tool_calling.parallel
    assert schema["minItems"] == 1 and schema["maxItems"] == 1
    names = [branch["properties"]["name"]["enum"] for branch in schema["items"]["anyOf"]]
    assert names == [["get_weather"], ["noop"]]


def test_required_moves_the_functions_defs_to_the_root():
    params = {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "string"}}}
    schema = required_calls_schema({"f": params}, parallel=True)
    assert schema["$defs"] == {"P": {"type": "string"}}
    assert "$defs" not in schema["items"]["anyOf"][0]["properties"]["parameters"]
    with pytest.raises(InvalidRequestError, match="P"):
        required_calls_schema({"f": params, "g": {**params, "$defs": {"P": {"type": "integer"}}}}, parallel=True)


@pytest.mark.parametrize("fields, param, words", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "tool_choice", "`get_time`, which is not in tools (defined: get_weather)"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools.1.function.name", "two tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools.0.function.parameters", "must describe an object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "strnig"}}}}}]},
     "tools.0.function.parameters", "not a valid JSON schema"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
     "response_format", "cannot be combined with tool_choice required"),
])
def test_bad_tool_requests_are_refused_naming_the_field(fields, param, words):
    assert words in refused(param, **fields)


def test_a_model_without_a_tool_format_refuses_tools():
    with pytest.raises(InvalidRequestError, match="no tool-call format") as err:
        output_shape_of(chat(tools=[WEATHER]), supports_tools=False, model=MODEL)
    assert err.value.param == "tools"


@pytest.mark.parametrize("fields", [
    {"tools": [{"type": "function", "function": {"name": "has space"}}]},
    {"tool_choice": "sometimes"},
    {"response_format": {"type": "xml"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},  # no schema
    {"top_logprobs": 21}, {"logit_bias": {"5": 101}},
    {"messages": [{"role": "tool", "content": "18 C"}]},  # no tool_call_id
    {"messages": [{"role": "user"}]},  # no content
    {"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
])
def test_malformed_fields_are_validation_errors(fields):
    with pytest.raises(ValidationError):
        chat(**fields)


def plan(body, tokenizer, **kwargs):
    return generation_request(body, tokenizer=tokenizer, served_model=MODEL, max_model_len=2048,
                        request_id="r1", supports_tools=True, **kwargs)


def test_tools_are_tokenised_with_the_prompt_once(tools_tokenizer):
    plain, with_tools = plan(chat(), tools_tokenizer), plan(chat(tools=[WEATHER]), tools_tokenizer)
    text = tools_tokenizer.decode(list(with_tools.prompt_token_ids))
    assert '"name": "get_weather"' in text and "<tools>" in text
    # The tokens the admission bound and the key's tpm budget reserve include the tools.
    assert len(with_tools.prompt_token_ids) > len(plain.prompt_token_ids) + 20


def test_a_tool_turn_and_its_result_are_rendered(tools_tokenizer):
    messages = [*USER,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    request = plan(chat(messages=messages, tools=[WEATHER]), tools_tokenizer)
    text = tools_tokenizer.decode(list(request.prompt_token_ids))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in text


def test_tool_call_arguments_that_are_not_json_are_refused(tools_tokenizer):
    messages = [*USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{city: Paris"}}]}]
    with pytest.raises(InvalidRequestError) as err:
        plan(chat(messages=messages, tools=[WEATHER]), tools_tokenizer)
    assert err.value.param == "messages.1.tool_calls.0.function.arguments"


def test_the_tools_template_renders_plain_chats_as_the_models_own(tokenizer, tools_tokenizer):
    conversations = [
        [ChatMessage(role="user", content="hi")],
        [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hi"),
         ChatMessage(role="assistant", content="Hello!"), ChatMessage(role="user", content="Bye")],
        [ChatMessage(role="developer", content="D"), ChatMessage(role="user", content="x")],
    ]
    for messages in conversations:
        assert tools_tokenizer.encode_chat(messages) == tokenizer.encode_chat(messages)


def test_logprobs_and_logit_bias_reach_the_engine(tokenizer):
    s = plan(chat(logprobs=True, top_logprobs=3, logit_bias={"42": -100, "7": 5.5}), tokenizer).sampling
    assert s.logprobs == 3 and dict(s.logit_bias) == {42: -100, 7: 5.5}
    assert plan(chat(logprobs=True), tokenizer).sampling.logprobs == 0
    assert plan(chat(), tokenizer).sampling.logprobs is None
    completion = CompletionRequest(model=MODEL, prompt="Hi", logprobs=2)
    assert plan(completion, tokenizer).sampling.logprobs == 2


@pytest.mark.parametrize("fields, param", [
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"ignore_eos": True, "response_format": {"type": "json_object"}}, "ignore_eos"),
    ({"logit_bias": {"hello": 1}}, "logit_bias"),
    ({"logit_bias": {"999999": 1}}, "logit_bias"),
])
def test_bad_logprob_bias_and_length_requests_are_refused(tokenizer, fields, param):
    with pytest.raises(InvalidRequestError) as err:
        plan(chat(**fields), tokenizer)
    assert err.value.param == param
