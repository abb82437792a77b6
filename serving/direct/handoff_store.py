"""A replica's staging area for the plans the router sends ahead of their requests (pure:
no I/O; one event loop, no locks).

The router pushes a plan, then answers HAProxy, which forwards the HTTP request; the
plan usually arrives first, but nothing guarantees it. So :meth:`HandoffStore.claim` waits
up to ``wait_s`` for a plan that is not there yet, and a plan nobody claims (HAProxy
retried the request on another replica, or the client left before it was forwarded) is
dropped after ``ttl_s``. Either way each plan ends exactly once in ``on_done``: when
its request ends (:meth:`HandoffStore.finish`), when it expires unclaimed, or at once if
it arrives after its request gave up waiting; the router then stops counting it
against this replica. Bounded: at most ``max_entries`` plans wait (the oldest go first).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from serving.direct.handoff import Handoff

DEFAULT_WAIT_S = 0.05
DEFAULT_TTL_S = 30.0
DEFAULT_MAX_ENTRIES = 4096


class HandoffStore:
    """Plans by key, each claimed at most once."""

    def __init__(
        self,
        on_done: Callable[[Handoff], None],
        *,
        wait_s: float = DEFAULT_WAIT_S,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_done = on_done
        self._wait_s, self._ttl_s, self._max = wait_s, ttl_s, max_entries
        self._clock = clock
        self._plans: OrderedDict[str, tuple[Handoff, float]] = OrderedDict()
        self._waiters: dict[str, asyncio.Future[Handoff]] = {}
        self._given_up: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._plans)

    def put(self, plan: Handoff) -> None:
        """A plan arrived from the router."""
        now = self._clock()
        self.expire(now)
        waiter = self._waiters.pop(plan.key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(plan)
            return
        if self._given_up.pop(plan.key, None) is not None:
            self._on_done(plan)  # its request already planned itself
            return
        self._plans[plan.key] = (plan, now)
        while len(self._plans) > self._max:
            _, (oldest, _) = self._plans.popitem(last=False)
            self._on_done(oldest)

    async def claim(self, key: str) -> Handoff | None:
        """The plan of ``key``, waiting up to ``wait_s`` for it; None if it never came."""
        entry = self._plans.pop(key, None)
        if entry is not None:
            return entry[0]
        waiter = self._waiters.get(key)
        if waiter is not None:  # a second claim of one key: the first owns the plan
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[key] = waiter
        try:
            return await asyncio.wait_for(waiter, self._wait_s)
        except TimeoutError:
            self._given_up[key] = self._clock()
            return None
        finally:
            self._waiters.pop(key, None)

    def finish(self, plan: Handoff) -> None:
        """The request of a claimed ``plan`` ended (answered, refused or cut)."""
        self._on_done(plan)

    def expire(self, now: float | None = None) -> None:
        """Drop plans older than ``ttl_s`` (handed to ``on_done``) and forget old
        given-up keys."""
        now = self._clock() if now is None else now
        cutoff = now - self._ttl_s
        while self._plans:
            key, (plan, arrived) = next(iter(self._plans.items()))
            if arrived > cutoff:
                break
            del self._plans[key]
            self._on_done(plan)
        while self._given_up and next(iter(self._given_up.values())) <= cutoff:
            self._given_up.popitem(last=False)
