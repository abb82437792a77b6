"""The direct mode on the real stack (2 vLLM replicas serving HTTP behind Serve's HAProxy,
two routers), with the official openai client.

1. The router tokenises once: a request the router could read is served from its plan
   (the replica does not tokenise it again); one too large for the router's buffer is
   planned by the replica itself, and its error names the problem.
2. Settings change without restarting an engine: a new admission bound and routing
   policy reach the running replicas (same processes), and the bound holds.
3. A router killed under load: no request fails, none is lost (the other router of the
   node routes; streams never pass through a router).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import openai
import psutil
import pytest

from serving.app_builder import ENGINE_DEPLOYMENT, ROUTER_DEPLOYMENT
from serving.cluster.ingress_env import ROUTER_BODY_BYTES
from tests.integration.metrics_reading import by_label, settled, wait_until
from tests.integration.settings import BASE, MODEL

pytestmark = pytest.mark.integration


def api(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


def planned(url: str) -> dict[str, float]:
    return by_label(url, "serveout_planned_requests_total", "source")


def replica_pids(deployment: str) -> list[int]:
    """The live replica processes of one deployment of the session's cluster (this test
    process started Ray: only its own descendants are looked at)."""
    pids = []
    for process in psutil.Process().children(recursive=True):
        try:
            if (process.status() != psutil.STATUS_ZOMBIE
                    and f"ServeReplica:serveout:{deployment}" in " ".join(process.cmdline())):
                pids.append(process.pid)
        except psutil.Error:
            continue
    return sorted(pids)


def test_a_readable_request_is_tokenised_once_by_the_router(stack):
    stack.ensure(BASE)
    before = settled(lambda: planned(stack.url))  # every process publishes its counts ~1/s
    for _ in range(4):
        reply = api(stack.url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8, temperature=0)
        assert reply.usage.prompt_tokens > 0 and reply.choices[0].message.content
    counted = lambda: planned(stack.url).get("router", 0) - before.get("router", 0)  # noqa: E731
    wait_until(lambda: counted() >= 4, timeout_s=20)
    after = settled(lambda: planned(stack.url))
    assert after.get("router", 0) - before.get("router", 0) == 4
    assert after.get("replica", 0) == before.get("replica", 0)  # nobody tokenised them twice


def test_a_body_past_the_routers_buffer_is_planned_by_the_replica(stack):
    stack.ensure(BASE)
    words = ROUTER_BODY_BYTES // 5 + 1000  # "word " x n: longer than HAProxy hands the router
    with pytest.raises(openai.BadRequestError) as too_long:
        api(stack.url).completions.create(model=MODEL, prompt="word " * words, max_tokens=4)
    assert too_long.value.code == "context_length_exceeded"  # the replica read and tokenised it


def test_settings_reach_the_running_engines_without_a_restart(stack):
    stack.ensure(BASE)
    pids = replica_pids(ENGINE_DEPLOYMENT)
    assert len(pids) == 2
    bound = 2  # one per replica
    stack.ensure({**BASE, "gateway": {**BASE["gateway"], "max_in_flight": bound},
                  "routing": {"policy": "round-robin"}})
    status = httpx.get(f"{stack.url}/status", timeout=10).json()
    assert (status["app_admission_limit"], status["admission_limit"]) == (bound, 1)
    assert replica_pids(ENGINE_DEPLOYMENT) == pids  # the same engine processes

    async def burst() -> list[int]:
        async with openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", timeout=120,
                                      max_retries=0) as client:
            async def one() -> int:
                try:
                    await client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "Count to fifty."}],
                        max_tokens=48, extra_body={"ignore_eos": True})
                    return 200
                except openai.APIStatusError as exc:
                    return exc.status_code
            return await asyncio.gather(*(one() for _ in range(8)))

    codes = asyncio.run(burst())
    print(f"\n8 concurrent requests, bound {bound} (1 per replica): {sorted(codes)}")
    assert set(codes) <= {200, 429} and 1 <= codes.count(200) <= bound


def test_a_router_killed_under_load_fails_no_request(stack):
    stack.ensure(BASE)
    routers = replica_pids(ROUTER_DEPLOYMENT)
    assert len(routers) == 2, routers  # two per node

    async def load() -> list[tuple[int, int | None]]:
        async with openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", timeout=180,
                                      max_retries=0) as client:
            async def one(i: int, stream: bool) -> tuple[int, int | None]:
                await asyncio.sleep(0.25 * i)  # arrivals before, during and after the kill
                try:
                    if not stream:
                        reply = await client.chat.completions.create(
                            model=MODEL, messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=16,
                            extra_body={"ignore_eos": True})
                        return 200, reply.usage.completion_tokens
                    tokens = None
                    async for chunk in await client.chat.completions.create(
                            model=MODEL, messages=[{"role": "user", "content": f"Count {i}."}], max_tokens=32,
                            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                        tokens = chunk.usage.completion_tokens if chunk.usage else tokens
                    return 200, tokens
                except openai.APIStatusError as exc:
                    return exc.status_code, None

            tasks = [asyncio.create_task(one(i, stream=i % 2 == 0)) for i in range(24)]
            await asyncio.sleep(1.5)
            os.kill(routers[0], signal.SIGKILL)
            killed = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*tasks), 600)
            print(f"\nrouter {routers[0]} killed; requests done {time.monotonic() - killed:.1f} s later")
            return results

    results = asyncio.run(load())
    print(f"outcomes: {results}")
    assert all(status == 200 for status, _ in results), results
    assert [tokens for _, tokens in results] == [16 if i % 2 else 32 for i in range(24)], results
    # Serve replaces the dead router.
    assert wait_until(lambda: len(replica_pids(ROUTER_DEPLOYMENT)) == 2 and routers[0] not in replica_pids(ROUTER_DEPLOYMENT), timeout_s=120)
