"""A fixed list of timed requests as token ids, and the traffic view the cluster reads (pure).

A :class:`RequestSet` is what an oracle and every routing policy are judged on: the
same prompts at the same arrival times. :class:`FixedTraffic` gives it to
:class:`~simulator.cluster.ClusterSim` as one single-turn session per request, in
arrival order (a later turn of a conversation is its own request, sent at its time
with the whole history, as a trace replay sends it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from simulator.traffic import SessionTokens

FRESH_BASE = 10_000_000
"""Token ids from here up are made-up ids unique to one use (answers, unshared tails)."""


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """One request: arrival (seconds), prompt token ids, output length, and its session and turn."""

    t_s: float
    prompt: tuple[int, ...]
    output_tokens: int
    session: int = 0
    turn: int = 0


@dataclass(frozen=True)
class RequestSet:
    """Requests in arrival order, named, with where they come from and what was changed."""

    name: str
    requests: tuple[TimedRequest, ...]
    source: str
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        times = [r.t_s for r in self.requests]
        if times != sorted(times):
            raise ValueError(f"{self.name}: requests must be in arrival order")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def span_s(self) -> float:
        return self.requests[-1].t_s if self.requests else 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    def compressed(self, speed: float) -> RequestSet:
        """The same requests ``speed`` times faster."""
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed:g}")
        requests = tuple(TimedRequest(r.t_s / speed, r.prompt, r.output_tokens, r.session, r.turn)
                         for r in self.requests)
        return RequestSet(self.name, requests, self.source, self.notes)

    def fit(self, max_model_len: int) -> RequestSet:
        """Prompts cut so prompt + output fits ``max_model_len`` (their leading, shared part kept)."""
        cut = 0
        out = []
        for r in self.requests:
            room = max_model_len - r.output_tokens
            if room < 1:
                raise ValueError(f"{self.name}: a request's output ({r.output_tokens}) exceeds max_model_len")
            if len(r.prompt) > room:
                cut += 1
                r = TimedRequest(r.t_s, r.prompt[:room], r.output_tokens, r.session, r.turn)
            out.append(r)
        notes = self.notes + ((f"{cut} prompt(s) cut to max_model_len {max_model_len}",) if cut else ())
        return RequestSet(self.name, tuple(out), self.source, notes)


@dataclass
class FreshIds:
    """Made-up token ids, each range used once (never shared by accident)."""

    _next: itertools.count = field(default_factory=lambda: itertools.count(FRESH_BASE))

    def take(self, n: int) -> tuple[int, ...]:
        start = next(self._next)
        if n > 1:
            self._next = itertools.count(start + n)
        return tuple(range(start, start + n))


class FixedTraffic:
    """A :class:`RequestSet` as the cluster's traffic: request ``i`` is session ``i``."""

    def __init__(self, requests: RequestSet) -> None:
        self.wraps = 0
        self._next = 0
        self.sessions = [SessionTokens((), (r.prompt,), (r.output_tokens,), 0.0) for r in requests.requests]

    def next_session(self) -> int:
        if self._next >= len(self.sessions):
            raise IndexError("every request of the set was sent")
        self._next += 1
        return self._next - 1

    def prompt(self, session: int, turn: int) -> tuple[int, ...]:
        return self.sessions[session].turns[turn]
