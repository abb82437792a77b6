"""`serving` end to end as a user runs it: up (own Ray cluster), smoke request, status,
killed outright, up again on the same port, down. Runs first in the session, before the
shared cluster starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PORT = "8010"


def serving(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.cli", *args], capture_output=True, text=True, **kwargs)


def test_models_list_shows_every_spec_and_readiness():
    result = serving("models", "list", timeout=120)
    assert result.returncode == 0, result.stderr
    for name in ("smollm2-135m-instruct", "llama-3.1-8b-instruct", "llama-3.3-70b-instruct", "tiny-llama-tp2-test"):
        assert name in result.stdout
    assert "cluster download" in result.stdout  # hub specs cannot be prepared here


def test_unknown_model_is_a_clear_error():
    result = serving("up", "--model", "nope", "--port", PORT, timeout=120)
    assert result.returncode == 2
    assert "unknown model 'nope'" in result.stderr and "smollm2-135m-instruct" in result.stderr


def _up(*args: str) -> tuple[subprocess.Popen, str]:
    """``serving up`` in its own session (as a shell job would be), read until it is ready."""
    proc = subprocess.Popen([sys.executable, "-m", "serving.cli", "up", "--port", PORT, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C" in line:
            break
    return proc, "".join(lines)


def _session(sid: int) -> list[str]:
    """The live processes of session ``sid`` (zombies have ended), as ``pid name``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(f"{pid} {name}")
    return found


def _gone(sid: int, within_s: float) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := _session(sid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_up_smoke_status_then_killed_outright_then_up_again_on_the_same_port_and_down():
    proc, output = _up("--smoke")
    try:
        assert f"http://127.0.0.1:{PORT}/v1" in output, output[-3000:]
        assert "Paris" in output
        status = serving("status", "--json", timeout=60)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["replicas"]["ready"] == 1 and state["routing_policy"] == "cache-aware"
        probe = f"import httpx; print(httpx.get('http://127.0.0.1:{PORT}/v1/models').json()['data'][0]['id'])"
        reached = serving("exec", "--", sys.executable, "-c", probe, timeout=60)
        assert reached.returncode == 0 and reached.stdout.strip() == "smollm2-135m-instruct", reached.stderr
        # SIGKILL of its process group: no clean-up code runs. Every process it started (Ray,
        # the engine replica, vLLM's engine core, HAProxy) must still go, and free the port.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert not (left := _gone(proc.pid, within_s=30)), f"outlived serving up: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # The same port again (the null engine: what is checked is that nothing holds the port),
    # then stopped by `serving down`.
    proc, output = _up("--engine", "null")
    try:
        assert f"http://127.0.0.1:{PORT}/v1" in output, output[-3000:]
        down = serving("down", timeout=60)
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=120) == 0
        assert not (left := _gone(proc.pid, within_s=30)), f"outlived serving down: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert serving("status", timeout=60).returncode == 2  # nothing running any more
