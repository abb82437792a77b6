"""A FAKE OpenAI-compatible server for testing the load generator without an engine.

It streams ``max_tokens`` one-word chunks with a fixed delay and a final usage chunk,
and misbehaves on request when the user message starts with a marker:
``#429`` (rate limited, Retry-After: 1), ``#400``, ``#500``, ``#midstream`` (an SSE
error event after two chunks), ``#close`` (connection dropped mid-stream), ``#slow``
(sleeps 30 s before answering), ``#nousage`` (no usage chunk). ``/metrics`` exports
vLLM-named counters of what it generated. ``/v1/models`` lists :data:`MODELS` as serveout
does (a base, then its LoRA adapters with ``parent``); requests are counted by the model
they name (``state.models``) and answers echo it; and by their ``Authorization`` and
``X-Serveout-Priority-Class`` headers (``state.callers``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK_DELAY_S = 0.004
BASE = "fake-model"
MODELS = (BASE, "clinic", "pharmacy")  # the base model, then two adapters of it


class FakeState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self.running = 0
        self.requests = 0
        self.models: Counter[str] = Counter()
        self.callers: Counter[tuple[str | None, str | None]] = Counter()
        self.get_auth: Counter[tuple[str, str | None]] = Counter()  # (path, Authorization) of GETs


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "FakeServer"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send_json(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        state = self.server.state
        with state.lock:
            state.get_auth[(self.path, self.headers.get("Authorization"))] += 1
        if self.path == "/v1/models":
            data = [{"id": m, "object": "model", **({"parent": BASE} if m != BASE else {})} for m in MODELS]
            self._send_json(200, {"object": "list", "data": data})
        elif self.path == "/metrics":
            with state.lock:
                text = (
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="fake-model"}} {state.running}\n'
                    f'vllm:num_requests_waiting{{model_name="fake-model"}} 0\n'
                    f'vllm:kv_cache_usage_perc{{model_name="fake-model"}} {min(state.running / 10, 1.0)}\n'
                    f'vllm:generation_tokens_total{{model_name="fake-model"}} {state.generation_tokens}\n'
                    f'vllm:prompt_tokens_total{{model_name="fake-model"}} {state.prompt_tokens}\n'
                )
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send_json(404, {"detail": "Not Found"})

    def _chunk(self, payload: str) -> None:
        data = payload.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        if "messages" in body:
            text = body["messages"][-1]["content"]
            prompt_tokens = sum(len(m["content"].split()) for m in body["messages"]) + 5
        else:
            text = body["prompt"]
            prompt_tokens = len(text.split())
        state = self.server.state
        with state.lock:
            state.requests += 1
            state.models[str(body.get("model"))] += 1
            state.callers[(self.headers.get("Authorization"), self.headers.get("X-Serveout-Priority-Class"))] += 1
        model = body.get("model")
        if text.startswith("#429"):
            return self._send_json(429, {"error": {"message": "overloaded", "type": "overloaded"}}, {"Retry-After": "1"})
        if text.startswith("#400"):
            return self._send_json(400, {"error": {"message": "bad request", "type": "invalid"}})
        if text.startswith("#500"):
            return self._send_json(500, {"error": {"message": "engine failed", "type": "internal"}})
        if text.startswith("#slow"):
            time.sleep(30)
        n = int(body.get("max_tokens") or 16)
        if not body.get("stream"):
            with state.lock:
                state.generation_tokens += n
                state.prompt_tokens += prompt_tokens
            time.sleep(CHUNK_DELAY_S * n)
            return self._send_json(200, {
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " w" * n}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
            })
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with state.lock:
            state.running += 1
            state.prompt_tokens += prompt_tokens
        try:
            role = {"model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
            self._chunk(f"data: {json.dumps(role)}\n\n")
            self._chunk(": keep-alive\n\n")
            for i in range(n):
                time.sleep(CHUNK_DELAY_S)
                if text.startswith("#midstream") and i == 2:
                    self._chunk('data: {"error": {"message": "engine died mid-stream", "code": 500}}\n\n')
                    break
                if text.startswith("#close") and i == 2:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                finish = "length" if i == n - 1 else None
                chunk = {"model": model, "choices": [{"index": 0, "delta": {"content": " w"}, "finish_reason": finish}]}
                with state.lock:
                    state.generation_tokens += 1
                self._chunk(f"data: {json.dumps(chunk)}\n\n")
            else:
                if not text.startswith("#nousage"):
                    usage = {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}}
                    self._chunk(f"data: {json.dumps(usage)}\n\n")
            self._chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with state.lock:
                state.running -= 1


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = FakeState()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
