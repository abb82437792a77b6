"""The null engine: the engine protocol with no model, to measure the serving path alone.

It answers every request with ``max_tokens`` copies of a fixed short word per choice
(``NullBackend.token_text``, `` tok`` by default, so a client can count them), the
first ``ttft_s`` after the request starts running, then ``tokens_per_s`` per stream
(0 = as fast as possible; tokens follow an absolute schedule, so a late event loop
catches up instead of drifting). It chunks like vLLM's ``stream_interval``: the first
token alone, then ``stream_interval`` tokens per chunk, the rest in the last one; and
like vLLM's output collector, a paced stream whose reader falls behind gets every
token already due in one chunk (as fast as possible: one chunk per event-loop turn).
Every token has the id ``NULL_TOKEN_ID``. Every choice finishes with ``"length"``:
stop strings, EOS and the other sampling fields are ignored (there is no model to stop). Usage is honest: prompt tokens are
the request's token ids, completion tokens what was streamed.

At most ``max_num_seqs`` requests run at once; the rest wait in FIFO order and are
reported as ``waiting`` (the running ones as ``running``), as vLLM's scheduler does,
so routing, queue-depth autoscaling and admission see the same load signals.
Cancelling a stream (Serve does when the client goes away) frees its slot at once.

No vLLM import here: a null replica needs no weights and no engine process.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import nullcontext

from serving.config.adapters import AdapterSpec
from serving.config.model_spec import EngineSettings
from serving.engine.adapter_set import AdapterSet, LoadedAdapter
from serving.config.stack import NullBackend
from serving.engine.protocol import (
    EngineStats,
    GenerationChunk,
    GenerationDelta,
    GenerationRequest,
)
from serving.errors import ReplicaFailedError

NULL_TOKEN_ID = 0  # the id of every token it streams
FINISH_REASON = "length"


def chunk_sizes(max_tokens: int, stream_interval: int) -> list[int]:
    """Tokens per chunk, as vLLM streams them: the first alone, then ``stream_interval``
    at a time, the remainder last (pure). ``max_tokens`` 0 is one empty final chunk."""
    if max_tokens <= 0:
        return [0]
    sizes = [1]
    left = max_tokens - 1
    while left > 0:
        sizes.append(min(stream_interval, left))
        left -= sizes[-1]
    return sizes


def tokens_due(elapsed_s: float, backend: NullBackend) -> int:
    """How many tokens are due ``elapsed_s`` after the request started running (pure;
    paced streams only)."""
    if elapsed_s < backend.ttft_s:
        return 0
    return int((elapsed_s - backend.ttft_s) * backend.tokens_per_s + 1e-9) + 1


def token_due_s(token_index: int, backend: NullBackend) -> float:
    """When token ``token_index`` (0-based) is due, in seconds after the request started
    running (pure): the first at ``ttft_s``, then one every ``1 / tokens_per_s``."""
    if backend.tokens_per_s <= 0:
        return backend.ttft_s
    return backend.ttft_s + token_index / backend.tokens_per_s


class Slots:
    """At most ``limit`` holders at once; the others wait in FIFO order (single event
    loop, no thread safety). A released slot passes straight to the oldest waiter."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.running < self.limit and not self._waiters:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # ``release`` hands its slot over: ``running`` is already counted
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


class NullEngine:
    """A model-free engine (implements :class:`serving.engine.protocol.Engine`).

    ``clock`` and ``sleep`` are the pacing seam (a fake clock in unit tests).
    """

    def __init__(
        self,
        backend: NullBackend,
        settings: EngineSettings,
        replica_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._backend = backend
        self._stream_interval = settings.stream_interval
        self._replica_id = replica_id
        self._clock = clock
        self._sleep = sleep
        self._slots = Slots(settings.max_num_seqs)
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self.adapters = AdapterSet(_nothing_to_check, _nothing_to_do, _nothing_to_do)

    async def set_adapters(self, adapters: tuple[AdapterSpec, ...]) -> None:
        """Serve these adapter names (no weights: every answer is the same tokens)."""
        await self.adapters.apply(adapters)

    @property
    def dead(self) -> bool:
        """Never: there is no engine process to die."""
        return False

    def dead_error(self) -> ReplicaFailedError:
        return ReplicaFailedError(
            f"the null engine of replica {self._replica_id} died", replica_id=self._replica_id,
            reason="engine_dead")

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream the request's chunks once a slot is free; closing or cancelling the
        iteration aborts it (its slot is freed)."""
        with self.adapters.use(request.adapter) if request.adapter else nullcontext():
            async for chunk in self._generate(request):
                yield chunk

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        await self._slots.acquire()
        try:
            n = request.sampling.n
            prompt_tokens = len(request.prompt_token_ids)
            self._prompt_tokens += prompt_tokens
            total = request.sampling.max_tokens
            sizes = chunk_sizes(total, self._stream_interval)
            started = self._clock()
            sent, i = 0, 0
            while i < len(sizes):
                size = sizes[i]
                due = started + token_due_s(max(sent + size - 1, 0), self._backend)
                # Sleeping 0 still yields: an as-fast-as-possible stream never starves the others.
                await self._sleep(max(due - self._clock(), 0.0))
                if self._backend.tokens_per_s > 0 and i > 0:  # a late reader gets every token due
                    ready = min(total, tokens_due(self._clock() - started, self._backend))
                    while i + 1 < len(sizes) and sent + size + sizes[i + 1] <= ready:
                        i += 1
                        size += sizes[i]
                last = i == len(sizes) - 1
                i += 1
                sent += size
                self._generation_tokens += n * size
                deltas = tuple(
                    GenerationDelta(index=index, text=self._backend.token_text * size, num_tokens=size,
                                    finish_reason=FINISH_REASON if last else None,
                                    token_ids=(NULL_TOKEN_ID,) * size)
                    for index in range(n)
                )
                yield GenerationChunk(deltas=deltas, replica_id=self._replica_id,
                                      prompt_tokens=prompt_tokens, completion_tokens=n * sent,
                                      finished=last)
        finally:
            self._slots.release()

    def stats(self) -> EngineStats:
        """Live load (waiting for a slot, running) plus cumulative token counters; no KV
        cache and no prefix cache, so those stay 0."""
        return EngineStats(replica_id=self._replica_id, waiting=self._slots.waiting, running=self._slots.running,
                           prompt_tokens=self._prompt_tokens, generation_tokens=self._generation_tokens,
                           adapters=self.adapters.names)

    async def check_health(self) -> None:
        """Always healthy."""

    def shutdown(self) -> None:
        """Nothing to stop."""


def _nothing_to_check(adapter: AdapterSpec) -> None:
    """The null engine reads no adapter files."""


async def _nothing_to_do(adapter: LoadedAdapter) -> None:
    """The null engine holds no adapter weights."""
