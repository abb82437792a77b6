"""Best-effort one-way messages between the router and the engine replicas (ZMQ).

The router pushes each request's plan to the replica it picked, and each replica pushes
back when a validated request ended; both sides bind a :class:`Inbox` (a ZMQ PULL socket
on the node's address, on a free port) and send with an :class:`Outbox` (a PUSH socket
per peer). Nothing waits on delivery: a full or unconnected pipe drops the message
(``send`` returns False) and the caller takes its fallback (the replica plans the
request itself; the router's count of the request expires). One event loop per side:
not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable

import zmq
import zmq.asyncio

log = logging.getLogger("serveout.gateway")

SEND_QUEUE_LIMIT = 1024
"""Messages queued per peer before sends to it fail."""
MAX_PEERS = 256
"""Open PUSH sockets per outbox (least recently used closed first)."""


class Outbox:
    """PUSH sockets to peers by endpoint (``tcp://host:port``), on its own ZMQ context."""

    def __init__(self) -> None:
        self._context = zmq.Context()
        self._sockets: OrderedDict[str, zmq.Socket] = OrderedDict()

    def send(self, endpoint: str, data: bytes) -> bool:
        """Queue ``data`` for ``endpoint`` without waiting; False when it cannot go now
        (closed included)."""
        socket = None if self._context.closed else self._socket(endpoint)
        if socket is None:
            return False
        try:
            socket.send(data, flags=zmq.DONTWAIT, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            log.warning("side channel to %s failed: %s", endpoint, exc)
            self._sockets.pop(endpoint, None)
            socket.close(linger=0)
            return False
        return True

    def _socket(self, endpoint: str) -> zmq.Socket | None:
        socket = self._sockets.get(endpoint)
        if socket is not None:
            self._sockets.move_to_end(endpoint)
            return socket
        socket = self._context.socket(zmq.PUSH)
        socket.setsockopt(zmq.LINGER, 0)
        # Queued until the connection is up (the first message to a new peer would fail
        # otherwise), at most SEND_QUEUE_LIMIT; a peer that never answers loses them.
        socket.setsockopt(zmq.SNDHWM, SEND_QUEUE_LIMIT)
        try:
            socket.connect(endpoint)
        except zmq.ZMQError as exc:
            socket.close(linger=0)
            log.warning("cannot connect the side channel to %s: %s", endpoint, exc)
            return None
        self._sockets[endpoint] = socket
        while len(self._sockets) > MAX_PEERS:
            _, old = self._sockets.popitem(last=False)
            old.close(linger=0)
        return socket

    def close(self) -> None:
        for socket in self._sockets.values():
            socket.close(linger=0)
        self._sockets.clear()
        self._context.term()


class Inbox:
    """A PULL socket bound on ``host`` (a free port); ``handler`` gets every message on
    the running loop (call :meth:`start` from it); its own ZMQ context."""

    def __init__(self, host: str, handler: Callable[[bytes], None]) -> None:
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._handler = handler
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._receive())

    async def _receive(self) -> None:
        while True:
            data = await self._socket.recv(copy=True)
            try:
                self._handler(data)
            except Exception:  # one bad message must not stop the inbox
                log.exception("side channel message dropped")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._socket.close(linger=0)
        self._context.term()
