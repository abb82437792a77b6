"""Shared state of one stage inside the load generator (gevent-free, unit-testable).

Every user greenlet shares one :class:`RunContext`: it hands out sessions, open-loop
arrival slots and the request budget, and decides when issuing stops (duration reached,
request budget spent, schedule exhausted). Greenlets switch only at I/O, so plain
counters are safe.

A worker of a distributed stage holds its share (its arrivals, its part of the budget)
and numbers requests, users and sessions ``slot + slots * n``, so that ids stay unique
across the workers; its stage clock's zero is the master's, given as a Unix time.

``paired`` (a trace replay): arrival ``i`` sends session ``i`` of the plan, never another
and never twice, so each request leaves at its own recorded time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from loadtest.analysis.records import RequestRecord
from loadtest.workloads.base import Session, WorkloadPlan


class RunContext:
    """Pacing and bookkeeping for one stage; ``clock`` is injectable for tests."""

    def __init__(
        self,
        *,
        plan: WorkloadPlan,
        arrivals: Sequence[float] | None,
        max_requests: int | None,
        load_duration_s: float | None,
        stage: int = 0,
        slot: int = 0,
        slots: int = 1,
        paired: bool = False,
        cancel: tuple[float, float] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if paired and (arrivals is None or len(arrivals) > len(plan.sessions)):
            raise ValueError("a paired stage needs one session per arrival")
        self.plan = plan
        self.arrivals = arrivals
        self.max_requests = max_requests
        self.load_duration_s = load_duration_s
        self.stage = stage
        self.slot = slot
        self.slots = slots
        self.paired = paired
        self.cancel = cancel
        self.seed = seed
        self.clock = clock
        self.t0 = clock()
        self.t0_unix = time.time()
        self.issued = 0
        self.completed = 0
        self.in_flight = 0
        self.session_wraps = 0
        self.active_sessions = 0
        self._next_session = 0
        self._next_arrival = 0
        self._next_user = 0
        self._sessions_started = 0
        self.last_arrival_s = 0.0  # the latest arrival taken (a user may still be waiting for it)
        self._stopped = False

    def start(self) -> None:
        """Set the stage clock's zero (just before users start)."""
        self.t0 = self.clock()
        self.t0_unix = time.time()

    def start_at(self, t0_unix: float) -> None:
        """Set the stage clock's zero to a Unix time (a distributed stage's shared zero).

        Both clocks are read back to back, so on one machine every worker's zero agrees
        within microseconds; across machines, within the offset of their wall clocks.
        """
        self.t0 = self.clock() + (t0_unix - time.time())
        self.t0_unix = t0_unix

    def now(self) -> float:
        """Seconds on the stage clock (negative before its zero)."""
        return self.clock() - self.t0

    @property
    def open_loop(self) -> bool:
        return self.arrivals is not None

    def user_index(self) -> int:
        self._next_user += 1
        return self.slot + self.slots * (self._next_user - 1)

    def next_index(self) -> int:
        """The index of the plan's next session, cycling (and counting wraps) when exhausted."""
        if self._next_session >= len(self.plan.sessions):
            self._next_session = 0
            self.session_wraps += 1
        self._next_session += 1
        return self._next_session - 1

    def next_session(self) -> Session:
        """The next session of the plan (see :meth:`next_index`)."""
        return self.plan.sessions[self.next_index()]

    def take_arrival(self) -> float | None:
        """The next scheduled start (stage clock), or ``None`` when issuing is over."""
        taken = self.take_scheduled()
        return None if taken is None else taken[0]

    def take_scheduled(self) -> tuple[float, int | None] | None:
        """The next scheduled start and, paired, the index of the session bound to it
        (``None``: the next of the pool); ``None`` when issuing is over (for good)."""
        assert self.arrivals is not None
        if not self.issuing():
            return None
        index = self._next_arrival
        at = float(self.arrivals[index])
        if self.load_duration_s is not None and at >= self.load_duration_s:
            return None
        self._next_arrival += 1
        self.last_arrival_s = at
        return at, (index if self.paired else None)

    def session_number(self) -> int:
        """A number for the session starting now, unique in the stage (across workers)."""
        self._sessions_started += 1
        return self.slot + self.slots * (self._sessions_started - 1)

    def _budget_left(self) -> bool:
        if self._stopped:
            return False
        if self.max_requests is not None and self.issued >= self.max_requests:
            return False
        return self.load_duration_s is None or self.now() < self.load_duration_s

    def issuing(self) -> bool:
        """Whether new sessions may still start (once ``False``, never ``True`` again)."""
        if not self._budget_left():
            return False
        return self.arrivals is None or self._next_arrival < len(self.arrivals)

    def session_started(self) -> None:
        self.active_sessions += 1

    def session_ended(self) -> None:
        self.active_sessions -= 1

    def take_request(self) -> int | None:
        """Claim one request from the budget: its id, or ``None`` when issuing is over."""
        if not self._budget_left():
            return None
        self.issued += 1
        self.in_flight += 1
        return self.slot + self.slots * (self.issued - 1)

    def cancel_after(self, request_id: int) -> float | None:
        """How long after sending the client abandons request ``request_id`` (``None``:
        never); the same requests for the same seed, wherever they are sent."""
        if self.cancel is None:
            return None
        fraction, after_s = self.cancel
        return after_s if unit_hash(self.seed, request_id) < fraction else None

    def finish(self, record: RequestRecord) -> None:
        """A claimed request is over (its record is written by the events listener)."""
        del record
        self.in_flight -= 1
        self.completed += 1

    def stop(self) -> None:
        """Stop issuing (in-flight requests continue)."""
        self._stopped = True

    def done(self) -> bool:
        """Nothing will be issued any more and nothing is in flight or mid-session."""
        return not self.issuing() and self.in_flight == 0 and self.active_sessions == 0


def unit_hash(seed: int, key: int) -> float:
    """A number in [0, 1) from ``(seed, key)``, uniform over keys (splitmix64)."""
    x = (seed * 0x9E3779B97F4A7C15 + key + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((x ^ (x >> 31)) >> 11) / float(1 << 53)
