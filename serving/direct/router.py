"""The direct mode's router: the gateway decision, once per request, off the byte path.

Serve's HAProxy ingress calls it for every POST (``POST /internal/route`` with the
client's body, its ``x-session-id`` and ``x-request-id``; HAProxy's Lua action, Ray
2.60) and forwards the client's request to the engine replica it names. For each call
the router:

1. reads the body (HAProxy passes at most its buffer; a longer body is marked
   truncated) and, when it is whole and there is planning capacity, validates and
   tokenises it once (:func:`~serving.direct.handoff.validate_completion`, in a thread);
2. picks a replica with the configured policy: the same
   :class:`~serving.routing.serve_router.ServeoutRequestRouter` and pure routing core as
   every other path, through ``choose_replica(..., _reserve=False)`` on the engine
   deployment's handle, with the request's token ids (prefix-affinity) and session;
3. pushes the plan to that replica's plan inbox and answers HAProxy with the replica's
   id and the plan's key as a trusted header (``x-serve-router-plan``).

It never answers for the replica: a body it cannot parse, a 4xx it would raise, a
request too large to read all go to a replica without a plan, and the replica reads
the body itself and answers (400, 413, ...) in its own words; admission and API keys
live in the replica too (HAProxy does not forward ``Authorization`` to the router). A
replica reports when a validated request ends, so the routing core's count of requests
in flight per replica stays exact (a report that never comes expires).

With no replica to route to within :data:`CHOOSE_TIMEOUT_S` (scale from zero), the
router names none, and HAProxy hands the request to Serve's fallback proxy, which
waits for a replica.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import OrderedDict

import msgspec
import ray
from prometheus_client import REGISTRY, Counter
from pydantic import ValidationError
from ray import serve
from ray.serve.handle import DeploymentHandle

from serving import ray_internals
from serving.config.stack import StackConfig
from serving.errors import RequestError
from serving.openai.body_parsing import completion_body
from serving.gateway.metrics_sharing import FleetMetrics, RayBoardChannel, shared_views
from serving.direct.handoff import HANDOFF_ENDPOINT_STAT, HANDOFF_KEY_HEADER, Handoff, HandoffCodec
from serving.openai.validation import ValidatedRequest, validate_completion
from serving.openai.schemas import ChatCompletionRequest, new_id
from serving.direct.side_channel import Inbox, Outbox
from serving.openai.tokenization import PromptTokenizer, prompt_tokenizer
from serving.routing.core import RouteTicket
from serving.routing.serve_router import GENERATE_METHOD, ROUTE_TICKET_KWARG

log = logging.getLogger("serveout.router")

CHOOSE_TIMEOUT_S = 2.0
"""How long the router waits for a replica to route to before it names none."""
MAX_PLANNING = 64
"""Requests the router tokenises at once; past it, requests go unplanned (the replicas
admit, then plan them), so a burst never queues unbounded here."""
NO_REPLICA = "none"
"""The replica id the router names when it has none: a pin-miss that HAProxy sends to
Serve's fallback proxy."""
TRUNCATED_HEADER = b"x-body-truncated"
INLINE_PLAN_BYTES = 8 * 1024
"""Bodies up to this size are planned on the router's event loop (a few hundred µs);
longer ones in a worker thread, so a long prompt never stalls the other routes."""
PLAN_TTL_MARGIN_S = 60.0
"""How long past the request deadline a plan's count stays when its end is never reported."""


@serve.ingress()
class RouterIngress:
    """The ``router`` deployment (Serve's ingress request router of the engine app).

    Built from the engine deployment's handle and the app's name; its settings (the
    routing policy, the request deadline, the body limit) arrive as the deployment's
    ``user_config`` (:meth:`reconfigure`), so a new policy takes effect on the running
    routers, between two requests, with no window where old and new routers disagree."""

    async def __init__(self, engine: DeploymentHandle, app_name: str) -> None:
        ray_internals.init_handle(engine)  # before .options(), which would use the defaults
        self._generate = getattr(engine, GENERATE_METHOD)
        self._app_name = app_name
        self._config: StackConfig | None = None
        self._routing = None
        self._tokenizer: PromptTokenizer | None = None
        self._codec = HandoffCodec()
        self._outbox = Outbox()
        self._done = Inbox(ray.util.get_node_ip_address(), self._on_done)
        self._done.start()
        self._tracked: OrderedDict[str, tuple[RouteTicket, float]] = OrderedDict()
        self._planning = 0
        self._session_header = b"x-session-id"
        self._plans = Counter("serveout_router_plans", "Requests routed, by whether the router "
                              "planned them (planned) or left that to the replica and why.",
                              ["outcome"], registry=REGISTRY)
        replica_id = serve.get_replica_context().replica_id.unique_id
        self._fleet = FleetMetrics(REGISTRY, f"router-{replica_id}", RayBoardChannel(app_name),
                                   shared=shared_views(True))
        self._fleet.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._expire_tracked())

    async def reconfigure(self, user_config: dict) -> None:
        """Serve's hook for the app's settings (the whole :class:`StackConfig`)."""
        config = StackConfig.model_validate(user_config)
        if (self._tokenizer is None or self._config is None or config.model_path != self._config.model_path
                or config.model != self._config.model):
            self._tokenizer = await asyncio.to_thread(prompt_tokenizer, config)
        self._config, self._routing = config, config.resolved_routing
        self._session_header = config.routing.session_header.lower().encode("latin-1")

    def __serve_build_asgi_app__(self):
        async def app(scope, receive, send) -> None:
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            elif scope["type"] == "http":
                await self._http(scope, receive, send)

        return app

    async def _http(self, scope, receive, send) -> None:
        if scope["method"] != "POST" or self._config is None:  # a person looking: up, or starting
            return await _answer(send, 200 if self._config else 503, {"status": "ok" if self._config else "starting"})
        body = await _read(receive)
        headers = dict(scope["headers"])
        answer = await self.route(body, truncated=TRUNCATED_HEADER in headers,
                                  session_id=_text(headers.get(self._session_header)),
                                  request_id=_text(headers.get(b"x-request-id")))
        await _answer(send, 200, answer)

    async def route(self, body: bytes, *, truncated: bool, session_id: str | None,
                    request_id: str | None) -> dict:
        """The routing answer for one request: ``replica_id`` and the trusted headers."""
        planned, outcome = await self._plan(body, truncated, session_id, request_id)
        handle = self._generate.options(session_id=session_id) if session_id else self._generate
        ticket = RouteTicket(self._routing)
        args = (planned.generation,) if planned is not None else ()
        try:
            async with asyncio.timeout(CHOOSE_TIMEOUT_S):
                async with handle.choose_replica(*args, **{ROUTE_TICKET_KWARG: ticket}, _reserve=False) as chosen:
                    replica = chosen._replica
        except TimeoutError:
            self._plans.labels("no_replica").inc()
            return {"replica_id": NO_REPLICA}
        answer: dict = {"replica_id": replica.replica_id.to_full_id_str()}
        endpoint = replica.routing_stats.get(HANDOFF_ENDPOINT_STAT) if planned is not None else None
        if planned is not None and not endpoint:
            outcome = "replica_unknown"  # its stats are not polled yet: it plans itself
        if isinstance(endpoint, str):
            key = secrets.token_hex(16)
            message = self._codec.encode(Handoff(key=key, request=planned, done_to=self._done.endpoint))
            if self._outbox.send(endpoint, message):
                self._tracked[key] = (ticket, time.monotonic())
                answer["request_headers"] = {HANDOFF_KEY_HEADER: key}
            else:
                outcome = "channel_busy"
        self._plans.labels(outcome).inc()
        if "request_headers" not in answer:
            ticket.finish()  # nobody will report this request's end
        return answer

    async def _plan(self, body: bytes, truncated: bool, session_id: str | None,
                    request_id: str | None) -> tuple[ValidatedRequest | None, str]:
        if self._config is None:
            return None, "starting"
        if truncated or len(body) > self._config.gateway.max_body_bytes:
            return None, "body_too_large"
        if self._planning >= MAX_PLANNING:
            return None, "router_busy"
        self._planning += 1
        try:
            if len(body) <= INLINE_PLAN_BYTES:  # a short prompt: cheaper than a thread hop
                return self._plan_now(body, session_id, request_id), "planned"
            return await asyncio.to_thread(self._plan_now, body, session_id, request_id), "planned"
        except (RequestError, ValidationError):
            return None, "client_error"  # the replica parses it again and says what is wrong
        finally:
            self._planning -= 1

    def _plan_now(self, body: bytes, session_id: str | None, request_id: str | None) -> ValidatedRequest:
        parsed = completion_body(body)
        chat = isinstance(parsed, ChatCompletionRequest)
        model = self._config.model
        return validate_completion(
            parsed, tokenizer=self._tokenizer, served_model=model.name, max_model_len=model.max_model_len,
            request_id=new_id("chatcmpl" if chat else "cmpl"), session_id=session_id,
            deadline_s=time.time() + self._config.gateway.request_timeout_s, trace_id=request_id,
            supports_tools=model.tool_calling is not None,
            adapters=(*self._config.adapter_names, *self._config.alias_names),  # an alias: the replica picks its version
        )

    def _on_done(self, data: bytes) -> None:
        try:
            done = self._codec.done(data)
        except msgspec.ValidationError:
            log.warning("a message on the router's done inbox was not a report; dropped")
            return
        entry = self._tracked.pop(done.key, None)
        if entry is not None:
            entry[0].finish(engine_dead=done.engine_dead)

    async def _expire_tracked(self) -> None:
        while True:
            await asyncio.sleep(30.0)
            ttl = (self._config.gateway.request_timeout_s if self._config else 300.0) + PLAN_TTL_MARGIN_S
            cutoff = time.monotonic() - ttl
            while self._tracked:
                key, (ticket, routed) = next(iter(self._tracked.items()))
                if routed > cutoff:
                    break
                del self._tracked[key]
                ticket.finish()

    async def close(self) -> None:
        self._sweeper.cancel()
        await self._fleet.close()
        await self._done.close()
        self._outbox.close()


async def _read(receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _answer(send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
