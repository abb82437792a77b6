"""The one place where errors become OpenAI-style bodies and HTTP status codes.

Body shape: ``{"error": {"message", "type", "param", "code"}}``. A client's mistake
is always a 4xx; only faults of the server itself are 5xx.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from serving import errors


@dataclass(frozen=True)
class ErrorResponse:
    status: int
    body: dict
    headers: dict[str, str] = field(default_factory=dict)


def error_body(message: str, type_: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# (exception class, HTTP status, OpenAI error type, code); first match wins (subclasses first).
_TABLE: tuple[tuple[type[errors.RequestError], int, str, str | None], ...] = (
    (errors.ContextLengthExceededError, 400, "invalid_request_error", "context_length_exceeded"),
    (errors.InvalidRequestError, 400, "invalid_request_error", None),
    (errors.AuthenticationError, 401, "invalid_request_error", "invalid_api_key"),
    (errors.PermissionDeniedError, 403, "invalid_request_error", "permission_denied"),
    (errors.ModelNotFoundError, 404, "invalid_request_error", "model_not_found"),
    (errors.RequestTooLargeError, 413, "invalid_request_error", "request_too_large"),
    (errors.RateLimitedError, 429, "rate_limit_error", "rate_limit_exceeded"),
    (errors.OverloadedError, 429, "rate_limit_error", "overloaded"),
    (errors.NoReplicaError, 503, "service_unavailable_error", "no_replica"),
    (errors.ServerDrainingError, 503, "service_unavailable_error", "server_draining"),
    (errors.DeadlineExceededError, 504, "timeout_error", "deadline_exceeded"),
    (errors.ReplicaFailedError, 503, "service_unavailable_error", "replica_failed"),
    (errors.EngineError, 500, "internal_error", "engine_error"),
)


def map_error(exc: BaseException) -> ErrorResponse:
    """The HTTP answer for any exception raised while serving a request."""
    if isinstance(exc, ValidationError):
        return _validation(exc)
    if isinstance(exc, errors.RequestError):
        for cls, status, type_, code in _TABLE:
            if isinstance(exc, cls):
                return ErrorResponse(
                    status, error_body(exc.message, type_, param=exc.param, code=code), _headers_of(exc)
                )
    return ErrorResponse(500, error_body("internal server error", "internal_error", code="internal_error"))


def _headers_of(exc: errors.RequestError) -> dict[str, str]:
    if isinstance(exc, (errors.OverloadedError, errors.ServerDrainingError)):
        return {"Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, errors.AuthenticationError):
        return {"WWW-Authenticate": "Bearer"}
    return {}


def http_error(status: int, detail: str) -> ErrorResponse:
    """Framework-level HTTP errors (unknown route, wrong method) in OpenAI's shape."""
    type_ = "invalid_request_error" if status < 500 else "internal_error"
    return ErrorResponse(status, error_body(detail, type_, code=f"http_{status}"))


def _validation(exc: ValidationError) -> ErrorResponse:
    first = exc.errors(include_url=False)[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    message = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
        for e in exc.errors(include_url=False)[:5]
    )
    return ErrorResponse(400, error_body(message, "invalid_request_error", param=param, code="invalid_value"))
