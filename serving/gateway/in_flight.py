"""One admitted request in flight: its engine stream, its deadline, one retry on another
replica (or, for a stream under way, one resumption: :mod:`serving.gateway.resume`),
and the bookkeeping when it ends (slot, tokens, metrics, one log line)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from serving.admission.api_keys import Caller
from serving.admission.bound import AdmissionTicket
from serving.admission.key_limits import RequestBudget
from serving.engine.protocol import GenerationChunk, GenerationRequest
from serving.errors import DeadlineExceededError, EngineError, ReplicaFailedError, RequestError, ServerDrainingError
from serving.gateway.resume import SentTokens, continuation, counted_on, why_not_resumable
from serving.openai.error_mapping import map_error
from serving.openai.frames import ResponseAssembler, StreamEncoder
from serving.tenancy.records import RequestRecord

if TYPE_CHECKING:
    from serving.gateway.service import GatewayService, ServedModel

log = logging.getLogger("serveout.gateway")


@dataclass
class Admitted:
    """What an admitted request holds: its slot, its key's budget, and who sent it."""

    caller: Caller
    ticket: AdmissionTicket
    budget: RequestBudget

    def release(self, used_tokens: int, output_tokens: int = 0) -> None:
        """Free the slot and charge the key the tokens really used (idempotent): its rate
        budget all of them, its fair-share counter the output (the prompt was charged
        when tokenised)."""
        self.ticket.release(output_tokens)
        self.budget.settle(used_tokens)



class InFlight:
    """One admitted request in flight: its engine stream, deadline and bookkeeping."""

    def __init__(self, service: GatewayService, served: ServedModel, request: GenerationRequest,
                 endpoint: str, started: float, admitted: Admitted) -> None:
        self.service, self.served, self.request = service, served, request
        self.endpoint, self.started, self.admitted = endpoint, started, admitted
        self.key = admitted.caller.name
        ledger = service.ledger
        # The audit trail's content (opt-in) keeps the chunks the client got; off, the
        # engine's stream is read as it is (no per-chunk work).
        self.captured: list[GenerationChunk] | None = [] if ledger is not None and ledger.content else None
        self.handed_off = time.monotonic()
        self.chunks = self._stream(request)
        self.last: GenerationChunk | None = None
        self.first_at: float | None = None
        self.retried = False
        self.resumed = False
        self.closed = False
        # One timer per request (not one per chunk): at the deadline, or when a drain
        # cuts the request, the chunk being awaited is cancelled and the stream ends
        # with ``ended_by``.
        self.ended_by: RequestError | None = None
        self._waiter: asyncio.Task | None = None  # the task awaiting a chunk right now
        self._deadline = asyncio.get_running_loop().call_later(service.request_timeout_s, self._expire)
        service.metrics.in_flight.labels(served.name).inc()
        service.metrics.key_in_flight.labels(self.key).inc()
        service.metrics.class_in_flight.labels(served.name, admitted.ticket.klass).inc()
        service.drain_state.track(self)

    def _stream(self, request: GenerationRequest, avoid_replica: str | None = None, *, resumed_after: int = 0):
        """The engine's chunks of ``request`` (kept too when the audit records content);
        ``resumed_after``: it continues this request after that many tokens sent."""
        engine = self.served.engine
        chunks = engine.stream(request, avoid_replica=avoid_replica) if avoid_replica else engine.stream(request)
        if resumed_after:
            chunks = counted_on(chunks, len(self.request.prompt_token_ids), resumed_after)
        if self.captured is None:
            return chunks
        if not resumed_after:
            self.captured.clear()
        return _capturing(chunks, self.captured)

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
        self.first_at = time.monotonic()
        self.service.metrics.ttft.labels(self.served.name, self.endpoint).observe(self.first_at - self.started)
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
        self.chunks = self._stream(self.request, avoid_replica=failure.replica_id)

    async def _resume(self, failure: ReplicaFailedError, sent: SentTokens) -> None:
        """Go on with a stream under way on another replica, from the tokens it has sent;
        raise instead if it cannot (:func:`~serving.gateway.resume.why_not_resumable`)
        or already was."""
        why = "it had already been resumed once" if self.resumed else why_not_resumable(self.request, sent)
        if why is not None:
            log_request(request_id=self.request.trace_id, engine_request_id=self.request.request_id,
                        not_resumed=why, replica=failure.replica_id)
            raise ReplicaFailedError(f"{failure.message}; the stream was not resumed: {why}",
                                     replica_id=failure.replica_id, reason=failure.reason) from failure
        self.resumed = True
        self.service.metrics.resumed.labels(self.served.name, failure.reason).inc()
        log_request(request_id=self.request.trace_id, engine_request_id=self.request.request_id,
                    resumed=failure.reason, replica=failure.replica_id, tokens_sent=len(sent.token_ids))
        await self.chunks.aclose()
        self.chunks = self._stream(continuation(self.request, sent), avoid_replica=failure.replica_id,
                                   resumed_after=len(sent.token_ids))

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
        # What was sent, to resume from if the replica dies (not when no other replica can be asked).
        sent = SentTokens() if self.served.engine.retries_elsewhere else None
        try:
            chunk: GenerationChunk | None = first
            while chunk is not None:
                for event in encoder.encode(chunk):
                    yield event
                if sent is not None:
                    sent.add(chunk)
                try:
                    chunk = await self._next()
                except ReplicaFailedError as exc:
                    if sent is None:
                        raise
                    await self._resume(exc, sent)
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
        self.admitted.release(used, last.completion_tokens if last else 0)
        await self.chunks.aclose()
        metrics, model = self.service.metrics, self.served.name
        status = _status_of(error)
        metrics.count_request(model, self.endpoint, status, self.key)
        metrics.latency.labels(model, self.endpoint).observe(time.monotonic() - self.started)
        if last is not None:
            metrics.record_tokens(model, last.prompt_tokens, last.completion_tokens, self.key)
            if status == "200" and self.first_at is not None and last.completion_tokens > 1:
                metrics.tpot.labels(model).observe((time.monotonic() - self.first_at) / (last.completion_tokens - 1))
        if self.service.ledger is not None:
            self._account(int(status), last)
        metrics.key_in_flight.labels(self.key).dec()
        metrics.class_in_flight.labels(model, self.admitted.ticket.klass).dec()
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


    def _account(self, status: int, last: GenerationChunk | None) -> None:
        """Meter the request and queue its usage and audit record (O(1))."""
        now = time.monotonic()
        content = self.captured is not None
        self.service.ledger.record(RequestRecord(
            at=time.time(), key=self.key, model=self.served.name, endpoint=self.endpoint, status=status,
            prompt_tokens=last.prompt_tokens if last else 0, cached_tokens=last.cached_tokens if last else None,
            output_tokens=last.completion_tokens if last else 0, engine_s=now - self.handed_off,
            latency_s=now - self.started, request_id=self.request.trace_id,
            prompt_ids=self.request.prompt_token_ids if content else None,
            chunks=self.captured, decode=self.served.tokenizer.decode if content else None))


async def _capturing(chunks: AsyncIterator[GenerationChunk], into: list[GenerationChunk]):
    """``chunks``, each also kept in ``into`` (the audit trail's content)."""
    try:
        async for chunk in chunks:
            into.append(chunk)
            yield chunk
    finally:
        await chunks.aclose()


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
