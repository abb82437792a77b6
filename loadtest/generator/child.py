"""The load-generator child processes: start, watch (CPU via psutil), stop by PID.

One stage runs one generator process or, distributed, a master plus local worker
processes (started once the master listens); ``loadtest worker`` keeps worker processes
serving a remote master stage after stage. Every one is told its scheduling priority
(``--priority``, :mod:`loadtest.generator.priority`), which it claims before anything else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from loadtest.config import GeneratorConfig
from loadtest.generator.job import EXIT_NO_MASTER, EXIT_NO_START
from loadtest.generator.priority import OPTION, Priority

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding the loadtest package
WILDCARD_HOSTS = frozenset({"", "*", "0.0.0.0", "::"})
WORKER_EXIT_GRACE_S = 3.0
RESTART_DELAY_S = 2.0


class GeneratorProcess:
    """``python -m loadtest.generator ARGS`` (a job file, or ``--worker HOST:PORT``) with
    its output in ``log_path`` (``None``: this process's own output)."""

    def __init__(self, args: list[str], log_path: Path | None, python: str | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.python = python or sys.executable
        self.cpu_samples: list[tuple[float, float]] = []
        self._popen: subprocess.Popen[bytes] | None = None
        self._process: psutil.Process | None = None
        self._log = None

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        env.setdefault("HF_HUB_OFFLINE", "1")
        self._log = self.log_path.open("ab") if self.log_path is not None else None
        self._popen = subprocess.Popen(
            [self.python, "-m", "loadtest.generator", *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log is not None else None,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        self._process = psutil.Process(self._popen.pid)

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def poll(self) -> int | None:
        assert self._popen is not None
        return self._popen.poll()

    def sample_cpu(self) -> None:
        """Record (unix time, CPU seconds used so far) while the process lives."""
        if self._process is None or self.poll() is not None:
            return
        try:
            times = self._process.cpu_times()
        except psutil.Error:
            return
        self.cpu_samples.append((time.time(), times.user + times.system))

    def wait(self, timeout_s: float) -> int | None:
        """The exit code once the process has ended within ``timeout_s``, else ``None``."""
        assert self._popen is not None
        try:
            return self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 5.0) -> int:
        """Terminate (then kill) the process if it still runs; returns its exit code."""
        assert self._popen is not None
        if self._popen.poll() is None:
            self._popen.terminate()
            try:
                self._popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait(timeout=grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self._popen.returncode

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class StageProcesses:
    """A stage's generator process or, distributed, its master plus ``workers`` local
    worker processes (started by :meth:`start_workers` once the master listens)."""

    def __init__(self, job_path: Path, folder: Path, generator: GeneratorConfig, python: str | None = None) -> None:
        self.main = GeneratorProcess([str(job_path), OPTION, generator.priority], folder / "generator.log", python)
        self.folder = folder
        self.generator = generator
        self.python = python
        self.workers: list[GeneratorProcess] = []
        self.workers_started = not generator.distributed or generator.workers == 0

    def start_workers(self, port: int) -> None:
        gen = self.generator
        args = ["--worker", master_address(gen.master_host, port), "--connect-timeout", f"{gen.connect_timeout_s:g}",
                OPTION, gen.priority]  # fmt: skip
        for i in range(self.generator.workers):
            worker = GeneratorProcess(args, self.folder / f"worker-{i}.log", self.python)
            worker.start()
            self.workers.append(worker)
        self.workers_started = True

    def crashed(self) -> str | None:
        """What went wrong when a local worker has exited with an error, else ``None``
        (a worker the master quit before the start is not a crash: the master says why)."""
        for i, worker in enumerate(self.workers):
            code = worker.poll()
            if code not in (None, 0, EXIT_NO_START):
                return f"load-generator worker process {i} (pid {worker.pid}) exited with code {code}:\n{worker.log_tail()}"
        return None

    def stop(self) -> int:
        """Stop the master (or generator), then the workers, which get a moment to end by
        themselves after the master's quit; returns the master's exit code."""
        code = self.main.stop()
        deadline = time.monotonic() + WORKER_EXIT_GRACE_S
        for worker in self.workers:
            worker.wait(max(0.0, deadline - time.monotonic()))
            worker.stop()
        return code


def master_address(host: str, port: int) -> str:
    """Where local workers reach a master bound to ``host`` (loopback for a wildcard)."""
    host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve_master(
    master: str,
    processes: int,
    *,
    connect_timeout_s: float,
    priority: Priority = "realtime",
    python: str | None = None,
    log: Callable[[str], object] = print,
    stop: threading.Event | None = None,
) -> int:
    """``loadtest worker``: keep ``processes`` worker processes serving the master at
    ``master`` (HOST:PORT), one stage per process, each restarted after its stage, until
    one finds no master within ``connect_timeout_s`` (or ``stop`` is set), each at
    ``priority``. Returns the worker stages served."""
    args = ["--worker", master, "--connect-timeout", f"{connect_timeout_s:g}", OPTION, priority]
    slots: list[GeneratorProcess | None] = [None] * processes
    restart_at = [0.0] * processes
    served = 0
    try:
        while stop is None or not stop.is_set():
            for i, proc in enumerate(slots):
                if proc is not None:
                    code = proc.poll()
                    if code is None:
                        continue
                    if code == EXIT_NO_MASTER:
                        log(f"worker process {i}: no master at {master} within {connect_timeout_s:g} s; stopping")
                        return served
                    served += code == 0
                    if code != 0:
                        log(f"worker process {i} (pid {proc.pid}) exited with code {code}")
                    slots[i] = None
                    restart_at[i] = time.monotonic() + RESTART_DELAY_S  # the last stage's master is gone by then
                if time.monotonic() >= restart_at[i]:
                    slots[i] = GeneratorProcess(args, None, python)
                    slots[i].start()
            time.sleep(0.2)
        return served
    finally:
        for proc in slots:
            if proc is not None:
                proc.stop()


def cpu_percentages(samples: list[tuple[float, float]], since_unix: float) -> list[tuple[float, float]]:
    """Per-interval CPU use in percent of one core, as (seconds since ``since_unix``, %)."""
    points = [(t, c) for t, c in samples if t >= since_unix - 1.0]
    out = []
    for (t0, c0), (t1, c1) in zip(points, points[1:]):
        if t1 - t0 > 0.2:
            out.append((t1 - since_unix, 100.0 * (c1 - c0) / (t1 - t0)))
    return out
