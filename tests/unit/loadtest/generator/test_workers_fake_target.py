"""Distributed load generation end to end: the orchestrator, a real master and real
worker processes (Locust's own master/worker protocol over 127.0.0.1) against a FAKE
OpenAI server (tests/unit/loadtest/fake_openai_server.py). Counts and identities are
asserted, never timing."""

import json
import socket
import stat
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from loadtest import RunOptions, parse_profile, parse_workload, run_load_test
from loadtest.analysis.arrivals import schedule
from loadtest.analysis.records import read_records
from loadtest.cli import EXIT_WORKER_FAILED, main
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.errors import WorkerError
from loadtest.generator.child import serve_master
from loadtest.generator.job import GeneratorStatus
from tests.unit.loadtest.fake_openai_server import FakeServer

pytestmark = pytest.mark.timeout(300)  # a hang is a failure, whatever the machine's load


@pytest.fixture()
def server():
    with FakeServer() as s:
        yield s


def config(server, tmp_path, prompts, **kwargs) -> LoadTestConfig:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts) + "\n")
    return LoadTestConfig(
        target=TargetConfig(url=server.url, model="fake-model", scrape_metrics=False),
        workload=parse_workload(f"jsonl:path={path},output_len=4"),
        **kwargs,
    )


def final_status(out: Path) -> GeneratorStatus:
    lines = (out / "generator" / "stage-00.status.jsonl").read_text().splitlines()
    return GeneratorStatus.model_validate_json(lines[-1])


def test_two_workers_send_exactly_the_schedule_and_every_record_once(tmp_path, server):
    cfg = config(
        server, tmp_path, ["alpha", "beta", "gamma"],
        profile=parse_profile("poisson:rate=12,burstiness=0.5"), duration_s=3.0, seed=7,
        generator=GeneratorConfig(workers=2),
    )  # fmt: skip
    out = tmp_path / "out"
    summary = run_load_test(cfg, RunOptions(out_dir=out, reports=("json",)))
    records = read_records(out / "records.jsonl")
    expected = schedule(start_rate=12, burstiness=0.5, seed=7, duration_s=3.0)
    # the merged records are exactly the requests the server saw
    assert len(records) == server.state.requests == summary.headline.requests.sent
    # each arrival of the one schedule left exactly once, from one worker or the other
    index = {float(a): i for i, a in enumerate(expected)}
    assert Counter(index[r.scheduled_s] for r in records) == Counter(range(len(expected)))
    # every record exactly once: unique ids, each worker's (slot + 2n) without a gap
    ids = [r.id for r in records]
    assert len(set(ids)) == len(ids)
    for slot in (0, 1):
        mine = sorted(i for i in ids if i % 2 == slot)
        assert mine == list(range(slot, slot + 2 * len(mine), 2))
    final = final_status(out)
    assert final.error is None and len(final.workers) == 2
    assert sum(w.records for w in final.workers) == len(records) and all(w.records for w in final.workers)
    assert len({w.pid for w in final.workers}) == 2
    assert summary.headline.generator.cpu_seconds_load > 0 and summary.headline.generator.cpu_percent_p90 is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_remote_worker_joins_over_loopback_and_the_budget_adds_up(tmp_path, server):
    port = free_port()
    cfg = config(
        server, tmp_path, [f"prompt {i}" for i in range(8)],
        profile=parse_profile("concurrency:users=3"), duration_s=None, max_requests=20,
        generator=GeneratorConfig(workers=1, expect_workers=2, master_port=port),
    )  # fmt: skip
    stop = threading.Event()
    remote = threading.Thread(
        target=serve_master, args=(f"127.0.0.1:{port}", 1),
        kwargs={"connect_timeout_s": 120.0, "stop": stop, "log": lambda _: None}, daemon=True,
    )  # fmt: skip
    remote.start()
    out = tmp_path / "out"
    try:
        run_load_test(cfg, RunOptions(out_dir=out, reports=("json",)))
    finally:
        stop.set()
        remote.join(timeout=30)
    records = read_records(out / "records.jsonl")
    assert len(records) == server.state.requests == 20
    assert len({r.id for r in records}) == 20 and len({r.user for r in records}) == 3
    final = final_status(out)
    assert sorted(w.records for w in final.workers) == sorted(Counter(r.id % 2 for r in records).values())
    # Locust split the 3 users 1 + 2; the budget of 20 followed them (6 or 7 for the one-user worker)
    assert sorted(w.users for w in final.workers) == [1, 2]
    assert all(abs(w.records - 20 * w.users / 3) < 1 for w in final.workers)
    assert not remote.is_alive()


def crashing_python(tmp_path: Path) -> Path:
    """An interpreter wrapper whose first worker process kills itself (SIGKILL) a few
    seconds after it starts; everything else runs as usual."""
    real = sys.executable
    kill_later = (
        "import os, runpy, sys, threading; threading.Timer(4.0, os.kill, (os.getpid(), 9)).start(); "
        "sys.argv = ['loadtest.generator', *sys.argv[1:]]; runpy.run_module('loadtest.generator', run_name='__main__')"
    )
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *--worker*) if mkdir "{tmp_path}/crashed" 2>/dev/null; then '
        f'exec "{real}" -c "{kill_later}" "$@"; fi;; esac\n'
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_a_crashed_worker_fails_the_run_instead_of_hanging(tmp_path, server):
    cfg = config(
        server, tmp_path, ["alpha"],
        profile=parse_profile("poisson:rate=5"), duration_s=60.0,
        generator=GeneratorConfig(workers=2),
    )  # fmt: skip
    with pytest.raises(WorkerError, match=r"worker process \d \(pid \d+\) exited with code -9"):
        run_load_test(cfg, RunOptions(python=str(crashing_python(tmp_path))))
    assert (tmp_path / "crashed").is_dir()


def test_a_missing_worker_fails_the_stage_within_the_connect_timeout(tmp_path, server):
    cfg = config(
        server, tmp_path, ["alpha"],
        profile=parse_profile("concurrency:users=2"), duration_s=5.0,
        generator=GeneratorConfig(workers=1, expect_workers=2, master_port=free_port(), connect_timeout_s=3.0),
    )  # fmt: skip
    # The local worker may itself be slow to start on a loaded machine: 0 or 1 connected.
    with pytest.raises(WorkerError, match="[01] of 2 load-generator workers connected within 3 s"):
        run_load_test(cfg)
    assert server.state.requests == 0


def test_worker_errors_have_their_own_exit_code(monkeypatch):
    def fail(*_args, **_kwargs):
        raise WorkerError("worker 1 sent no heartbeat for 15 s")

    monkeypatch.setattr("loadtest.run.orchestrator.run_load_test", fail)
    assert main(["run", "--workload", "prompts", "--duration", "1s", "--workers", "2"]) == EXIT_WORKER_FAILED


def test_generator_options_are_checked():
    assert main(["run", "--workload", "prompts", "--workers", "0"]) == 2
    assert main(["run", "--workload", "prompts", "--workers", "2", "--expect-workers", "1"]) == 2
    assert main(["run", "--workload", "prompts", "--workers", "1", "--expect-workers", "3"]) == 2  # no fixed port
    assert main(["run", "--workload", "prompts", "--master-bind", "nohost"]) == 2
    assert main(["worker", "--master", "127.0.0.1", "--processes", "1"]) == 2
