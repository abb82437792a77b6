"""Fakes shared across the unit tests: each stands in for one real thing, named in its docstring.

A fake one test module needs stays in that module; fakes of one area stay beside its
tests (tests/unit/simulator/fakes.py, tests/unit/sweep/sweep_fakes.py,
tests/unit/loadtest/fake_openai_server.py).
"""

from __future__ import annotations

import asyncio

from serving.engine.protocol import GenerationChunk, GenerationDelta, GenerationRequest


class FakeClock:
    """Stands in for ``time.monotonic`` (and ``time.sleep``, ``asyncio.sleep``): time moves only when told.

    Called, it reads ``now``, which a test sets; :meth:`sleep` (for ``time.sleep``) and
    :meth:`async_sleep` (for ``asyncio.sleep``) advance it exactly and record each
    wake-up in ``wakes``, counted from ``start``.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.start = self.now = start
        self.wakes: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.wakes.append(round(self.now - self.start, 9))

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)  # as a real sleep does, let the other tasks run


class FakeEngineClient:
    """Stands in for the gateway's engine client (serving.gateway.engine_client.EngineClient): no Ray, no engine.

    Streams ``words`` one per chunk, ``delay_s`` apart, to each of the request's ``n``
    choices; ``max_tokens`` cuts them (finish reason ``length``, else ``stop``). Keeps the
    last request it got (``last``) and counts the streams closed (``closed``).
    """

    retries_elsewhere = True

    def __init__(self, words: tuple[str, ...] = ("a", "b", "c"), delay_s: float = 0.0) -> None:
        self.words, self.delay_s = words, delay_s
        self.last: GenerationRequest | None = None
        self.closed = 0

    async def stream(self, request: GenerationRequest, *, avoid_replica: str | None = None):
        self.last = request
        s = request.sampling
        words = self.words[: s.max_tokens]
        try:
            for i, word in enumerate(words):
                await asyncio.sleep(self.delay_s)
                reason = None if i < len(words) - 1 else "length" if len(words) == s.max_tokens else "stop"
                deltas = tuple(GenerationDelta(c, word, 1, reason) for c in range(s.n))
                yield GenerationChunk(deltas, "fake", len(request.prompt_token_ids), (i + 1) * s.n,
                                      finished=reason is not None)
        finally:
            self.closed += 1
