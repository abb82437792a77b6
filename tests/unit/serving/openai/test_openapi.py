"""``/openapi.json`` declares every body the gateway accepts and returns, from the models
that validate them (the gateway over a FAKE engine client; the real tokenizer)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from serving.api.app import build_http_app
from serving.openai.schemas import ChatCompletionRequest
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import service

ROUTES = {
    ("/v1/chat/completions", "post"): ("ChatCompletionRequest", "ChatCompletion", "ChatCompletionChunk"),
    ("/v1/completions", "post"): ("CompletionRequest", "Completion", "Completion"),
    ("/tokenize", "post"): ("TokenizeRequest", "TokenizeResponse", None),
    ("/detokenize", "post"): ("DetokenizeRequest", "DetokenizeResponse", None),
    ("/v1/models", "get"): (None, "ModelList", None),
    ("/health", "get"): (None, "HealthResponse", None),
    ("/status", "get"): (None, "StatusResponse", None),
}


@pytest.fixture(scope="module")
def client(tokenizer):
    app = build_http_app(service(tokenizer, FakeEngineClient()), registry=CollectorRegistry(),
                         max_body_bytes=1 << 20, status=lambda: {})
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def doc(client) -> dict:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def schema_name(content: dict, media: str) -> str:
    return content[media]["schema"]["$ref"].rsplit("/", 1)[-1]


@pytest.mark.parametrize("path, method", list(ROUTES))
def test_every_route_declares_its_bodies(doc, path, method):
    request, answer, stream = ROUTES[(path, method)]
    operation = doc["paths"][path][method]
    if request is not None:
        assert schema_name(operation["requestBody"]["content"], "application/json") == request
    ok = operation["responses"]["200"]["content"]
    assert schema_name(ok, "application/json") == answer
    if stream is not None:
        assert schema_name(ok, "text/event-stream") == stream
    if method == "post":
        assert schema_name(operation["responses"]["400"]["content"], "application/json") == "ErrorBody"


def test_every_reference_resolves(doc):
    schemas = doc["components"]["schemas"]
    refs = {ref.rsplit("/", 1)[-1] for ref in _refs(doc)}
    assert refs and not refs - schemas.keys()


def test_the_request_schema_is_the_one_that_validates_it(doc):
    chat = doc["components"]["schemas"]["ChatCompletionRequest"]
    expected = ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    assert chat["properties"] == expected["properties"] and chat["required"] == ["model", "messages"]
    for field in ("response_format", "tools", "tool_choice", "logprobs", "top_logprobs", "logit_bias"):
        assert field in chat["properties"]


def test_the_document_is_no_longer_empty(doc):
    assert len(json.dumps(doc)) > 20_000  # was 1.6 KB with no body at all


def test_bodies_are_still_parsed_by_hand_with_openai_errors(client):
    response = client.post("/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    assert response.status_code == 400 and set(response.json()["error"]) == {"message", "type", "param", "code"}


def _refs(value):
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)
