"""The separate mode with two gateway replicas on the real stack (the null engine behind
them: no model, so the test measures the gateways, not vLLM), with the official openai
client.

1. Serve's proxy reaches both gateways, and each admits half of the app's bound.
2. The app's admission bound holds for the two together: of many concurrent streams,
   no more than ``max_in_flight`` are admitted; the rest get 429 with an OpenAI body.
3. Any gateway's ``/metrics`` shows both gateways' series, each labelled
   ``gateway_replica``: every scrape counts every request, and a gateway's counters
   never go back whichever gateway answers.
4. ``drain_gateway`` drains both replicas, and the streams they held complete.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serving.gateway.separate import drain_gateway
from tests.integration.metrics_reading import wait_until
from tests.integration.settings import BASE, MODEL, replicas

pytestmark = pytest.mark.integration

BOUND = 8
GATEWAYS = 2
TOKENS_PER_S = 20.0
MAX_TOKENS = 80  # ~4 s per stream: all are in flight together
CONFIG = {**BASE, "replicas": replicas(1),
          "engine_backend": {"kind": "null", "tokens_per_s": TOKENS_PER_S},
          "gateway": {**BASE["gateway"], "mode": "separate", "replicas": GATEWAYS, "max_in_flight": BOUND}}


def status(url: str) -> dict:
    return httpx.get(f"{url}/status", timeout=10).json()


def stream(url: str) -> tuple[int, str | None, int | None]:
    """(HTTP status, finish reason, completion tokens) of one streamed chat."""
    api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=60, max_retries=0)
    finish, tokens = None, None
    try:
        for chunk in api.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "count"}], max_tokens=MAX_TOKENS,
                stream=True, stream_options={"include_usage": True}):
            finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
            tokens = chunk.usage.completion_tokens if chunk.usage else tokens
    except openai.APIStatusError as exc:
        assert exc.response.json()["error"]["type"], exc.response.text  # an OpenAI error body
        return exc.status_code, None, None
    return 200, finish, tokens


@pytest.fixture(scope="module")
def two_gateways(stack):
    config = stack.ensure(CONFIG)
    both = wait_until(lambda: status(stack.url)["gateway"]["replicas"] == GATEWAYS, timeout_s=60, period_s=0.5)
    assert both, status(stack.url)
    yield stack, config
    stack.forget()  # drained gateways refuse work: the next test deploys fresh ones


def test_the_proxy_reaches_both_gateways_and_each_admits_half_the_bound(two_gateways):
    stack, _ = two_gateways
    seen = [status(stack.url) for _ in range(40)]
    print(f"\n/status answered by {sorted({s['gateway']['replica'] for s in seen})}")
    assert len({s["gateway"]["replica"] for s in seen}) == GATEWAYS
    assert {(s["admission_limit"], s["app_admission_limit"]) for s in seen} == {(BOUND // GATEWAYS, BOUND)}


def test_the_apps_bound_holds_across_gateways(two_gateways):
    stack, _ = two_gateways
    with ThreadPoolExecutor(3 * BOUND) as pool:
        outcomes = list(pool.map(lambda _: stream(stack.url), range(3 * BOUND)))
    codes = [code for code, _, _ in outcomes]
    print(f"\n{3 * BOUND} concurrent streams, bound {BOUND} over {GATEWAYS} gateways: "
          f"{codes.count(200)} x 200, {codes.count(429)} x 429")
    assert set(codes) <= {200, 429}
    assert 0 < codes.count(200) <= BOUND
    assert all(o == (200, "length", MAX_TOKENS) for o in outcomes if o[0] == 200), outcomes


def answered_by_gateway(url: str, *, name: str = "serveout_requests_total") -> dict[str, float]:
    """``{gateway_replica: requests answered 200}`` in one scrape of ``/metrics`` (or the
    summed value of another family ``name``, by gateway)."""
    out: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == name and s.labels.get("status", "200") == "200":
                out[s.labels["gateway_replica"]] += s.value
    return dict(out)


def chat(url: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).status_code


def test_every_gateways_metrics_answer_for_both_gateways(two_gateways):
    stack, _ = two_gateways
    gateways = {status(stack.url)["gateway"]["replica"] for _ in range(40)}
    assert len(gateways) == GATEWAYS
    before = sum(answered_by_gateway(stack.url).values())
    chats = 10
    with ThreadPoolExecutor(2) as pool:
        codes = list(pool.map(lambda _: chat(stack.url), range(chats)))
    assert codes == [200] * chats
    assert wait_until(lambda: sum(answered_by_gateway(stack.url).values()) == before + chats, timeout_s=10)
    scrapes = [answered_by_gateway(stack.url) for _ in range(20)]  # the proxy spreads them over both gateways
    print(f"\n{len(scrapes)} scrapes of /metrics, requests by gateway: {scrapes[-1]}")
    assert all(sum(scrape.values()) == before + chats for scrape in scrapes), scrapes
    in_flight = [answered_by_gateway(stack.url, name="serveout_in_flight_requests") for _ in range(20)]
    assert all(set(scrape) == gateways for scrape in in_flight), in_flight  # a series from every gateway
    text = stack.metrics_text()
    ready = [line for line in text.splitlines() if line.startswith('serveout_replicas{') and 'state="ready"' in line]
    assert len(ready) == 1 and "gateway_replica" not in ready[0], ready  # the engines' view, once


def test_a_gateways_counters_never_go_back_between_scrapes_under_load(two_gateways):
    stack, _ = two_gateways
    with ThreadPoolExecutor(2) as pool:
        load = pool.submit(lambda: [chat(stack.url) for _ in range(30)])
        scrapes = [answered_by_gateway(stack.url)]
        while not load.done():
            scrapes.append(answered_by_gateway(stack.url))
        assert set(load.result()) == {200}
    print(f"\n{len(scrapes)} scrapes under load, first {scrapes[0]}, last {scrapes[-1]}")
    assert len(scrapes) > 2
    for gateway in scrapes[0]:
        counts = [scrape.get(gateway, -1.0) for scrape in scrapes]  # -1: the gateway was missing
        assert counts == sorted(counts), (gateway, counts)


def test_drain_reaches_every_gateway_and_their_streams_complete(two_gateways):
    stack, config = two_gateways
    with ThreadPoolExecutor(BOUND // 2 + 1) as pool:
        streams = [pool.submit(stream, stack.url) for _ in range(BOUND // 2)]
        assert wait_until(lambda: sum(status(stack.url)["in_flight"] for _ in range(6)) > 0,
                          timeout_s=30, period_s=0.2)
        report = drain_gateway(config, timeout_s=30)
        outcomes = [s.result(timeout=120) for s in streams]
    print(f"\ndrain report: {report}; streams: {outcomes}")
    assert report["gateways"] == GATEWAYS and report["cut"] == 0 and report["left"] == 0
    assert all(o == (200, "length", MAX_TOKENS) for o in outcomes), outcomes
    assert all(httpx.get(f"{stack.url}/health", timeout=10).status_code == 503 for _ in range(10))
