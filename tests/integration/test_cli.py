"""`serving` end to end as a user runs it: up (its own Ray cluster of three real nodes),
smoke request, status, a worker node killed under load, the stack killed outright, up
again on the same port, down. Runs first in the session, before the shared cluster
starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from serving.engine.process_guard import descendants
from serving.run_state import state_file

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


def _chat(url: str, results: list, *, stream: bool, started: threading.Event | None = None) -> None:
    """One chat request; appends (status, finished, done marker seen or whole answer) or the error."""
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Tell me about Paris."}],
            "max_tokens": 96 if stream else 48, "temperature": 0, "stream": stream}
    try:
        with httpx.Client(timeout=120) as client, client.stream("POST", f"{url}/v1/chat/completions",
                                                               json=body) as response:
            if not stream:
                answer = json.loads(response.read()) if response.status_code == 200 else {}
                results.append((response.status_code, bool(answer.get("choices"))))
                return
            done = False
            for line in response.iter_lines():
                if started is not None:
                    started.set()
                done = done or line == "data: [DONE]"
            results.append((response.status_code, done))
    except httpx.TimeoutException as exc:
        results.append(("hung", repr(exc)))
    except httpx.HTTPError as exc:  # a stream cut when its node died: the client can tell
        results.append(("cut", repr(exc)))


def _load(url: str, *, whole: int, streams: int, during=lambda: None) -> tuple[list, list]:
    """``whole`` non-streamed and ``streams`` streamed requests at once; ``during()`` runs
    once every stream has its first chunk. Returns (whole results, stream results)."""
    whole_results: list = []
    stream_results: list = []
    firsts = [threading.Event() for _ in range(streams)]
    threads = [threading.Thread(target=_chat, args=(url, stream_results), kwargs={"stream": True, "started": e})
               for e in firsts]
    threads += [threading.Thread(target=_chat, args=(url, whole_results), kwargs={"stream": False})
                for _ in range(whole)]
    for thread in threads:
        thread.start()
    for event in firsts:
        event.wait(120)
    during()
    for thread in threads:
        thread.join(180)
    return whole_results, stream_results


def _kill_node(pid: int) -> list[int]:
    """SIGKILL a node's ``ray start`` and every process below it (its raylet, workers,
    engine); the PIDs killed."""
    victims = [pid, *descendants(pid)]
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims


def test_three_nodes_up_a_worker_node_killed_under_load_then_killed_outright_then_up_again_and_down():
    proc, output = _up("--nodes", "3", "--replicas", "2", "--smoke")
    try:
        assert f"http://127.0.0.2:{PORT}/v1" in output, output[-3000:]  # the head's ingress
        assert "Paris" in output
        def recorded_nodes() -> list[dict]:  # what `serving status` shows of them, read directly
            return json.loads(state_file().read_text())["nodes"]

        def status() -> dict:
            shown = serving("status", "--json", timeout=60)
            assert shown.returncode == 0, shown.stderr
            return json.loads(shown.stdout)

        deadline = time.monotonic() + 60  # the replica count reaches /status by Serve's next update
        while (state := status())["bases"][0]["replicas"]["ready"] < 2 and time.monotonic() < deadline:
            time.sleep(1)
        assert state["bases"][0]["replicas"]["ready"] == 2 and state["routing_policy"] == "cache-aware"
        nodes = state["nodes"]
        assert [n["ip"] for n in nodes] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"] and nodes[0]["head"]
        for node in nodes:  # every node's own ingress routes to the engines
            models = httpx.get(f"{node['url']}/v1/models", timeout=30)
            assert models.status_code == 200 and models.json()["data"][0]["id"] == "smollm2-135m-instruct"
        probe = f"import httpx; print(httpx.get('http://127.0.0.3:{PORT}/health').status_code)"
        reached = serving("exec", "--", sys.executable, "-c", probe, timeout=60)
        assert reached.returncode == 0 and reached.stdout.strip() == "200", reached.stderr

        # A worker node (one of the two engines) SIGKILLed while streams and whole requests run.
        killed: list[int] = []
        whole, streams = _load(nodes[0]["url"], whole=8, streams=4,
                               during=lambda: killed.extend(_kill_node(nodes[2]["pid"])))
        assert killed and len(whole) == 8 and len(streams) == 4
        assert whole == [(200, True)] * 8, whole  # those it held are answered by the survivor
        assert not [r for r in streams if r[0] not in (200, "cut")], streams  # no 5xx, none hung
        assert all(r[1] is True for r in streams if r[0] == 200), streams  # an uncut stream ends with [DONE]
        # Then the survivor answers everything, through the head's and its own ingress.
        for url in (nodes[0]["url"], nodes[1]["url"]):
            after, _ = _load(url, whole=2, streams=0)
            assert after == [(200, True)] * 2, (url, after)
        assert not [pid for pid in killed if Path(f"/proc/{pid}").exists()
                    and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"]
        deadline = time.monotonic() + 60  # serving up starts the dead node again, as Kubernetes would
        while (replaced := recorded_nodes()[2])["pid"] == nodes[2]["pid"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert replaced["pid"] != nodes[2]["pid"] and Path(f"/proc/{replaced['pid']}").exists(), replaced

        # SIGKILL of its process group: no clean-up code runs. Every process it started (the
        # nodes' Ray processes, the engine replica, vLLM's engine core, HAProxy) must
        # still go, and free the port.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert not (left := _gone(proc.pid, within_s=30)), f"outlived serving up: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # The same port again (one node, the null engine: what is checked is that nothing holds
    # the port), then stopped by `serving down`.
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
