"""``gateway.mode: direct``: its config rules, its Serve options, and the local engine
client (with FAKE generators: pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from serving.app_builder import direct_engine_deployment_options, engine_version
from serving.engine.protocol import GenerationChunk
from serving.errors import ConfigError, EngineError, ReplicaFailedError
from serving.direct.engine_ingress import LocalEngineClient
from tests.unit.serving.config.test_engine_backend import from_cli


def test_the_direct_mode_routes_through_serveouts_router_and_serve_bounds_sit_above_the_share():
    config = from_cli(["--replicas", "2", "--max-in-flight", "100"])
    options = direct_engine_deployment_options(config)
    kwargs = options["request_router_config"].request_router_kwargs
    assert kwargs["engine_view"] is False  # each replica exports its own engine's stats
    assert options["num_replicas"] == 2
    assert options["max_ongoing_requests"] == 2 * 50 + 64  # each replica admits 50
    assert options["user_config"]["gateway"]["max_in_flight"] == 100


def test_settings_keep_the_engine_version_and_what_builds_an_engine_changes_it():
    base = engine_version(from_cli(["--replicas", "2"]))
    assert engine_version(from_cli(["--replicas", "2", "--routing", "round-robin",
                                    "--max-in-flight", "7"])) == base
    assert engine_version(from_cli(["--replicas", "2", "--dtype", "bfloat16"])) != base
    assert engine_version(from_cli(["--replicas", "1"])) != base  # cores per replica change


def test_a_replica_count_change_restarts_no_engine_when_the_cores_per_rank_are_fixed():
    pinned = engine_version(from_cli(["--replicas", "2", "--cpus-per-rank", "1"]))
    assert engine_version(from_cli(["--replicas", "3", "--cpus-per-rank", "1"])) == pinned
    assert engine_version(from_cli(["--replicas", "2", "--cpus-per-rank", "2"])) != pinned
    on_gpu = ["--model", "llama-3.1-8b-instruct"]  # GPU replicas bind no cores
    assert engine_version(from_cli([*on_gpu, "--replicas", "4"])) == engine_version(from_cli([*on_gpu, "--replicas", "5"]))


@pytest.mark.parametrize("argv, message", [
    (["--gateway-mode", "in-engine"], "replaced by direct"),
    (["--gateway-replicas", "2"], "gateway.mode direct runs the gateway in every engine replica"),
])
def test_the_direct_mode_refuses_what_it_cannot_do(argv, message):
    with pytest.raises(ConfigError, match=message):
        from_cli(argv)


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


class FakeElsewhere:
    """A FAKE handle client: records the replica it was asked to avoid."""

    retries_elsewhere = True

    def __init__(self) -> None:
        self.avoided: list[str | None] = []

    async def stream(self, request, *, avoid_replica=None):
        self.avoided.append(avoid_replica)
        yield chunk(99)


def test_a_retry_goes_to_another_replica_through_the_handle():
    elsewhere = FakeElsewhere()
    client = LocalEngineClient(FakeGenerate(3), elsewhere)
    assert client.retries_elsewhere

    async def go():
        return [c.completion_tokens async for c in client.stream(object(), avoid_replica="me")]

    assert asyncio.run(go()) == [99] and elsewhere.avoided == ["me"]
    assert not LocalEngineClient(FakeGenerate(1)).retries_elsewhere
