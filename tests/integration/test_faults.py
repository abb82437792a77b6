"""A replica failing on the real stack (the direct mode, 2 replicas): one replica's
process frozen (SIGSTOP) and thawed, then under load SIGKILL of one replica's vLLM
EngineCore process, then of one replica actor's process.

Checked: no request hangs (every one is bounded); every whole answer is a 200 (one whose
replica had sent nothing goes to the other replica: through the engine deployment's
handle when the EngineCore died, resent by HAProxy when the replica's process died);
with the EngineCore dead every stream completes with all its tokens (the replica's
process lives on: it resumes its streams under way on the other replica, from the
tokens already sent); with the replica's own process dead, the streams it held are cut
visibly (a closed connection, never an answer that looks
complete); the dead replica's EngineCore does not outlive it. Either way a request sent
0.5 s after the fault is a 200 or, while the survivor holds its admission share, a 429
with Retry-After (or HAProxy's own 502/503, an OpenAI error body); every request sent
once the load has ended is a 200; and Serve brings the deployment back to 2 ready
replicas. The recovery time is printed, not asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from benchmarks.chaos import replica_pids
from tests.integration.metrics_reading import by_label, wait_until
from tests.integration.settings import BASE, MODEL

pytestmark = pytest.mark.integration

MAX_TOKENS = 32
WHOLE, STREAMED = 8, 4
AFTER = 4  # sent 0.5 s after the fault, then again once the load has ended
REQUEST_TIMEOUT_S = 180.0  # a request answered after this counts as hung
RECOVERY_TIMEOUT_S = 300.0  # a new replica takes ~30-90 s to start on 2 busy cores
NOTICE_TIMEOUT_S = 120.0  # Serve's health checks run every 10 s


def ready_replicas(url: str) -> float:
    return by_label(url, "serveout_replicas", "state").get("ready", 0)


def retries(url: str) -> float:
    return sum(by_label(url, "serveout_retries_total", "reason").values())


def resumed(url: str) -> float:
    return sum(by_label(url, "serveout_streams_resumed_total", "reason").values())


def request_body(stream: bool) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Count slowly to one hundred."}],
            "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


@dataclass
class StreamOutcome:
    status: int
    replica: str = ""  # the replica it started on (x-serveout-replica)
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from the usage event (only when it completed)
    error: dict | None = None
    done: bool = False  # saw [DONE]
    broken: bool = False  # the connection broke before [DONE]


@dataclass
class LoadOutcome:
    whole: list[int] = field(default_factory=list)  # HTTP statuses
    streams: list[StreamOutcome] = field(default_factory=list)
    during: list[int] = field(default_factory=list)  # sent 0.5 s after the fault, with the load on


CUT = -1  # the connection closed without an answer (its replica's process died)


async def whole_request(client: httpx.AsyncClient, url: str) -> int:
    try:
        response = await client.post(f"{url}/v1/chat/completions", json=request_body(stream=False))
    except httpx.RemoteProtocolError:
        return CUT
    if response.status_code == 200:
        assert response.json()["usage"]["completion_tokens"] == MAX_TOKENS
    else:
        print(f"whole request: {response.status_code} {dict(response.headers)} {response.text[:400]}")
    if response.status_code != 200:  # an OpenAI error body, whoever wrote it (HAProxy too)
        assert response.headers["content-type"].startswith("application/json"), response.text
        assert response.json()["error"]["message"], response.text
    if response.status_code == 429:  # refused while the survivor holds its share: says when to retry
        assert response.headers.get("retry-after") and response.json()["error"]["code"], response.text
    return response.status_code


async def streamed_request(client: httpx.AsyncClient, url: str, started: "FirstToken") -> StreamOutcome:
    outcome = StreamOutcome(0)
    try:
        await _stream(client, url, started, outcome)
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        print(f"stream cut: {exc!r}")
        outcome.broken = True
    return outcome


@dataclass
class FirstToken:
    """Set when the first stream has a token; ``replica`` is the replica serving it."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    replica: str | None = None

    def set(self, replica: str) -> None:
        if not self.event.is_set():
            self.replica = replica
            self.event.set()


async def _stream(client: httpx.AsyncClient, url: str, started: FirstToken, outcome: StreamOutcome) -> None:
    """Read one stream into ``outcome`` (what it got stays there if the connection breaks)."""
    async with client.stream("POST", f"{url}/v1/chat/completions", json=request_body(stream=True)) as response:
        replica = outcome.replica = response.headers.get("x-serveout-replica", "")
        outcome.status = response.status_code
        if response.status_code != 200:
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                outcome.done = True
                break
            event = json.loads(data)
            if "error" in event:
                outcome.error = event["error"]
                continue
            for choice in event.get("choices", []):
                if choice["delta"].get("content"):
                    started.set(replica)
                    outcome.text += choice["delta"]["content"]
                outcome.finish_reason = choice.get("finish_reason") or outcome.finish_reason
            if event.get("usage"):
                outcome.completion_tokens = event["usage"]["completion_tokens"]


async def load_with_fault(url: str, kill) -> tuple[LoadOutcome, list[int]]:
    """8 whole + 4 streamed requests at once; ``kill(replica)`` once a stream is under
    way, with the replica serving it; then ``AFTER`` more whole requests 0.5 s after the
    fault, and ``AFTER`` more once the load has ended."""
    started = FirstToken()
    async with httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S)) as client:
        whole = [asyncio.create_task(whole_request(client, url)) for _ in range(WHOLE)]
        streams = [asyncio.create_task(streamed_request(client, url, started)) for _ in range(STREAMED)]
        await asyncio.wait_for(started.event.wait(), REQUEST_TIMEOUT_S)
        kill(started.replica)
        await asyncio.sleep(0.5)
        after = [asyncio.create_task(whole_request(client, url)) for _ in range(AFTER)]
        # Bounded: a hung request fails the test here (TimeoutError), never blocks it.
        results = await asyncio.wait_for(asyncio.gather(*whole, *streams), REQUEST_TIMEOUT_S + 30)
        during = await asyncio.wait_for(asyncio.gather(*after), REQUEST_TIMEOUT_S + 30)
        later = await asyncio.wait_for(asyncio.gather(*(whole_request(client, url) for _ in range(AFTER))),
                                       REQUEST_TIMEOUT_S + 30)
    return LoadOutcome(list(results[:WHOLE]), list(results[WHOLE:]), list(during)), list(later)


def check_and_report(url: str, outcome: LoadOutcome, later: list[int], killed_at: float, killed: str,
                     before: tuple[float, float], reference: str, what: str, *, replica_survives: bool) -> None:
    # A whole answer is sent in one piece at its end: one whose replica died before (its
    # engine, or its whole process: HAProxy sees an empty response) goes to the other one.
    assert outcome.whole == [200] * WHOLE, f"whole answers after {what}: {outcome.whole}"
    # With the load still on, the surviving replica may hold its whole admission share
    # (12 of 24: HAProxy resends the dead one's unanswered requests to it): a 429 with
    # Retry-After then. A dead replica process: until Serve notices (seconds), HAProxy
    # may be told to send a request there and answer its own 502 or 503 (an OpenAI error
    # body) once its retries are spent (docs/serving.md, "When an engine replica dies";
    # the SDK retries a 5xx).
    allowed = {200, 429} if replica_survives else {200, 429, 502, 503}
    assert set(outcome.during) <= allowed, f"requests sent 0.5 s after {what}: {outcome.during}"
    assert later == [200] * AFTER, f"requests sent after {what}, once the load ended: {later}"
    for stream in outcome.streams:
        if stream.broken:  # only a dead replica process cannot say why
            assert not replica_survives, stream
            continue
        assert stream.status == 200 and stream.done, stream
        if stream.finish_reason == "error":  # says why, in-band; not when the replica lives to resume it
            assert stream.error is not None and not replica_survives, stream
        else:  # completed: every token it was asked for, not silently cut short
            assert stream.finish_reason == "length" and stream.completion_tokens == MAX_TOKENS, stream
    # (Read for the report: the dead replica's own counts may leave /metrics with it.)
    retried, resumed_streams = retries(url) - before[0], resumed(url) - before[1]
    on_killed = [s for s in outcome.streams if s.replica == killed]
    assert on_killed, "the stream that set off the fault was on the killed replica"
    if replica_survives:  # its streams went on on the other replica: every token once, in order
        assert all(s.finish_reason == "length" for s in on_killed), on_killed
    else:  # they died with its process: cut, visibly
        assert all(s.broken for s in on_killed), on_killed
    for stream in outcome.streams:  # greedy: resumed or not, the answer the model gives
        assert stream.broken or stream.finish_reason == "error" or stream.text == reference, (stream, reference)
    # Serve first marks the dead replica (ready < 2; skipped if it already did), then
    # a new one becomes ready.
    noticed = wait_until(lambda: ready_replicas(url) < 2, timeout_s=NOTICE_TIMEOUT_S, period_s=0.5)
    noticed_s = time.monotonic() - killed_at
    assert noticed, f"Serve still counted 2 ready replicas {NOTICE_TIMEOUT_S:.0f} s after {what}"
    recovered = wait_until(lambda: ready_replicas(url) == 2, timeout_s=RECOVERY_TIMEOUT_S, period_s=1.0)
    recovery_s = time.monotonic() - killed_at
    errors = sum(s.finish_reason == "error" for s in outcome.streams)
    print(f"\n{what}: whole answers {sorted(outcome.whole)}, sent during {sorted(outcome.during)}; "
          f"retried {retried:g} requests, resumed {resumed_streams:g} streams, {errors}/{STREAMED} streams "
          f"ended with an error; "
          f"Serve counted the replica gone after {noticed_s:.1f} s, 2 replicas ready again after "
          f"{recovery_s:.1f} s")
    assert recovered, f"Serve did not replace the replica within {RECOVERY_TIMEOUT_S:.0f} s after {what}"


def run_fault(stack, choose_pid, what: str, *, replica_survives: bool) -> None:
    config = stack.ensure(BASE)
    url = stack.url
    assert wait_until(lambda: ready_replicas(url) == 2, timeout_s=RECOVERY_TIMEOUT_S, period_s=1.0)
    by_replica = replica_pids(config.app_name)
    before = retries(url), resumed(url)
    reference = httpx.post(f"{url}/v1/chat/completions", json=request_body(stream=False), timeout=120)
    reference = reference.json()["choices"][0]["message"]["content"]
    killed_at = 0.0
    pids: dict = {}

    def kill(replica: str) -> None:  # the replica a running stream is on: never an idle one
        nonlocal killed_at, pids
        pids = by_replica[replica]
        killed_at = time.monotonic()
        os.kill(choose_pid(pids), signal.SIGKILL)

    try:
        outcome, later = asyncio.run(load_with_fault(url, kill))
        check_and_report(url, outcome, later, killed_at, pids["replica_id"], before, reference, what,
                         replica_survives=replica_survives)
    finally:
        outlived = reap_orphans(pids["engine_core"]) if pids else []
    assert not outlived, f"{what}: EngineCore {outlived} outlived its replica"


def reap_orphans(engine_core_pids: list[int]) -> list[int]:
    """The EngineCore processes that outlived their replica (its process guard kills
    them within a second): killed here, so the next tests keep their memory."""
    outlived = []
    time.sleep(2.0)
    for pid in engine_core_pids:
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE or "EngineCore" not in " ".join(
                    [process.name(), *process.cmdline()]):
                continue  # gone (or the pid was reused)
            outlived.append(pid)
            process.kill()
        except psutil.Error:
            continue
    return outlived


FROZEN_S = 5.0  # HAProxy checks each replica every second and marks it down after 2 failures


def test_a_frozen_replica_leaves_routing_and_new_requests_go_to_the_other(stack):
    """SIGSTOP of a replica's process (the stand-in for a partitioned node): once HAProxy's
    health checks mark it down, every new request is answered by the other replica and
    none waits on the frozen one; thawed, it is counted ready again. (What it held when
    it froze ends by HAProxy's server timeout, the deadline + 30 s: measured by
    ``benchmarks.chaos --faults hung-replica``, too long for the suite.)"""
    config = stack.ensure(BASE)
    url = stack.url
    assert wait_until(lambda: ready_replicas(url) == 2, timeout_s=RECOVERY_TIMEOUT_S, period_s=1.0)
    (frozen, pids), (other, _) = replica_pids(config.app_name).items()
    os.kill(pids["replica"], signal.SIGSTOP)
    try:
        time.sleep(FROZEN_S)
        with httpx.Client(timeout=60) as client:  # a request sent to the frozen one would time out here
            answers = [client.post(f"{url}/v1/chat/completions", json=request_body(False)) for _ in range(AFTER)]
    finally:
        os.kill(pids["replica"], signal.SIGCONT)
    assert [a.status_code for a in answers] == [200] * AFTER, [a.text[:200] for a in answers]
    assert {a.headers.get("x-serveout-replica") for a in answers} == {other}, frozen
    assert wait_until(lambda: ready_replicas(url) == 2, timeout_s=NOTICE_TIMEOUT_S, period_s=1.0)


def test_sigkill_of_an_engine_core_process(stack):
    def engine_core(pids: dict) -> int:
        assert len(pids["engine_core"]) == 1, pids
        return pids["engine_core"][0]

    run_fault(stack, engine_core, "SIGKILL of one replica's EngineCore", replica_survives=True)


def test_sigkill_of_a_replica_actor_process(stack):
    run_fault(stack, lambda pids: pids["replica"], "SIGKILL of one replica actor", replica_survives=False)
