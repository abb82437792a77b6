"""``Authorization: Bearer KEY`` on every route but the open ones (ASGI middleware).

Default-deny: with keys configured, any path not listed as open (``/health``; and
``/metrics`` and ``/status`` when ``gateway.metrics_public``) needs a valid key, even
one that does not exist (so unknown routes reveal nothing). The caller it finds is
``request.state.caller``; without keys every request is the anonymous caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fastapi.responses import JSONResponse

from serving.errors import AuthenticationError
from serving.admission.api_keys import ANONYMOUS_CALLER, KeyRing, bearer_token
from serving.openai.error_mapping import map_error

ALWAYS_OPEN = frozenset({"/health"})
OBSERVABILITY = frozenset({"/metrics", "/status"})


def open_paths(*, metrics_public: bool) -> frozenset[str]:
    return ALWAYS_OPEN | OBSERVABILITY if metrics_public else ALWAYS_OPEN


class ApiKeyMiddleware:
    """Sets ``scope["state"]["caller"]``, or answers 401 in OpenAI's error shape.

    ``on_refused(reason, request_id)`` is told of each refusal (reason ``missing`` or
    ``invalid``), for metrics and logs.

    ``keys`` and ``open_paths`` are read on every request (the keys file can be reloaded,
    the settings reconfigured): ``keys()`` None means no authentication.
    """

    def __init__(self, app, *, keys: Callable[[], KeyRing | None],
                 open_paths: Callable[[], Collection[str]] = lambda: ALWAYS_OPEN,
                 on_refused: Callable[[str, str | None], None] = lambda reason, request_id: None) -> None:
        self.app, self.keys, self.open_paths, self.on_refused = app, keys, open_paths, on_refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        keys = self.keys()
        if keys is None or scope["path"] in self.open_paths():
            state["caller"] = ANONYMOUS_CALLER
            return await self.app(scope, receive, send)
        raw = dict(scope.get("headers") or ()).get(b"authorization")
        token = bearer_token(raw.decode("latin-1") if raw is not None else None)
        try:
            state["caller"] = keys.identify(token)
        except AuthenticationError as exc:
            self.on_refused("missing" if token is None else "invalid", state.get("request_id"))
            error = map_error(exc)
            response = JSONResponse(error.body, status_code=error.status, headers=error.headers)
            return await response(scope, receive, send)
        await self.app(scope, receive, send)
