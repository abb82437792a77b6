"""`serving` end to end as a user runs it: up (own Ray cluster), smoke request, status,
down. Runs first in the session, before the shared cluster starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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


def test_up_smoke_status_down():
    proc = subprocess.Popen([sys.executable, "-m", "serving.cli", "up", "--port", PORT, "--smoke"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C" in line:
                break
        output = "".join(lines)
        assert f"http://127.0.0.1:{PORT}/v1" in output, output[-3000:]
        assert "Paris" in output
        status = serving("status", "--json", timeout=60)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["replicas"]["ready"] == 1 and state["routing_policy"] == "cache-aware"
        probe = f"import httpx; print(httpx.get('http://127.0.0.1:{PORT}/v1/models').json()['data'][0]['id'])"
        reached = serving("exec", "--", sys.executable, "-c", probe, timeout=60)
        assert reached.returncode == 0 and reached.stdout.strip() == "smollm2-135m-instruct", reached.stderr
        down = serving("down", timeout=60)
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert serving("status", timeout=60).returncode == 2  # nothing running any more
