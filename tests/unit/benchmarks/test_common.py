"""The benchmarks' common helpers (benchmarks/common/): CPU arithmetic on readings,
the sampler's window, stopping a child by its PID, the health wait, and when a script
re-runs itself in a loopback-only namespace (the re-exec itself replaced by a fake)."""

from __future__ import annotations

import subprocess
import sys
from collections import namedtuple

import psutil
import pytest

from benchmarks.common import isolation
from benchmarks.common.cpu import Sampler, between, busy_s, cpu_s, percent_of_cores
from benchmarks.common.model import MODEL, model_spec
from benchmarks.common.servers import ServerStartError, free_port, start, stop, wait_healthy
from serving.cluster import netns
from serving.cluster.netns import IN_NETNS_ENV

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal")


def test_busy_seconds_leave_out_idle_and_iowait():
    assert busy_s(Times(10.0, 1.0, 4.0, 100.0, 7.0, 0.5, 0.5, 0.0)) == pytest.approx(16.0)


def test_busy_seconds_without_an_iowait_field():
    NoIowait = namedtuple("NoIowait", "user system idle")
    assert busy_s(NoIowait(3.0, 1.0, 50.0)) == pytest.approx(4.0)


def test_percent_of_cores():
    assert percent_of_cores(3.0, 2.0, cores=2) == pytest.approx(75.0)
    assert percent_of_cores(1.0, 1.0, cores=1) == pytest.approx(100.0)


def test_between_takes_the_first_and_last_sample_inside_the_window():
    samples = [(0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (3.0, 7.0), (4.0, 11.0)]
    assert between(samples, 1.0, 3.0) == pytest.approx(5.0)
    assert between(samples, 0.5, 3.5) == pytest.approx(5.0)
    assert between(samples, 2.5, 3.5) == 0.0  # one sample: no growth measured
    assert between([], 0.0, 9.0) == 0.0


class FakeGoneProcess:
    """A process that ended: psutil raises on every reading."""

    def cpu_times(self):
        raise psutil.NoSuchProcess(pid=1)


def test_cpu_seconds_leave_out_a_process_that_is_gone():
    me = psutil.Process()
    alone = cpu_s([me])
    assert alone > 0
    assert cpu_s([FakeGoneProcess(), me]) >= alone
    assert cpu_s([FakeGoneProcess()]) == 0.0


def test_the_sampler_ends_when_its_reading_fails():
    readings = iter([1.0, 2.0, 3.0])

    def read() -> float:
        try:
            return next(readings)
        except StopIteration:
            raise psutil.NoSuchProcess(pid=1) from None

    sampler = Sampler(read, period_s=0.001)
    sampler._thread.join(timeout=10)
    assert not sampler._thread.is_alive()
    assert [v for _, v in sampler.samples] == [1.0, 2.0, 3.0]
    assert sampler.between(0.0, float("inf")) == pytest.approx(2.0)


def test_free_port_can_be_bound():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path):
    script = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert child.stdout.readline().strip() == "up"  # its handler is in place
    stop(child, timeout_s=0.5)
    assert child.returncode is not None and child.returncode < 0


def test_wait_healthy_names_a_server_that_exited(tmp_path):
    log = tmp_path / "server.log"
    child = start([sys.executable, "-c", "import sys; sys.exit(7)"], log=log)
    with pytest.raises(ServerStartError, match=r"the test server exited with code 7 .*server\.log"):
        wait_healthy(child, f"http://127.0.0.1:{free_port()}", name="the test server", timeout_s=30, log=log)


def test_wait_healthy_gives_up_after_its_timeout():
    child = start([sys.executable, "-c", "import time; time.sleep(60)"], log=None)
    try:
        with pytest.raises(ServerStartError, match="not healthy after 0.3 s"):
            wait_healthy(child, f"http://127.0.0.1:{free_port()}", name="the test server", timeout_s=0.3)
    finally:
        stop(child)


class FakeReexec:
    """Records the command a re-exec into a namespace would have replaced this process with."""

    def __init__(self) -> None:
        self.argv: list[str] | None = None

    def __call__(self, argv: list[str]) -> None:
        self.argv = argv


@pytest.fixture
def reexec(monkeypatch) -> FakeReexec:
    fake = FakeReexec()
    monkeypatch.setattr(isolation, "reexec_in_loopback_netns", fake)
    monkeypatch.delenv(IN_NETNS_ENV, raising=False)
    monkeypatch.setattr(netns, "interfaces", lambda: ["eth0", "lo"])  # as outside any namespace
    monkeypatch.setattr(sys, "argv", ["/repo/benchmarks/x.py", "--flag", "1"])
    return fake


def test_root_reruns_the_module_in_a_namespace(reexec, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    isolation.loopback_if_root("benchmarks.x")
    assert reexec.argv == [sys.executable, "-m", "benchmarks.x", "--flag", "1"]


def test_no_rerun_when_not_root_or_already_inside(reexec, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 1000)
    isolation.loopback_if_root("benchmarks.x")
    assert reexec.argv is None
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setenv(IN_NETNS_ENV, "1")
    isolation.loopback_if_root("benchmarks.x")
    isolation.loopback_holding_lock("/tmp/lock")
    assert reexec.argv is None
    monkeypatch.delenv(IN_NETNS_ENV)
    monkeypatch.setattr(netns, "interfaces", lambda: ["lo"])  # any loopback-only namespace (unshare -n)
    isolation.loopback_if_root("benchmarks.x")
    assert reexec.argv is None


def test_the_locked_rerun_holds_the_lock_inside_the_namespace(reexec):
    isolation.loopback_holding_lock("/tmp/lock")
    assert reexec.argv == ["flock", "/tmp/lock", sys.executable, "/repo/benchmarks/x.py", "--flag", "1"]


def test_the_default_model_spec_is_servings_default():
    assert model_spec().name == MODEL
