"""Reports, compare and the CLI (no server needed)."""

import csv
import time

import pytest
from loadtest_factories import ErrorKind, failed_record, ok_record

from loadtest.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from loadtest.config import LoadTestConfig
from loadtest.errors import UnknownNameError
from loadtest.metrics import build_stage
from loadtest.profiles import parse_profile
from loadtest.reports import write_reports
from loadtest.reports.compare import compare_summaries
from loadtest.reports.markdown import render_markdown
from loadtest.slo import parse_slos
from loadtest.summary import GeneratorReport, Summary, load_summary
from loadtest.workloads import parse_workload


def make_summary(ttft=0.1, slos="ttft_p95=200ms", saturated=False):
    config = LoadTestConfig(
        profile=parse_profile("concurrency:users=2"),
        workload=parse_workload("prompts"),
        duration_s=10.0,
        warmup_s=1.0,
        slos=parse_slos(slos),
    )
    records = [
        ok_record(0.5, ttft, [0.01] * 3),  # warm-up
        ok_record(2.0, ttft, [0.01] * 3),
        ok_record(3.0, ttft * 2, [0.02] * 3),
        failed_record(4.0, ErrorKind.HTTP_5XX, status=503),
    ]
    stage = build_stage(
        records,
        plan=config.profile.next_stage([]),
        window=config.measured_window,
        timed=True,
        objectives=config.slos,
        started_unix=time.time(),
        offset_s=0.5,
        generator=GeneratorReport(cpu_seconds_load=0.2, cpu_percent_p90=95.0 if saturated else 5.0, saturated=saturated),
    )
    summary = Summary(
        tool_version="test",
        started_unix=time.time() - 12,
        ended_unix=time.time(),
        config=config,
        stages=(stage,),
        passed=stage.passed,
        warnings=("LOAD GENERATOR SATURATED in run",) if saturated else (),
    )
    return summary, records


def test_every_report_is_written_and_readable(tmp_path):
    summary, records = make_summary(saturated=True)
    written = {p.name for p in write_reports(summary, records, tmp_path)}
    assert written == {"summary.json", "records.jsonl", "requests.csv", "latency_cdf.png", "timeline.png", "report.md"}
    assert load_summary(tmp_path) == summary
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert [r["phase"] for r in rows] == ["warmup", "measured", "measured", "measured"]
    assert rows[-1]["error_kind"] == "http_5xx" and rows[-1]["status"] == "503"
    report = (tmp_path / "report.md").read_text()
    assert "LOAD GENERATOR SATURATED" in report and "![latency_cdf.png](latency_cdf.png)" in report
    assert "http_5xx: 1" in report


def test_markdown_verdicts():
    passing, _ = make_summary(ttft=0.05)
    assert "verdict: PASS" in render_markdown(passing)
    failing, _ = make_summary(ttft=0.5)
    assert "verdict: **FAIL**" in render_markdown(failing)


def test_selected_reports_and_unknown_format(tmp_path):
    summary, records = make_summary()
    written = {p.name for p in write_reports(summary, records, tmp_path, ["csv"])}
    assert written == {"summary.json", "records.jsonl", "requests.csv"}  # summary.json always
    with pytest.raises(UnknownNameError, match="markdown"):
        write_reports(summary, records, tmp_path, ["html"])


def test_compare_ratios():
    fast, _ = make_summary(ttft=0.1)
    slow, _ = make_summary(ttft=0.3)
    rows = {r.figure.name: r for r in compare_summaries(fast, slow)}
    ttft = rows["TTFT p50"]
    assert ttft.ratio == pytest.approx(slow.headline.latency.ttft.p50 / fast.headline.latency.ttft.p50)
    assert ttft.better is False  # B is slower
    assert rows["requests ok"].ratio == 1.0 and rows["requests ok"].better is None


def test_cli_usage_errors(capsys):
    assert main(["run", "--profile", "gatling"]) == EXIT_USAGE
    assert "poisson" in capsys.readouterr().err
    assert main(["run", "--slo", "ttft_p42=1s", "--workload", "prompts"]) == EXIT_USAGE
    assert main(["run", "--warmup", "70s", "--workload", "prompts"]) == EXIT_USAGE
    assert main(["run", "--reports", "html", "--workload", "prompts"]) == EXIT_USAGE


def test_cli_unreachable_target(tmp_path):
    code = main(["run", "--target", "http://127.0.0.1:9", "--workload", "prompts", "--duration", "1s",
                 "--out", str(tmp_path / "o"), "--quiet"])  # fmt: skip
    assert code == EXIT_FAILED


def test_cli_list_and_compare(tmp_path, capsys):
    assert main(["list"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "shared-prefix" in out and "vi-health-admin" in out and "sweep" in out
    a, records = make_summary(ttft=0.1)
    b, _ = make_summary(ttft=0.2)
    write_reports(a, records, tmp_path / "a", ["json"])
    write_reports(b, records, tmp_path / "b", ["json"])
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == EXIT_OK
    assert "2.00x" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "a"), "--reports", "markdown"]) == EXIT_OK
    assert (tmp_path / "a" / "report.md").exists()
