"""The router's subscriptions to its engines' KV cache event publishers (ZMQ SUB).

An engine replica started with ``engine.kv_cache_events`` publishes vLLM's KV cache
events on a ZMQ PUB socket of its node (``tcp://<node>:<port>``, port chosen by vLLM)
and reports that endpoint in its routing stats (``EngineStats.kv_events_endpoint``).
:class:`KvEventFeed` subscribes to each live replica's endpoint from the router's
event loop, decodes every batch (:mod:`serving.routing.kv_event_wire`) and replays it
into that replica's :class:`~serving.routing.engine_cache.EngineCacheIndex`, which the
routing core hands to the policy as the replica's cache view. PUB/SUB carries to
every subscriber, so each gateway's router follows the same engines.

Lost messages (a gap in vLLM's sequence numbers: the subscriber's queue overflowed, or
it joined late) clear that replica's index rather than leave blocks the engine may
have evicted since; the engine re-reports the blocks of every later hit, so the view
refills with what is in use. A replica whose publisher is not reachable has no view
(the policy then falls back to its own record of where it sent prefixes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

import zmq
import zmq.asyncio

from serving.routing.engine_cache import EngineCacheIndex
from serving.routing.kv_event_wire import KvEventDecodeError, decode_message

log = logging.getLogger("serveout.routing")

RECEIVE_QUEUE = 100_000
"""Messages a subscription queues before ZMQ drops them (vLLM's publisher default HWM)."""


class _Subscription:
    def __init__(self, context: zmq.asyncio.Context, endpoint: str, index: EngineCacheIndex) -> None:
        self.endpoint = endpoint
        self.index = index
        self.gaps = 0
        self.bad = 0
        self._next_seq: int | None = None
        self._socket = context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.connect(endpoint)
        self._task = asyncio.get_running_loop().create_task(self._receive())

    async def _receive(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            try:
                message = decode_message(frames)
            except KvEventDecodeError as exc:
                self.bad += 1
                if self.bad == 1:
                    log.warning("KV event from %s not understood (%s); skipping such messages", self.endpoint, exc)
                continue
            if self._next_seq is not None and message.seq != self._next_seq:
                self.gaps += 1
                self.index.clear()
            self._next_seq = message.seq + 1
            self.index.apply(message.events)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._socket.close(linger=0)


class KvEventFeed:
    """Per replica: a subscription to its engine's KV events and the index they build."""

    def __init__(self, block_tokens: int, context: zmq.asyncio.Context) -> None:
        self.block_tokens = block_tokens
        self._context = context  # the owner's (the router's): one per router, not per process
        self._subscriptions: dict[str, _Subscription] = {}
        self._closing: set[asyncio.Task] = set()

    def view(self, replica_id: str) -> EngineCacheIndex | None:
        """The replica's cache as its events built it (``None``: not followed)."""
        subscription = self._subscriptions.get(replica_id)
        return subscription.index if subscription is not None else None

    def follow(self, endpoints: Mapping[str, str | None]) -> None:
        """Follow exactly these replicas (replica id -> endpoint; ``None``/empty: it
        publishes nothing). Call from the router's running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop yet: the next replica update follows them
        for replica_id in list(self._subscriptions):
            if endpoints.get(replica_id) != self._subscriptions[replica_id].endpoint:
                self._drop(replica_id)
        for replica_id, endpoint in endpoints.items():
            if endpoint and replica_id not in self._subscriptions:
                try:
                    self._subscriptions[replica_id] = _Subscription(
                        self._context, endpoint, EngineCacheIndex(self.block_tokens))
                except zmq.ZMQError as exc:
                    log.warning("cannot follow the KV events of %s at %s: %s", replica_id, endpoint, exc)

    def _drop(self, replica_id: str) -> None:
        subscription = self._subscriptions.pop(replica_id)
        task = asyncio.get_running_loop().create_task(subscription.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every subscription (those of replicas already dropped included)."""
        for subscription in self._subscriptions.values():
            await subscription.close()
        self._subscriptions.clear()
        if self._closing:
            await asyncio.gather(*self._closing)
