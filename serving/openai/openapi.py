"""``/openapi.json`` from the models that validate the bodies.

The gateway reads request bodies by hand (a size limit before parsing, OpenAI-shaped
errors), so FastAPI cannot infer them from the routes' signatures. Each route declares
them instead (:func:`route_docs`: the request model, the answer's model, the stream's
event model, the error statuses), and :func:`install` adds every model's JSON schema
to the document's components: the request models (:mod:`serving.openai.schemas`) as
pydantic validates them, the answers (:mod:`serving.openai.response_schemas`) as the
gateway serialises them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from serving.openai.response_schemas import ErrorBody

REF = "#/components/schemas/{model}"
ERROR_STATUSES = {
    400: "invalid request (malformed JSON, wrong types, unsupported fields, a schema the engine cannot enforce)",
    401: "missing or wrong API key",
    404: "unknown model",
    413: "body larger than the gateway accepts",
    429: "admission bound or the key's rate limits (Retry-After)",
    500: "a fault of the server",
    503: "no replica, draining, or the replica failed",
    504: "past the request deadline",
}


def _ref(model: type[BaseModel]) -> dict:
    return {"$ref": REF.format(model=model.__name__)}


def route_docs(*, answer: type[BaseModel] | None = None, body: type[BaseModel] | None = None,
               stream: type[BaseModel] | None = None, errors: tuple[int, ...] = (),
               also: dict[int, tuple[str, type[BaseModel]]] | None = None,
               media_type: str = "application/json", summary: str | None = None) -> dict:
    """Keyword arguments for a route decorator: its OpenAPI request body and responses
    (``errors``: statuses answered with an error body; ``also``: other statuses, each
    with its description and model)."""
    content: dict[str, Any] = {media_type: {"schema": _ref(answer)} if answer else {"schema": {"type": "string"}}}
    if stream is not None:
        content["text/event-stream"] = {
            "schema": _ref(stream),
            "x-sse": "each `data:` line holds one such object; the stream ends with `data: [DONE]`"}
    responses: dict[int | str, Any] = {200: {"description": "OK", "content": content}}
    for status in errors:
        responses[status] = {"description": ERROR_STATUSES[status],
                             "content": {"application/json": {"schema": _ref(ErrorBody)}}}
    for status, (description, model) in (also or {}).items():
        responses[status] = {"description": description, "content": {"application/json": {"schema": _ref(model)}}}
    extra: dict[str, Any] = {}
    if body is not None:
        extra["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    kwargs: dict[str, Any] = {"responses": responses, "openapi_extra": extra}
    if summary:
        kwargs["summary"] = summary
    return kwargs


def install(app: FastAPI, *, requests: list[type[BaseModel]], answers: list[type[BaseModel]]) -> None:
    """Make ``app.openapi()`` include the schemas of ``requests`` (validation mode) and
    ``answers`` (serialisation mode), built once."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                              description=app.description)
            models = [(m, "validation") for m in requests] + [(m, "serialization") for m in answers]
            _, defs = models_json_schema(models, ref_template=REF)
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(defs.get("$defs", {}))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi
