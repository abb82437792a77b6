"""The null engine: chunking, pacing (on a fake clock), usage, abort and the concurrency cap."""

import asyncio
import subprocess
import sys

import pytest

from serving.config.model_spec import EngineSettings
from serving.config.stack import NullBackend
from serving.engine.null_engine import NullEngine, Slots, chunk_sizes, token_due_s
from serving.engine.protocol import GenerationChunk, GenerationRequest, SamplingSettings
from serving.errors import ReplicaFailedError
from tests.fakes import FakeClock

BOUND_S = 10.0  # every asyncio test is bounded; none asserts on speed


class GatedSleep:
    """A sleep that holds every stream until ``open`` is called (a stream stays running)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        await self.gate.wait()


def request(max_tokens=4, n=1, prompt=(1, 2, 3), rid="r") -> GenerationRequest:
    return GenerationRequest(request_id=rid, prompt_token_ids=prompt,
                             sampling=SamplingSettings(max_tokens=max_tokens, n=n, stop=(" tok",)))


def engine(tokens_per_s=0.0, ttft_s=0.0, max_num_seqs=8, stream_interval=1, **kw) -> NullEngine:
    return NullEngine(NullBackend(tokens_per_s=tokens_per_s, ttft_s=ttft_s),
                      EngineSettings(max_num_seqs=max_num_seqs, stream_interval=stream_interval), "replica-1", **kw)


async def collect(eng: NullEngine, req: GenerationRequest) -> list[GenerationChunk]:
    return [chunk async for chunk in eng.generate(req)]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, BOUND_S))


async def until(predicate) -> None:
    """Let the other tasks run until ``predicate()`` holds (bounded by ``run``'s timeout)."""
    while not predicate():
        await asyncio.sleep(0)


@pytest.mark.parametrize(("max_tokens", "interval", "sizes"), [
    (5, 1, [1, 1, 1, 1, 1]), (10, 4, [1, 4, 4, 1]), (9, 4, [1, 4, 4]), (1, 4, [1]), (0, 1, [0]),
])
def test_chunks_are_the_first_token_alone_then_stream_interval_like_vllm(max_tokens, interval, sizes):
    assert chunk_sizes(max_tokens, interval) == sizes


def test_tokens_are_due_after_ttft_then_one_per_period():
    paced = NullBackend(tokens_per_s=10, ttft_s=0.5)
    assert [token_due_s(i, paced) for i in range(3)] == pytest.approx([0.5, 0.6, 0.7])
    assert token_due_s(99, NullBackend(ttft_s=0.2)) == 0.2  # 0 tokens/s: as fast as possible


def test_a_stream_is_max_tokens_words_paced_on_schedule_with_honest_usage():
    clock = FakeClock(100.0)
    eng = engine(tokens_per_s=10, ttft_s=0.5, clock=clock, sleep=clock.async_sleep)
    chunks = run(collect(eng, request(max_tokens=4, prompt=(5, 6, 7, 8, 9))))
    assert clock.wakes == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert [c.deltas[0].text for c in chunks] == [" tok"] * 4
    assert [c.completion_tokens for c in chunks] == [1, 2, 3, 4]
    assert {c.prompt_tokens for c in chunks} == {5}
    assert [c.deltas[0].finish_reason for c in chunks] == [None, None, None, "length"]  # stop ignored
    assert [c.finished for c in chunks] == [False, False, False, True]
    assert {c.replica_id for c in chunks} == {"replica-1"}
    stats = eng.stats()
    assert (stats.prompt_tokens, stats.generation_tokens, stats.queue_depth) == (5, 4, 0)


def test_n_choices_advance_together_in_stream_interval_chunks():
    clock = FakeClock(100.0)
    eng = engine(tokens_per_s=100, stream_interval=3, clock=clock, sleep=clock.async_sleep)
    chunks = run(collect(eng, request(max_tokens=7, n=2)))
    assert [[d.num_tokens for d in c.deltas] for c in chunks] == [[1, 1], [3, 3], [3, 3]]
    assert clock.wakes == pytest.approx([0.0, 0.03, 0.06])  # each chunk when its last token is due
    for index in (0, 1):
        text = "".join(d.text for c in chunks for d in c.deltas if d.index == index)
        assert text == " tok" * 7
    assert chunks[-1].completion_tokens == 14 and eng.stats().generation_tokens == 14
    assert [d.finish_reason for d in chunks[-1].deltas] == ["length", "length"]


def test_as_fast_as_possible_streams_take_turns():
    eng = engine()
    order: list[str] = []

    async def consume(rid: str) -> None:
        async for _ in eng.generate(request(max_tokens=5, rid=rid)):
            order.append(rid)

    async def both() -> None:
        await asyncio.gather(consume("a"), consume("b"))

    run(both())
    assert sorted(order) == ["a"] * 5 + ["b"] * 5
    assert order.index("b") < len(order) - order[::-1].index("a") - 1  # b started before a ended


def test_the_concurrency_cap_queues_and_reports_waiting_and_running():
    async def scenario() -> None:
        sleep = GatedSleep()
        eng = engine(tokens_per_s=1, max_num_seqs=2, sleep=sleep)
        tasks = [asyncio.create_task(collect(eng, request(max_tokens=3, rid=str(i)))) for i in range(3)]
        await until(lambda: eng.stats().queue_depth == 3)
        assert (eng.stats().running, eng.stats().waiting) == (2, 1)
        sleep.gate.set()
        results = await asyncio.gather(*tasks)
        assert [len(chunks) for chunks in results] == [3, 3, 3]
        assert (eng.stats().running, eng.stats().waiting) == (0, 0)
        assert eng.stats().generation_tokens == 9

    run(scenario())


def test_closing_a_stream_aborts_it_and_frees_its_slot_for_a_waiter():
    async def scenario() -> None:
        eng = engine(max_num_seqs=1)
        first = eng.generate(request(max_tokens=100, rid="first"))
        assert (await anext(first)).completion_tokens == 1
        await anext(first)
        waiter = asyncio.create_task(collect(eng, request(max_tokens=3, rid="second")))
        await until(lambda: eng.stats().waiting == 1)
        await first.aclose()  # what Serve does when the client goes away
        assert eng.stats().generation_tokens == 2
        assert len(await waiter) == 3
        assert eng.stats().queue_depth == 0

    run(scenario())


def test_cancelling_a_waiting_request_leaves_the_queue():
    async def scenario() -> None:
        sleep = GatedSleep()
        eng = engine(tokens_per_s=1, max_num_seqs=1, sleep=sleep)
        running = asyncio.create_task(collect(eng, request(max_tokens=2)))
        waiting = asyncio.create_task(collect(eng, request(max_tokens=2)))
        await until(lambda: eng.stats().queue_depth == 2)
        waiting.cancel()
        await until(lambda: eng.stats().waiting == 0)
        assert eng.stats().running == 1
        sleep.gate.set()
        assert len(await running) == 2
        assert eng.stats().queue_depth == 0 and eng.stats().generation_tokens == 2

    run(scenario())


def test_a_slot_handed_to_a_waiter_cancelled_before_it_ran_is_passed_on():
    async def scenario() -> None:
        slots = Slots(1)
        await slots.acquire()
        waiter = asyncio.create_task(slots.acquire())
        await until(lambda: slots.waiting == 1)
        slots.release()  # hands the slot to the waiter...
        waiter.cancel()  # ...which is cancelled before it wakes
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (slots.running, slots.waiting) == (0, 0)
        await slots.acquire()  # the slot is free again
        assert slots.running == 1

    run(scenario())


def test_the_null_engine_never_dies_and_is_healthy():
    eng = engine()
    assert eng.dead is False
    run(eng.check_health())
    error = eng.dead_error()
    assert isinstance(error, ReplicaFailedError) and error.reason == "engine_dead"


def test_the_null_engine_module_does_not_import_vllm():
    code = ("import sys, serving.engine.null_engine; "
            "sys.exit(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')) != [])")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
