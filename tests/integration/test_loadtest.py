"""The load tester against the real stack: each profile for a few seconds, checking
that the summary is consistent with itself and with the server's own counters."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest import (
    SCHEMA_VERSION,
    LoadTestConfig,
    RunOptions,
    TargetConfig,
    load_summary,
    parse_profile,
    parse_slos,
    parse_workload,
    run_load_test,
)
from tests.integration.settings import MODEL

pytestmark = pytest.mark.integration


def run(stack, tmp_path: Path, profile: str, workload: str, **fields):
    config = LoadTestConfig(
        target=TargetConfig(url=stack.url, model=MODEL, scrape_interval_s=1.0),
        profile=parse_profile(profile), workload=parse_workload(workload), seed=3,
        **{"duration_s": 6.0, "drain_timeout_s": 60.0, **fields})
    return run_load_test(config, RunOptions(out_dir=tmp_path))


def check_consistent(summary, out_dir: Path) -> None:
    for stage in summary.stages:
        r = stage.requests
        assert r.sent == r.measured + r.excluded_warmup + r.excluded_cooldown
        assert r.measured == r.ok + r.failed
        assert sum(r.errors.values()) == r.failed
        assert r.ok > 0
        # The server's counters (scraped before and after) saw exactly our tokens.
        assert stage.server.generation_tokens_delta == stage.tokens.output_total
        assert stage.server.prompt_tokens_delta == stage.tokens.prompt_total
        assert stage.tokens.output_len_mismatches == 0
        assert stage.latency.ttft.p50 <= stage.latency.e2e.p50
    rows = list(csv.DictReader((out_dir / "requests.csv").open()))
    assert len(rows) == sum(s.requests.sent for s in summary.stages)
    assert {row["ok"] for row in rows} <= {"0", "1"}  # requests.csv writes int(ok)
    ok_rows = [row for row in rows if row["ok"] == "1"]
    assert len(ok_rows) >= sum(s.requests.ok for s in summary.stages) > 0
    for row in ok_rows:  # streamed: every successful request has a TTFT
        assert row["ttft_s"] and float(row["ttft_s"]) <= float(row["e2e_s"])
    data = json.loads((out_dir / "summary.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert load_summary(out_dir / "summary.json").stages[0].requests.sent == summary.stages[0].requests.sent


@pytest.fixture(scope="module")
def stack(base_stack):
    return base_stack


def test_fixed_concurrency_with_slo(stack, tmp_path):
    summary = run(stack, tmp_path, "concurrency:users=4", "random:input_len=64,output_len=32",
                  slos=parse_slos("ttft_p95=30s,tpot_p95=2s"))
    check_consistent(summary, tmp_path)
    stage = summary.stages[0]
    assert stage.slo.passed is True and stage.slo.good_requests == stage.requests.ok
    assert stage.throughput.output_tokens_per_s > 0
    assert {p.name for p in (tmp_path).glob("*.png")}  # plots written
    assert (tmp_path / "report.md").read_text().strip()
    timeline = summary.server.timeline
    assert any(p.queue_depth is not None for p in timeline)
    assert any(p.replicas_ready == 2 for p in timeline)


def test_constant_rate_open_loop(stack, tmp_path):
    check_consistent(run(stack, tmp_path, "constant:rate=2", "prompts:sets=en-questions,output_len=16"), tmp_path)


def test_poisson_with_shared_prefixes(stack, tmp_path):
    summary = run(stack, tmp_path, "poisson:rate=2,burstiness=0.5",
                  "shared-prefix:num_prefixes=2,prefix_len=256,question_len=16,output_len=16")
    check_consistent(summary, tmp_path)
    assert summary.stages[0].server.prefix_cache_hit_rate > 0


def test_linear_ramp_multi_turn(stack, tmp_path):
    check_consistent(run(stack, tmp_path, "ramp:start_rate=0.5,end_rate=2", "multi-turn:turns=2,input_len=32,output_len=16"),
                     tmp_path)


def test_rate_sweep_finds_a_rate(stack, tmp_path):
    summary = run(stack, tmp_path, "sweep:rates=0.5,1,refine=0", "random:input_len=32,output_len=16",
                  duration_s=5.0, slos=parse_slos("e2e_p95=60s"))
    check_consistent(summary, tmp_path)
    assert len(summary.stages) == 2
    assert summary.sweep.max_rate_meeting_slo == pytest.approx(1.0)


def test_cli_run_writes_every_output(stack, tmp_path):
    out = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "--target", stack.url, "--model", MODEL,
         "--profile", "concurrency:users=2", "--workload", "prompts:sets=vi-questions,output_len=16",
         "--duration", "5s", "--slo", "ttft_p95=30s", "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("summary.json", "requests.csv", "report.md"):
        assert (out / name).is_file()
    assert list(out.glob("*.png"))
    compare = subprocess.run([sys.executable, "-m", "loadtest", "compare", str(out), str(out)],
                             capture_output=True, text=True, timeout=60)
    assert compare.returncode == 0 and "1.00" in compare.stdout


def test_quality_probe_scores_the_default_model(stack, tmp_path):
    """`loadtest quality` on 20 bundled items (4 per category): the default model in
    float32 answers them (the set keeps only items it answers right on the bare engine;
    the stack's replicas run on one core each, so a rounding may differ)."""
    out = tmp_path / "quality.json"
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "quality", "--target", stack.url, "--model", MODEL, "--limit", "20",
         "--concurrency", "8", "--json", str(out), "--quiet"],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "95% CI" in result.stdout
    print(result.stdout)
    report = json.loads(out.read_text())
    assert report["errors"] == 0
    assert report["overall"]["items"] == 20 and set(report["categories"]) == {
        "facts", "facts-plain", "arithmetic", "extraction", "vi-admin"}
    assert report["overall"]["correct"] >= 17, [r for r in report["results"] if not r["correct"]]
    assert report["overall"]["low"] <= report["overall"]["score"] <= report["overall"]["high"]
