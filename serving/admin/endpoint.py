"""The admin endpoint of a stack ``serving up`` runs: its LoRA adapters changed over
HTTP, in the shape of vLLM's (``POST /v1/load_lora_adapter`` with ``lora_name`` and
``lora_path``, ``POST /v1/unload_lora_adapter`` with ``lora_name``), plus
``GET /v1/lora_adapters``. A stack of several bases takes ``base_model_name`` (the name
vLLM's ``--lora-modules`` uses) on a load; without it the adapter goes on the first
base. Every answer is JSON; an error is OpenAI's error body.

``serving rollout`` adds ``GET|POST /v1/rollouts`` (the latest rollout; start one with a
:class:`~serving.config.rollout.RolloutPlan` body), ``POST /v1/rollouts/promote`` and
``/v1/rollouts/abort``, and the rollouts' metrics at ``GET /metrics``.

It is the control plane, served by the ``serving up`` process on its own port (as
Ray's dashboard API is beside Serve's), not by the engine replicas: a change
redeploys the stack (:class:`~serving.admin.adapter_control.AdapterControl`). With API keys
on, only a key marked ``admin`` in the keys file may call it (another key: 403); with
none, it binds to the stack's own host like the data plane and anyone who reaches it
may. A change answers when every engine serves it (or refused it), so a call may take
seconds; changes run one at a time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from serving.admin.adapter_control import AdapterControl
from serving.admin.rollout_control import RolloutControl
from serving.config.rollout import RolloutPlan
from serving.admission.api_keys import Caller, bearer_token
from serving.errors import (InvalidRequestError, PermissionDeniedError, RequestError, RequestTooLargeError,
                            ServeoutError)
from serving.openai.error_mapping import ErrorResponse, error_body, http_error, map_error

MAX_BODY_BYTES = 64 * 1024


def adapter_entry(control: AdapterControl, name: str) -> dict:
    """One adapter as the endpoint answers it (``/v1/models``' shape, with its folder)."""
    parent, adapter = next((base, a) for base, a in control.adapters() if a.name == name)
    return {"id": adapter.name, "object": "lora_adapter", "parent": parent,
            "path": str(adapter.path), "rank": adapter.rank, "description": adapter.description}


class AdminApi:
    """The endpoint's routes over ``control``; ``identify(token)``: the caller of a
    bearer token (None: no keys, everyone may); ``rollouts``: ``serving rollout``'s routes
    (``/v1/rollouts``), and ``registry``: their metrics at ``GET /metrics`` (text)."""

    def __init__(self, control: AdapterControl, identify: Callable[[str | None], Caller] | None,
                 rollouts: RolloutControl | None = None, registry: CollectorRegistry | None = None) -> None:
        self._control, self._identify = control, identify
        self._rollouts, self._registry = rollouts, registry

    def handle(self, method: str, path: str, authorization: str | None, body: bytes) -> tuple[int, dict | str]:
        """(status, JSON body) for one request."""
        try:
            self._authorize(authorization)
            return 200, self._route(method, path, body)
        except _HttpError as exc:
            return exc.answer.status, exc.answer.body
        except RequestError as exc:
            answer = map_error(exc)
            return answer.status, answer.body
        except ServeoutError as exc:  # the redeploy failed: the operator needs the reason
            return 500, error_body(str(exc), "internal_error", code="deploy_failed")

    def _authorize(self, authorization: str | None) -> None:
        if self._identify is None:
            return
        caller = self._identify(bearer_token(authorization))
        if not caller.admin:
            raise PermissionDeniedError(f"the key {caller.name!r} may not change the stack's adapters "
                                        "(mark an admin key with `admin` in the keys file)")

    def _route(self, method: str, path: str, body: bytes) -> dict | str:
        routes = {("GET", "/v1/lora_adapters"): self._list, ("POST", "/v1/load_lora_adapter"): self._load,
                  ("POST", "/v1/unload_lora_adapter"): self._unload}
        if self._rollouts is not None:
            rollouts = self._rollouts
            routes |= {("GET", "/v1/rollouts"): lambda _: rollouts.status(),
                       ("POST", "/v1/rollouts"): lambda fields: rollouts.start(_plan(fields)),
                       ("POST", "/v1/rollouts/promote"): lambda _: rollouts.promote(),
                       ("POST", "/v1/rollouts/abort"): lambda _: rollouts.abort()}
        if self._registry is not None and (method, path) == ("GET", "/metrics"):
            return generate_latest(self._registry).decode()
        known = {p for _, p in routes}
        if (method, path) not in routes:
            status = 405 if path in known else 404
            raise _HttpError(http_error(status, "Method Not Allowed" if status == 405 else "Not Found"))
        return routes[method, path](_fields(body) if method == "POST" else {})

    def _list(self, _: dict) -> dict:
        return {"object": "list", "data": [adapter_entry(self._control, a.name) for _, a in self._control.adapters()]}

    def _load(self, fields: dict) -> dict:
        name = _text(fields, "lora_name", required=True)
        rank = fields.get("rank")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
            raise InvalidRequestError("rank must be a whole number >= 1", param="rank")
        self._control.load(name, _text(fields, "lora_path"), rank, base=_text(fields, "base_model_name"))
        return adapter_entry(self._control, name)

    def _unload(self, fields: dict) -> dict:
        name = _text(fields, "lora_name", required=True)
        self._control.unload(name)
        return {"id": name, "object": "lora_adapter", "deleted": True}


class _HttpError(RequestError):
    """A route-level error (404, 405) whose answer is already made."""

    def __init__(self, answer: ErrorResponse) -> None:
        super().__init__(answer.body["error"]["message"])
        self.answer = answer


def _fields(body: bytes) -> dict:
    try:
        fields = json.loads(body or b"{}")
    except ValueError:
        raise InvalidRequestError("the body is not valid JSON") from None
    if not isinstance(fields, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return fields


def _plan(fields: dict) -> RolloutPlan:
    try:
        return RolloutPlan.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequestError(f"{where + ': ' if where else ''}{first['msg']}", param=where) from None


def _text(fields: dict, name: str, *, required: bool = False) -> str | None:
    value = fields.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{name} must be a non-empty string", param=name)
    return value


def serve_admin_api(api: AdminApi, host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``api`` on ``host:port`` (0: a free port) from a daemon thread; the server
    (``server_address`` says where; ``shutdown()`` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                status, body = 413, map_error(RequestTooLargeError("the body is too large")).body
            else:
                status, body = api.handle(self.command, self.path.split("?", 1)[0],
                                          self.headers.get("Authorization"), self.rfile.read(length))
            text = isinstance(body, str)
            data = body.encode() if text else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *_) -> None:  # serving up's console shows each change instead
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="serveout-admin", daemon=True).start()
    return server
