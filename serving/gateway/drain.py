"""Draining the gateway before its app stops (pure: no I/O, only the event loop).

Ray Serve gives a replica no notice before it stops: the user's ``__del__`` (for the
gateway, the ASGI lifespan shutdown) runs only after the replica's requests have
finished, and ``serve.shutdown`` kills the HTTP proxies at once. So the process that
owns the app asks the gateway to drain first (``Gateway.drain`` through a handle):

- from then on ``/health`` answers 503 ``{"status": "draining"}`` and every new
  completion 503 + ``Retry-After`` with code ``server_draining``;
- requests in flight run on, for at most the drain timeout;
- those still running then are cut: a stream ends with ``finish_reason: "error"`` and
  a ``server_draining`` error event, a whole answer is a 503 ``server_draining``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

from serving.errors import ServerDrainingError

POLL_S = 0.05
"""How often a drain looks at the requests in flight."""
CUT_GRACE_S = 5.0
"""How long a drain waits, after cutting, for the cut requests to send their errors."""


class Cuttable(Protocol):
    def cut(self, error: ServerDrainingError) -> None:
        """End the request with ``error`` as soon as it can (idempotent)."""
        ...


@dataclass(frozen=True)
class DrainReport:
    """How a drain went: requests in flight when it began, how many of them were cut
    at the deadline, and how many were still open when it returned (clients that stopped
    reading their stream)."""

    in_flight: int
    cut: int
    left: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class Drain:
    """Whether the gateway drains, and the requests it may have to cut."""

    def __init__(self) -> None:
        self.draining = False
        self.cut_count = 0
        self._cut_with: tuple[str, int] | None = None  # (message, retry_after_s) once cutting
        self._live: set[Cuttable] = set()

    def refuse_new(self, retry_after_s: int) -> None:
        """Raise :class:`ServerDrainingError` while draining."""
        if self.draining:
            raise ServerDrainingError("the server is shutting down and takes no new requests",
                                      retry_after_s=retry_after_s)

    def track(self, request: Cuttable) -> None:
        """Follow a request until :meth:`forget`; one that starts after the cut is cut at once."""
        self._live.add(request)
        if self._cut_with is not None:
            self._cut(request)

    def forget(self, request: Cuttable) -> None:
        self._live.discard(request)

    def cut_all(self, message: str, *, retry_after_s: int) -> None:
        """Cut every request followed now, and every one followed from now on."""
        self._cut_with = (message, retry_after_s)
        for request in list(self._live):
            self._cut(request)

    def _cut(self, request: Cuttable) -> None:
        message, retry_after_s = self._cut_with
        self.cut_count += 1  # one error per request: each is raised in its own task
        request.cut(ServerDrainingError(message, retry_after_s=retry_after_s))


async def drain_requests(state: Drain, in_flight: Callable[[], int], timeout_s: float, *,
                retry_after_s: int = 1, poll_s: float = POLL_S, grace_s: float = CUT_GRACE_S) -> DrainReport:
    """Start draining, wait up to ``timeout_s`` for ``in_flight()`` to reach 0, cut what
    is left, and wait up to ``grace_s`` more for the cut requests to end."""
    state.draining = True
    loop = asyncio.get_running_loop()
    at_start = in_flight()
    await _wait_idle(in_flight, loop.time() + timeout_s, poll_s)
    if in_flight():
        state.cut_all("the server is shutting down and the request did not finish within the "
                      f"drain timeout ({timeout_s:g} s)", retry_after_s=retry_after_s)
        await _wait_idle(in_flight, loop.time() + grace_s, poll_s)
    return DrainReport(in_flight=at_start, cut=state.cut_count, left=in_flight())


async def _wait_idle(in_flight: Callable[[], int], until: float, poll_s: float) -> None:
    loop = asyncio.get_running_loop()
    while in_flight() and loop.time() < until:
        await asyncio.sleep(poll_s)
