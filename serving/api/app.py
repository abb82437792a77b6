"""The gateway's FastAPI app: OpenAI routes, tokenizer routes, health and metrics.

With API keys configured every route but ``/health`` (and ``/metrics`` and ``/status``
when they are public) needs ``Authorization: Bearer KEY``: see :mod:`serving.api.auth`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serving.errors import InvalidRequestError, RequestError, RequestTooLargeError
from serving.admission.api_keys import ANONYMOUS, KeyRing
from serving.admission.priority import PRIORITY_HEADER
from serving.openai.body_parsing import Body, parse_body
from serving.api.auth import ApiKeyMiddleware, open_paths
from serving.openai.error_mapping import ErrorResponse, http_error, map_error
from serving.openai.openapi import install as install_openapi
from serving.openai.openapi import route_docs
from serving.api.request_id import RequestIdMiddleware
from serving.openai import response_schemas as answers
from serving.openai.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    model_card,
    now,
)
from serving.direct.handoff_store import HandoffStore
from serving.direct.handoff import HANDOFF_KEY_HEADER, Handoff
from serving.gateway.in_flight import log_request
from serving.gateway.service import EventStream, GatewayService, JsonAnswer

REPLICA_HEADER = "x-serveout-replica"  # which engine replica served the request
COMPLETION_ERRORS = (400, 401, 404, 413, 429, 500, 503, 504)
TOKENIZER_ERRORS = (400, 401, 404, 413)


class _ClosingStreamingResponse(StreamingResponse):
    """A streaming response that always runs ``on_close``, even if the client left
    before the first byte (when the body generator never started)."""

    def __init__(self, stream: EventStream, extra_headers: dict[str, str]) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", REPLICA_HEADER: stream.replica_id,
                   **extra_headers}
        super().__init__(stream.events, media_type="text/event-stream", headers=headers)
        self._on_close = stream.close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


def _response(result: JsonAnswer | EventStream, on_end: Callable[[], None] | None = None,
              headers: dict[str, str] | None = None) -> Response:
    """The HTTP answer; ``headers`` (the key's rate-limit figures) go on it before the
    first byte, for a stream too."""
    headers = headers or {}
    if isinstance(result, EventStream):
        if on_end is not None:
            close = result.close

            async def close_then_end() -> None:
                try:
                    await close()
                finally:
                    on_end()

            result = dataclasses.replace(result, close=close_then_end)
        return _ClosingStreamingResponse(result, headers)
    if on_end is not None:
        on_end()
    return JSONResponse(result.body, headers={REPLICA_HEADER: result.replica_id, **headers})


async def _claimed_plan(request: Request, plans: HandoffStore | None) -> Handoff | None:
    if plans is None:
        return None
    key = request.headers.get(HANDOFF_KEY_HEADER)
    return await plans.claim(key) if key else None


def _json(error: ErrorResponse) -> JSONResponse:
    return JSONResponse(error.body, status_code=error.status, headers=error.headers)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refusing more than ``max_bytes`` (413) without reading it all."""
    declared = request.headers.get("content-length")
    try:
        too_large = declared is not None and int(declared) > max_bytes
    except ValueError:  # not a number, or more digits than int() parses: let the read decide
        too_large = False
    if too_large:
        raise RequestTooLargeError(f"request body is larger than {max_bytes} bytes")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise RequestTooLargeError(f"request body is larger than {max_bytes} bytes")
        parts.append(part)
    return b"".join(parts)


def _ending_with(on_shutdown: Callable[[], Awaitable[None]]):
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await on_shutdown()

    return lifespan


def build_http_app(
    service: GatewayService,
    *,
    registry: CollectorRegistry,
    max_body_bytes: int | Callable[[], int],
    status: Callable[[], dict],
    keys: KeyRing | None | Callable[[], KeyRing | None] = None,
    metrics_public: bool | Callable[[], bool] = False,
    echo_request_id: bool = True,
    metrics_text: Callable[[], Awaitable[bytes]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    plans: HandoffStore | None = None,
) -> FastAPI:
    """The gateway's routes over ``service``; ``status`` feeds ``GET /status``.

    ``max_body_bytes``, ``keys`` and ``metrics_public`` may be callables, read on every
    request (settings that change without a restart). ``keys`` None: no authentication
    at all (every request is ``anonymous``). ``plans``: the router's plans (direct
    mode); a completion whose ``x-serve-router-plan`` key finds its plan is served from
    it without reading the body (:mod:`serving.direct.handoff`).
    ``echo_request_id`` False behind Ray Serve's proxy, which returns ``X-Request-Id``
    itself (a second copy would make the header a list). ``metrics_text`` renders
    ``GET /metrics`` (default: ``registry`` as it is; several gateway replicas render
    them all: :mod:`serving.gateway.metrics_sharing`). ``on_shutdown`` runs when the
    app's ASGI lifespan ends (Serve ends it when it stops the replica).
    """
    app = FastAPI(title="serveout gateway", version="1",
                  description="OpenAI-compatible API of serveout (chat and text completions, "
                  "structured outputs, tools, logprobs) and vLLM's tokenizer routes.",
                  lifespan=_ending_with(on_shutdown) if on_shutdown is not None else None)
    install_openapi(app, requests=[ChatCompletionRequest, CompletionRequest, TokenizeRequest, DetokenizeRequest],
                    answers=[answers.ChatCompletion, answers.ChatCompletionChunk, answers.Completion,
                             answers.ModelList, answers.TokenizeResponse, answers.DetokenizeResponse,
                             answers.HealthResponse, answers.StatusResponse, answers.ErrorBody])
    current_keys = keys if callable(keys) else (lambda: keys)
    body_limit = max_body_bytes if callable(max_body_bytes) else (lambda: max_body_bytes)
    public = metrics_public if callable(metrics_public) else (lambda: metrics_public)
    first_keys = current_keys()
    service.metrics.declare_keys(first_keys.names if first_keys else (ANONYMOUS,))

    def refused(reason: str, request_id: str | None) -> None:
        service.metrics.auth_failures.labels(reason).inc()
        log_request(request_id=request_id, status=401, error="AuthenticationError", reason=f"{reason} key")

    # Added first, so it runs inside RequestIdMiddleware: a 401 carries X-Request-Id too.
    app.add_middleware(ApiKeyMiddleware, keys=current_keys,
                       open_paths=lambda: open_paths(metrics_public=public()), on_refused=refused)
    app.add_middleware(RequestIdMiddleware, echo=echo_request_id)

    async def body_of(request: Request, model: type[Body]) -> Body:
        return parse_body(await read_body(request, body_limit()), model)

    async def completion(request: Request, model: type[ChatCompletionRequest | CompletionRequest]):
        caller = request.state.caller
        plan = await _claimed_plan(request, plans)
        if plan is not None and plan.request.chat == (model is ChatCompletionRequest):
            try:
                result = await service.complete_validated(plan.request, caller=caller,
                                                        trace_id=request.state.request_id,
                                                        asked_class=request.headers.get(PRIORITY_HEADER))
            except BaseException:
                plans.finish(plan)
                raise
            return _response(result, on_end=lambda: plans.finish(plan),
                             headers=service.rate_limit_headers(caller))
        if plan is not None:  # planned for the other endpoint: this one answers from the body
            plans.finish(plan)
        try:
            body = await body_of(request, model)
        except (RequestError, ValidationError) as exc:
            endpoint = "chat" if model is ChatCompletionRequest else "completions"
            status = map_error(exc).status
            service.metrics.count_request("unknown", endpoint, str(status), caller.name)
            service.account_refusal("unknown", endpoint, status, caller, request.state.request_id)
            raise
        result = await service.complete(body, caller=caller, session_id=request.headers.get("x-session-id"),
                                        trace_id=request.state.request_id,
                                        asked_class=request.headers.get(PRIORITY_HEADER))
        return _response(result, headers=service.rate_limit_headers(caller))

    @app.post("/v1/chat/completions", **route_docs(
        body=ChatCompletionRequest, answer=answers.ChatCompletion, stream=answers.ChatCompletionChunk,
        errors=COMPLETION_ERRORS, summary="A chat completion (SSE events when `stream` is true)"))
    async def chat_completions(request: Request):
        return await completion(request, ChatCompletionRequest)

    @app.post("/v1/completions", **route_docs(
        body=CompletionRequest, answer=answers.Completion, stream=answers.Completion,
        errors=COMPLETION_ERRORS, summary="A text completion (SSE events when `stream` is true)"))
    async def completions(request: Request):
        return await completion(request, CompletionRequest)

    @app.get("/v1/models", **route_docs(answer=answers.ModelList, errors=(401,)))
    async def list_models(request: Request):
        created = now()
        cards = [model_card(m.name, m.max_model_len, created, m.parent)
                 for m in service.visible_models(request.state.caller)]
        return {"object": "list", "data": cards}

    async def release_plan(request: Request) -> None:
        """The router plans every POST it can read (it does not see the path): a plan for
        a request that is not a completion ends here."""
        plan = await _claimed_plan(request, plans)
        if plan is not None:
            plans.finish(plan)

    @app.post("/tokenize", **route_docs(body=TokenizeRequest, answer=answers.TokenizeResponse,
                                        errors=TOKENIZER_ERRORS))
    async def tokenize(request: Request):
        await release_plan(request)
        body = await body_of(request, TokenizeRequest)
        served = service.model(body.model, request.state.caller)
        if (body.prompt is None) == (body.messages is None):
            raise InvalidRequestError("give exactly one of `prompt` or `messages`", param="prompt")
        if body.messages is not None:
            tokens = served.tokenizer.encode_chat(body.messages)
        else:
            tokens = served.tokenizer.encode_text(body.prompt, add_special_tokens=body.add_special_tokens)
        return {"count": len(tokens), "max_model_len": served.max_model_len, "tokens": tokens}

    @app.post("/detokenize", **route_docs(body=DetokenizeRequest, answer=answers.DetokenizeResponse,
                                          errors=TOKENIZER_ERRORS))
    async def detokenize(request: Request):
        await release_plan(request)
        body = await body_of(request, DetokenizeRequest)
        served = service.model(body.model, request.state.caller)
        return {"prompt": served.tokenizer.decode(body.tokens)}

    @app.get("/health", **route_docs(answer=answers.HealthResponse, also={
            503: ("no replica ready yet, or the app is draining", answers.HealthResponse)},
            summary="200 when a replica can serve"))
    async def health():
        if service.draining:  # a load balancer stops sending here
            return JSONResponse({"status": "draining"}, status_code=503)
        not_ready = [m.name for m in service.models.values()
                     if m.replicas().ready == 0 and not m.scales_from_zero]
        if not_ready:
            return JSONResponse({"status": "starting", "not_ready": not_ready}, status_code=503)
        return {"status": "ok"}

    @app.get("/status", **route_docs(answer=answers.StatusResponse, errors=(401,)))
    async def status_route():
        return status()

    @app.get("/metrics", **route_docs(media_type=CONTENT_TYPE_LATEST, errors=(401,),
                                      summary="Prometheus text (serveout_* series)"))
    async def metrics():
        text = await metrics_text() if metrics_text is not None else generate_latest(registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    def keyed(request: Request, error: ErrorResponse) -> JSONResponse:
        """An error answer, with the caller's rate-limit headers when its key has limits."""
        caller = getattr(request.state, "caller", None)
        if caller is not None:
            error = dataclasses.replace(error, headers={**service.rate_limit_headers(caller), **error.headers})
        return _json(error)

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, exc: RequestError):
        return keyed(request, map_error(exc))

    @app.exception_handler(ValidationError)
    async def on_validation_error(request: Request, exc: ValidationError):
        return keyed(request, map_error(exc))

    @app.exception_handler(RequestValidationError)
    async def on_fastapi_validation(_: Request, exc: RequestValidationError):
        return _json(ErrorResponse(400, http_error(400, str(exc.errors()[:3])).body))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, exc: StarletteHTTPException):
        return _json(http_error(exc.status_code, str(exc.detail)))

    @app.exception_handler(Exception)
    async def on_unexpected(_: Request, exc: Exception):
        return _json(map_error(exc))

    return app
