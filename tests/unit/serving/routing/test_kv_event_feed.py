"""The router follows an engine's KV event publisher: a real ZMQ PUB socket on loopback
sending batches that vLLM's classes encoded (tests/fixtures/kv_events), as vLLM's
``ZmqEventPublisher`` frames them (topic, 8-byte sequence number, payload)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import zmq
import zmq.asyncio

from serving.routing.kv_event_feed import KvEventFeed
from serving.routing.prefix_index import block_hashes

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "kv_events"
FIRST = block_hashes(tuple(range(12)) + (99,), 4)


def payload(name: str) -> bytes:
    return (FIXTURES / f"{name}.msgpack").read_bytes()


async def until(condition, limit_s: float = 10.0) -> None:
    """Wait for the subscriber to catch up (bounded; the check itself is not timed)."""
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the feed never saw the events")


async def scenario() -> None:
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    feed = KvEventFeed(block_tokens=4, context=context)
    feed.follow({"r1": f"tcp://127.0.0.1:{port}", "r2": None})
    assert feed.view("r2") is None
    index = feed.view("r1")
    seq = 0

    async def send(name: str, *, skip: int = 0) -> None:
        nonlocal seq
        seq += skip
        await pub.send_multipart([b"", seq.to_bytes(8, "big"), payload(name)])
        seq += 1

    # A SUB socket misses what is sent before it has connected: resend until it is in.
    for _ in range(500):
        await send("stored_chain")
        await asyncio.sleep(0.01)
        if index.cached_blocks(FIRST) == 3:
            break
    await until(lambda: index.cached_blocks(FIRST) == 3)
    await send("removed_tail_and_offload")
    await until(lambda: index.cached_blocks(FIRST) == 2)
    await send("stored_chain", skip=5)  # a gap: what it missed may have evicted blocks
    await until(lambda: feed._subscriptions["r1"].gaps == 1)
    assert index.cached_blocks(FIRST) == 3  # cleared, then this batch replayed
    feed.follow({})  # the replica left
    assert feed.view("r1") is None
    await feed.close()
    pub.close(linger=0)
    context.term()


def test_the_feed_replays_an_engines_events_and_clears_on_a_gap():
    asyncio.run(scenario())


def test_following_outside_the_event_loop_waits_for_the_next_update():
    context = zmq.asyncio.Context()
    feed = KvEventFeed(block_tokens=4, context=context)
    feed.follow({"r1": "tcp://127.0.0.1:1"})
    assert feed.view("r1") is None
    context.term()
