"""``gateway.mode: in-engine``: its config rules, its Serve options, and the local
engine client (with FAKE generators: pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from serving.app_builder import in_engine_deployment_options
from serving.engine.protocol import GenerationChunk
from serving.errors import ConfigError, EngineError, ReplicaFailedError
from serving.gateway.in_engine import LocalEngineClient
from tests.unit.serving.config.test_engine_backend import from_cli


def test_in_engine_mode_has_no_serveout_router_and_serve_bounds_above_the_share():
    config = from_cli(["--gateway-mode", "in-engine", "--replicas", "2", "--max-in-flight", "100"])
    options = in_engine_deployment_options(config)
    assert "request_router_config" not in options
    assert options["num_replicas"] == 2
    assert options["max_ongoing_requests"] == 2 * 50 + 64  # each replica admits 50


@pytest.mark.parametrize("argv, message", [
    (["--routing", "prefix-affinity"], "needs gateway.mode separate"),
    (["--gateway-replicas", "2"], "one gateway per engine replica"),
])
def test_in_engine_mode_refuses_what_it_cannot_do(argv, message):
    with pytest.raises(ConfigError, match=message):
        from_cli(["--gateway-mode", "in-engine", *argv])


def chunk(n: int) -> GenerationChunk:
    return GenerationChunk(deltas=(), replica_id="r", prompt_tokens=1, completion_tokens=n, finished=False)


class FakeGenerate:
    """A fake replica ``generate``: yields ``chunks`` then raises ``error`` if given."""

    def __init__(self, chunks: int, error: Exception | None = None) -> None:
        self.chunks, self.error, self.closed = chunks, error, False

    async def __call__(self, request):
        try:
            for n in range(self.chunks):
                yield chunk(n)
            if self.error is not None:
                raise self.error
        finally:
            self.closed = True


def collect(client: LocalEngineClient, limit: int | None = None) -> list[GenerationChunk]:
    async def go():
        out = []
        stream = client.stream(object())
        async for item in stream:
            out.append(item)
            if limit is not None and len(out) == limit:
                await stream.aclose()
                break
        return out

    return asyncio.run(go())


def test_the_local_client_streams_the_replicas_chunks():
    assert [c.completion_tokens for c in collect(LocalEngineClient(FakeGenerate(3)))] == [0, 1, 2]


def test_closing_the_stream_closes_the_engine_generator():
    generate = FakeGenerate(10)
    assert len(collect(LocalEngineClient(generate), limit=2)) == 2
    assert generate.closed  # vLLM aborts the request when its generator closes


def test_serveout_errors_pass_and_other_failures_become_engine_errors():
    with pytest.raises(ReplicaFailedError):
        collect(LocalEngineClient(FakeGenerate(1, ReplicaFailedError("dead", reason="engine_dead"))))
    with pytest.raises(EngineError, match="RuntimeError"):
        collect(LocalEngineClient(FakeGenerate(1, RuntimeError("boom"))))
