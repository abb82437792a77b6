"""The gateway's request handling, independent of HTTP framework and of Ray.

For one completion request: admit (429: the bound, its priority class's ceiling, the
key's token-fair share, concurrency and request rate; 400 / 403 for an unknown or a
raised class), validate and tokenise off the event loop (400s), reserve the key's
tokens (429), stream from an engine replica under the request's deadline (504), and format
the answer as OpenAI JSON or SSE events, recording metrics on the way.

A replica that dies (:class:`ReplicaFailedError`) before anything reached the client
(before a stream's first event; for a whole answer, at any point) costs a retry on
another replica, once, under the same deadline; a second failure is a 503. A stream
already under way ends with an in-band error event instead.

While the gateway drains (:meth:`GatewayService.drain`, before its app stops) new
requests get 503 ``server_draining``, and those still running at the drain deadline
are cut with that error (:mod:`serving.gateway.drain`). One request in flight, from its
first chunk to its last metric, is :mod:`serving.gateway.in_flight`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from serving.admission.api_keys import ANONYMOUS, ANONYMOUS_CALLER, Caller
from serving.admission.bound import AdmissionController
from serving.admission.key_limits import KeyRateLimiter
from serving.admission.priority import request_class
from serving.config.priority import PrioritySpec
from serving.errors import ModelNotFoundError, NoReplicaError, OverloadedError, RequestError, ServerDrainingError
from serving.gateway.drain import Drain, DrainReport, drain_requests
from serving.gateway.engine_client import EngineClient
from serving.gateway.in_flight import Admitted, InFlight, log_request
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.replica_status import ReplicaCounts
from serving.openai.error_mapping import map_error
from serving.openai.frames import ChatFormat, CompletionFormat, ResponseAssembler, ResponseHeader, StreamEncoder
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest, new_id
from serving.openai.validation import Tokenizer, ValidatedRequest, validate_completion
from serving.admission.rate_headers import rate_limit_headers
from serving.config.rollout import TrafficSplit
from serving.routing.traffic_split import choose_version, sticky_key
from serving.tenancy.ledger import Ledger
from serving.tenancy.records import RequestRecord

@dataclass
class ServedModel:
    """One model id behind the gateway: its tokenizer, engine replicas and admission bound;
    ``supports_tools`` when its spec says how it calls tools. A LoRA adapter is one too,
    with its base model as ``parent`` (and the base's replicas, tokenizer and bound)."""

    name: str
    max_model_len: int
    tokenizer: Tokenizer
    engine: EngineClient
    admission: AdmissionController
    replicas: Callable[[], ReplicaCounts] = field(default=lambda: ReplicaCounts(ready=1))
    scales_from_zero: bool = False
    supports_tools: bool = False
    parent: str | None = None

    def with_adapter(self, name: str) -> "ServedModel":
        """This base model's adapter ``name``: same replicas, tokenizer and bound."""
        return dataclasses.replace(self, name=name, parent=self.name)

    def check_can_serve(self) -> None:
        """Raise :class:`NoReplicaError` when no replica serves and none can start."""
        counts = self.replicas()
        if counts.desired == 0 and not self.scales_from_zero:
            raise NoReplicaError(f"no replica of {self.name} is running or starting")


@dataclass
class JsonAnswer:
    """A whole (non-streamed) answer and the engine replica that produced it."""

    body: dict
    replica_id: str


@dataclass
class EventStream:
    """A streamed answer: SSE events, and ``close`` to call when the response ends
    for any reason (idempotent; frees the request even if the stream never started)."""

    events: AsyncIterator[str]
    close: Callable[[], Awaitable[None]]
    replica_id: str


class GatewayService:
    """Serves completion requests for the models it holds, by model id."""

    def __init__(
        self,
        models: list[ServedModel],
        metrics: GatewayMetrics,
        *,
        request_timeout_s: float,
        log_prompts: bool = False,
        rate_limiter: KeyRateLimiter | None = None,
        ledger: Ledger | None = None,
        priority: PrioritySpec = PrioritySpec(),
    ) -> None:
        self.models = {m.name: m for m in models}
        self.priority = priority  # the classes (gateway.priority)
        self.splits: dict[str, TrafficSplit] = {}
        self.metrics = metrics
        self.rate_limiter = rate_limiter or KeyRateLimiter()
        self.request_timeout_s = request_timeout_s
        self.log_prompts = log_prompts
        self.drain_state = Drain()
        self.ledger = ledger  # usage counters, store and audit trail (None: not kept)

    @property
    def draining(self) -> bool:
        return self.drain_state.draining

    def in_flight(self) -> int:
        """Requests admitted and not finished, over every model (adapters share their
        base model's bound)."""
        bounds = {id(m.admission): m.admission for m in self.models.values()}
        return sum(b.in_flight for b in bounds.values())

    def set_models(self, models: list[ServedModel], splits: tuple[TrafficSplit, ...] = ()) -> None:
        """Serve these model ids, split by ``splits``, from now on (requests in flight
        keep the version they got)."""
        self.models = {m.name: m for m in models}
        self.splits = {s.name: s for s in splits}
        self.metrics.split_percent.clear()
        for split in splits:
            self.metrics.split_percent.labels(split.name, split.stable).set(100 - split.canary_percent)
            if split.canary is not None:
                self.metrics.split_percent.labels(split.name, split.canary).set(split.canary_percent)

    def version(self, served: ServedModel, caller: Caller, session_id: str | None,
                trace_id: str | None) -> ServedModel:
        """The version that serves a request for ``served``: itself, or the adapter its
        traffic split picks for the request's sticky key."""
        split = self.splits.get(served.name)
        if split is None:
            return served
        key = sticky_key(session_id, None if caller.name == ANONYMOUS else caller.name,
                         trace_id or secrets.token_hex(8))
        return self.models.get(choose_version(split, key), served)

    async def drain(self, timeout_s: float, *, retry_after_s: int = 1) -> DrainReport:
        """Refuse new requests from now on, let those in flight finish for up to
        ``timeout_s``, then cut the rest with :class:`ServerDrainingError`."""
        return await drain_requests(self.drain_state, self.in_flight, timeout_s, retry_after_s=retry_after_s)

    def model(self, name: str, caller: Caller = ANONYMOUS_CALLER) -> ServedModel:
        """The served model ``name``, if ``caller``'s key may call it; else
        :class:`ModelNotFoundError` listing what it may call."""
        served = self.models.get(name)
        if served is not None and caller.may_use(name):
            return served
        if caller.models is not None:  # as OpenAI answers: nothing told about the others
            raise ModelNotFoundError(f"The model `{name}` does not exist or you do not have access to it.",
                                     param="model")
        raise ModelNotFoundError(
            f"The model `{name}` does not exist. Served models: {', '.join(self.models)}", param="model")

    def rate_limit_headers(self, caller: Caller) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers for ``caller``'s rpm / tpm budgets now
        (:mod:`serving.admission.rate_headers`; empty when its key has neither)."""
        if caller.limits.rpm is None and caller.limits.tpm is None:
            return {}
        return rate_limit_headers(self.rate_limiter, caller)

    def account_refusal(self, model: str, endpoint: str, status: int, caller: Caller,
                        trace_id: str | None, latency_s: float = 0.0) -> None:
        """Meter and audit a request answered with an error before it reached an engine."""
        if self.ledger is not None:
            self.ledger.record(RequestRecord(at=time.time(), key=caller.name, model=model, endpoint=endpoint,
                                             status=status, latency_s=latency_s, request_id=trace_id))

    def visible_models(self, caller: Caller) -> list[ServedModel]:
        """The models ``caller``'s key may call (what ``/v1/models`` lists to it)."""
        return [m for m in self.models.values() if caller.may_use(m.name)]

    async def complete(
        self,
        body: ChatCompletionRequest | CompletionRequest,
        *,
        caller: Caller = ANONYMOUS_CALLER,
        session_id: str | None = None,
        trace_id: str | None = None,
        asked_class: str | None = None,
    ) -> JsonAnswer | EventStream:
        """A whole response, or an :class:`EventStream` when ``body.stream`` is set.
        ``asked_class``: the priority class the request asks for (its
        ``X-Serveout-Priority-Class`` header; None: its key's).

        Errors before the first token raise (the caller answers with an HTTP status);
        errors after it become an SSE error event.
        """
        chat = isinstance(body, ChatCompletionRequest)

        def plan(served: ServedModel) -> ValidatedRequest:
            return validate_completion(
                body,
                tokenizer=served.tokenizer,
                served_model=served.parent or served.name,
                adapters=(served.name,) if served.parent else (),
                max_model_len=served.max_model_len,
                request_id=new_id("chatcmpl" if chat else "cmpl"),
                session_id=session_id,
                deadline_s=time.time() + self.request_timeout_s,
                trace_id=trace_id,
                supports_tools=served.supports_tools,
            )

        async def planned_here(served: ServedModel) -> ValidatedRequest:
            # Tokenising is CPU work: off the event loop, which keeps serving streams.
            planned = await asyncio.to_thread(plan, served)
            self.metrics.planned.labels("replica").inc()
            return planned

        return await self._serve(body.model, chat, planned_here, caller=caller, trace_id=trace_id,
                                 asked_class=asked_class, session_id=session_id)

    async def complete_validated(
        self, planned: ValidatedRequest, *, caller: Caller = ANONYMOUS_CALLER, trace_id: str | None = None,
        asked_class: str | None = None,
    ) -> JsonAnswer | EventStream:
        """Like :meth:`complete`, for a request the router already validated and
        tokenised (:mod:`serving.direct.handoff`): nothing is parsed or tokenised again."""
        async def given(served: ServedModel) -> ValidatedRequest:
            self.metrics.planned.labels("router").inc()
            return planned

        return await self._serve(planned.model, planned.chat, given, caller=caller, trace_id=trace_id,
                                 asked_class=asked_class, session_id=planned.generation.session_id)

    async def _serve(
        self,
        model_name: str,
        chat: bool,
        make_plan: Callable[[ServedModel], Awaitable[ValidatedRequest]],
        *,
        caller: Caller,
        trace_id: str | None,
        asked_class: str | None = None,
        session_id: str | None = None,
    ) -> JsonAnswer | EventStream:
        started = time.monotonic()
        endpoint = "chat" if chat else "completions"
        admitted: Admitted | None = None
        version: ServedModel | None = None  # the split's pick, once known: its refusals are its own
        klass = self.priority.default_class
        try:
            served = self.model(model_name, caller)
            klass = request_class(caller, asked_class, self.priority)
            version = self.version(served, caller, session_id, trace_id)
            self.drain_state.refuse_new(served.admission.retry_after_s)
            served.check_can_serve()
            # Admission first: a request counts against the bound from the moment it is
            # parsed, so a burst cannot wait unbounded in a tokenisation backlog.
            admitted = self._admit(served, caller, klass)
            planned = await make_plan(served)
            request = planned.generation
            admitted.ticket.charge(len(request.prompt_token_ids))  # its key's fair-share counter
            rank = self.priority.rank(klass)
            if (trace_id is not None and request.trace_id != trace_id) or request.priority != rank:
                request = dataclasses.replace(request, trace_id=trace_id or request.trace_id, priority=rank)
            if version is not served:  # planned for the public name, generated by the version
                request = dataclasses.replace(request, adapter=version.name)
            sampling = request.sampling
            admitted.budget.reserve_tokens(
                len(request.prompt_token_ids) + sampling.n * sampling.max_tokens)
        except BaseException as exc:
            if admitted is not None:
                admitted.release(0)  # nothing reached an engine
            if isinstance(exc, RequestError):
                model = version.name if version is not None else (
                    model_name if model_name in self.models else "unknown")
                status = map_error(exc).status
                self.metrics.count_request(model, endpoint, str(status), caller.name)
                if isinstance(exc, (OverloadedError, ServerDrainingError)):
                    self.metrics.count_rejected(model, caller.name, exc.reason, klass)
                log_request(request_id=trace_id, model=model, endpoint=endpoint, status=status,
                            key=caller.name, error=type(exc).__name__)
                self.account_refusal(model, endpoint, status, caller, trace_id, time.monotonic() - started)
            raise
        if self.log_prompts:
            log_request(request_id=trace_id, engine_request_id=request.request_id,
                        prompt_token_ids=list(request.prompt_token_ids))
        call = InFlight(self, version, request, endpoint, started, admitted)
        fmt = ChatFormat() if chat else CompletionFormat()
        header = ResponseHeader(id=request.request_id, model=served.name)
        try:
            first = await call.first_chunk()
        except BaseException as exc:
            await call.close(exc)
            raise
        if not planned.stream:
            answer = await call.collect(first, lambda: ResponseAssembler(fmt, header, planned.n))
            return JsonAnswer(answer, call.last.replica_id if call.last else first.replica_id)
        events = call.sse(first, StreamEncoder(fmt, header, planned.n, planned.include_usage))
        return EventStream(events, lambda: call.close(asyncio.CancelledError()), first.replica_id)

    def _admit(self, served: ServedModel, caller: Caller, klass: str) -> Admitted:
        """A slot under the bound (the class's ceiling, fair share, the key's concurrency),
        then one request from the key's rpm budget; refused by either, nothing stays held."""
        ticket = served.admission.admit(caller.name, concurrency=caller.limits.concurrency, klass=klass,
                                        weight=caller.weight)
        try:
            return Admitted(caller, ticket, self.rate_limiter.admit(caller))
        except BaseException:
            ticket.release()
            raise
