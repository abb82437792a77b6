"""An OpenAI-compatible streaming server whose timing is known exactly: the benchmarks' ground truth.

Every completion (chat or text, streamed or not) answers its first token ``ttft``
seconds after the request was received, then one token every ``itl`` seconds, until
``max_tokens`` (or ``max_completion_tokens``) tokens. Deadlines are absolute
(``received + ttft + k * itl``), so lateness never accumulates; a write lands when the
event loop's timer fires (within about a millisecond of its deadline). What the server
actually did is recorded per request (receipt, each token's write, end, with the
``x-request-id`` header) and served at ``GET /truth``: the benchmarks compare clients
with those recorded times, not only with the configured ones.

Stream headers go out at receipt; what the answers hold is ``benchmarks.common.timed_answers``.
Also served: ``/v1/models``, ``/health``,
``/metrics`` (vLLM-named counters), ``POST /truth/reset``. Bound to 127.0.0.1 only;
importable without vLLM or Ray.

    .venv/bin/python -m benchmarks.timed_server --ttft 0.1 --itl 0.02 --port 8300

This module is the server and :func:`start_in_child`; the program (its command line)
is ``benchmarks/timed_server.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httptools

from benchmarks.common.servers import HOST, ServerStartError, start, stop, wait_healthy
from benchmarks.common.timed_answers import BadRequest, StreamFrames, TimedConfig, parse_completion, whole_answer
from serving.cluster.netns import python_argv


@dataclass
class Trace:
    """What the server did for one completion request (``time.monotonic()`` seconds)."""

    id: int
    endpoint: str
    stream: bool
    received: float
    request_id: str | None = None
    token_times: list[float] = field(default_factory=list)  # each token chunk's write (streams only)
    end: float | None = None  # the last byte written; None while in flight or when aborted
    output_tokens: int = 0  # tokens the answer holds (what usage reports)
    prompt_tokens: int = 0
    aborted: bool = False  # the client went away before the end

    @property
    def complete(self) -> bool:
        return self.end is not None and not self.aborted


STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(status: int, body: bytes, content_type: str, keep_alive: bool) -> bytes:
    close = "" if keep_alive else "connection: close\r\n"
    head = (f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Error')}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n{close}\r\n")
    return head.encode() + body


def _json(status: int, data: Any, keep_alive: bool) -> bytes:
    return _response(status, json.dumps(data).encode(), "application/json", keep_alive)


def _error(status: int, message: str, keep_alive: bool) -> bytes:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return _json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}}, keep_alive)


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
               b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")


class TimedServer:
    """The server's state: configuration, recorded traces, counters."""

    def __init__(self, config: TimedConfig) -> None:
        self.config = config
        self.traces: list[Trace] = []
        self.running = 0
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self._next_id = 0

    def new_trace(self, endpoint: str, stream: bool, received: float, request_id: str | None) -> Trace:
        self._next_id += 1
        trace = Trace(self._next_id, endpoint, stream, received, request_id)
        self.traces.append(trace)
        return trace

    def truth(self) -> dict:
        """Everything recorded, with the offset turning monotonic times into Unix times."""
        return {"clock": "monotonic", "unix_offset": time.time() - time.monotonic(),
                "config": self.config.model_dump(), "traces": [asdict(t) for t in self.traces]}

    def metrics(self) -> bytes:
        label = f'{{model_name="{self.config.model}"}}'
        return (f"vllm:num_requests_running{label} {self.running}\nvllm:num_requests_waiting{label} 0\n"
                f"vllm:generation_tokens_total{label} {self.generation_tokens}\n"
                f"vllm:prompt_tokens_total{label} {self.prompt_tokens}\n").encode()

    def reset(self) -> int:
        """Forget the finished traces (in-flight ones stay); how many were forgotten."""
        before = len(self.traces)
        self.traces = [t for t in self.traces if t.end is None and not t.aborted]
        return before - len(self.traces)


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection (httptools parser; requests answered one at a time)."""

    def __init__(self, server: TimedServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[tuple[float, bytes, bytes, dict[bytes, bytes], bytes, bool]] = deque()
        self.busy = False
        self.timer: asyncio.TimerHandle | None = None
        self.active: Trace | None = None

    # transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(_error(400, "malformed HTTP request", False))
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.active is not None:
            self.active.aborted = True
            self.server.running -= 1
            self.active = None
        self.transport = None

    # parser callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", {}, []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        received = time.monotonic()
        method = self.parser.get_method()
        keep_alive = self.parser.should_keep_alive()
        self.queue.append((received, method, self._url.split(b"?")[0], self._headers, b"".join(self._body), keep_alive))
        if not self.busy:
            self._next()

    # answering
    def _next(self) -> None:
        while self.queue and not self.busy and self.transport is not None:
            self.busy = True
            received, method, path, headers, body, keep_alive = self.queue.popleft()
            self._answer(received, method, path.decode("latin-1"), headers, body, keep_alive)

    def _done(self, keep_alive: bool) -> None:
        self.busy = False
        self.active = None
        if not keep_alive:
            self._close()
        else:
            self._next()

    def _reply(self, data: bytes, keep_alive: bool) -> None:
        self._write(data)
        self._done(keep_alive)

    def _answer(self, received: float, method: bytes, path: str, headers: dict, body: bytes, keep_alive: bool) -> None:
        server = self.server
        routes: dict[tuple[bytes, str], Callable[[], bytes]] = {
            (b"GET", "/health"): lambda: _response(200, b"", "text/plain", keep_alive),
            (b"GET", "/v1/models"): lambda: _json(200, {"object": "list", "data": [
                {"id": server.config.model, "object": "model", "owned_by": "serveout"}]}, keep_alive),
            (b"GET", "/metrics"): lambda: _response(200, server.metrics(), "text/plain; version=0.0.4", keep_alive),
            (b"GET", "/truth"): lambda: _json(200, server.truth(), keep_alive),
            (b"POST", "/truth/reset"): lambda: _json(200, {"cleared": server.reset()}, keep_alive),
        }
        if (method, path) in routes:
            return self._reply(routes[(method, path)](), keep_alive)
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._reply(_error(404, f"no route {path}", keep_alive), keep_alive)
        if method != b"POST":
            return self._reply(_error(405, "use POST", keep_alive), keep_alive)
        try:
            req = parse_completion(body, chat=path.endswith("chat/completions"), config=server.config)
        except BadRequest as exc:
            return self._reply(_error(exc.status, str(exc), keep_alive), keep_alive)
        request_id = headers.get(b"x-request-id")
        trace = server.new_trace(path, req.stream, received, request_id.decode("latin-1") if request_id else None)
        trace.output_tokens, trace.prompt_tokens = req.tokens, req.prompt_tokens
        server.running += 1
        server.prompt_tokens += req.prompt_tokens
        self.active = trace
        first = received + server.config.ttft_s
        if req.stream:
            self._write(STREAM_HEAD)
            frames = StreamFrames(req, trace.id, server.config.model)
            self._at(first, self._token, trace, frames, req.tokens, keep_alive)
        else:
            answer = whole_answer(req, trace.id, server.config.model)
            self._at(first + (req.tokens - 1) * server.config.itl_s, self._whole, trace, answer, keep_alive)

    def _at(self, deadline: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback`` at an absolute ``time.monotonic()`` deadline."""
        self.timer = self.loop.call_later(deadline - time.monotonic(), callback, *args)

    def _token(self, trace: Trace, frames: StreamFrames, total: int, keep_alive: bool) -> None:
        k = len(trace.token_times)
        last = k == total - 1
        self._write(frames.first if k == 0 else frames.last if last else frames.middle)
        now = time.monotonic()
        trace.token_times.append(now)
        self.server.generation_tokens += 1
        if last:
            self._finish(trace, now, keep_alive)
        else:
            config = self.server.config
            deadline = trace.received + config.ttft_s + (k + 1) * config.itl_s
            self._at(deadline, self._token, trace, frames, total, keep_alive)

    def _whole(self, trace: Trace, answer: bytes, keep_alive: bool) -> None:
        self._write(_response(200, answer, "application/json", keep_alive))
        self.server.generation_tokens += trace.output_tokens
        self._finish(trace, time.monotonic(), keep_alive)

    def _finish(self, trace: Trace, now: float, keep_alive: bool) -> None:
        trace.end = now
        self.server.running -= 1
        self.timer = None
        self._done(keep_alive)

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def traces_from_truth(truth: dict) -> list[Trace]:
    """The traces of a ``GET /truth`` answer."""
    return [Trace(**t) for t in truth["traces"]]


async def serve(config: TimedConfig, port: int, *, ready: Callable[[int], None] | None = None,
                stop: asyncio.Event | None = None) -> TimedServer:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when run as a program)."""
    server = TimedServer(config)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), HOST, port, backlog=4096)
    stop = stop or asyncio.Event()
    if ready is not None:
        ready(listener.sockets[0].getsockname()[1])
    await stop.wait()
    listener.close()
    return server


def start_in_child(*, port: int, ttft_s: float, itl_s: float, model: str, log: Path,
                   extra_args: tuple[str, ...] = (), timeout_s: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Run the timed server (``python -m benchmarks.timed_server``) as a child process (its
    output in ``log``); returns it and its URL once ``/health`` answers. Stop it with
    :func:`benchmarks.common.servers.stop`."""
    command = python_argv("benchmarks.timed_server", ["--port", str(port), "--ttft", str(ttft_s),
                                                      "--itl", str(itl_s), "--model", model, *extra_args])
    server = start(command, log=log)
    url = f"http://{HOST}:{port}"
    try:
        wait_healthy(server, url, name="the timed server", timeout_s=timeout_s, log=log, interval_s=0.1)
    except ServerStartError as exc:
        stop(server)
        raise SystemExit(str(exc)) from None
    return server, url
