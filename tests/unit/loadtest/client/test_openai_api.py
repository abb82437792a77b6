"""Request bodies and error classification."""

import pytest

from loadtest.analysis.records import ErrorKind
from loadtest.client.openai_api import (
    classify_status,
    completion_prompt,
    error_message,
    parse_retry_after,
    request_body,
)
from loadtest.config import Endpoint, TargetConfig
from loadtest.workloads import Turn

TURN = Turn(content="What is 2+2?", max_tokens=16)


def test_chat_body_streaming_with_exact_output():
    body = request_body(TargetConfig(model="m"), system=None, history=[], turn=TURN)
    assert body == {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "max_tokens": 16,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_body_with_system_history_and_options():
    target = TargetConfig(model="m", stream=False, exact_output=False, temperature=0.0)
    body = request_body(target, system="be brief", history=[("hi", "hello!")], turn=TURN)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][2]["content"] == "hello!"
    assert "stream_options" not in body and "ignore_eos" not in body and "min_tokens" not in body
    assert body["temperature"] == 0.0 and body["stream"] is False


def test_completions_body():
    target = TargetConfig(model="m", endpoint=Endpoint.COMPLETIONS)
    body = request_body(target, system="sys", history=[], turn=TURN)
    assert body["prompt"] == "sys\n\nWhat is 2+2?" and "messages" not in body
    assert Endpoint.COMPLETIONS.path == "/v1/completions" and Endpoint.CHAT.path == "/v1/chat/completions"


def test_completion_prompt_multi_turn():
    text = completion_prompt(None, [("a", "b")], "c")
    assert text == "User: a\nAssistant: b\n\nUser: c\nAssistant:"


@pytest.mark.parametrize(
    "status, kind",
    [(200, None), (301, None), (400, ErrorKind.HTTP_4XX), (404, ErrorKind.HTTP_4XX), (429, ErrorKind.HTTP_429),
     (500, ErrorKind.HTTP_5XX), (503, ErrorKind.HTTP_5XX)],
)
def test_classify_status(status, kind):
    assert classify_status(status) == kind


def test_retry_after():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after(None) is None and parse_retry_after("-1") is None


def test_error_message():
    assert error_message(b'{"error": {"message": "too long", "type": "BadRequestError"}}') == "too long"
    assert error_message(b'{"object": "error", "message": "nope"}') == "nope"
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"plain text " * 100)[:10] == "plain text" and len(error_message(b"x" * 999)) == 300
