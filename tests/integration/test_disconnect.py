"""A client that goes away mid-stream leaves nothing running in the engine."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.integration.metrics_reading import by_label, wait_until
from tests.integration.settings import MODEL

pytestmark = pytest.mark.integration


def engine_running(url: str) -> float:
    return sum(by_label(url, "serveout_engine_running_requests", "replica").values())


def generation_tokens(url: str) -> float:
    return sum(by_label(url, "serveout_engine_generation_tokens_total", "replica").values())


def test_disconnect_mid_stream_aborts_the_engine_request(base_stack):
    url = base_stack.url
    before = generation_tokens(url)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a very long story."}],
            "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            received = 0
            for line in response.iter_lines():
                if line.startswith("data: ") and "content" in line:
                    json.loads(line[6:])
                    received += 1
                if received >= 5:
                    break  # leave mid-stream: the connection closes here
    # Aborted: the engine holds no running request well before the 1500 tokens
    # (~50 s at this pace) could have been generated...
    assert wait_until(lambda: engine_running(url) == 0, timeout_s=20)
    # ...and the tokens it generated for it stop far short of 1500.
    assert generation_tokens(url) - before < 1500
    assert by_label(url, "serveout_in_flight_requests", "model")[MODEL] == 0
