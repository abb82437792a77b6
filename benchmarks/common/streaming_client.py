"""A small asyncio streaming client for benchmarks: TTFT and tokens/s at fixed concurrency.

Kept deliberately simple (httpx + SSE lines) so that both targets are driven by the
exact same code; the full load tester lives in :mod:`loadtest`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import httpx

from loadtest.analysis.stats import percentile

PROMPT = ("Summarise in one paragraph why serving large language models on many replicas "
          "needs careful routing, admission control and autoscaling, and what goes wrong "
          "without them.")  # the serving benchmarks' prompt


@dataclass(frozen=True)
class StreamResult:
    ttft_s: float
    e2e_s: float
    output_tokens: int
    replica: str = "?"  # serveout's x-serveout-replica header (which replica served it)


@dataclass(frozen=True)
class RunFigures:
    concurrency: int
    requests: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    output_tok_s: float
    wall_s: float


async def stream_one(client: httpx.AsyncClient, url: str, body: dict) -> StreamResult:
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        replica = response.headers.get("x-serveout-replica", "?")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content") and ttft is None:
                    ttft = time.perf_counter() - start
    return StreamResult(ttft or float("nan"), time.perf_counter() - start, tokens, replica)


def chat_body(model: str, prompt: str, output_tokens: int) -> dict:
    """A streamed greedy chat request that generates exactly ``output_tokens``."""
    return {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_tokens, "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}


async def run_bodies(url: str, bodies: list[dict], *, concurrency: int) -> RunFigures:
    """Send ``bodies`` (in order) from ``concurrency`` closed-loop workers."""
    queue: asyncio.Queue[dict] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    results: list[StreamResult] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            results.append(await stream_one(client, url, queue.get_nowait()))

    limits = httpx.Limits(max_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ttfts = sorted(r.ttft_s * 1000 for r in results)
    return RunFigures(concurrency, len(bodies), percentile(ttfts, 50), percentile(ttfts, 95),
                      sum(r.output_tokens for r in results) / wall, wall)


async def run(url: str, model: str, *, concurrency: int, requests: int, output_tokens: int,
              prompt: str) -> RunFigures:
    """``requests`` copies of one prompt at fixed concurrency."""
    return await run_bodies(url, [chat_body(model, prompt, output_tokens)] * requests,
                            concurrency=concurrency)


async def trivial_latency_ms(url: str, path: str, n: int = 200) -> float:
    """Median latency of a trivial GET (the HTTP path's own cost)."""
    async with httpx.AsyncClient(timeout=30) as client:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            (await client.get(f"{url}{path}")).raise_for_status()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)
