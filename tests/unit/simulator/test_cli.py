"""The simulator's command end to end in a subprocess: the load tester's summary and
reports, labelled simulated; `loadtest simulate` forwards to it; bad input is one line."""

import json
import subprocess
import sys

from loadtest.analysis.summary import load_summary
from tests.paths import REPO

TINY = ["--hardware", "cpu", "--replicas", "2", "--profile", "poisson:rate=2",
        "--workload", "random:input_len=32,output_len=8", "--duration", "10s", "--quiet"]


def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_simulate_writes_the_load_testers_summary_labelled_simulated(tmp_path):
    result = run("-m", "loadtest", "simulate", *TINY, "--slo", "ttft_p95=60s", "--reports", "json,markdown",
                 "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = load_summary(tmp_path)
    assert summary.config.label.startswith("simulated")
    assert summary.warnings[0].startswith("SIMULATED")
    assert summary.headline.requests.ok == 20 and summary.passed is True
    info = json.loads((tmp_path / "simulation.json").read_text())
    assert info["simulated"] and info["hardware"] == "cpu" and "efficiency.network" in info["assumed_constants"]
    assert "simulated" in (tmp_path / "report.md").read_text().splitlines()[0]


def test_an_unknown_hardware_is_one_line_and_exit_2(tmp_path):
    result = run("-m", "simulator", "run", *TINY, "--hardware", "tpu9", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "unknown hardware 'tpu9'" in result.stderr


def test_the_simulator_does_not_import_ray_unless_it_autoscales():
    code = "import sys, simulator.cli, simulator.simulate, simulator.cluster; print('ray' in sys.modules)"
    assert run("-c", code, timeout=60).stdout.strip() == "False"


def test_run_help_lists_the_load_options_in_plain_text():
    from simulator.cli import LOAD_OPTIONS, build_parser

    parser = build_parser()
    run_parser = parser._subparsers._group_actions[0].choices["run"]
    text = run_parser.format_help()
    for option in ("--profile", "--workload", "--duration", "--slo"):
        assert option in text
    assert set(LOAD_OPTIONS) <= set(text.split())
    assert "``" not in parser.format_help() + text
