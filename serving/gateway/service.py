"""The gateway's request handling, independent of HTTP framework and of Ray.

For one completion request: admit (429: the bound, the key's fair share, concurrency
and request rate), validate and tokenise off the event loop (400s), reserve the key's
tokens (429), stream from an engine replica under the request's deadline (504), and format
the answer as OpenAI JSON or SSE events, recording metrics on the way.

A replica that dies (:class:`ReplicaFailedError`) before anything reached the client
(before a stream's first event; for a whole answer, at any point) costs a retry on
another replica, once, under the same deadline; a second failure is a 503. A stream
already under way ends with an in-band error event instead.

While the gateway drains (:meth:`GatewayService.drain`, before its app stops) new
requests get 503 ``server_draining``, and those still running at the drain deadline
are cut with that error (:mod:`serving.gateway.drain`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from serving.engine.protocol import GenerationChunk, GenerationRequest
from serving.errors import (
    DeadlineExceededError,
    EngineError,
    ModelNotFoundError,
    NoReplicaError,
    OverloadedError,
    ReplicaFailedError,
    RequestError,
    ServerDrainingError,
)
from serving.gateway.admission import AdmissionController, AdmissionTicket
from serving.gateway.api_keys import ANONYMOUS_CALLER, Caller
from serving.gateway.drain import Drain, DrainReport, drain_requests
from serving.gateway.engine_client import EngineClient
from serving.gateway.error_mapping import map_error
from serving.gateway.key_limits import KeyRateLimiter, RequestBudget
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.openai_format import (
    ChatFormat,
    CompletionFormat,
    ResponseAssembler,
    ResponseHeader,
    StreamEncoder,
)
from serving.gateway.replica_status import ReplicaCounts
from serving.gateway.plans import PlannedRequest, plan_completion
from serving.gateway.request_planning import Tokenizer
from serving.gateway.schemas import ChatCompletionRequest, CompletionRequest, new_id

log = logging.getLogger("serveout.gateway")


@dataclass
class ServedModel:
    """One model behind the gateway: its tokenizer, engine replicas and admission bound;
    ``supports_tools`` when its spec says how it calls tools."""

    name: str
    max_model_len: int
    tokenizer: Tokenizer
    engine: EngineClient
    admission: AdmissionController
    replicas: Callable[[], ReplicaCounts] = field(default=lambda: ReplicaCounts(ready=1))
    scales_from_zero: bool = False
    supports_tools: bool = False

    def check_can_serve(self) -> None:
        """Raise :class:`NoReplicaError` when no replica serves and none can start."""
        counts = self.replicas()
        if counts.desired == 0 and not self.scales_from_zero:
            raise NoReplicaError(f"no replica of {self.name} is running or starting")


@dataclass
class Admitted:
    """What an admitted request holds: its slot, its key's budget, and who sent it."""

    caller: Caller
    ticket: AdmissionTicket
    budget: RequestBudget

    def release(self, used_tokens: int) -> None:
        """Free the slot and charge the key the tokens really used (idempotent)."""
        self.ticket.release()
        self.budget.settle(used_tokens)


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
    ) -> None:
        self.models = {m.name: m for m in models}
        self.metrics = metrics
        self.rate_limiter = rate_limiter or KeyRateLimiter()
        self.request_timeout_s = request_timeout_s
        self.log_prompts = log_prompts
        self.drain_state = Drain()

    @property
    def draining(self) -> bool:
        return self.drain_state.draining

    def in_flight(self) -> int:
        """Requests admitted and not finished, over every model."""
        return sum(m.admission.in_flight for m in self.models.values())

    async def drain(self, timeout_s: float, *, retry_after_s: int = 1) -> DrainReport:
        """Refuse new requests from now on, let those in flight finish for up to
        ``timeout_s``, then cut the rest with :class:`ServerDrainingError`."""
        return await drain_requests(self.drain_state, self.in_flight, timeout_s, retry_after_s=retry_after_s)

    def model(self, name: str) -> ServedModel:
        try:
            return self.models[name]
        except KeyError:
            raise ModelNotFoundError(
                f"The model `{name}` does not exist. Served models: {', '.join(self.models)}",
                param="model",
            ) from None

    async def complete(
        self,
        body: ChatCompletionRequest | CompletionRequest,
        *,
        caller: Caller = ANONYMOUS_CALLER,
        session_id: str | None = None,
        trace_id: str | None = None,
    ) -> JsonAnswer | EventStream:
        """A whole response, or an :class:`EventStream` when ``body.stream`` is set.

        Errors before the first token raise (the caller answers with an HTTP status);
        errors after it become an SSE error event.
        """
        chat = isinstance(body, ChatCompletionRequest)

        def plan(served: ServedModel) -> PlannedRequest:
            return plan_completion(
                body,
                tokenizer=served.tokenizer,
                served_model=served.name,
                max_model_len=served.max_model_len,
                request_id=new_id("chatcmpl" if chat else "cmpl"),
                session_id=session_id,
                deadline_s=time.time() + self.request_timeout_s,
                trace_id=trace_id,
                supports_tools=served.supports_tools,
            )

        async def planned_here(served: ServedModel) -> PlannedRequest:
            # Tokenising is CPU work: off the event loop, which keeps serving streams.
            planned = await asyncio.to_thread(plan, served)
            self.metrics.planned.labels("replica").inc()
            return planned

        return await self._serve(body.model, chat, planned_here, caller=caller, trace_id=trace_id)

    async def complete_planned(
        self, planned: PlannedRequest, *, caller: Caller = ANONYMOUS_CALLER, trace_id: str | None = None,
    ) -> JsonAnswer | EventStream:
        """Like :meth:`complete`, for a request the router already validated and
        tokenised (:mod:`serving.gateway.plans`): nothing is parsed or tokenised again."""
        async def given(served: ServedModel) -> PlannedRequest:
            self.metrics.planned.labels("router").inc()
            return planned

        return await self._serve(planned.model, planned.chat, given, caller=caller, trace_id=trace_id)

    async def _serve(
        self,
        model_name: str,
        chat: bool,
        make_plan: Callable[[ServedModel], Awaitable[PlannedRequest]],
        *,
        caller: Caller,
        trace_id: str | None,
    ) -> JsonAnswer | EventStream:
        started = time.monotonic()
        endpoint = "chat" if chat else "completions"
        admitted: Admitted | None = None
        try:
            served = self.model(model_name)
            self.drain_state.refuse_new(served.admission.retry_after_s)
            served.check_can_serve()
            # Admission first: a request counts against the bound from the moment it is
            # parsed, so a burst cannot wait unbounded in a tokenisation backlog.
            admitted = self._admit(served, caller)
            planned = await make_plan(served)
            request = planned.generation
            if trace_id is not None and request.trace_id != trace_id:
                request = dataclasses.replace(request, trace_id=trace_id)
            sampling = request.sampling
            admitted.budget.reserve_tokens(
                len(request.prompt_token_ids) + sampling.n * sampling.max_tokens)
        except BaseException as exc:
            if admitted is not None:
                admitted.release(0)  # nothing reached an engine
            if isinstance(exc, RequestError):
                model = model_name if model_name in self.models else "unknown"
                status = map_error(exc).status
                self.metrics.count_request(model, endpoint, str(status), caller.name)
                if isinstance(exc, (OverloadedError, ServerDrainingError)):
                    self.metrics.count_rejected(model, caller.name, exc.reason)
                log_request(request_id=trace_id, model=model, endpoint=endpoint, status=status,
                            key=caller.name, error=type(exc).__name__)
            raise
        if self.log_prompts:
            log_request(request_id=trace_id, engine_request_id=request.request_id,
                        prompt_token_ids=list(request.prompt_token_ids))
        call = _Call(self, served, request, endpoint, started, admitted)
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

    def _admit(self, served: ServedModel, caller: Caller) -> Admitted:
        """A slot under the bound (fair share, the key's concurrency), then one request
        from the key's rpm budget; refused by either, nothing stays held."""
        ticket = served.admission.admit(caller.name, concurrency=caller.limits.concurrency)
        try:
            return Admitted(caller, ticket, self.rate_limiter.admit(caller))
        except BaseException:
            ticket.release()
            raise


class _Call:
    """One admitted request in flight: its engine stream, deadline and bookkeeping."""

    def __init__(self, service: GatewayService, served: ServedModel, request: GenerationRequest,
                 endpoint: str, started: float, admitted: Admitted) -> None:
        self.service, self.served, self.request = service, served, request
        self.endpoint, self.started, self.admitted = endpoint, started, admitted
        self.key = admitted.caller.name
        self.chunks = served.engine.stream(request)
        self.last: GenerationChunk | None = None
        self.retried = False
        self.closed = False
        # One timer per request (not one per chunk): at the deadline, or when a drain
        # cuts the request, the chunk being awaited is cancelled and the stream ends
        # with ``ended_by``.
        self.ended_by: RequestError | None = None
        self._waiter: asyncio.Task | None = None  # the task awaiting a chunk right now
        self._deadline = asyncio.get_running_loop().call_later(service.request_timeout_s, self._expire)
        service.metrics.in_flight.labels(served.name).inc()
        service.metrics.key_in_flight.labels(self.key).inc()
        service.drain_state.track(self)

    def cut(self, error: ServerDrainingError) -> None:
        """End the request with ``error``: at once if it waits for a chunk, else before
        the next one."""
        self._end(error)

    def _expire(self) -> None:
        self._end(DeadlineExceededError(
            f"the request did not finish within {self.service.request_timeout_s:g} s and was cancelled"))

    def _end(self, error: RequestError) -> None:
        if self.ended_by is None:
            self.ended_by = error
            if self._waiter is not None:
                self._waiter.cancel()

    async def _next(self) -> GenerationChunk | None:
        if self.ended_by is not None:
            raise self.ended_by
        self._waiter = task = asyncio.current_task()
        try:
            chunk = await anext(self.chunks, None)
        except asyncio.CancelledError:
            # Ours (deadline or drain) unless someone else cancelled the task too.
            if self.ended_by is not None and task.uncancel() == 0:
                raise self.ended_by from None
            raise
        finally:
            self._waiter = None
        if chunk is not None:
            self.last = chunk
        return chunk

    async def first_chunk(self) -> GenerationChunk:
        chunk = await self._first()
        self.service.metrics.ttft.labels(self.served.name, self.endpoint).observe(
            time.monotonic() - self.started)
        return chunk

    async def _first(self) -> GenerationChunk:
        """The first chunk, from another replica (once) if the first one dies."""
        while True:
            try:
                chunk = await self._next()
                break
            except ReplicaFailedError as exc:
                await self._retry(exc)
        if chunk is None:
            raise EngineError("the engine returned no output")
        return chunk

    async def _retry(self, failure: ReplicaFailedError) -> None:
        """Start the request again on another replica (a new engine request id, the same
        prompt and deadline); raise instead if it already was."""
        if not self.served.engine.retries_elsewhere:
            raise ReplicaFailedError(
                f"{failure.message}; another replica can serve the request",
                replica_id=failure.replica_id, reason=failure.reason) from failure
        if self.retried:
            raise ReplicaFailedError(
                f"{failure.message} (the request had already been retried on another replica)",
                replica_id=failure.replica_id, reason=failure.reason) from failure
        self.retried = True
        self.service.metrics.retries.labels(self.served.name, failure.reason).inc()
        log_request(request_id=self.request.trace_id, engine_request_id=self.request.request_id,
                    retry=failure.reason, replica=failure.replica_id)
        await self.chunks.aclose()
        self.last = None
        self.request = dataclasses.replace(self.request, request_id=f"{self.request.request_id}-retry")
        self.chunks = self.served.engine.stream(self.request, avoid_replica=failure.replica_id)

    async def collect(self, first: GenerationChunk, new_assembler: Callable[[], ResponseAssembler]) -> dict:
        """The whole answer. Nothing is sent before it is complete, so a replica that dies
        at any point costs one retry from the start."""
        try:
            assembler, chunk = new_assembler(), first
            while chunk is not None:
                assembler.add(chunk)
                try:
                    chunk = await self._next()
                except ReplicaFailedError as exc:
                    await self._retry(exc)
                    assembler, chunk = new_assembler(), await self._first()
        except BaseException as exc:
            await self.close(exc)
            raise
        await self.close(None)
        return assembler.response()

    async def sse(self, first: GenerationChunk, encoder: StreamEncoder) -> AsyncIterator[str]:
        error: BaseException | None = None
        try:
            chunk: GenerationChunk | None = first
            while chunk is not None:
                for event in encoder.encode(chunk):
                    yield event
                chunk = await self._next()
            for event in encoder.finish():
                yield event
        except Exception as exc:  # after the first byte: report in-band, then end the stream
            error = exc
            for event in encoder.error(map_error(exc).body):
                yield event
        except BaseException as exc:  # cancelled: the client went away
            error = exc
            raise
        finally:
            await self.close(error)

    async def close(self, error: BaseException | None) -> None:
        """Release the admission slot and the key's unused tokens, stop the engine stream,
        record metrics (once)."""
        if self.closed:
            return
        self.closed = True
        self._deadline.cancel()
        self.service.drain_state.forget(self)
        last = self.last
        # Without a chunk the engine may still have read the prompt: charge it.
        used = last.prompt_tokens + last.completion_tokens if last else len(self.request.prompt_token_ids)
        self.admitted.release(used)
        await self.chunks.aclose()
        metrics, model = self.service.metrics, self.served.name
        status = _status_of(error)
        metrics.count_request(model, self.endpoint, status, self.key)
        metrics.latency.labels(model, self.endpoint).observe(time.monotonic() - self.started)
        if last is not None:
            metrics.record_tokens(model, last.prompt_tokens, last.completion_tokens, self.key)
        metrics.key_in_flight.labels(self.key).dec()
        metrics.in_flight.labels(model).dec()  # last: a scraper seeing 0 in flight sees every token
        log_request(
            request_id=self.request.trace_id, engine_request_id=self.request.request_id, model=model,
            endpoint=self.endpoint, key=self.key, status=int(status),
            replica=last.replica_id if last else None,
            prompt_tokens=last.prompt_tokens if last else None,
            completion_tokens=last.completion_tokens if last else None,
            latency_s=round(time.monotonic() - self.started, 4),
            error=type(error).__name__ if status not in ("200", "499") else None,
        )


def log_request(**fields) -> None:
    """One structured (JSON) log line about a request; never prompt or completion text
    (prompt token ids only when ``gateway.log_prompts`` is on)."""
    log.info(json.dumps({"event": "request", **{k: v for k, v in fields.items() if v is not None}}))


def _status_of(error: BaseException | None) -> str:
    if error is None:
        return "200"
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "499"  # client closed the request
    return str(map_error(error).status)
