"""One OpenAI request over HTTP with exact client-side timing (gevent side).

Uses geventhttpclient directly: its ``readline`` returns each SSE line as soon as it
arrives, whereas Locust's ``iter_content`` waits for full blocks and would blur TTFT
and inter-chunk gaps.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPParseError

from loadtest.analysis.records import ErrorKind
from loadtest.client.openai_api import classify_status, error_message, parse_retry_after
from loadtest.client.sse import StreamReader, Usage, parse_usage
from loadtest.errors import ParseError


Addresses = list[tuple]  # socket.getaddrinfo's answer


def resolve(url: str) -> Addresses | None:
    """The socket addresses of ``url``'s host (``None`` when it cannot be resolved now:
    every connection then looks it up itself). Called once per stage, before it starts."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        return socket.getaddrinfo(parts.hostname, port, 0, socket.SOCK_STREAM, socket.SOL_TCP)
    except OSError:
        return None


def pin(client: HTTPClient, addresses: Addresses) -> HTTPClient:
    """``client``, connecting to ``addresses`` instead of looking its host up for every new
    connection (geventhttpclient asks gevent's thread pool: a thread hand-off, on first
    use a thread start, on the path of a request that is due)."""
    client._connection_pool._resolve = lambda: addresses  # geventhttpclient's per-connection lookup
    return client


@dataclass
class Exchange:
    """What one request produced (times in seconds since it was sent)."""

    ok: bool = False
    status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    retry_after_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float = 0.0
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    usage: Usage | None = None
    text: str = ""
    finish_reason: str | None = None
    reusable: bool = True


def perform(
    client: HTTPClient,
    *,
    path: str,
    body: bytes,
    headers: dict[str, str],
    stream: bool,
    timeout_s: float,
    clock: Callable[[], float],
    cancel_after_s: float | None = None,
) -> Exchange:
    """Send one request and read its answer; never raises for request failures.
    ``cancel_after_s``: abandon it that long after sending (the client's own cancel)."""
    out = Exchange()
    sent = clock()
    timer = gevent.Timeout(timeout_s)
    timer.start()
    cancel = gevent.Timeout(cancel_after_s) if cancel_after_s is not None else None
    if cancel is not None:
        cancel.start()
    try:
        response = client.request("POST", path, body=body, headers=headers)
        out.status = response.status_code
        kind = classify_status(out.status)
        if kind is not None:
            data = response.read()
            out.error_kind, out.error = kind, error_message(data)
            retry = response.get("retry-after")
            out.retry_after_s = parse_retry_after(retry if isinstance(retry, str) else None)
        elif stream:
            _read_stream(response, out, sent, clock)
        else:
            _read_json(response.read(), out)
    except gevent.Timeout as exc:
        if exc is cancel:
            out.error_kind, out.error = ErrorKind.CLIENT_CANCELLED, f"abandoned by the client after {cancel_after_s:g} s"
        elif exc is timer:
            out.error_kind, out.error = ErrorKind.TIMEOUT, f"no complete answer within {timeout_s:g} s"
        else:
            raise
        out.reusable = False
    except (TimeoutError, socket.timeout) as exc:
        out.error_kind, out.error = ErrorKind.TIMEOUT, f"network timeout: {exc}"
        out.reusable = False
    except ParseError as exc:
        out.error_kind, out.error = ErrorKind.PROTOCOL, str(exc)
        out.reusable = False
    except (HTTPParseError, OSError) as exc:
        out.error_kind, out.error = ErrorKind.CONNECTION, f"{type(exc).__name__}: {exc}"
        out.reusable = False
    finally:
        timer.close()
        if cancel is not None:
            cancel.close()
    if not out.e2e_s:
        out.e2e_s = clock() - sent
    if out.error_kind is None and stream and out.chunks == 0:
        out.error_kind, out.error = ErrorKind.PROTOCOL, "the stream carried no content"
    out.ok = out.error_kind is None
    return out


def _read_stream(response, out: Exchange, sent: float, clock: Callable[[], float]) -> None:
    reader = StreamReader()
    state = reader.timer
    while True:
        line = response.readline(b"\n")
        now = clock() - sent
        if line:
            reader.feed(line, now)
        else:
            reader.feed(response.read(), now)
            reader.close(now)
        if state.error is not None:
            out.error_kind, out.error = ErrorKind.STREAM_ERROR, state.error[:300]
            out.reusable = False
            break
        if not line:
            break
    out.ttft_s, out.gaps, out.chunks = state.ttft, state.gaps, state.chunks
    out.usage, out.finish_reason, out.text = state.usage, state.finish_reason, state.output_text
    out.e2e_s = state.done_at if state.done_at is not None else clock() - sent


def _read_json(data: bytes, out: Exchange) -> None:
    try:
        body = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ParseError(f"response is not JSON: {data[:120]!r}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ParseError(f"response has no choices: {data[:120]!r}")
    out.usage = parse_usage(body.get("usage"))
    texts = []
    for choice in body["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            texts.append(message["content"])
        elif isinstance(choice, dict) and isinstance(choice.get("text"), str):
            texts.append(choice["text"])
        if isinstance(choice, dict) and choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
    out.text = "".join(texts)
    out.chunks = 1
