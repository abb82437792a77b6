"""Admission control: a hard bound on the requests a gateway holds for one model, with
priority classes, shared between API keys by the tokens they were served.

Past the bound a request is refused at once with :class:`OverloadedError` (429 +
Retry-After) instead of queueing: queue length and memory stay bounded under any
load, and clients get a fast, explicit signal to back off.

**Priority classes** (:class:`~serving.config.priority.PrioritySpec`, highest first).
A request of class ``c`` is admitted only while the requests in flight (every class
together) are below ``c``'s ceiling: ``limit`` for a class of ``max_share`` 1.0, else
``max(1, floor(max_share * min(limit, slots)))``, where ``slots`` is the engine's
``max_num_seqs`` when admission runs inside the engine replica (the direct mode; else
``limit``). So under rising load the lowest class is refused first (reason
``priority``), then the next, and the top class only at the bound itself (reason
``overloaded``); a lower class never holds more than its share of the engine's
sequences, which stay free for the classes above (vLLM does not preempt a running
request for a waiting one of higher priority). A lower class always keeps one slot.

**Token-fair sharing within a class** (the Virtual Token Counter of Sheng et al., OSDI
2024, adapted to a bound that refuses instead of queueing). Each key has a counter per
class: a request adds ``input_token_cost * prompt tokens`` when tokenised
(:meth:`AdmissionTicket.charge`) and ``output_token_cost * output tokens`` when it ends
(:meth:`AdmissionTicket.release`), both divided by the key's weight. A key is *active*
in a class while it has requests of it in flight or was seen (arrival, finish) within
``active_window_s``; a key that becomes active is lifted to the lowest counter of the
class's active keys, so idle time banks no credit. A key is *favoured* when it is alone
in its class or its counter is more than ``tolerance`` below every other active key's.

The guarantee, per class: a favoured key is refused only when the class has no room
at all (its ceiling is reached). Any other key is also refused (reason ``fair_share``)
(a) past its equal part, ``ceil(ceiling / active keys)`` requests in flight: the room
kept for the keys served less, and (b) for ``retry_after_s + 1`` seconds after a key served more than ``tolerance``
less than it was refused for lack of room: the slots that free up meanwhile go to
that key's retries (a client that honours Retry-After is back within that time). Nothing else is
refused: a key alone may use the whole class ceiling, and the bound is never held
empty while the keys that want it are all refused by (a) or (b) only for the keys
served less that hold or await it. Output tokens count when a request ends, so a
long stream weighs on its key from then on (the bound on the counters' spread is
VTC's, plus the requests in flight).

Several gateway replicas: the bound and every key's concurrency are app-wide; each of
N replicas admits ``floor(bound / N)`` (at least 1), see :func:`share_of`; classes and
counters are per replica.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from serving.admission.api_keys import ANONYMOUS
from serving.config.priority import PrioritySpec
from serving.errors import OverloadedError, RateLimitedError


def share_of(limit: int, sharers: int) -> int:
    """One process's part of an app-wide ``limit`` shared by ``sharers`` (>= 1): the
    processes that run admission (the engine replicas in the direct mode, the gateway
    replicas in the separate mode)."""
    return max(1, limit // max(1, sharers))


class AdmissionTicket:
    """Held while a request is in flight; releasing twice is harmless."""

    def __init__(self, controller: "AdmissionController", key: str, klass: str) -> None:
        self._controller: AdmissionController | None = controller
        self.key, self.klass = key, klass

    def charge(self, prompt_tokens: int) -> None:
        """Add the request's prompt to its key's counter (once it is tokenised)."""
        if self._controller is not None:
            self._controller._charge(self.klass, self.key, prompt_tokens, 0)

    def release(self, output_tokens: int = 0) -> None:
        """Free the slot and add the tokens generated to the key's counter."""
        if self._controller is not None:
            self._controller._charge(self.klass, self.key, 0, output_tokens)
            self._controller._release(self.key, self.klass)
            self._controller = None


class AdmissionController:
    """Counts in-flight requests against ``limit`` (this replica's share of the app's
    ``app_limit``), overall, per class and per key."""

    def __init__(self, limit: int, *, retry_after_s: int = 1, active_window_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, sharers: int = 1,
                 priority: PrioritySpec = PrioritySpec(), slots: int | None = None) -> None:
        if limit < 1:
            raise ValueError("admission limit must be >= 1")
        self.app_limit, self.sharers, self.slots = limit, sharers, slots
        self.limit = share_of(limit, sharers)
        self.retry_after_s, self.active_window_s, self.priority = retry_after_s, active_window_s, priority
        self._clock = clock
        self._in_flight = 0
        self._per_key: dict[str, int] = {}
        self._per_class: dict[str, int] = {}
        self._held: dict[tuple[str, str], int] = {}  # (class, key) -> in flight
        self._seen: dict[tuple[str, str], float] = {}  # (class, key) -> last arrival or finish
        self._counter: dict[tuple[str, str], float] = {}  # (class, key) -> weighted tokens served
        self._weight: dict[str, float] = {}
        self._wanting: dict[tuple[str, str], float] = {}  # refused for lack of room, when

    def reconfigure(self, limit: int, *, retry_after_s: int, active_window_s: float,
                    priority: PrioritySpec | None = None) -> None:
        """A new app-wide bound and its settings, for new requests (those in flight stay)."""
        if limit < 1:
            raise ValueError("admission limit must be >= 1")
        self.app_limit, self.retry_after_s, self.active_window_s = limit, retry_after_s, active_window_s
        self.limit = share_of(limit, self.sharers)
        if priority is not None:
            self.priority = priority

    def retain_keys(self, names: Iterable[str]) -> None:
        """Forget keys that can no longer send (the keys file changed)."""
        keep = set(names)
        for table in (self._seen, self._counter, self._wanting):
            for entry in [e for e in table if e[1] not in keep and not self._held.get(e)]:
                del table[entry]
        for key in [k for k in self._weight if k not in keep and not self._per_key.get(k)]:
            del self._weight[key]

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

    def in_flight_of_class(self, klass: str) -> int:
        return self._per_class.get(klass, 0)

    def counter(self, key: str, klass: str | None = None) -> float:
        """``key``'s weighted tokens served in ``klass`` (default: the default class)."""
        return self._counter.get((klass or self.priority.default_class, key), 0.0)

    def ceiling(self, klass: str) -> int:
        """The in-flight count (every class) below which ``klass`` is admitted."""
        share = self.priority.classes[self.priority.rank(klass)].max_share
        if share >= 1.0:
            return self.limit
        return max(1, math.floor(share * min(self.limit, self.slots or self.limit)))

    def active_keys(self, klass: str | None = None) -> int:
        """Keys active in ``klass`` (default: the default class); forgets stale ones."""
        return len(self._active(klass or self.priority.default_class))

    def fair_share(self, active: int | None = None, klass: str | None = None) -> int:
        """The most requests a key that is ahead may hold while ``active`` keys (default:
        now) are active in ``klass``: its equal part of the class's ceiling."""
        klass = klass or self.priority.default_class
        return math.ceil(self.ceiling(klass) / max(1, len(self._active(klass)) if active is None else active))

    def admit(self, key: str = ANONYMOUS, *, concurrency: int | None = None, klass: str | None = None,
              weight: float = 1.0) -> AdmissionTicket:
        """A ticket for one request of ``key`` in ``klass`` (default: the default class),
        or a 429 error: the key's own ``concurrency`` (:class:`RateLimitedError`), the
        class's ceiling, fair sharing, or the bound."""
        klass = klass or self.priority.default_class
        now, entry = self._clock(), (klass, key)
        self._weight[key] = weight
        mine = self.in_flight_of(key)
        if concurrency is not None and mine >= share_of(concurrency, self.sharers):
            raise RateLimitedError(
                f"this API key may have {concurrency} request(s) in flight at once"
                + (f" ({share_of(concurrency, self.sharers)} through each of {self.sharers} "
                   "gateway replicas)" if self.sharers > 1 else "")
                + "; retry after one finishes", retry_after_s=self.retry_after_s, reason="concurrency")
        active = self._active(klass)  # one pass over the class's keys per request
        if key not in active:  # it becomes active: from the lowest active counter (no banked credit)
            if active:
                self._counter[entry] = max(self._counter.get(entry, 0.0),
                                           min(self._counter.get((klass, k), 0.0) for k in active))
            active.append(key)
        self._seen[entry] = now
        ceiling = self.ceiling(klass)
        if self._in_flight >= ceiling:
            self._wanting[entry] = now
            raise self._full(klass, ceiling)
        mine_c = self._counter.get(entry, 0.0)
        others = [self._counter.get((klass, k), 0.0) for k in active if k != key]
        if others and mine_c >= min(others) - self.priority.tolerance:  # not the least served
            share = math.ceil(ceiling / len(active))
            behind = self._waiting_behind(klass, mine_c, now)
            if self._held.get(entry, 0) >= share or behind:
                raise OverloadedError(
                    f"the server is busy and this API key was not served less than the other active keys "
                    f"of class `{klass}` ({len(active)} active; "
                    + (f"key `{behind}`, served less, waits for a slot" if behind else
                       f"it already holds its equal part, {share} of {ceiling} requests")
                    + f"); retry after {self.retry_after_s} s", retry_after_s=self.retry_after_s,
                    reason="fair_share")
        self._in_flight += 1
        self._per_key[key] = mine + 1
        self._per_class[klass] = self._per_class.get(klass, 0) + 1
        self._held[entry] = self._held.get(entry, 0) + 1
        return AdmissionTicket(self, key, klass)

    def _full(self, klass: str, ceiling: int) -> OverloadedError:
        if ceiling >= self.limit:
            return OverloadedError(
                f"the server is at capacity ({self.limit} requests in flight); retry after "
                f"{self.retry_after_s} s", retry_after_s=self.retry_after_s)
        return OverloadedError(
            f"the server is busy: requests of priority class `{klass}` may fill {ceiling} of its "
            f"{self.limit} slots, the rest is kept for higher classes; retry after {self.retry_after_s} s",
            retry_after_s=self.retry_after_s, reason="priority")

    def _active(self, klass: str) -> list[str]:
        now, keys = self._clock(), []
        for entry, seen in list(self._seen.items()):
            if entry[0] != klass:
                continue
            if not self._held.get(entry) and now - seen > self.active_window_s:
                del self._seen[entry]
                self._wanting.pop(entry, None)
            else:
                keys.append(entry[1])
        return keys

    def _waiting_behind(self, klass: str, mine: float, now: float) -> str | None:
        """A key of ``klass`` refused for lack of room lately, served less than ``mine``."""
        for (c, key), at in self._wanting.items():
            if (c == klass and now - at <= self.retry_after_s + 1.0
                    and self._counter.get((c, key), 0.0) < mine - self.priority.tolerance):
                return key
        return None

    def _charge(self, klass: str, key: str, prompt: int, output: int) -> None:
        cost = prompt * self.priority.input_token_cost + output * self.priority.output_token_cost
        if cost:
            self._counter[klass, key] = self._counter.get((klass, key), 0.0) + cost / self._weight.get(key, 1.0)

    def _release(self, key: str, klass: str) -> None:
        self._in_flight -= 1
        for table, name in ((self._per_key, key), (self._per_class, klass), (self._held, (klass, key))):
            table[name] -= 1
            if not table[name]:
                del table[name]
        self._seen[klass, key] = self._clock()
