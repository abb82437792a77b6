"""Overload: far more concurrent requests than admitted gives 429 + Retry-After, never
a 5xx or a hang, and every admitted request completes."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.integration.settings import BASE, MODEL

pytestmark = pytest.mark.integration

LIMIT = BASE["gateway"]["max_in_flight"]


async def one(client: httpx.AsyncClient, url: str, i: int) -> tuple[int, httpx.Headers, str, tuple[float, float]]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Say a number: {i}"}],
            "max_tokens": 64, "ignore_eos": True, "stream": True}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        lines, first = [], None
        async for line in response.aiter_lines():
            first = first if first is not None else time.monotonic()
            lines.append(line)
        return response.status_code, response.headers, "".join(lines), (first or 0.0, time.monotonic())


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (each admitted stream's first byte to its end:
    inside the time it held an admission slot)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now = peak = 0
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak


def test_overload_is_refused_cleanly_and_admitted_work_completes(base_stack):
    url = base_stack.url

    async def burst():
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(timeout=httpx.Timeout(180), limits=limits) as client:
            return await asyncio.gather(*(one(client, url, i) for i in range(LIMIT * 4)))

    results = asyncio.run(asyncio.wait_for(burst(), timeout=240))  # never a hang
    statuses = [status for status, _, _, _ in results]
    assert set(statuses) <= {200, 429}, statuses
    refused = [(h, t) for s, h, t, _ in results if s == 429]
    admitted = [t for s, _, t, _ in results if s == 200]
    assert refused, "no request was refused at 4x the admission limit"
    # Never more than the bound at once; and both replicas admitted their share (each
    # holds half of it): more than one replica's share was streaming at once.
    peak = most_at_once([span for s, _, _, span in results if s == 200])
    print(f"\n{len(results)} requests, bound {LIMIT}: {len(admitted)} admitted, at most {peak} streaming at once")
    assert LIMIT // 2 < peak <= LIMIT, (peak, LIMIT)
    for headers, text in refused:
        assert int(headers["retry-after"]) >= 1
        assert '"type":"rate_limit_error"' in text.replace(" ", "")
    for text in admitted:  # every admitted stream ran to its end
        assert text.endswith("data: [DONE]") and '"finish_reason":"length"' in text
