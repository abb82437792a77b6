"""The whole pipeline (orchestrator -> Locust generator process -> records -> summary ->
reports) against a FAKE OpenAI server (tests/unit/loadtest/fake_openai_server.py).
Timing is never asserted; counts, kinds and consistency are."""

import json
from pathlib import Path

import pytest

from loadtest import RunOptions, load_summary, parse_profile, parse_slos, parse_workload, run_load_test
from loadtest.analysis.arrivals import LATE_THRESHOLD_S, schedule
from loadtest.analysis.records import ErrorKind, TokenSource, read_records
from loadtest.config import LoadTestConfig, TargetConfig
from loadtest.errors import TargetError
from tests.fixtures import TINY_TOKENIZER
from tests.unit.loadtest.fake_openai_server import FakeServer

MARKERS = ["plain one", "#429 a", "#500 b", "#400 c", "#midstream d", "#close e", "#nousage f"]


def prompt_file(tmp_path: Path, prompts) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts) + "\n")
    return path


def config(server, workload, **kwargs):
    target = kwargs.pop("target", {})
    return LoadTestConfig(
        target=TargetConfig(url=server.url, model="fake-model", scrape_interval_s=0.5, **target),
        workload=parse_workload(workload),
        **kwargs,
    )


@pytest.fixture()
def server():
    with FakeServer() as s:
        yield s


def test_closed_loop_counts_every_kind_of_failure(tmp_path, server):
    path = prompt_file(tmp_path, MARKERS)
    cfg = config(
        server,
        f"jsonl:path={path},output_len=12",
        profile=parse_profile("concurrency:users=4"),
        duration_s=None,
        max_requests=35,
        slos=parse_slos("e2e_p99=60s"),
        tokenizer=TINY_TOKENIZER,  # counts the answers sent without usage
    )
    out = tmp_path / "out"
    summary = run_load_test(cfg, RunOptions(out_dir=out))
    stage = summary.headline
    r = stage.requests
    # 35 requests = 5 passes over the 7 prompts (a seeded permutation, cycled)
    assert r.sent == r.measured == 35 and r.ok + r.failed == 35
    assert r.errors == {
        ErrorKind.CONNECTION: 5,
        ErrorKind.HTTP_429: 5,
        ErrorKind.HTTP_4XX: 5,
        ErrorKind.HTTP_5XX: 5,
        ErrorKind.STREAM_ERROR: 5,
    }
    assert r.ok == 10
    records = read_records(out / "records.jsonl")
    assert len(records) == 35
    ok = [x for x in records if x.ok]
    assert all(x.ttft_s is not None and 0 < x.ttft_s <= x.e2e_s for x in ok)
    assert all(x.output_tokens == 12 and len(x.itl_s) == 11 for x in ok)
    assert {x.token_source for x in ok} == {TokenSource.USAGE, TokenSource.TOKENIZER}
    limited = [x for x in records if x.error_kind is ErrorKind.HTTP_429]
    assert all(x.status == 429 and x.retry_after_s == 1.0 for x in limited)
    assert stage.latency.ttft.count == stage.latency.e2e.count == 10
    assert stage.tokens.output_total == 120
    # the server's own counter: every ok token plus the 2 streamed before each failure mid-stream
    assert stage.server.generation_tokens_delta == 120 + 2 * 5 + 2 * 5
    assert stage.slo.passed is True and stage.slo.good_requests == 10
    # the run passes unless this shared machine made the generator miss its own bounds
    # (then the measurement is invalid and never a pass: docs/loadtest.md)
    assert summary.passed is stage.validity.valid, stage.validity
    # outputs
    assert load_summary(out) == summary
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) == 36 and rows[0].startswith("stage,id,")
    for name in ("report.md", "latency_cdf.png", "timeline.png"):
        assert (out / name).stat().st_size > 1000
    assert "connection: 5" in (out / "report.md").read_text()
    assert (out / "generator" / "stage-00.generator.log").exists()
    assert summary.headline.generator.cpu_seconds is not None


def test_open_loop_sends_exactly_the_schedule(tmp_path, server):
    path = prompt_file(tmp_path, ["alpha", "beta"])
    cfg = config(
        server,
        f"jsonl:path={path},output_len=4",
        profile=parse_profile("poisson:rate=12,burstiness=0.5"),
        duration_s=3.0,
        warmup_s=1.0,
        seed=7,
    )
    summary = run_load_test(cfg)
    expected = schedule(start_rate=12, burstiness=0.5, seed=7, duration_s=3.0)
    r = summary.headline.requests
    assert r.sent == len(expected)
    # Warm-up is by start time: an arrival due just before 1.0 s that leaves within the
    # late threshold may start after it (seen on a loaded box).
    assert int((expected < 1.0 - LATE_THRESHOLD_S).sum()) <= r.excluded_warmup <= int((expected < 1.0).sum())
    assert r.measured + r.excluded_warmup + r.excluded_cooldown == r.sent
    assert summary.headline.arrivals.scheduled == len(expected)
    assert summary.headline.plan.offered_rate == 12


def test_timeouts_and_non_streamed_answers(tmp_path, server):
    path = prompt_file(tmp_path, ["#slow", "fine"])
    cfg = config(
        server,
        f"jsonl:path={path},output_len=5",
        target={"stream": False, "request_timeout_s": 0.5},
        profile=parse_profile("concurrency:users=2"),
        duration_s=None,
        max_requests=4,
    )
    summary = run_load_test(cfg)
    r = summary.headline.requests
    assert r.errors == {ErrorKind.TIMEOUT: 2} and r.ok == 2
    lat = summary.headline.latency
    assert lat.ttft.count == 0 and lat.itl.count == 0 and lat.e2e.count == 2
    assert summary.headline.tokens.output_total == 10
    assert summary.headline.tokens.from_usage == 2


def test_unreachable_target_fails_early(tmp_path):
    cfg = LoadTestConfig(
        target=TargetConfig(url="http://127.0.0.1:9", connect_timeout_s=1.0),
        profile=parse_profile("concurrency:users=1"),
        workload=parse_workload("prompts"),
        duration_s=1.0,
    )
    with pytest.raises(TargetError, match="cannot reach"):
        run_load_test(cfg)


def test_unknown_model_fails_early(server):
    cfg = LoadTestConfig(
        target=TargetConfig(url=server.url, model="other"),
        profile=parse_profile("concurrency:users=1"),
        workload=parse_workload("prompts"),
        duration_s=1.0,
    )
    with pytest.raises(TargetError, match="fake-model"):
        run_load_test(cfg)
