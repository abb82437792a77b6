"""OpenAI's rate-limit headers over HTTP: the real FastAPI app and service, with a FAKE
engine client: on a whole answer, a stream's head, a 429 and a 400, for a key with
limits; none for a key without."""

import asyncio

import httpx
from prometheus_client import CollectorRegistry

from serving.admission.api_keys import KeyRing, parse_keys
from serving.api.app import build_http_app
from serving.config.gateway import KeyLimits
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, service

METERED = "sk-metered-0123456789abcdef"
FREE = "sk-free-0123456789abcdefgh"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def send(tokenizer, requests):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), registry=registry)
    ring = KeyRing(parse_keys(f"metered:{METERED} rpm=3 tpm=6000\nfree:{FREE}", defaults=KeyLimits()))
    app = build_http_app(svc, registry=registry, max_body_bytes=1 << 20, status=lambda: {}, keys=ring)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            return [await client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
                    for key, body in requests]

    return asyncio.run(run())


def test_headers_on_answers_streams_and_refusals(tokenizer):
    whole, stream, bad, refused, free = send(tokenizer, [
        (METERED, CHAT), (METERED, {**CHAT, "stream": True}), (METERED, {**CHAT, "max_tokens": 10**6}),
        (METERED, CHAT), (FREE, CHAT)])
    assert whole.status_code == 200
    assert whole.headers["x-ratelimit-limit-requests"] == "3"
    assert whole.headers["x-ratelimit-remaining-requests"] == "2"
    assert whole.headers["x-ratelimit-limit-tokens"] == "6000"
    used = whole.json()["usage"]["total_tokens"]
    assert int(whole.headers["x-ratelimit-remaining-tokens"]) >= 6000 - used  # charged its real usage
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["x-ratelimit-remaining-requests"] == "1"
    assert bad.status_code == 400 and bad.headers["x-ratelimit-remaining-requests"] == "0"  # past admission: rpm counted it
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"].endswith("s") and refused.headers["retry-after"]
    assert free.status_code == 200 and not [h for h in free.headers if h.startswith("x-ratelimit")]
