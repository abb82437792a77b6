"""API keys over HTTP: the real FastAPI app and service, with a FAKE engine client."""

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.config.gateway import KeyLimits
from serving.admission.api_keys import KeyRing, parse_keys
from serving.api.app import build_http_app
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, service

ALICE = "sk-alice-0123456789abcdef"
SLOW = "sk-slow-0123456789abcdefgh"
WRONG = "sk-wrong-0123456789abcdef"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def calls(tokenizer, requests, *, keys=True, metrics_public=False):
    """Send ``requests`` ((method, path, key, json)) in order; returns the responses and
    the /metrics text read at the end (through the app, with ALICE's key)."""
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), registry=registry)
    ring = KeyRing(parse_keys(f"alice:{ALICE}\nslow:{SLOW} rpm=1", defaults=KeyLimits())) if keys else None
    app = build_http_app(svc, registry=registry, max_body_bytes=1 << 20, status=lambda: {"ok": True},
                         keys=ring, metrics_public=metrics_public)

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            out = []
            for method, path, key, body in requests:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                out.append(await client.request(method, path, headers=headers, json=body))
            metrics = await client.get("/metrics", headers={"Authorization": f"Bearer {ALICE}"})
            return out, metrics.text

    return asyncio.run(run())


def assert_401(response):
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", None)
    assert error["code"] == "invalid_api_key"
    assert WRONG not in response.text


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/chat/completions", CHAT),
    ("GET", "/v1/models", None),
    ("POST", "/tokenize", {"model": MODEL, "prompt": "hi"}),
    ("POST", "/detokenize", {"model": MODEL, "tokens": [1]}),
    ("GET", "/metrics", None),
    ("GET", "/status", None),
    ("GET", "/no-such-route", None),
])
def test_every_route_but_health_needs_a_right_key(tokenizer, method, path, body):
    (missing, wrong, right), _ = calls(tokenizer, [
        (method, path, None, body), (method, path, WRONG, body), (method, path, ALICE, body)])
    assert_401(missing)
    assert_401(wrong)
    assert right.status_code == (404 if path == "/no-such-route" else 200), right.text
    assert "You didn't provide an API key" in missing.json()["error"]["message"]


def test_health_stays_open(tokenizer):
    (health,), _ = calls(tokenizer, [("GET", "/health", None, None)])
    assert health.status_code == 200


def test_public_metrics_open_metrics_and_status_only(tokenizer):
    (metrics, status, models), _ = calls(tokenizer, [
        ("GET", "/metrics", None, None), ("GET", "/status", None, None), ("GET", "/v1/models", None, None)],
        metrics_public=True)
    assert metrics.status_code == 200 and status.status_code == 200
    assert_401(models)


def test_without_keys_nothing_changes(tokenizer):
    (chat, models, junk), metrics = calls(tokenizer, [
        ("POST", "/v1/chat/completions", None, CHAT), ("GET", "/v1/models", None, None),
        ("GET", "/v1/models", WRONG, None)], keys=False)
    assert chat.status_code == models.status_code == junk.status_code == 200
    assert 'serveout_key_requests_total{key="anonymous",status="200"} 1.0' in metrics


def test_metrics_count_by_key_name_never_by_the_key(tokenizer):
    _, metrics = calls(tokenizer, [
        ("POST", "/v1/chat/completions", ALICE, CHAT), ("POST", "/v1/chat/completions", None, CHAT),
        ("POST", "/v1/chat/completions", WRONG, CHAT), ("POST", "/v1/chat/completions", WRONG, CHAT)])
    assert 'serveout_key_requests_total{key="alice",status="200"} 1.0' in metrics
    assert 'serveout_auth_failures_total{reason="missing"} 1.0' in metrics
    assert 'serveout_auth_failures_total{reason="invalid"} 2.0' in metrics
    assert 'serveout_key_in_flight_requests{key="slow"} 0.0' in metrics  # declared up front
    for secret in (ALICE, SLOW, WRONG, "anonymous"):
        assert secret not in metrics


def test_a_keys_rpm_gives_429_with_retry_after(tokenizer):
    (first, second, other), metrics = calls(tokenizer, [
        ("POST", "/v1/chat/completions", SLOW, CHAT), ("POST", "/v1/chat/completions", SLOW, CHAT),
        ("POST", "/v1/chat/completions", ALICE, CHAT)])
    assert first.status_code == 200 and other.status_code == 200
    assert second.status_code == 429
    assert 1 <= int(second.headers["retry-after"]) <= 60
    error = second.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "`slow`" in error["message"]
    assert 'serveout_key_rejected_requests_total{key="slow",reason="rpm"} 1.0' in metrics
