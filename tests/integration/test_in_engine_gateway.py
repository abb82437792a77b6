"""``gateway.mode: in-engine`` on the real stack: every engine replica (real vLLM) is
its own gateway, with the official openai client.

The API, OpenAI errors, admission and drain work as in the separate mode: a streamed
and a whole chat completion, a 400 for a bad request, 429s past the bound (never more
admitted than the bound) and a drain that lets the streams in flight finish, then
refuses.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from serving.gateway.ingress import drain_gateway
from tests.integration.metrics_reading import wait_until
from tests.integration.settings import BASE, MODEL

pytestmark = pytest.mark.integration

BOUND = 4
CONFIG = {**BASE, "replicas": {"num_replicas": 1},
          "gateway": {**BASE["gateway"], "mode": "in-engine", "max_in_flight": BOUND}}


@pytest.fixture(scope="module")
def in_engine(stack):
    config = stack.ensure(CONFIG)
    yield stack, config
    stack.config = None  # drained: the next test redeploys


def api(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


def stream(url: str, max_tokens: int) -> tuple[int, str | None, int | None]:
    finish, tokens = None, None
    try:
        for chunk in api(url).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=max_tokens,
                temperature=0, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
            finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
            tokens = chunk.usage.completion_tokens if chunk.usage else tokens
    except openai.APIStatusError as exc:
        return exc.status_code, exc.code, None
    return 200, finish, tokens


def test_the_engine_replica_serves_the_openai_api_itself(in_engine):
    stack, _ = in_engine
    status = httpx.get(f"{stack.url}/status", timeout=10).json()
    assert status["gateway"]["mode"] == "in-engine"
    assert stream(stack.url, 8) == (200, "length", 8)
    whole = api(stack.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0)
    assert whole.usage.completion_tokens <= 4 and whole.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as bad:
        api(stack.url).chat.completions.create(model=MODEL, messages=[], max_tokens=4)
    assert bad.value.status_code == 400 and bad.value.body


def test_admission_holds_the_bound_in_the_engine_replica(in_engine):
    stack, _ = in_engine
    with ThreadPoolExecutor(3 * BOUND) as pool:
        outcomes = list(pool.map(lambda _: stream(stack.url, 64), range(3 * BOUND)))
    codes = [o[0] for o in outcomes]
    print(f"\n{3 * BOUND} concurrent streams, bound {BOUND}: {codes.count(200)} x 200, {codes.count(429)} x 429")
    assert set(codes) <= {200, 429} and 0 < codes.count(200) <= BOUND
    assert all(o == (200, "length", 64) for o in outcomes if o[0] == 200), outcomes


def test_drain_lets_streams_finish_and_then_refuses(in_engine):
    stack, config = in_engine
    with ThreadPoolExecutor(2) as pool:
        streams = [pool.submit(stream, stack.url, 48) for _ in range(2)]
        assert wait_until(lambda: httpx.get(f"{stack.url}/status", timeout=10).json()["in_flight"] == 2,
                          timeout_s=60, period_s=0.1)
        report = drain_gateway(config, timeout_s=60)
        outcomes = [s.result(timeout=180) for s in streams]
    print(f"\ndrain report: {report}; streams: {outcomes}")
    assert report["gateways"] == 1 and report["cut"] == 0 and report["left"] == 0
    assert outcomes == [(200, "length", 48)] * 2
    assert httpx.get(f"{stack.url}/health", timeout=10).status_code == 503
