"""The Locust user that drives an OpenAI-compatible endpoint.

Each request is reported through Locust's ``events.request`` (so the web UI shows it,
with E2E as the response time) carrying the full :class:`RequestRecord` in its
``context``; the load generator's listener writes those records to JSONL. Pacing is
decided by the shared :class:`RunContext`: closed loop (next request when the last
one ended) or open loop (each session starts at its scheduled arrival).
"""

from __future__ import annotations

import json
import time
from typing import ClassVar
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from locust import User, constant, task

from loadtest.analysis.records import ErrorKind, RequestRecord, TokenSource
from loadtest.client.openai_api import request_body
from loadtest.config import TargetConfig
from loadtest.generator.context import RunContext
from loadtest.generator.exchange import Exchange, perform
from loadtest.workloads.base import Session, Turn

IDLE_POLL_S = 0.2
MAX_RETRY_AFTER_S = 10.0


class RequestFailed(Exception):
    """How a failed request is shown in Locust's statistics (``<kind>: <message>``)."""


class OpenAIUser(User):
    """Sends the sessions of ``run_context`` to ``target``; subclass it with both set."""

    abstract = True
    wait_time = constant(0)
    run_context: ClassVar[RunContext]
    target: ClassVar[TargetConfig]
    api_key: ClassVar[str | None] = None
    ui_metrics: ClassVar[bool] = False

    def on_start(self) -> None:
        self.index = self.run_context.user_index()
        self._client: HTTPClient | None = None
        headers = {"Content-Type": "application/json", "User-Agent": "serveout-loadtest"}
        if self.target.stream:
            headers["Accept"] = "text/event-stream"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._headers = headers
        base = urlsplit(self.target.url)
        self._path_prefix = base.path.rstrip("/")

    def on_stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _http(self) -> HTTPClient:
        if self._client is None:
            self._client = HTTPClient.from_url(
                self.target.url,
                concurrency=1,
                connection_timeout=self.target.connect_timeout_s,
                network_timeout=self.target.request_timeout_s,
                insecure=True,
            )
        return self._client

    @task
    def drive(self) -> None:
        run = self.run_context
        if (early := -run.now()) > 0:  # spawned before the stage clock's zero (a distributed start)
            gevent.sleep(early)
        scheduled = None
        if run.open_loop:
            scheduled = run.take_arrival()
            if scheduled is None:
                gevent.sleep(IDLE_POLL_S)
                return
        elif not run.issuing():
            gevent.sleep(IDLE_POLL_S)
            return
        run.session_started()  # before waiting for the arrival: the stage is not over yet
        try:
            if scheduled is not None and (delay := scheduled - run.now()) > 0:
                gevent.sleep(delay)
            self._session(run.next_session(), scheduled)
        finally:
            run.session_ended()

    def _session(self, session: Session, scheduled: float | None) -> None:
        run = self.run_context
        system = run.plan.system_text(session)
        history: list[tuple[str, str]] = []
        for number, turn in enumerate(session.turns):
            if number and session.think_time_s:
                gevent.sleep(session.think_time_s)
            request_id = run.take_request()
            if request_id is None:
                return
            body = request_body(self.target, system=system, history=history, turn=turn)
            exchange = self._send(request_id, session, number, turn, body, scheduled)
            scheduled = None  # only a session's first request has a scheduled start
            if not exchange.ok:
                if (
                    exchange.retry_after_s
                    and not run.open_loop
                    and self.target.respect_retry_after
                ):
                    gevent.sleep(min(exchange.retry_after_s, MAX_RETRY_AFTER_S))
                return
            history.append((turn.content, exchange.text))

    def _send(
        self,
        request_id: int,
        session: Session,
        number: int,
        turn: Turn,
        body: dict,
        scheduled: float | None,
    ) -> Exchange:
        run = self.run_context
        start = run.now()
        start_unix = time.time()
        payload = json.dumps(body).encode()
        try:
            exchange = perform(
                self._http(),
                path=self._path_prefix + self.target.endpoint.path,
                body=payload,
                headers=self._headers,
                stream=self.target.stream,
                timeout_s=self.target.request_timeout_s,
                clock=run.clock,
            )
        except gevent.GreenletExit:
            cancelled = Exchange(
                error_kind=ErrorKind.CANCELLED,
                error="still in flight at the hard stop",
                e2e_s=run.now() - start,
                reusable=False,
            )
            self._report(cancelled, self._record(request_id, session, number, turn, cancelled, start, start_unix, scheduled))
            raise
        if not exchange.reusable and self._client is not None:
            self._client.close()
            self._client = None
        record = self._record(request_id, session, number, turn, exchange, start, start_unix, scheduled)
        self._report(exchange, record)
        return exchange

    def _record(
        self,
        request_id: int,
        session: Session,
        number: int,
        turn: Turn,
        ex: Exchange,
        start: float,
        start_unix: float,
        scheduled: float | None,
    ) -> RequestRecord:
        usage = ex.usage
        has_usage = usage is not None and usage.completion_tokens is not None
        return RequestRecord(
            id=request_id,
            stage=self.run_context.stage,
            session=session.id,
            turn=number,
            user=self.index,
            scheduled_s=scheduled,
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
            expected_prompt_tokens=turn.expected_prompt_tokens if number == 0 else None,
            requested_output_tokens=turn.max_tokens if self.target.exact_output else None,
            finish_reason=ex.finish_reason,
            output_text=ex.text if ex.ok and not has_usage else None,
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
