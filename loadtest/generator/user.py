"""The Locust user that drives an OpenAI-compatible endpoint.

Each request is reported through Locust's ``events.request`` (so the web UI shows it,
with E2E as the response time) carrying the full :class:`RequestRecord` in its
``context``; the load generator's listener writes those records to JSONL. Pacing is
decided by the shared :class:`RunContext`: closed loop (next request when the last
one ended) or open loop (each session starts at its scheduled arrival).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from locust import User, constant, task

from loadtest.analysis.records import ErrorKind, RequestRecord, TokenSource
from loadtest.client.openai_api import MAX_RETRY_AFTER_S, request_body, request_model
from loadtest.config import TargetConfig
from loadtest.generator.bodies import FirstBodies, encode
from loadtest.generator.context import RunContext
from loadtest.generator.exchange import Addresses, Exchange, perform, pin
from loadtest.workloads.base import Session, Turn
from loadtest.workloads.tenant_mix import tenant_headers

PARKED_S = 3600.0  # a user with nothing more to send waits this long at a time (the stage's end kills it)


@dataclass(frozen=True, slots=True)
class Sent:
    """What a request belongs to: its session (``seq``: as sent), turn number (from 0,
    the session's ``turn_offset`` included) and turn, and its scheduled start."""

    session: Session
    seq: int
    number: int
    turn: Turn
    scheduled: float | None


class RequestFailed(Exception):
    """How a failed request is shown in Locust's statistics (``<kind>: <message>``)."""


class OpenAIUser(User):
    """Sends the sessions of ``run_context`` to ``target``; subclass it with both set."""

    abstract = True
    wait_time = constant(0)
    run_context: ClassVar[RunContext]
    target: ClassVar[TargetConfig]
    bodies: ClassVar[FirstBodies | None] = None  # sessions' first bodies, encoded before the stage
    addresses: ClassVar[Addresses | None] = None  # the target's, resolved before the stage
    api_key: ClassVar[str | None] = None
    tenant_keys: ClassVar[dict[str, str]] = {}  # tenant name -> its key (sessions name their tenant)
    ui_metrics: ClassVar[bool] = False

    def on_start(self) -> None:
        self.index = self.run_context.user_index()
        self._clients: dict[int, HTTPClient] = {}
        headers = {"Content-Type": "application/json", "User-Agent": "serveout-loadtest"}
        if self.target.stream:
            headers["Accept"] = "text/event-stream"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._headers = headers
        self._tenant_headers: dict[tuple[str, str | None], dict[str, str]] = {}
        base = urlsplit(self.target.url)
        self._path_prefix = base.path.rstrip("/")

    def on_stop(self) -> None:
        for branch in list(self._clients):
            self._drop_client(branch)

    def _http(self, branch: int | None = None) -> HTTPClient:
        """The user's connection (a fan-out branch ``b`` > 0: one more of its own)."""
        key = branch or 0
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = HTTPClient.from_url(
                self.target.url,
                concurrency=1,
                connection_timeout=self.target.connect_timeout_s,
                network_timeout=self.target.request_timeout_s,
                insecure=True,
            )
            if self.addresses is not None:
                pin(client, self.addresses)
        return client

    def _drop_client(self, branch: int | None) -> None:
        client = self._clients.pop(branch or 0, None)
        if client is not None:
            client.close()

    @task
    def drive(self) -> None:
        run = self.run_context
        scheduled = bound = None
        if run.open_loop:  # an arrival may be taken before the stage clock's zero: it is waited for below
            taken = run.take_scheduled()
            if taken is None:  # issuing is over for good: no polling (hundreds of idle users cost CPU)
                gevent.sleep(PARKED_S)
                return
            scheduled, bound = taken
        else:
            if (early := -run.now()) > 0:  # spawned before the stage clock's zero
                gevent.sleep(early)
            if not run.issuing():
                gevent.sleep(PARKED_S)
                return
        run.session_started()  # before waiting for the arrival: the stage is not over yet
        try:
            if scheduled is not None and (delay := scheduled - run.now()) > 0:
                gevent.sleep(delay)
            index = bound if bound is not None else run.next_index()
            session = run.plan.sessions[index]
            self._session(index, session, scheduled, session.id if run.paired else run.session_number())
        finally:
            run.session_ended()

    def _session(self, index: int, session: Session, scheduled: float | None, seq: int) -> None:
        run = self.run_context
        system = run.plan.system_text(session)
        first = self.bodies.first(index) if self.bodies is not None else None
        history: list[tuple[str, str]] = []
        for number, turn in enumerate(session.turns):
            if number and session.think_time_s:
                gevent.sleep(session.think_time_s)
            sent = Sent(session, seq, session.turn_offset + number, turn, scheduled)
            scheduled = None  # only a session's first request has a scheduled start
            if turn.fanout > 1:
                exchange = self._step(sent, system, history)
            else:
                request_id = run.take_request()
                if request_id is None:
                    return
                if number == 0 and first is not None:
                    payload = first
                else:
                    payload = encode(request_body(self.target, system=system, history=history, turn=turn,
                                                  extra=session.extra_body))  # fmt: skip
                exchange = self._send(request_id, sent, payload)
            if exchange is None or not exchange.ok:
                if (
                    exchange is not None
                    and exchange.retry_after_s
                    and not run.open_loop
                    and self.target.respect_retry_after
                ):
                    gevent.sleep(min(exchange.retry_after_s, MAX_RETRY_AFTER_S))
                return
            history.append((turn.content, exchange.text))

    def _step(self, sent: Sent, system: str | None, history: list[tuple[str, str]]) -> Exchange | None:
        """An agent step: ``turn.fanout`` requests at once, each on its own connection;
        the first branch's exchange when all succeeded (the session goes on from it)."""
        run, turn = self.run_context, sent.turn
        branches = []
        for branch in range(turn.fanout):
            request_id = run.take_request()
            if request_id is None:
                break
            body = request_body(self.target, system=system, history=history, turn=turn,
                                extra=sent.session.extra_body, content=f"{turn.content} ({branch + 1})")
            branches.append(gevent.spawn(self._send, request_id, sent, encode(body), branch))
        if not branches:
            return None
        gevent.joinall(branches, raise_error=True)
        exchanges = [g.value for g in branches]
        return exchanges[0] if len(exchanges) == turn.fanout and all(e.ok for e in exchanges) else None

    def _send(self, request_id: int, sent: Sent, payload: bytes, branch: int | None = None) -> Exchange:
        run = self.run_context
        start = run.now()
        start_unix = time.time()
        cancel_after = run.cancel_after(request_id)
        client = self._http(branch)
        try:
            exchange = perform(
                client,
                path=self._path_prefix + self.target.endpoint.path,
                body=payload,
                headers=self._headers_of(sent.session),
                stream=self.target.stream,
                timeout_s=self.target.request_timeout_s,
                clock=run.clock,
                cancel_after_s=cancel_after,
            )
        except gevent.GreenletExit:
            cancelled = Exchange(
                error_kind=ErrorKind.CANCELLED,
                error="still in flight at the hard stop",
                e2e_s=run.now() - start,
                reusable=False,
            )
            self._report(cancelled, self._record(request_id, sent, cancelled, start, start_unix, branch, cancel_after))
            raise
        if not exchange.reusable:
            self._drop_client(branch)
        record = self._record(request_id, sent, exchange, start, start_unix, branch, cancel_after)
        self._report(exchange, record)
        return exchange

    def _headers_of(self, session: Session) -> dict[str, str]:
        """The headers of a session's requests: its tenant's key and class, if it has one."""
        if session.tenant is None:
            return self._headers
        which = (session.tenant, session.priority_class)
        headers = self._tenant_headers.get(which)
        if headers is None:
            own = tenant_headers(self.tenant_keys[session.tenant], session.priority_class)
            headers = self._tenant_headers[which] = {**self._headers, **own}
        return headers

    def _record(
        self,
        request_id: int,
        sent: Sent,
        ex: Exchange,
        start: float,
        start_unix: float,
        branch: int | None,
        cancel_after: float | None,
    ) -> RequestRecord:
        usage, turn = ex.usage, sent.turn
        has_usage = usage is not None and usage.completion_tokens is not None
        return RequestRecord(
            id=request_id,
            stage=self.run_context.stage,
            session=sent.session.id,
            turn=sent.number,
            session_seq=sent.seq,
            branch=branch,
            fanout=turn.fanout if turn.fanout > 1 else None,
            user=self.index,
            scheduled_s=sent.scheduled,
            start_s=start,
            start_unix=start_unix,
            ok=ex.ok,
            status=ex.status,
            error_kind=ex.error_kind,
            error=ex.error,
            retry_after_s=ex.retry_after_s,
            ttft_s=ex.ttft_s,
            e2e_s=ex.e2e_s,
            itl_s=ex.gaps,
            chunks=ex.chunks,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            output_tokens=usage.completion_tokens if has_usage else None,
            token_source=TokenSource.USAGE if has_usage else TokenSource.NONE,
            expected_prompt_tokens=turn.expected_prompt_tokens if sent.number == sent.session.turn_offset else None,
            requested_output_tokens=turn.max_tokens if self.target.exact_output else None,
            finish_reason=ex.finish_reason,
            output_text=ex.text if ex.ok and not has_usage else None,
            cancel_after_s=cancel_after,
            model=request_model(self.target, sent.session.extra_body),
            tenant=sent.session.tenant,
            priority_class=sent.session.priority_class,
        )

    def _report(self, ex: Exchange, record: RequestRecord) -> None:
        events = self.environment.events
        name = self.target.endpoint.path
        exception = None if ex.ok else RequestFailed(f"{ex.error_kind}: {ex.error}")
        self.run_context.finish(record)
        events.request.fire(
            request_type="POST",
            name=name,
            response_time=ex.e2e_s * 1000.0,
            response_length=len(ex.text),
            exception=exception,
            context={"loadtest_record": record},
            response=None,
            url=self.target.url + name,
            start_time=record.start_unix,
        )
        if self.ui_metrics and ex.ok and ex.ttft_s is not None:
            events.request.fire(
                request_type="TTFT",
                name=name,
                response_time=ex.ttft_s * 1000.0,
                response_length=0,
                exception=None,
                context={},
                response=None,
                url=self.target.url + name,
                start_time=record.start_unix,
            )
