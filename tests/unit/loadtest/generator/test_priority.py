"""Every load-generator process claims real-time round-robin scheduling when the OS allows
it, says whether it got it, and runs on normally when it did not."""

import os
import socket
import subprocess
import sys
import time

import pytest

from loadtest.config import GeneratorConfig
from loadtest.generator import child
from loadtest.generator.child import StageProcesses, serve_master
from loadtest.generator.job import EXIT_NO_MASTER, GeneratorStatus, WorkerStatus
from loadtest.generator.priority import RT_PRIORITY, claim_priority, priority_from_argv
from loadtest.generator.workers import all_realtime, combined_status
from tests.paths import REPO

NOT_ROOT = "real-time scheduling needs root (or CAP_SYS_NICE); the claim itself is covered by the fakes"


@pytest.fixture
def normal_process(monkeypatch):
    """This (test) process reads as normal, whatever the scheduling it was started with."""
    monkeypatch.setattr(os, "sched_getscheduler", lambda pid: os.SCHED_OTHER)


@pytest.mark.parametrize("refusal", [PermissionError(1, "Operation not permitted"), OSError(22, "Invalid argument")])
def test_a_refused_claim_leaves_the_process_normal_and_the_run_going(monkeypatch, normal_process, refusal):
    def refuse(pid, policy, param):
        raise refusal

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert claim_priority("realtime") is False


def test_without_the_call_at_all_the_process_stays_normal(monkeypatch, normal_process):
    monkeypatch.delattr(os, "sched_setscheduler")  # not Linux
    assert claim_priority("realtime") is False


def test_a_granted_claim_asks_for_round_robin_at_the_lowest_priority(monkeypatch, normal_process):
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda pid, policy, param: calls.append((pid, policy, param)))
    assert claim_priority("realtime") is True
    assert calls == [(0, os.SCHED_RR, os.sched_param(1))] and RT_PRIORITY == 1


def test_normal_changes_nothing(monkeypatch, normal_process):
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: pytest.fail("normal must not change the scheduling"))
    assert claim_priority("normal") is False


@pytest.mark.skipif(os.geteuid() != 0, reason=NOT_ROOT)
def test_as_root_the_claim_really_gives_round_robin_and_later_threads_inherit_it():
    code = (
        "import os, threading\n"
        "from loadtest.generator.priority import claim_priority\n"
        "os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # as a normal process starts\n"
        "go, got = threading.Event(), {}\n"
        "def probe(name):\n"
        "    go.wait(); got[name] = os.sched_getscheduler(0)\n"
        "before = threading.Thread(target=probe, args=('before',)); before.start()\n"
        "assert claim_priority('realtime') is True\n"
        "after = threading.Thread(target=probe, args=('after',)); after.start()\n"
        "go.set(); before.join(); after.join()\n"
        "assert os.sched_getscheduler(0) == os.SCHED_RR and os.sched_getparam(0).sched_priority == 1\n"
        "assert got == {'before': os.SCHED_OTHER, 'after': os.SCHED_RR}, got  # hence: claim before any thread\n"
        "print('ok')\n"
    )  # the claiming process exits at once
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason=NOT_ROOT)
def test_as_root_every_thread_of_a_generator_process_runs_round_robin():
    """``python -m loadtest.generator --priority realtime`` claims before its imports, so
    the threads they start are real-time too; checked once the worker calls its master."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(120)
        port = listener.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtest.generator", "--worker", f"127.0.0.1:{port}", "--connect-timeout", "60",
             "--priority", "realtime"], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            connection, _ = listener.accept()  # imported, runner built: every start-up thread exists
            connection.close()
            threads = os.listdir(f"/proc/{proc.pid}/task")
            assert {os.sched_getscheduler(int(tid)) for tid in threads} == {os.SCHED_RR}
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [(["job.json", "--priority", "realtime"], "realtime"), (["--worker", "h:1", "--priority=realtime"], "realtime"),
     (["job.json", "--priority", "normal"], "normal"), (["job.json"], "normal"), (["--priority"], "normal")],
)  # fmt: skip
def test_the_priority_is_read_off_the_command_line_before_any_import(argv, wanted):
    assert priority_from_argv(argv) == wanted


def test_every_generator_process_is_told_its_priority(tmp_path, monkeypatch):
    monkeypatch.setattr(child.GeneratorProcess, "start", lambda self: None)
    processes = StageProcesses(tmp_path / "job.json", tmp_path, GeneratorConfig(workers=2, priority="normal"))
    processes.start_workers(5557)
    assert processes.main.args == [str(tmp_path / "job.json"), "--priority", "normal"]
    assert [w.args[-2:] for w in processes.workers] == [["--priority", "normal"]] * 2
    default = StageProcesses(tmp_path / "job.json", tmp_path, GeneratorConfig())
    assert default.main.args[-2:] == ["--priority", "realtime"]


def test_remote_workers_are_told_their_priority(monkeypatch):
    started = []

    class Process:
        def __init__(self, args, log_path, python=None):
            self.args, self.pid = args, 1

        def start(self):
            started.append(self.args)

        def poll(self):
            return EXIT_NO_MASTER

        def stop(self):
            return 0

    monkeypatch.setattr(child, "GeneratorProcess", Process)
    assert serve_master("10.0.0.1:5557", 1, connect_timeout_s=1.0, priority="normal", log=lambda _: None) == 0
    assert started == [["--worker", "10.0.0.1:5557", "--connect-timeout", "1", "--priority", "normal"]]


def worker(index, realtime):
    return WorkerStatus(index=index, t_unix=time.time(), realtime=realtime)


def test_a_distributed_stage_is_real_time_only_when_every_process_was():
    both = [worker(0, True), worker(1, True)]
    assert combined_status("final", t=1.0, t0_unix=0.0, workers=both, own_realtime=True).realtime is True
    one_not = [worker(0, True), worker(1, False)]
    assert combined_status("final", t=1.0, t0_unix=0.0, workers=one_not, own_realtime=True).realtime is False
    assert combined_status("final", t=1.0, t0_unix=0.0, workers=both, own_realtime=False).realtime is False
    assert combined_status("started", t=0.0, t0_unix=0.0, workers=(), own_realtime=True).realtime is None
    assert all_realtime([True, None]) is None and all_realtime([None, False]) is False


def test_status_lines_carry_it_and_old_ones_read_as_unknown():
    assert GeneratorStatus.model_validate_json('{"phase": "final", "t": 1, "t0_unix": 0}').realtime is None
    line = GeneratorStatus(phase="final", t=1.0, t0_unix=0.0, realtime=True)
    assert GeneratorStatus.model_validate_json(line.model_dump_json()).realtime is True


def test_the_summary_says_what_the_generator_obtained():
    from types import SimpleNamespace

    from loadtest.run.orchestrator import _generator_report

    first = GeneratorStatus(phase="started", t=0.0, t0_unix=100.0)
    for realtime in (True, False, None):
        final = GeneratorStatus(phase="final", t=5.0, t0_unix=100.0, realtime=realtime)
        assert _generator_report(SimpleNamespace(cpu_samples=[]), first, final, ()).realtime is realtime
    assert _generator_report(SimpleNamespace(cpu_samples=[]), first, None, ()).realtime is None
