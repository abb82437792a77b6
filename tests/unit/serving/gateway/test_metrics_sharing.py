"""Several gateway replicas behind one ``/metrics``: the real FastAPI apps and
services, each replica with its own registry, meeting on a FAKE board channel (a
:class:`MetricsBoard` in this process instead of the app's Ray actor)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from serving.api.app import build_http_app
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.metrics_board import GATEWAY_REPLICA_LABEL, MetricsBoard, Snapshot
from serving.gateway.metrics_sharing import FleetMetrics, RayBoardChannel, board_actor_name, shared_views
from tests.fakes import FakeEngineClient
from tests.unit.serving.config.test_engine_backend import from_cli
from tests.unit.serving.gateway.test_service import MODEL, service

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
SEPARATE = shared_views(direct=False)


class FakeBoardChannel:
    """The app's board in this process; ``broken`` makes every call fail like a dead actor."""

    def __init__(self, board: MetricsBoard, *, broken: bool = False) -> None:
        self.board, self.broken = board, broken
        self.uncreated = 0  # publishes that may not create the board

    async def publish(self, snapshot: Snapshot, *, create: bool = True) -> None:
        self._check()
        self.uncreated += not create
        self.board.publish(snapshot)

    async def exchange(self, snapshot: Snapshot) -> list[Snapshot]:
        self._check()
        return self.board.exchange(snapshot)

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("board actor died")


class SilentBoardChannel:
    """A board that never answers."""

    async def publish(self, snapshot: Snapshot, *, create: bool = True) -> None:
        await asyncio.Event().wait()

    async def exchange(self, snapshot: Snapshot) -> list[Snapshot]:
        await asyncio.Event().wait()
        return []


class Replica:
    """One gateway replica: its own registry, service, app and :class:`FleetMetrics`."""

    def __init__(self, name: str, tokenizer, channel) -> None:
        self.registry = CollectorRegistry()
        svc = service(tokenizer, FakeEngineClient(), registry=self.registry)
        svc.metrics.replicas.labels(MODEL, "ready").set(2)
        self.fleet = FleetMetrics(self.registry, name, channel, shared=SEPARATE)
        self.app = build_http_app(svc, registry=self.registry, max_body_bytes=1 << 20, status=lambda: {},
                                  metrics_text=self.fleet.render, on_shutdown=self.fleet.close)


async def chats(replica: Replica, n: int) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=replica.app), base_url="http://gw") as client:
        for _ in range(n):
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def scrape(replica: Replica) -> dict[str, list]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=replica.app), base_url="http://gw") as client:
        text = (await client.get("/metrics")).text
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def answered(samples: dict[str, list]) -> dict[str, float]:
    """``{gateway replica: requests answered 200}`` in one scrape."""
    return {labels[GATEWAY_REPLICA_LABEL]: value for labels, value in samples["serveout_requests_total"]
            if labels["status"] == "200"}


def test_either_replica_answers_for_both_and_the_engine_view_comes_once(tokenizer):
    channel = FakeBoardChannel(MetricsBoard())
    a, b = Replica("a", tokenizer, channel), Replica("b", tokenizer, channel)

    async def run():
        await chats(a, 2)
        await chats(b, 3)
        await scrape(b)  # b's scrape publishes b's counts
        return await scrape(a), await scrape(b)

    from_a, from_b = asyncio.run(run())
    assert answered(from_a) == answered(from_b) == {"a": 2.0, "b": 3.0}
    assert sum(answered(from_a).values()) == 5
    assert from_a["serveout_replicas"] == [({"model": MODEL, "state": "ready"}, 2.0)]  # not once per gateway


def test_a_replicas_counter_never_goes_back_whichever_replica_answers(tokenizer):
    channel = FakeBoardChannel(MetricsBoard())
    a, b = Replica("a", tokenizer, channel), Replica("b", tokenizer, channel)

    async def run():
        seen = []
        await chats(a, 1)
        seen.append(answered(await scrape(a))["a"])
        await chats(a, 1)  # a has not published since
        seen.append(answered(await scrape(a))["a"])  # a answers: it publishes what it shows
        seen.append(answered(await scrape(b))["a"])
        return seen

    assert asyncio.run(run()) == [1.0, 2.0, 2.0]


def test_without_a_board_a_replica_shows_its_own_series_labelled(tokenizer):
    a = Replica("a", tokenizer, FakeBoardChannel(MetricsBoard(), broken=True))

    async def run():
        await chats(a, 2)
        return await scrape(a)

    samples = asyncio.run(run())
    assert answered(samples) == {"a": 2.0}
    assert samples["serveout_replicas"] == [({"model": MODEL, "state": "ready"}, 2.0)]


def gateway_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    GatewayMetrics(registry).declare_model(MODEL)
    return registry


def test_a_board_that_does_not_answer_does_not_hold_the_scrape():
    registry = gateway_registry()
    fleet = FleetMetrics(registry, "a", SilentBoardChannel(), shared=SEPARATE, timeout_s=0.01)
    text = asyncio.run(fleet.render()).decode()
    assert f'{GATEWAY_REPLICA_LABEL}="a"' in text


def test_a_started_replica_publishes_until_closed():
    board = MetricsBoard()
    registry = gateway_registry()
    fleet = FleetMetrics(registry, "a", FakeBoardChannel(board), shared=SEPARATE, period_s=0.0)

    def newest() -> int:
        return board.snapshots()[0].seq if board.snapshots() else -1

    async def run():
        fleet.start()
        for _ in range(3000):  # snapshots are taken in a worker thread: poll, for at most a minute
            if newest() >= 2:
                break
            await asyncio.sleep(0.02)
        await fleet.close()
        closed = newest()
        for _ in range(5):
            await asyncio.sleep(0.02)
        return closed, newest()

    closed, later = asyncio.run(run())
    assert closed >= 3  # three snapshots published by the loop at least, then the last one
    assert later == closed  # and no more once closed


def test_the_app_publishes_a_last_snapshot_when_its_lifespan_ends(tokenizer):
    board = MetricsBoard()
    channel = FakeBoardChannel(board)
    a = Replica("a", tokenizer, channel)
    with TestClient(a.app) as client:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
        assert board.snapshots() == []  # never started, never scraped
    (last,) = board.snapshots()
    assert channel.uncreated == 1  # a stopping replica does not start a board
    assert last.replica == "a"
    requests = next(f for f in last.decode() if f.name == "serveout_requests")
    assert [s.value for s in requests.samples if s.name.endswith("_total") and s.labels["status"] == "200"] == [1.0]


def test_the_ray_board_is_one_named_actor_per_app_and_a_last_publish_never_creates_it(monkeypatch):
    assert board_actor_name("serveout") == "serveout-metrics-board:serveout"

    def no_ray(self):
        raise AssertionError("looked up or created the board actor")

    monkeypatch.setattr(RayBoardChannel, "_get_or_create", no_ray)
    snapshot = Snapshot.of("a", 0, gateway_registry().collect())
    asyncio.run(RayBoardChannel("serveout").publish(snapshot, create=False))  # no board known: nothing sent
    with pytest.raises(AssertionError, match="board actor"):
        asyncio.run(RayBoardChannel("serveout").publish(snapshot))


def test_shared_views_are_the_engine_deployment_seen_alike_by_every_gateway():
    assert {"serveout_replicas", "serveout_queue_depth", "serveout_engine_kv_cache_usage"} <= SEPARATE
    assert "serveout_routed_requests" not in SEPARATE and "serveout_requests" not in SEPARATE
    assert shared_views(direct=True) == {"serveout_replicas"}  # each reports its own engine


@pytest.mark.parametrize("argv, most", [
    (["--gateway-mode", "separate"], 1),
    (["--gateway-mode", "separate", "--gateway-replicas", "3"], 3),
    (["--gateway-mode", "separate", "--gateway-autoscale", "1..4"], 4),
    (["--replicas", "2"], 3),  # direct: two engine replicas and the routers
    ([], 2),
])
def test_metrics_are_shared_exactly_when_several_gateway_processes_can_run(argv, most):
    assert from_cli(argv).gateway_processes_at_most == most
