"""``X-Request-Id``: accepted from the client or generated, returned on every response,
and carried to the engine and into every log line of the request."""

from __future__ import annotations

import re
import uuid

REQUEST_ID_HEADER = "x-request-id"
_VALID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")


def request_id_from(header_value: str | None) -> str:
    """The client's id when it is a short token of safe characters, else a new one
    (a hostile value never reaches the logs)."""
    if header_value is not None and _VALID.match(header_value):
        return header_value
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Pure ASGI middleware: sets ``request.state.request_id`` and (``echo``) the
    response header. Behind Ray Serve's proxy, which takes the client's id (or makes
    one), passes it in the request and returns it itself, use ``echo=False``."""

    def __init__(self, app, *, echo: bool = True) -> None:
        self.app = app
        self.echo = echo

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        raw = headers.get(REQUEST_ID_HEADER.encode())
        request_id = request_id_from(raw.decode("latin-1") if raw is not None else None)
        scope.setdefault("state", {})["request_id"] = request_id
        if not self.echo:
            return await self.app(scope, receive, send)

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()),
                                      (REQUEST_ID_HEADER.encode(), request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)
