"""Client cancellation against a real local server of known timing (benchmarks.timed_server):
the abandoned requests are counted apart and the server's in-flight gauge returns to zero;
and a trace replay sends every request once, at its own time, in one process or two workers."""

from __future__ import annotations

import pytest

from benchmarks.common.timed_server import start_in_child
from loadtest import RunOptions, parse_profile, parse_workload, run_load_test
from loadtest.analysis.records import ErrorKind, read_records
from loadtest.config import CancelConfig, GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.workloads.replay import TraceSelection, replay_plan
from tests.fixtures import TINY_TOKENIZER
from tests.paths import REPO
from tests.unit.loadtest.fake_openai_server import FakeServer

EXCERPT = REPO / "loadtest" / "data" / "traces" / "mooncake-conversation-400.jsonl"


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    log = tmp_path_factory.mktemp("timed") / "server.log"
    server, url = start_in_child(port=_free_port(), ttft_s=0.05, itl_s=0.02, model="timed", log=log)
    yield url
    server.terminate()
    server.wait(timeout=30)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cancelled_requests_are_counted_apart_and_the_server_settles(tmp_path, timed):
    config = LoadTestConfig(
        target=TargetConfig(url=timed, model="timed", scrape_interval_s=0.5),
        profile=parse_profile("concurrency:users=4"), workload=parse_workload("prompts:output_len=40"),
        duration_s=None, max_requests=24, cancel=CancelConfig(fraction=0.5, after_s=0.3),
    )  # fmt: skip
    summary = run_load_test(config, RunOptions(out_dir=tmp_path))
    r = summary.headline.requests
    records = read_records(tmp_path / "records.jsonl")
    planned = [x for x in records if x.cancel_after_s is not None]
    # 40 tokens take 0.05 + 39 x 0.02 = 0.83 s, so every planned cancel fires at 0.3 s
    assert r.cancel_planned == len(planned) > 0 and r.cancelled == len(planned)
    assert all(x.error_kind is ErrorKind.CLIENT_CANCELLED for x in planned)
    assert r.failed == 0 and r.error_rate == 0.0 and ErrorKind.CLIENT_CANCELLED not in r.errors
    assert r.ok == 24 - len(planned) == summary.headline.latency.e2e.count
    server = summary.headline.server
    assert server.settled is True and server.in_flight_after == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_replay_sends_every_request_once_at_its_own_time(tmp_path, workers):
    selection = "end=4,sessions=prefix"
    plan = replay_plan(TraceSelection(path=EXCERPT, end=4.0, sessions="prefix"))
    with FakeServer() as server:
        config = LoadTestConfig(
            target=TargetConfig(url=server.url, model="fake-model", scrape_metrics=False),
            profile=parse_profile(f"replay:{EXCERPT},{selection},speed=4"), duration_s=2.0,
            tokenizer=TINY_TOKENIZER, generator=GeneratorConfig(workers=workers),
        )  # fmt: skip
        summary = run_load_test(config, RunOptions(out_dir=tmp_path, reports=("json",)))
    records = read_records(tmp_path / "records.jsonl")
    assert len(records) == len(plan.requests) == summary.headline.arrivals.due
    assert summary.headline.arrivals.dropped == 0
    sent = sorted((x.scheduled_s, x.expected_prompt_tokens, x.requested_output_tokens) for x in records)
    want = sorted((t / 4, r.input_tokens + 29, r.output_tokens) for t, r in zip(plan.arrivals, plan.requests))
    assert [s[0] for s in sent] == pytest.approx([w[0] for w in want])
    assert [s[2] for s in sent] == [w[2] for w in want]
    assert {x.session for x in records} == set(range(plan.sessions))
