"""The one exception tree of serveout's serving stack.

Every error a client can cause or observe is a :class:`ServeoutError` subclass.
The gateway maps them to OpenAI-style bodies and HTTP codes in exactly one place
(:mod:`serving.openai.error_mapping`); nothing else chooses a status code.
"""

from __future__ import annotations


class ServeoutError(Exception):
    """Base of every serveout error."""


# --- set-up and configuration (operator mistakes, never sent over HTTP) -----------


class ConfigError(ServeoutError):
    """A config file or option is invalid (bad value, unknown name, missing file)."""


class ModelNotPreparedError(ConfigError):
    """A model spec's weights are not on local disk yet."""


class AdapterLoadError(ConfigError):
    """A LoRA adapter cannot be served (missing folder, a format or rank the engine
    refuses, made for another base model); the message names the adapter and why."""


class ModelPreparationError(ServeoutError):
    """Preparing a model's weights failed."""


class ClusterError(ServeoutError):
    """Starting, reaching or stopping the local Ray cluster or the Serve app failed."""


# --- request errors (client-visible; mapped to HTTP in serving.gateway) ----------


class RequestError(ServeoutError):
    """An error answered to one HTTP request.

    ``param`` names the offending request field when there is one.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequestError(RequestError):
    """The request is malformed or has invalid values (HTTP 400)."""


class ContextLengthExceededError(InvalidRequestError):
    """Prompt tokens plus ``max_tokens`` exceed the model's context (HTTP 400)."""


class AuthenticationError(RequestError):
    """A missing or wrong API key (HTTP 401; the OpenAI SDK raises ``AuthenticationError``)."""


class PermissionDeniedError(RequestError):
    """A valid key that may not do this (HTTP 403; the SDK raises ``PermissionDeniedError``)."""


class ModelNotFoundError(RequestError):
    """The requested model is not served here (HTTP 404)."""


class ServerDrainingError(RequestError):
    """The gateway is shutting down (HTTP 503 + Retry-After, code ``server_draining``):
    it refuses new requests, and cuts those still running at the drain deadline."""

    reason = "draining"  # the rejection reason in metrics, as OverloadedError's

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLargeError(RequestError):
    """The HTTP body is larger than the gateway accepts (HTTP 413)."""


class OverloadedError(RequestError):
    """Admission control refused the request; retry later (HTTP 429 + Retry-After).

    ``reason`` is a short fixed word for metrics (``overloaded``, ``fair_share``, ...).
    """

    def __init__(self, message: str, *, retry_after_s: int = 1, reason: str = "overloaded") -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


class RateLimitedError(OverloadedError):
    """One API key's own limit (rpm, tpm, concurrency) refused the request (HTTP 429)."""


class NoReplicaError(RequestError):
    """No engine replica can serve and none is starting (HTTP 503)."""


class DeadlineExceededError(RequestError):
    """The request ran past its deadline and was cancelled in the engine (HTTP 504)."""


class EngineError(RequestError):
    """The engine failed while serving the request (HTTP 500; a server fault)."""


class ReplicaFailedError(EngineError):
    """The engine replica serving the request died (its actor, or its engine process).

    The request itself was fine: the gateway retries it once on another replica when
    nothing has reached the client yet; otherwise HTTP 503 (or an in-band stream error).
    ``replica_id`` is the failed replica when known (the routers then avoid it);
    ``reason`` is a fixed word for metrics: ``engine_dead`` or ``actor_died``.
    Crosses the Ray handle boundary, so every argument after ``message`` has a default.
    """

    def __init__(self, message: str, *, replica_id: str | None = None,
                 reason: str = "actor_died") -> None:
        super().__init__(message)
        self.replica_id = replica_id
        self.reason = reason
