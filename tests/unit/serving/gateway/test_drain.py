"""Draining the gateway before its app stops, with a FAKE engine client (no Ray, no vLLM):
new requests refused with 503, requests in flight finished, the rest cut with an error
the client sees. Also the Serve stop deadlines the app builder derives from the config."""

import asyncio
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.config.drain import DrainSpec
from serving.errors import ServerDrainingError
from serving.gateway.drain import Drain
from serving.openai.error_mapping import map_error
from serving.api.app import build_http_app
from serving.gateway.service import EventStream
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, body, service

BOUND_S = 10.0  # guards against a hang; never reached when the code works


class FakeStuckEngineClient:
    """Never yields (a request queued in the engine); records closes."""

    def __init__(self):
        self.closed = 0

    retries_elsewhere = True

    async def stream(self, request):
        try:
            await asyncio.Event().wait()
            yield  # an async generator that never gets here
        finally:
            self.closed += 1


def sse_payloads(events: list[str]) -> list:
    return [json.loads(e[len("data: "):]) if e.strip() != "data: [DONE]" else "[DONE]"
            for e in events if e.startswith("data: ")]


async def read_stream(svc, request_body) -> list:
    stream = await svc.complete(request_body)
    assert isinstance(stream, EventStream)
    try:
        return sse_payloads([event async for event in stream.events])
    finally:
        await stream.close()


def test_the_drain_error_is_a_503_with_retry_after_and_openai_body():
    response = map_error(ServerDrainingError("shutting down", retry_after_s=3))
    assert response.status == 503 and response.headers == {"Retry-After": "3"}
    assert response.body == {"error": {"message": "shutting down", "type": "service_unavailable_error",
                                       "param": None, "code": "server_draining"}}


def test_a_request_that_starts_after_the_cut_is_cut_at_once():
    class FakeRequest:
        def __init__(self):
            self.errors = []

        def cut(self, error):
            self.errors.append(error)

    drain, early, late = Drain(), FakeRequest(), FakeRequest()
    drain.track(early)
    drain.cut_all("too late", retry_after_s=2)
    drain.track(late)  # it was tokenising when the deadline passed
    assert [type(e) for e in early.errors + late.errors] == [ServerDrainingError] * 2
    assert early.errors[0] is not late.errors[0]  # each raised in its own task
    assert drain.cut_count == 2 and late.errors[0].retry_after_s == 2


def test_streams_in_flight_finish_and_new_requests_are_refused(tokenizer):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(delay_s=0.05), registry=registry)

    async def run():
        streaming = asyncio.create_task(read_stream(svc, body(stream=True)))
        while svc.in_flight() == 0:
            await asyncio.sleep(0.01)
        draining = asyncio.create_task(svc.drain(timeout_s=BOUND_S))
        await asyncio.sleep(0)
        assert svc.draining
        with pytest.raises(ServerDrainingError) as refused:
            await svc.complete(body(stream=True))
        assert refused.value.retry_after_s == svc.models[MODEL].admission.retry_after_s
        return await streaming, await asyncio.wait_for(draining, BOUND_S)

    payloads, report = asyncio.run(run())
    assert "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads[:-1]) == "abc"
    assert payloads[-2]["choices"][0]["finish_reason"] == "stop" and payloads[-1] == "[DONE]"
    assert report.to_dict() == {"in_flight": 1, "cut": 0, "left": 0}
    assert registry.get_sample_value("serveout_rejected_requests_total",
                                     {"model": MODEL, "reason": "draining"}) == 1
    assert registry.get_sample_value("serveout_requests_total",
                                     {"model": MODEL, "endpoint": "chat", "status": "503"}) == 1


def test_a_stream_still_running_at_the_deadline_ends_with_a_visible_error(tokenizer):
    engine = FakeEngineClient(words=tuple("abcdefghij" * 10), delay_s=0.05)
    svc = service(tokenizer, engine, timeout_s=60)

    async def run():
        streaming = asyncio.create_task(read_stream(svc, body(stream=True, max_tokens=200)))
        while svc.in_flight() == 0:
            await asyncio.sleep(0.01)
        report = await asyncio.wait_for(svc.drain(timeout_s=0.2), BOUND_S)
        return await streaming, report

    payloads, report = asyncio.run(run())
    assert payloads[-1] == "[DONE]"
    error = payloads[-2]["error"]
    assert error["code"] == "server_draining" and "drain timeout (0.2 s)" in error["message"]
    assert payloads[-3]["choices"][0]["finish_reason"] == "error"
    received = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads[:-2])
    assert 0 < len(received) < 100  # it was cut short, and says so
    assert report.to_dict() == {"in_flight": 1, "cut": 1, "left": 0}
    assert engine.closed == 1 and svc.in_flight() == 0  # aborted in the engine, slot freed


def test_a_whole_answer_waiting_in_the_engine_at_the_deadline_is_a_503(tokenizer):
    engine = FakeStuckEngineClient()
    svc = service(tokenizer, engine, timeout_s=60)

    async def run():
        whole = asyncio.create_task(svc.complete(body()))
        while svc.in_flight() == 0:
            await asyncio.sleep(0.01)
        report = await asyncio.wait_for(svc.drain(timeout_s=0.1), BOUND_S)
        with pytest.raises(ServerDrainingError):
            await whole
        return report

    report = asyncio.run(run())
    assert report.to_dict() == {"in_flight": 1, "cut": 1, "left": 0}
    assert engine.closed == 1 and svc.in_flight() == 0


def test_an_idle_gateway_drains_at_once_and_health_says_draining(tokenizer):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), registry=registry)
    app = build_http_app(svc, registry=registry, max_body_bytes=1 << 20, status=lambda: {})
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            before = await client.get("/health")
            report = await asyncio.wait_for(svc.drain(timeout_s=BOUND_S), BOUND_S)
            return before, report, await client.get("/health"), await client.post(
                "/v1/chat/completions", json=chat)

    before, report, health, refused = asyncio.run(run())
    assert before.status_code == 200
    assert report.to_dict() == {"in_flight": 0, "cut": 0, "left": 0}
    assert (health.status_code, health.json()) == (503, {"status": "draining"})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "server_draining"


def test_drain_settings_default_and_come_from_the_config():
    assert DrainSpec().timeout_s == 30
    with pytest.raises(ValueError):
        DrainSpec(timeout_s=0)


def test_serve_stop_deadlines_follow_the_drain_and_request_timeouts(default_model_path):
    from serving.app_builder import (
        GATEWAY_STOP_GRACE_S,
        engine_deployment_options,
        gateway_deployment_options,
    )
    from serving.config.loading import build_stack_config
    from serving.config.model_spec import ModelCatalog
    from tests.paths import MODELS

    def config(request_timeout_s, **data):
        return build_stack_config({"gateway": {"request_timeout_s": request_timeout_s}, **data},
                                  catalog=ModelCatalog(MODELS), model_path=default_model_path)

    def stop_deadline(options) -> float:
        return options["graceful_shutdown_timeout_s"]

    drain_s = DrainSpec().timeout_s
    separate = {"mode": "separate"}

    def separate_config(request_timeout_s, **data):
        return build_stack_config({"gateway": {"request_timeout_s": request_timeout_s, **separate}, **data},
                                  catalog=ModelCatalog(MODELS), model_path=default_model_path)

    # Whoever holds the client's connection outlives its longest request and the drain:
    # the direct mode's engine replica, the separate gateway. Neither is killed with one.
    assert stop_deadline(engine_deployment_options(config(300))) == 300 + GATEWAY_STOP_GRACE_S
    assert stop_deadline(engine_deployment_options(config(5))) == drain_s + GATEWAY_STOP_GRACE_S
    assert stop_deadline(gateway_deployment_options(separate_config(300))) == 300 + GATEWAY_STOP_GRACE_S
    assert stop_deadline(gateway_deployment_options(separate_config(5))) == drain_s + GATEWAY_STOP_GRACE_S
    # Behind separate gateways an engine replica gets the drain; its gateway reports the cut.
    assert stop_deadline(engine_deployment_options(separate_config(300))) == drain_s
    assert stop_deadline(engine_deployment_options(separate_config(300, drain={"timeout_s": 7}))) == 7
