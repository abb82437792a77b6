"""Graceful drain on the real stack, with the official openai client.

1. Scale-down under load: streams running on 2 engine replicas while the app is
   redeployed with 1 (through ``Stack.ensure``, like every other test; the cores per
   rank are fixed, so Serve stops one replica, which is its streams' gateway too, and
   keeps the other). Every stream either completes with all its tokens and a finish
   reason, or ends with an error the client sees; none is cut short silently. The
   stopping replica still had streams running when it began to stop (else the test
   proved nothing), and ``/health`` is 200 afterwards.
2. Shutdown: the gateway is drained (``drain_gateway``, what the owner of the app calls
   before ``serve.shutdown``) while short and long streams run: ``/health`` answers 503
   draining, a new request 503 ``server_draining`` with Retry-After, the short streams
   complete, the long ones are cut at the drain timeout with a ``server_draining`` error.

Durations are printed, not asserted.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import openai
import pytest
from ray import serve

from serving.app_builder import ENGINE_DEPLOYMENT
from serving.gateway.separate import drain_gateway
from tests.integration.metrics_reading import by_label, wait_until
from tests.integration.settings import BASE, MODEL, replicas

pytestmark = pytest.mark.integration

STREAMS = 4
MAX_TOKENS = 256  # ~10-20 s per stream here: still running when the replicas stop
SHORT_TOKENS, LONG_TOKENS = 48, 1800  # a few seconds; far more than DRAIN_S allows
DRAIN_S = 20.0
START_TIMEOUT_S = 180.0  # every stream has its first token by then
END_TIMEOUT_S = 600.0  # a stream still open after this counts as hung


@dataclass
class StreamOutcome:
    max_tokens: int
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from the usage chunk (only when it completed)
    error: openai.APIError | None = None
    ended_at: float = 0.0

    @property
    def verdict(self) -> str:
        """``complete``, ``error`` (one the client sees: an HTTP error status, or
        ``finish_reason: "error"`` then an error event with a code), or ``cut`` (anything
        else: a dropped connection, a missing finish reason, missing tokens)."""
        if self.error is None:
            done = self.finish_reason == "length" and self.completion_tokens == self.max_tokens
            return "complete" if done else "cut"
        if isinstance(self.error, openai.APIStatusError):
            return "error"
        if isinstance(self.error, openai.APIConnectionError):
            return "cut"
        return "error" if self.finish_reason == "error" and self.error.code else "cut"


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


def run_stream(api: openai.OpenAI, max_tokens: int, started: threading.Semaphore) -> StreamOutcome:
    outcome = StreamOutcome(max_tokens)
    first = True
    try:
        stream = api.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Tell me a very long story."}],
            max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True})
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content and first:
                    first = False
                    started.release()
                outcome.finish_reason = choice.finish_reason or outcome.finish_reason
            if chunk.usage is not None:
                outcome.completion_tokens = chunk.usage.completion_tokens
    except openai.APIError as exc:
        outcome.error = exc
    finally:
        if first:
            started.release()  # never let the test wait for a stream that failed early
        outcome.ended_at = time.monotonic()
    return outcome


def start_streams(pool: ThreadPoolExecutor, url: str, token_counts: list[int]):
    """Start one stream per entry and wait until each has its first token."""
    api, started = client(url), threading.Semaphore(0)
    futures = [pool.submit(run_stream, api, n, started) for n in token_counts]
    for _ in futures:
        assert started.acquire(timeout=START_TIMEOUT_S), "a stream got no first token"
    return futures


def ready_replicas(url: str) -> float:
    return by_label(url, "serveout_replicas", "state").get("ready", 0)


def engine_stopping(app_name: str) -> int:
    try:
        states = serve.status().applications[app_name].deployments[ENGINE_DEPLOYMENT].replica_states
    except KeyError:  # between deployments
        return 0
    return sum(n for state, n in states.items() if str(getattr(state, "value", state)) == "STOPPING")


def describe(outcomes: list[StreamOutcome]) -> str:
    return "; ".join(f"{o.verdict}: finish={o.finish_reason} tokens={o.completion_tokens} "
                     f"error={getattr(o.error, 'code', None) or type(o.error).__name__ if o.error else None}"
                     for o in outcomes)


@pytest.mark.timeout(1800)
def test_scaling_down_under_load_loses_no_stream(stack):
    config = stack.ensure(BASE)
    url = stack.url
    assert wait_until(lambda: ready_replicas(url) == 2, timeout_s=300, period_s=1.0)
    first_stopping: list[float] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set() and not first_stopping:
            if engine_stopping(config.app_name):
                first_stopping.append(time.monotonic())
            time.sleep(0.25)

    with ThreadPoolExecutor(STREAMS + 1) as pool:
        futures = start_streams(pool, url, [MAX_TOKENS] * STREAMS)
        watcher = pool.submit(watch)
        redeploy_at = time.monotonic()
        try:
            stack.ensure({**BASE, "replicas": replicas(1)})  # blocks until healthy again
            outcomes = [f.result(timeout=END_TIMEOUT_S) for f in futures]
        finally:
            watching.set()
            watcher.result(timeout=30)
    ended = ", ".join(f"{o.ended_at - redeploy_at:.1f}" for o in outcomes)
    stopping = f"{first_stopping[0] - redeploy_at:.1f} s" if first_stopping else "never"
    print(f"\nscale-down 2 -> 1 under {STREAMS} streams: {describe(outcomes)}; streams ended {ended} s "
          f"after the redeploy began; an engine replica was first seen stopping after {stopping}")
    assert [o.verdict for o in outcomes].count("cut") == 0, describe(outcomes)
    assert first_stopping, "no engine replica was seen stopping"
    assert max(o.ended_at for o in outcomes) > first_stopping[0], \
        "every stream had ended before an engine replica stopped: the drain was not exercised"
    health = httpx.get(f"{url}/health", timeout=10)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})


@pytest.mark.timeout(900)
def test_a_draining_gateway_refuses_new_work_and_bounds_the_rest(stack):
    config = stack.ensure({**BASE, "replicas": replicas(1)})
    url = stack.url
    try:
        with ThreadPoolExecutor(5) as pool:
            futures = start_streams(pool, url, [SHORT_TOKENS, SHORT_TOKENS, LONG_TOKENS, LONG_TOKENS])
            began = time.monotonic()
            draining = pool.submit(drain_gateway, config, DRAIN_S)
            health = wait_until(lambda: _draining_health(url), timeout_s=DRAIN_S, period_s=0.2)
            with pytest.raises(openai.APIStatusError) as refused:
                client(url).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            report = draining.result(timeout=DRAIN_S + 120)
            drained_s = time.monotonic() - began
            outcomes = [f.result(timeout=END_TIMEOUT_S) for f in futures]
    finally:
        stack.forget()  # the replicas stay draining: the next test deploys fresh ones
    print(f"\ndrain of {DRAIN_S:g} s: report {report} after {drained_s:.1f} s; {describe(outcomes)}")
    assert health is not None and health.json() == {"status": "draining"}
    assert refused.value.status_code == 503 and refused.value.code == "server_draining"
    assert int(refused.value.response.headers["retry-after"]) >= 1
    short, long = outcomes[:2], outcomes[2:]
    assert [o.verdict for o in short] == ["complete", "complete"], describe(short)
    for o in long:  # cut at the deadline, and the client is told so
        assert o.verdict == "error" and o.error.code == "server_draining", describe(long)
    assert report["cut"] == len(long) and report["left"] == 0 and report["in_flight"] >= len(long)


def _draining_health(url: str) -> httpx.Response | None:
    response = httpx.get(f"{url}/health", timeout=10)
    return response if response.status_code == 503 else None
