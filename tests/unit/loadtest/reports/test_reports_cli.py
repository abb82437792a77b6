"""Reports, compare and the CLI (no server needed)."""

import csv
import json
import time

import numpy as np
import pytest
from rich.console import Console

from loadtest.analysis.metrics import build_stage
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import GeneratorReport, Summary, load_summary
from loadtest.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from loadtest.config import LoadTestConfig
from loadtest.errors import ExitCode, UnknownNameError
from loadtest.profiles import parse_profile
from loadtest.reports import write_reports
from loadtest.reports.compare import compare_summaries
from loadtest.reports.markdown import render_markdown
from loadtest.reports.plots import plot_cdfs, plot_timeline
from loadtest.reports.table import summary_renderable
from loadtest.run.orchestrator import StageResult, summarise_run
from loadtest.workloads import parse_workload
from tests.unit.loadtest.loadtest_factories import ErrorKind, failed_record, ok_record


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
    assert written == {"summary.json", "records.jsonl", "requests.csv", "latency_cdf.png", "timeline.png", "report.md",
                       "report.html"}
    assert load_summary(tmp_path) == summary
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert [r["phase"] for r in rows] == ["warmup", "measured", "measured", "measured"]
    # the integration suite reads this format (it once compared ok with "True" and never checked)
    assert [r["ok"] for r in rows] == ["1", "1", "1", "0"]
    assert rows[-1]["error_kind"] == "http_5xx" and rows[-1]["status"] == "503"
    report = (tmp_path / "report.md").read_text()
    assert "LOAD GENERATOR SATURATED" in report and "![latency_cdf.png](latency_cdf.png)" in report
    assert "http_5xx: 1" in report


def test_markdown_verdicts():
    passing, _ = make_summary(ttft=0.05)
    assert "verdict: PASS" in render_markdown(passing)
    failing, _ = make_summary(ttft=0.5)
    assert "verdict: **FAIL**" in render_markdown(failing)


def test_a_simulated_run_says_so_and_old_summaries_still_load(tmp_path):
    measured, records = make_summary()
    results = [StageResult(measured.stages[0], records)]
    summary = summarise_run(measured.config, results, None, measured.started_unix, simulated=True)
    write_reports(summary, records, tmp_path, ["markdown"])
    assert load_summary(tmp_path).simulated is True
    assert (tmp_path / "report.md").read_text().startswith("# Load test report (simulated)")
    assert summarise_run(measured.config, results, None, measured.started_unix).simulated is False
    assert "simulated" not in render_markdown(measured)
    # a summary.json written before the field existed
    old = json.loads((tmp_path / "summary.json").read_text())
    del old["simulated"]
    (tmp_path / "summary.json").write_text(json.dumps(old))
    assert load_summary(tmp_path).simulated is False


def test_simulated_plots_say_so_in_their_titles(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    close, figures = plt.close, []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figures to read their titles
    summary, records = make_summary()
    for flag in (False, True):
        shown = summary.model_copy(update={"simulated": flag})
        plot_cdfs(shown, records, tmp_path / "cdf.png")
        plot_timeline(shown, tmp_path / "timeline.png")
    titles = [(fig.get_suptitle(), fig.axes[0].get_title()) for fig in figures]
    for fig in figures:
        close(fig)
    assert ["(simulated)" in cdf for cdf, _ in titles[0::2]] == [False, True]
    assert ["(simulated)" in timeline for _, timeline in titles[1::2]] == [False, True]


def test_selected_reports_and_unknown_format(tmp_path):
    summary, records = make_summary()
    written = {p.name for p in write_reports(summary, records, tmp_path, ["csv"])}
    assert written == {"summary.json", "records.jsonl", "requests.csv"}  # summary.json always
    with pytest.raises(UnknownNameError, match="markdown"):
        write_reports(summary, records, tmp_path, ["pdf"])


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
    assert main(["run", "--reports", "pdf", "--workload", "prompts"]) == EXIT_USAGE


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


def summary_of(ttfts, *, slos="", generator=None, plan=None, records=None):
    """A one-stage summary of successful requests with the given TTFTs (one per 0.1 s)."""
    config = LoadTestConfig(
        profile=parse_profile("concurrency:users=2"), workload=parse_workload("prompts"), duration_s=100.0,
        slos=parse_slos(slos),
    )  # fmt: skip
    records = records or [ok_record(i * 0.1, t, [0.01] * 3) for i, t in enumerate(ttfts)]
    stage = build_stage(
        records, plan=plan or config.profile.next_stage([]), window=config.measured_window, timed=True,
        objectives=config.slos, started_unix=0.0, offset_s=0.0, generator=generator or GeneratorReport(),
    )  # fmt: skip
    return Summary(tool_version="test", started_unix=0.0, ended_unix=1.0, config=config, stages=(stage,),
                   passed=stage.passed)  # fmt: skip


def test_compare_noise_band_comes_from_the_data():
    rng = np.random.default_rng(0)
    base = rng.gamma(16.0, 0.0125, size=2000)  # mean 0.2 s, relative spread 25%
    # 2,000 requests each: a 6% shift is beyond the noise (before: inside the fixed +-10%)
    big = {r.figure.name: r for r in compare_summaries(summary_of(base), summary_of(base * 1.06))}
    assert big["TTFT p50"].band < 0.06 and big["TTFT p50"].better is False
    # 8 requests each: a 15% shift is noise (before: flagged, beyond +-10%)
    few = {r.figure.name: r for r in compare_summaries(summary_of(base[:8]), summary_of(base[:8] * 1.15))}
    assert few["TTFT p50"].band > 0.15 and few["TTFT p50"].better is None
    # no noise estimate, no highlight
    assert big["TTFT max"].band is None and big["TTFT max"].better is None


def test_reports_show_validity_arrivals_and_intervals():
    plan = parse_profile("poisson:rate=2,max_concurrency=3").next_stage([])
    records = [ok_record(t + 0.5, 0.1, [0.01], scheduled=t, user=i) for i, t in enumerate([0.0, 1.0, 2.0])]
    summary = summary_of([], slos="ttft_p95=1s", plan=plan, records=records)
    assert summary.passed is False
    text = render_markdown(summary)
    assert "verdict: **INVALID**" in text
    assert "**INVALID MEASUREMENT: 100% of arrivals left more than 50 ms late**" in text
    assert "client concurrency cap 3: 0 arrivals waited for a free slot" in text
    assert "holds in 100% of resamples" in text and "95% CI" in text
    assert "requests/s (started)" in text and "requests/s (completed)" in text
    console = Console(record=True, width=200)
    console.print(summary_renderable(summary))
    shown = console.export_text()
    assert "SLO verdict: INVALID" in shown and "INVALID MEASUREMENT" in shown and "client concurrency cap 3" in shown


def test_compare_many_runs_gates_regressions_beyond_the_noise(tmp_path, capsys):
    rng = np.random.default_rng(1)
    base = rng.gamma(16.0, 0.0125, size=2000)
    runs = {"base": base, "same": rng.permutation(base), "slower": base * 1.10, "faster": base * 0.9}
    for name, ttfts in runs.items():
        write_reports(summary_of(ttfts), [], tmp_path / name, ["json"])
    folders = [str(tmp_path / name) for name in runs]
    assert main(["compare", *folders]) == EXIT_OK  # without the gate, a table only
    out = capsys.readouterr().out
    assert "regression" in out and "slower: TTFT p50" in out and "faster: TTFT p50" not in out
    assert main(["compare", *folders, "--fail-on-regression"]) == ExitCode.REGRESSION == 7
    # the same data shuffled is no regression; a faster run is none either
    assert main(["compare", folders[0], folders[1], folders[3], "--fail-on-regression"]) == EXIT_OK
    # the gate looks only at the figures named
    assert main(["compare", *folders, "--fail-on-regression", "--figures", "output tok/s"]) == EXIT_OK
    assert main(["compare", *folders, "--figures", "TTFT p42"]) == EXIT_USAGE
    assert main(["compare", folders[0]]) == EXIT_USAGE
