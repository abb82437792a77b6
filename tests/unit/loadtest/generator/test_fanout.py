"""Agent steps (fan-out) end to end: the orchestrator, the Locust generator (one process,
or a master and two workers) and the timed server (benchmarks/timed_server.py, a real
HTTP server). Every branch of every step is sent, answered and recorded with its step;
the next turn waits for all of them. Counts and order are asserted, never timing."""

from __future__ import annotations

import socket
from collections import defaultdict

import httpx
import pytest

from benchmarks.common.timed_server import start_in_child, traces_from_truth
from loadtest import RunOptions, parse_profile, parse_workload, run_load_test
from loadtest.analysis.records import read_records
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from tests.fixtures import TINY_TOKENIZER

pytestmark = pytest.mark.timeout(300)  # a hang is a failure, whatever the machine's load

SESSIONS, TURNS, FANOUT = 4, 3, 3
PER_SESSION = 1 + (TURNS - 1) * FANOUT  # the first turn is one request, each later turn a step


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("timed") / "server.log"
    server, url = start_in_child(port=port, ttft_s=0.02, itl_s=0.005, model="timed", log=log)
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize("workers", [1, 2])
def test_every_branch_of_every_step_is_sent_and_recorded_with_its_step(tmp_path, timed, workers):
    httpx.post(f"{timed}/truth/reset")
    config = LoadTestConfig(
        target=TargetConfig(url=timed, model="timed", scrape_metrics=False),
        profile=parse_profile(f"concurrency:users={workers}"),  # one user per worker: each its own sessions
        workload=parse_workload(f"multi-turn:turns={TURNS},fanout={FANOUT},input_len=16,output_len=8"),
        duration_s=None, max_requests=SESSIONS * PER_SESSION, tokenizer=TINY_TOKENIZER,
        generator=GeneratorConfig(workers=workers),
    )  # fmt: skip
    summary = run_load_test(config, RunOptions(out_dir=tmp_path, reports=("json",)))
    records = read_records(tmp_path / "records.jsonl")
    assert len(records) == SESSIONS * PER_SESSION and all(r.ok for r in records)
    truth = traces_from_truth(httpx.get(f"{timed}/truth").json())
    assert len(truth) == len(records) and all(t.complete for t in truth)  # the server answered each one

    by_session = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_session[r.session_seq][r.turn].append(r)
    assert len(by_session) == SESSIONS
    for turns in by_session.values():
        assert sorted(turns) == list(range(TURNS))
        (first,) = turns[0]
        assert first.branch is None and first.fanout is None
        for turn in range(1, TURNS):
            step = turns[turn]
            assert sorted(r.branch for r in step) == list(range(FANOUT))
            assert {r.fanout for r in step} == {FANOUT} and len({r.user for r in step}) == 1
            before = turns[turn - 1]
            assert min(r.start_s for r in step) >= max(r.end_s for r in before)  # waited for the whole step

    fanout = summary.headline.sessions.fanout
    steps = SESSIONS * (TURNS - 1)
    assert fanout.steps == fanout.complete == steps and fanout.requests == steps * FANOUT
    assert fanout.width.min == fanout.width.max == FANOUT
