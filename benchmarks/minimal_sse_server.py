"""The smallest honest OpenAI streaming server: the reference for the serving path's
CPU per token (``benchmarks.serving_ceiling --against minimal``).

One uvicorn process, a bare ASGI app: for each ``POST /v1/chat/completions`` it streams
``max_tokens`` chunks of `` tok`` (the null engine's word), each frame built with
``json.dumps`` of the whole OpenAI chunk, then a usage chunk and ``[DONE]``; tokens
follow the same schedule as the null engine's (the first after ``ttft_s``, then one
every ``1 / tokens_per_s``; 0 = one per event-loop turn). No validation, no
tokenizer, no admission, no metrics: what is left is the cost of HTTP and SSE framing
in Python. Also ``GET /health``.

    python -m benchmarks.minimal_sse_server --port 8100 [--tokens-per-s 0] [--ttft-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import uvicorn

WORD = " tok"


def build_app(tokens_per_s: float, ttft_s: float):
    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"status": "ok"}'})
            return
        body = json.loads(raw)
        max_tokens = int(body.get("max_tokens") or 16)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        started, created = time.monotonic(), int(time.time())
        for i in range(max_tokens):
            due = started + ttft_s + (i / tokens_per_s if tokens_per_s > 0 else 0.0)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            delta = {"role": "assistant", "content": WORD} if i == 0 else {"content": WORD}
            chunk = {"id": "chatcmpl-minimal", "object": "chat.completion.chunk", "created": created,
                     "model": body.get("model", "m"),
                     "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                  "finish_reason": "length" if i == max_tokens - 1 else None}]}
            frame = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        usage = {"id": "chatcmpl-minimal", "object": "chat.completion.chunk", "created": created,
                 "model": body.get("model", "m"), "choices": [],
                 "usage": {"prompt_tokens": 1, "completion_tokens": max_tokens, "total_tokens": max_tokens + 1}}
        tail = f"data: {json.dumps(usage, separators=(',', ':'))}\n\ndata: [DONE]\n\n".encode()
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--tokens-per-s", type=float, default=0.0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    args = parser.parse_args()
    uvicorn.run(build_app(args.tokens_per_s, args.ttft_ms / 1000), host="127.0.0.1", port=args.port,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
