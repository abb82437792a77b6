"""API keys limited to some models (``models=`` in the keys file): the real FastAPI app
and service, a base model with one LoRA adapter, and a FAKE engine client."""

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.admission.api_keys import KeyRing, parse_keys
from serving.api.app import build_http_app
from serving.config.gateway import KeyLimits
from serving.errors import ConfigError
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, service

CLINIC_KEY = "sk-clinic-0123456789abcdef"
ADMIN_KEY = "sk-admin-0123456789abcdefg"
KEYS = f"clinic-app:{CLINIC_KEY} rpm=100 models=clinic\nadmin:{ADMIN_KEY}"


def chat(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def calls(tokenizer, requests):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), registry=registry)
    base = next(iter(svc.models.values()))
    svc.set_models([base, base.with_adapter("clinic"), base.with_adapter("pharmacy")])
    app = build_http_app(svc, registry=registry, max_body_bytes=1 << 20, status=lambda: {"ok": True},
                         keys=KeyRing(parse_keys(KEYS, defaults=KeyLimits())), metrics_public=True)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            out = [await client.request(method, path, headers={"Authorization": f"Bearer {key}"}, json=body)
                   for method, path, key, body in requests]
            return out, (await client.get("/metrics")).text

    return asyncio.run(run())


def test_a_key_calls_only_its_models_and_lists_only_them(tokenizer):
    (allowed, refused, base, models, admin_models, admin_call), metrics = calls(tokenizer, [
        ("POST", "/v1/chat/completions", CLINIC_KEY, chat("clinic")),
        ("POST", "/v1/chat/completions", CLINIC_KEY, chat("pharmacy")),
        ("POST", "/tokenize", CLINIC_KEY, {"model": MODEL, "prompt": "hi"}),
        ("GET", "/v1/models", CLINIC_KEY, None),
        ("GET", "/v1/models", ADMIN_KEY, None),
        ("POST", "/v1/chat/completions", ADMIN_KEY, chat("pharmacy")),
    ])
    assert allowed.status_code == 200 and admin_call.status_code == 200
    for response in (refused, base):
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("model_not_found", "model")
        assert "do not have access" in error["message"] and "Served models" not in error["message"]
    assert [m["id"] for m in models.json()["data"]] == ["clinic"]
    assert [m["id"] for m in admin_models.json()["data"]] == [MODEL, "clinic", "pharmacy"]
    assert 'serveout_key_requests_total{key="clinic-app",status="404"} 1.0' in metrics


@pytest.mark.parametrize("line", [f"a:{CLINIC_KEY} models=", f"a:{CLINIC_KEY} models=a,,b",
                                  f"a:{CLINIC_KEY} models=a models=b", f"a:{CLINIC_KEY} models=a!"])
def test_a_bad_models_option_is_a_config_error_that_never_shows_the_key(line):
    with pytest.raises(ConfigError, match="models=") as caught:
        parse_keys(line, defaults=KeyLimits())
    assert CLINIC_KEY not in str(caught.value)


def test_models_and_limits_combine_in_any_order():
    (entry,) = parse_keys(f"a:{CLINIC_KEY} models=clinic,pharmacy rpm=5", defaults=KeyLimits())
    assert entry.models == frozenset({"clinic", "pharmacy"}) and entry.limits.rpm == 5
