"""Priority classes through GatewayService with a FAKE engine client: the class a request
runs in, the engine priority it carries, the tokens fed back to its key's fair-share
counter, and the per-class metrics."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from serving.admission.api_keys import Caller
from serving.admission.bound import AdmissionController
from serving.errors import InvalidRequestError, OverloadedError, PermissionDeniedError
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.service import GatewayService, ServedModel
from tests.fakes import FakeEngineClient
from tests.unit.serving.gateway.test_service import MODEL, body, prompt_tokens

NIGHTLY = Caller("nightly", priority_class="batch", weight=2.0)


def service(tokenizer, engine, registry, limit=4):
    served = ServedModel(MODEL, 2048, tokenizer, engine, AdmissionController(limit))
    return GatewayService([served], GatewayMetrics(registry), request_timeout_s=5.0)


def test_a_request_runs_in_its_keys_class_or_a_lower_one_with_that_engine_priority(tokenizer):
    engine, registry = FakeEngineClient(), CollectorRegistry()
    svc = service(tokenizer, engine, registry)
    asyncio.run(svc.complete(body(), caller=Caller("clinic")))
    assert engine.last.priority == 0
    asyncio.run(svc.complete(body(), caller=NIGHTLY))
    assert engine.last.priority == 1
    asyncio.run(svc.complete(body(), caller=NIGHTLY, asked_class="sheddable"))
    assert engine.last.priority == 2
    admission = svc.models[MODEL].admission
    # prompt once (charged when tokenised) and 3 output tokens at 2 each, over weight 2
    assert admission.counter("nightly", "batch") == (prompt_tokens(tokenizer) + 3 * 2) / 2
    assert admission.in_flight == 0


def test_a_raised_or_unknown_class_is_refused_and_counted(tokenizer):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(), registry)
    with pytest.raises(PermissionDeniedError):
        asyncio.run(svc.complete(body(), caller=NIGHTLY, asked_class="interactive"))
    with pytest.raises(InvalidRequestError):
        asyncio.run(svc.complete(body(), caller=NIGHTLY, asked_class="urgent"))
    text = generate_latest(registry).decode()
    assert 'serveout_key_requests_total{key="nightly",status="403"} 1.0' in text
    assert 'serveout_key_requests_total{key="nightly",status="400"} 1.0' in text
    assert svc.models[MODEL].admission.in_flight == 0


def test_batch_is_held_back_and_counted_per_class(tokenizer):
    registry = CollectorRegistry()
    svc = service(tokenizer, FakeEngineClient(delay_s=0.2), registry, limit=4)  # batch may fill 3

    async def run():
        held = [asyncio.create_task(svc.complete(body(), caller=NIGHTLY)) for _ in range(3)]
        await asyncio.sleep(0.05)
        text = generate_latest(registry).decode()
        assert f'serveout_class_in_flight_requests{{model="{MODEL}",priority_class="batch"}} 3.0' in text
        with pytest.raises(OverloadedError) as err:
            await svc.complete(body(), caller=NIGHTLY)
        assert err.value.reason == "priority"
        await svc.complete(body(), caller=Caller("clinic"))  # the interactive reserve
        await asyncio.gather(*held)

    asyncio.run(run())
    text = generate_latest(registry).decode()
    assert (f'serveout_class_rejected_requests_total{{model="{MODEL}",priority_class="batch",'
            'reason="priority"} 1.0') in text
    assert f'serveout_class_in_flight_requests{{model="{MODEL}",priority_class="batch"}} 0.0' in text
