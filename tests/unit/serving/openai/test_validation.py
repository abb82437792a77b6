import pytest
from pydantic import ValidationError

from serving.errors import ContextLengthExceededError, InvalidRequestError, ModelNotFoundError
from serving.openai.validation import resolve_max_tokens, generation_request
from serving.openai.schemas import ChatCompletionRequest, ChatMessage, CompletionRequest, TokenizeRequest

MODEL = "smollm2-135m-instruct"


def chat(**fields):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], **fields}
    return ChatCompletionRequest.model_validate(body)


def plan(body, tokenizer, max_model_len=2048):
    return generation_request(body, tokenizer=tokenizer, served_model=MODEL, max_model_len=max_model_len,
                        request_id="r1")


def test_chat_template_is_applied_with_generation_prompt(tokenizer):
    text = tokenizer.chat_text([ChatMessage(role="user", content="Hello there")])
    assert "<|im_start|>user\nHello there<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_chat_tokens_match_the_template_text(tokenizer):
    messages = [ChatMessage(role="user", content="Hello there")]
    ids = tokenizer.encode_chat(messages)
    assert tokenizer.decode(ids) == tokenizer.chat_text(messages)


def test_text_parts_are_joined(tokenizer):
    parts = ChatMessage(role="user", content=[{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}])
    assert tokenizer.chat_text([parts]) == tokenizer.chat_text([ChatMessage(role="user", content="Hello")])


def test_sampling_fields_flow_into_the_request(tokenizer):
    request = plan(chat(max_tokens=7, temperature=0.3, top_p=0.5, n=2, stop=["\n", "END"], seed=3), tokenizer)
    s = request.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.n, s.stop, s.seed) == (7, 0.3, 0.5, 2, ("\n", "END"), 3)
    assert request.prompt_token_ids == tuple(tokenizer.encode_chat(chat().messages))


def test_missing_max_tokens_fills_the_rest_of_the_context(tokenizer):
    request = plan(chat(), tokenizer, max_model_len=100)
    assert request.sampling.max_tokens == 100 - len(request.prompt_token_ids)


def test_max_completion_tokens_is_honoured(tokenizer):
    assert plan(chat(max_completion_tokens=5), tokenizer).sampling.max_tokens == 5


def test_prompt_plus_max_tokens_over_context_is_refused(tokenizer):
    with pytest.raises(ContextLengthExceededError) as err:
        plan(chat(max_tokens=2048), tokenizer)
    assert err.value.param == "messages"
    assert "maximum context length is 2048" in err.value.message


def test_plan_max_tokens_edges():
    assert resolve_max_tokens(10, 90, 100, prompt_param="prompt") == 90
    with pytest.raises(ContextLengthExceededError):
        resolve_max_tokens(10, 91, 100, prompt_param="prompt")
    with pytest.raises(ContextLengthExceededError):
        resolve_max_tokens(100, None, 100, prompt_param="prompt")


def test_completion_prompt_as_token_ids(tokenizer):
    body = CompletionRequest.model_validate({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 4})
    assert plan(body, tokenizer).prompt_token_ids == (1, 2, 3)


def test_token_ids_outside_the_vocabulary_are_refused(tokenizer):
    body = CompletionRequest.model_validate({"model": MODEL, "prompt": [10**9]})
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        plan(body, tokenizer)


def test_unknown_model_is_not_found(tokenizer):
    with pytest.raises(ModelNotFoundError):
        plan(chat(model="gpt-4"), tokenizer)


def test_unsupported_feature_is_refused_by_name(tokenizer):
    with pytest.raises(InvalidRequestError) as err:
        plan(chat(prompt_logprobs=2), tokenizer)
    assert err.value.param == "prompt_logprobs"


def test_fields_without_effect_on_generation_are_accepted(tokenizer):
    assert plan(chat(metadata={"a": "b"}, store=False, logprobs=False), tokenizer).sampling.max_tokens > 0


def test_any_other_field_that_would_be_ignored_is_refused(tokenizer):
    with pytest.raises(InvalidRequestError, match="best_of") as err:
        plan(chat(best_of=3, echo=True), tokenizer)
    assert err.value.param == "best_of"


def test_penalties_and_vllm_sampling_extensions_are_honoured(tokenizer):
    fields = dict(presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.2, top_k=20,
                  min_p=0.05, min_tokens=3, max_tokens=8)
    s = plan(chat(**fields), tokenizer).sampling
    assert (s.presence_penalty, s.frequency_penalty, s.repetition_penalty, s.top_k, s.min_p,
            s.min_tokens) == (0.5, -0.5, 1.2, 20, 0.05, 3)


def test_min_tokens_above_max_tokens_is_refused(tokenizer):
    with pytest.raises(InvalidRequestError, match="min_tokens") as err:
        plan(chat(min_tokens=9, max_tokens=8), tokenizer)
    assert err.value.param == "min_tokens"


def test_a_chat_template_that_raises_is_a_client_error(tokenizer, monkeypatch):
    # Templates of many models call raise_exception() on roles that do not alternate.
    strict = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('roles must alternate') }}{% endif %}"
    monkeypatch.setattr(tokenizer._tok, "chat_template", strict)
    with pytest.raises(InvalidRequestError, match="roles must alternate") as err:
        plan(chat(), tokenizer)
    assert err.value.param == "messages"


def test_stream_options_without_stream_is_refused(tokenizer):
    with pytest.raises(InvalidRequestError, match="stream_options"):
        plan(chat(stream_options={"include_usage": True}), tokenizer)


@pytest.mark.parametrize("fields", [
    {"temperature": 3}, {"top_p": 0}, {"n": 0}, {"max_tokens": 0}, {"messages": []},
    {"stop": ["a", "b", "c", "d", "e"]}, {"stop": [""]}, {"messages": [{"role": "robot", "content": "x"}]},
    {"max_tokens": "many"}, {"seed": 2**63}, {"seed": -(2**63) - 1}, {"presence_penalty": 2.5},
    {"top_k": -2}, {"min_p": 1.5}, {"repetition_penalty": 0},
    {"top_k": 2**63},  # found by test_fuzz_gateway: the engine's msgpack transport carries int64 only
])
def test_invalid_values_are_validation_errors(fields):
    with pytest.raises(ValidationError):
        chat(**fields)


@pytest.mark.parametrize("temperature", [0, 1e-6])
def test_several_choices_with_greedy_sampling_are_refused(tokenizer, temperature):
    # Found by test_fuzz_gateway: vLLM refuses n > 1 when sampling greedily, which was a 500.
    with pytest.raises(InvalidRequestError, match="n must be 1") as err:
        plan(chat(temperature=temperature, n=2), tokenizer)
    assert err.value.param == "n"
    assert plan(chat(temperature=temperature, n=1), tokenizer).sampling.n == 1


def test_tokenize_refuses_an_empty_conversation():
    # Found by test_fuzz_gateway: transformers raises ValueError on it, which was a 500.
    with pytest.raises(ValidationError, match="at least 1 item"):
        TokenizeRequest.model_validate({"model": MODEL, "messages": []})


def test_an_unknown_field_of_a_message_is_refused_by_name(tokenizer):
    body = chat(messages=[{"role": "user", "content": "Hi", "mood": "cheerful"}])
    with pytest.raises(InvalidRequestError, match="mood") as err:
        plan(body, tokenizer)
    assert err.value.param == "messages.0.mood"


def test_an_answer_sent_back_as_the_sdk_dumps_it_is_accepted(tokenizer):
    echoed = {"role": "assistant", "content": "Hello!", "refusal": None, "audio": None,
              "function_call": None, "tool_calls": None, "annotations": []}
    body = chat(messages=[{"role": "user", "content": "Hi"}, echoed, {"role": "user", "content": "Again"}])
    assert plan(body, tokenizer).prompt_token_ids


def test_a_messages_name_reaches_the_chat_template():
    from serving.openai.tokenization import _template_message

    message = ChatMessage.model_validate({"role": "user", "content": "Hi", "name": "lan"})
    assert _template_message(message, 0) == {"role": "user", "content": "Hi", "name": "lan"}
