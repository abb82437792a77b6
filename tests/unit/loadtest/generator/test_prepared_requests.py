"""What the generator prepares before a stage so that a due request only writes bytes:
each session's first body, encoded; the target's address, resolved once (the request
then goes to a real HTTP server, a FAKE OpenAI one, without any lookup)."""

from __future__ import annotations

import json
import time

from geventhttpclient import HTTPClient

from loadtest.client.openai_api import request_body
from loadtest.config import TargetConfig
from loadtest.generator.bodies import FirstBodies
from loadtest.generator.exchange import perform, pin, resolve
from loadtest.workloads import Session, Turn, WorkloadPlan
from tests.unit.loadtest.fake_openai_server import FakeServer

TARGET = TargetConfig(url="http://127.0.0.1:9", model="m", extra_body={"top_p": 0.5})


def test_first_bodies_are_the_bodies_a_user_would_send():
    plan = WorkloadPlan(systems=("be brief",), sessions=(
        Session(id=0, turns=(Turn(content="a", max_tokens=3), Turn(content="b")), system=0, extra_body={"priority": 2}),
        Session(id=1, turns=(Turn(content="c", fanout=2),)),
    ))  # fmt: skip
    bodies = FirstBodies(plan, TARGET)
    assert len(bodies) == 2 and bodies.first(1) is None  # an agent step's branches differ: encoded when sent
    want = request_body(TARGET, system="be brief", history=(), turn=plan.sessions[0].turns[0], extra={"priority": 2})
    assert json.loads(bodies.first(0)) == want
    assert want["messages"][0] == {"role": "system", "content": "be brief"} and want["top_p"] == 0.5


def test_a_pinned_client_connects_to_the_address_resolved_before_the_stage():
    with FakeServer() as server:
        addresses = resolve(server.url)
        assert addresses  # 127.0.0.1 and the server's port
        # a host no lookup can find: the request only gets through on the pinned addresses
        client = pin(HTTPClient.from_url("http://no-such-host.invalid/", concurrency=1), addresses)
        body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 2, "stream": True}).encode()  # fmt: skip
        exchange = perform(client, path="/v1/chat/completions", body=body, headers={"Content-Type": "application/json"},
                           stream=True, timeout_s=30.0, clock=time.perf_counter)  # fmt: skip
        client.close()
    assert exchange.ok and exchange.chunks >= 1, exchange.error
    assert resolve("http://no-such-host.invalid:8000") is None  # unresolvable now: each connection tries itself
