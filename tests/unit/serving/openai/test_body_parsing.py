"""Hostile request bodies become 400s with OpenAI error bodies, never 500s."""

import pytest

from serving.errors import InvalidRequestError
from serving.openai.error_mapping import map_error
from serving.openai.body_parsing import parse_body
from serving.openai.schemas import ChatCompletionRequest


@pytest.mark.parametrize("raw, message", [
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', "surrogate"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "ok"}], "stop": "\\udfff"}', "surrogate"),
    (b'{"model": "m", "messages"', "malformed JSON"),
    (b"\xff\xfe", "malformed JSON"),
])
def test_hostile_bodies_are_client_errors(raw, message):
    with pytest.raises(InvalidRequestError, match=message) as err:
        parse_body(raw, ChatCompletionRequest)
    assert map_error(err.value).status == 400


def test_a_surrogate_pair_escape_is_valid_text():
    body = parse_body(b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}',
                      ChatCompletionRequest)
    assert body.messages[0].text() == "\U0001F600"
