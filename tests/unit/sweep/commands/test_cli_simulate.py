"""`sweep run SPEC --simulate` and `sweep plan --spec SPEC --simulate` as a user runs them
(a child process, the real simulator), on the H200 spec shrunk to one shape and short
load points so it takes seconds; plus their one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.errors import ExitCode
from sweep.cli import main
from tests.paths import REPO, SWEEPS

H200 = SWEEPS / "h200-llama-70b.yaml"
SMALL = ["--set", "space.tensor_parallel=[8]", "--set", "space.max_num_seqs=[256]",
         "--set", "traffic.duration_s=20s", "--set", "traffic.warmup_s=5s", "--set", "traffic.profile.rate_rps=8",
         "--set", "search.probe_refine=0", "--set", "search.max_samples=1"]


def sweep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_simulated_sweep_then_plan_from_it(tmp_path: Path):
    out = tmp_path / "sim"
    run = sweep("run", H200, "--simulate", "--out", out, *SMALL, "--set", "quality.items=20")
    assert run.returncode == ExitCode.OK, run.stderr
    assert "SIMULATED sweep h200-llama-70b" in run.stdout and "answered in" in run.stdout
    assert "quality not measured (SIMULATED): the quality gate was not applied" in run.stdout
    report = json.loads((out / "sweep.json").read_text())
    assert report["spec"]["simulation"] == {"hardware": None}
    assert report["warnings"][0].startswith("SIMULATED, not measured")
    assert report["answer"]["kind"] == "passing" and report["text_density"] is None  # no 70B tokenizer here
    assert (out / "report.md").read_text().startswith("# SIMULATED sweep")
    assert "## Quality\n\nquality not measured (SIMULATED)" in (out / "report.md").read_text()
    assert {r["quality"]["status"] for r in report["runs"]} == {"simulated"}
    assert (out / "plots" / "scaling.png").is_file()

    plan = sweep("plan", "--spec", H200, "--simulate", "--out", out, "--traffic", "20", *SMALL)
    assert plan.returncode == ExitCode.OK, plan.stderr
    assert "traffic -> GPUs" in plan.stdout and "add a replica above" in plan.stdout
    assert (out / "plots" / "capacity_curve.png").is_file()
    assert json.loads((out / "sweep.json").read_text())["runs_reused"] >= 1  # the plan reused the sweep


@pytest.mark.parametrize("args, fragment", [
    (("run", H200, "--hardware", "b300"), "needs --simulate"),
    (("run", H200, "--simulate", "--hardware", "nope"), "unknown hardware 'nope'"),
    (("plan", "--spec", H200), "add --simulate"),
    (("plan", "--results", "x", "--simulate"), "go with --spec"),
    (("mix", H200, "--traffic", "20", "--hardware", "h200,tpu"), "--hardware wants GPU kinds"),
    (("mix", H200, "--traffic", "-3"), "--traffic wants requests per second"),
])
def test_bad_simulation_options_are_one_line_usage_errors(tmp_path: Path, capsys, args, fragment):
    assert main([*map(str, args), *(["--out", str(tmp_path)] if args[0] == "run" else [])]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and fragment in err[0], err
