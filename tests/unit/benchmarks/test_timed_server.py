"""The timed server (benchmarks/common/timed_server.py) with the official openai client, and the
fidelity benchmark's truth maths (benchmarks/common/fidelity_truth.py) on hand-made traces."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from benchmarks.common.fidelity_truth import (
    LOADTEST_DEF,
    VLLM_DEF,
    ClientStream,
    delivery_lag,
    in_tolerance,
    latencies,
    not_worse,
    pair_in_order,
    schedule_lateness,
    send_delay,
    time_budget,
    tokens_written_between,
    truth_figures,
)
from benchmarks.common.timed_answers import TOKEN_TEXT, TimedConfig
from benchmarks.common.timed_server import Trace, serve, traces_from_truth

PROMPT = "three short words"


class RunningServer:
    """The timed server on a free loopback port, in a thread with its own event loop."""

    def __init__(self, config: TimedConfig) -> None:
        self.config = config
        self.port: int | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await serve(self.config, 0, ready=self._started, stop=self._stop)

    def _started(self, port: int) -> None:
        self.port = port
        self._ready.set()

    def __enter__(self) -> RunningServer:
        self._thread.start()
        assert self._ready.wait(10), "the timed server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def traces(self) -> list[Trace]:
        return traces_from_truth(httpx.get(f"{self.url}/truth").json())


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with RunningServer(TimedConfig(ttft_s=0.002, itl_s=0.001, eos_after=3)) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    httpx.post(f"{server.url}/truth/reset").raise_for_status()
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def stream_chat(client: openai.OpenAI, max_tokens: int, **extra) -> list:
    return list(client.chat.completions.create(
        model="timed", messages=[{"role": "user", "content": PROMPT}], max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **extra))


def test_a_stream_holds_max_tokens_one_per_chunk_then_usage(client):
    chunks = stream_chat(client, 7)
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert content == [TOKEN_TEXT] * 7
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert chunks[-1].usage.prompt_tokens == len(PROMPT.split())


def test_without_include_usage_a_stream_has_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(model="timed", messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=2, stream=True))
    assert all(c.usage is None for c in chunks) and sum(1 for c in chunks if c.choices[0].delta.content) == 2


def test_a_single_token_stream(client):
    chunks = stream_chat(client, 1)
    assert [c.choices[0].delta.content for c in chunks if c.choices][1:] == [TOKEN_TEXT]
    assert chunks[-1].usage.completion_tokens == 1


def test_whole_answers_chat_and_completions(client):
    chat = client.chat.completions.create(model="timed", messages=[{"role": "user", "content": PROMPT}],
                                          max_completion_tokens=4, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == TOKEN_TEXT * 4 and chat.usage.completion_tokens == 4
    text = client.completions.create(model="timed", prompt="a b", max_tokens=5, extra_body={"ignore_eos": True})
    assert text.choices[0].text == TOKEN_TEXT * 5 and text.usage.prompt_tokens == 2
    assert text.usage.total_tokens == 7


def test_a_streamed_text_completion(client):
    chunks = list(client.completions.create(model="timed", prompt="a b c", max_tokens=3, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == TOKEN_TEXT * 3
    assert chunks[-1].usage.completion_tokens == 3


def test_ignore_eos_is_honoured(client):
    # the fixture's server stops at 3 tokens unless told to ignore end-of-sequence
    natural = client.chat.completions.create(model="timed", messages=[{"role": "user", "content": "x"}], max_tokens=6)
    assert natural.usage.completion_tokens == 3 and natural.choices[0].finish_reason == "stop"
    forced = client.chat.completions.create(model="timed", messages=[{"role": "user", "content": "x"}],
                                            max_tokens=6, extra_body={"ignore_eos": True})
    assert forced.usage.completion_tokens == 6 and forced.choices[0].finish_reason == "length"


def test_refusals_are_openai_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="timed", messages=[{"role": "user", "content": "x"}], max_tokens=0)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="timed", messages=[{"role": "user", "content": "x"}], n=2)


def test_models_health_metrics_and_unknown_routes(server, client):
    assert [m.id for m in client.models.list()] == ["timed"]
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert httpx.get(f"{server.url}/nowhere").status_code == 404
    before = httpx.get(f"{server.url}/metrics").text
    stream_chat(client, 5)
    after = httpx.get(f"{server.url}/metrics").text

    def generated(text: str) -> float:
        return float(next(line for line in text.splitlines() if "generation_tokens_total" in line).split()[-1])

    assert generated(after) - generated(before) == 5
    assert 'vllm:num_requests_running{model_name="timed"} 0' in after


def test_traces_record_every_write_in_order(server, client):
    stream_chat(client, 6, extra_headers={"x-request-id": "req-1"})
    client.chat.completions.create(model="timed", messages=[{"role": "user", "content": PROMPT}], max_tokens=2)
    streamed, whole = server.traces()
    assert streamed.request_id == "req-1" and whole.request_id is None
    assert streamed.stream and streamed.complete and streamed.output_tokens == 6
    assert len(streamed.token_times) == 6
    assert streamed.received < streamed.token_times[0]
    assert streamed.token_times == sorted(streamed.token_times) and streamed.end == streamed.token_times[-1]
    assert not whole.stream and whole.token_times == [] and whole.end > whole.received
    assert whole.prompt_tokens == len(PROMPT.split())


def test_reset_forgets_finished_traces(server, client):
    stream_chat(client, 2)
    assert len(server.traces()) == 1
    assert httpx.post(f"{server.url}/truth/reset").json() == {"cleared": 1}
    assert server.traces() == []


def test_a_client_that_leaves_mid_stream_is_recorded_as_aborted(server, client):
    body = {"model": "timed", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10_000,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
        next(response.iter_lines())
    deadline = time.monotonic() + 10  # bounded wait for the server to see the close; not a timing check
    while not (traces := server.traces())[0].aborted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert traces[0].aborted and not traces[0].complete and traces[0].end is None


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        TimedConfig(ttft_s=-1)


# ---- truth maths on hand-made traces -----------------------------------------------------

def trace(received: float, tokens: list[float], *, request_id: str | None = None) -> Trace:
    return Trace(id=1, endpoint="/v1/chat/completions", stream=True, received=received, request_id=request_id,
                 token_times=tokens, end=tokens[-1], output_tokens=len(tokens))


TRACES = [trace(10.0, [10.1, 10.12, 10.14, 10.16]), trace(11.0, [11.2, 11.21, 11.23])]


def test_loadtest_definition_counts_token_chunks_only():
    lat = latencies(TRACES, LOADTEST_DEF)
    assert lat["ttft"].count == 2 and lat["ttft"].p50 == pytest.approx(0.15)  # (0.1 + 0.2) / 2
    assert lat["itl"].count == 5 and lat["itl"].max == pytest.approx(0.02) and lat["itl"].min == pytest.approx(0.01)
    assert lat["e2e"].max == pytest.approx(0.23) and lat["e2e"].min == pytest.approx(0.16)
    # TPOT = (E2E - TTFT) / (tokens - 1): (0.16 - 0.1) / 3 and (0.23 - 0.2) / 2
    assert sorted([lat["tpot"].min, lat["tpot"].max]) == pytest.approx([0.015, 0.02])


def test_vllm_definition_adds_the_role_chunk_gap():
    lat = latencies(TRACES, VLLM_DEF)
    assert lat["itl"].count == 7 and lat["itl"].min == 0.0  # the role chunk shares token 1's write
    assert lat["ttft"].p50 == latencies(TRACES, LOADTEST_DEF)["ttft"].p50


def test_unfinished_traces_are_left_out():
    aborted = Trace(id=2, endpoint="/v1/chat/completions", stream=True, received=0.0, token_times=[0.5],
                    end=None, output_tokens=4, aborted=True)
    assert latencies([*TRACES, aborted], LOADTEST_DEF)["ttft"].count == 2
    assert tokens_written_between([aborted], 0.0, 1.0) == 0


def test_throughput_follows_each_tools_window():
    assert tokens_written_between(TRACES, 10.1, 10.14) == 3
    windowed = truth_figures(TRACES, LOADTEST_DEF, (10.0, 11.0))
    assert windowed["tok_s"] == pytest.approx(4.0)  # 4 tokens written inside one second
    whole = truth_figures(TRACES, VLLM_DEF, None)
    assert whole["tok_s"] == pytest.approx(7 / 1.23)  # all tokens / (last end - first receipt)
    assert whole["ttft_p95"] == pytest.approx(0.1 + 0.95 * 0.1)


def test_tolerances():
    assert in_tolerance("ttft_p50", 0.1019, 0.1) and not in_tolerance("ttft_p50", 0.1021, 0.1)
    assert in_tolerance("e2e_p50", 1.019, 1.0) and not in_tolerance("e2e_p50", 1.021, 1.0)  # 2 % > 2 ms
    assert in_tolerance("tok_s", 98.5, 100.0) and not in_tolerance("tok_s", 97.9, 100.0)
    assert not in_tolerance("ttft_p50", None, 0.1)
    assert not_worse("itl_p50", 0.0201, 0.02, 0.0202, 0.02) and not not_worse("itl_p50", 0.0205, 0.02, 0.0201, 0.02)
    assert not_worse("tok_s", 99.0, 100.0, 98.0, 100.0) and not not_worse("tok_s", 97.0, 100.0, 99.0, 100.0)


def test_lateness_and_time_budget():
    late = schedule_lateness(TRACES, ttft_s=0.1, itl_s=0.02)
    # deadlines 10.1, 10.12, 10.14, 10.16 / 11.1, 11.12, 11.14: the second trace is 0.1, 0.09, 0.09 late
    assert late.max == pytest.approx(0.1) and late.min == pytest.approx(0.0, abs=1e-9)
    budget = time_budget([9.999, 10.999], TRACES, LOADTEST_DEF, client_ttft_mean=0.153, client_e2e_mean=0.2)
    assert budget["send"] == pytest.approx(0.001)
    assert budget["first_chunk_delivery"] == pytest.approx(0.153 - 0.001 - 0.15)
    assert budget["end_delivery"] == pytest.approx(0.2 - 0.001 - 0.195)
    assert time_budget([], TRACES, LOADTEST_DEF, 0.1, 0.2) == {}


def test_client_streams_pair_with_traces_in_start_order_and_give_delivery_lags():
    late_reader = ClientStream.of(10.9998, 0.2006, [0.01, 0.02])  # read 11.2004, 11.2104, 11.2304
    prompt_reader = ClientStream.of(9.9999, 0.1002, [0.02, 0.02, 0.02])  # 10.1001, 10.1201, ...
    assert late_reader.chunks == pytest.approx([11.2004, 11.2104, 11.2304])
    pairs = pair_in_order([late_reader, prompt_reader], TRACES)
    assert [trace.received for _, trace in pairs] == [10.0, 11.0] and pairs[0][0] is prompt_reader
    lag = delivery_lag(pairs, LOADTEST_DEF)
    assert lag.count == 7 and lag.min == pytest.approx(0.0001) and lag.max == pytest.approx(0.0004)
    sends = send_delay(pairs)  # receipt - start: 10.0 - 9.9999 and 11.0 - 10.9998
    assert [sends.min, sends.max] == pytest.approx([0.0001, 0.0002])
