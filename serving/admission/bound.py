"""Admission control: a hard bound on the requests a gateway holds for one model,
shared fairly between API keys.

Past the bound a request is refused at once with :class:`OverloadedError` (429 +
Retry-After) instead of queueing: queue length and memory stay bounded under any
load, and clients get a fast, explicit signal to back off.

Fair sharing: a key is *active* while it has requests in flight and for
``active_window_s`` after its last arrival or finish. When several keys are active,
each may hold at most ``ceil(limit / active keys)`` requests, so one heavy key
cannot take the whole bound: the share a light key does not use stays free for its
next request. A key alone may use the whole bound. (Its requests already in flight
when a second key arrives drain normally, so that key's first request can still
meet a full bound; from then on it counts as active and finds room.)

Several gateway replicas: the bound and every key's concurrency are app-wide; each of
N gateway replicas admits ``floor(bound / N)`` (at least 1), see :func:`share_of`, so
together they never hold more than the bound. Fair sharing between keys is per gateway
replica. Serve's proxy spreads requests over the gateways by their load, so one gateway
refusing while another has room is rare; a client's retry usually lands elsewhere.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from serving.errors import OverloadedError, RateLimitedError
from serving.admission.api_keys import ANONYMOUS


def share_of(limit: int, sharers: int) -> int:
    """One process's part of an app-wide ``limit`` shared by ``sharers`` (>= 1): the
    processes that run admission (the engine replicas in the direct mode, the gateway
    replicas in the separate mode)."""
    return max(1, limit // max(1, sharers))


class AdmissionTicket:
    """Held while a request is in flight; releasing twice is harmless."""

    def __init__(self, controller: "AdmissionController", key: str) -> None:
        self._controller: AdmissionController | None = controller
        self.key = key

    def release(self) -> None:
        if self._controller is not None:
            self._controller._release(self.key)
            self._controller = None


class AdmissionController:
    """Counts in-flight requests against ``limit`` (this gateway replica's share of the
    app's ``app_limit``), overall and per key."""

    def __init__(self, limit: int, *, retry_after_s: int = 1, active_window_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, sharers: int = 1) -> None:
        if limit < 1:
            raise ValueError("admission limit must be >= 1")
        self.app_limit = limit
        self.sharers = sharers
        self.limit = share_of(limit, sharers)
        self.retry_after_s = retry_after_s
        self.active_window_s = active_window_s
        self._clock = clock
        self._in_flight = 0
        self._per_key: dict[str, int] = {}
        self._seen: dict[str, float] = {}  # key -> last arrival or finish (bounded: key names)

    def reconfigure(self, limit: int, *, retry_after_s: int, active_window_s: float) -> None:
        """A new app-wide bound and its settings, for new requests (those in flight stay)."""
        if limit < 1:
            raise ValueError("admission limit must be >= 1")
        self.app_limit, self.retry_after_s, self.active_window_s = limit, retry_after_s, active_window_s
        self.limit = share_of(limit, self.sharers)

    def retain_keys(self, names) -> None:
        """Forget keys that can no longer send (the keys file changed): a key that is gone
        must not keep a share of the bound for ``active_window_s``."""
        keep = set(names)
        for key in [k for k in self._seen if k not in keep and not self._per_key.get(k)]:
            del self._seen[key]

    def set_sharers(self, sharers: int) -> None:
        """Admit this replica's share of the app's bound among ``sharers`` from now on
        (requests in flight stay; a smaller share only refuses new ones)."""
        self.sharers = max(1, sharers)
        self.limit = share_of(self.app_limit, self.sharers)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def in_flight_of(self, key: str) -> int:
        return self._per_key.get(key, 0)

    def active_keys(self) -> int:
        """Keys with requests in flight or seen within the window (forgets the others)."""
        now = self._clock()
        for key, seen in list(self._seen.items()):
            if not self._per_key.get(key) and now - seen > self.active_window_s:
                del self._seen[key]
        return len(self._seen)

    def fair_share(self, active: int | None = None) -> int:
        """The most requests one key may hold while ``active`` keys (default: now) compete."""
        return math.ceil(self.limit / max(1, self.active_keys() if active is None else active))

    def admit(self, key: str = ANONYMOUS, *, concurrency: int | None = None) -> AdmissionTicket:
        """A ticket for one request of ``key``, or a 429 error: the key's own
        ``concurrency`` (:class:`RateLimitedError`), its fair share, or the bound."""
        self._seen[key] = self._clock()
        mine = self.in_flight_of(key)
        if concurrency is not None and mine >= share_of(concurrency, self.sharers):
            raise RateLimitedError(
                f"this API key may have {concurrency} request(s) in flight at once"
                + (f" ({share_of(concurrency, self.sharers)} through each of {self.sharers} "
                   "gateway replicas)" if self.sharers > 1 else "")
                + "; retry after one finishes", retry_after_s=self.retry_after_s, reason="concurrency")
        active = self.active_keys()
        share = self.fair_share(active)
        if active > 1 and mine >= share:
            raise OverloadedError(
                f"the server is busy and this API key already holds its fair share ({share} of "
                f"{self.limit} requests in flight, shared by {active} active keys); retry after "
                f"{self.retry_after_s} s", retry_after_s=self.retry_after_s, reason="fair_share")
        if self._in_flight >= self.limit:
            raise OverloadedError(
                f"the server is at capacity ({self.limit} requests in flight); retry after "
                f"{self.retry_after_s} s",
                retry_after_s=self.retry_after_s,
            )
        self._in_flight += 1
        self._per_key[key] = mine + 1
        return AdmissionTicket(self, key)

    def _release(self, key: str) -> None:
        self._in_flight -= 1
        self._per_key[key] -= 1
        if not self._per_key[key]:
            del self._per_key[key]
        self._seen[key] = self._clock()
