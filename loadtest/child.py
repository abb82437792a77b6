"""The load-generator child process: start, watch (CPU via psutil), stop by PID."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding the loadtest package


class GeneratorProcess:
    """``python -m loadtest.generator JOB.json`` with its output in ``log_path``."""

    def __init__(self, job_path: Path, log_path: Path, python: str | None = None) -> None:
        self.job_path = job_path
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
        self._log = self.log_path.open("ab")
        self._popen = subprocess.Popen(
            [self.python, "-m", "loadtest.generator", str(self.job_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
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
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def cpu_percentages(samples: list[tuple[float, float]], since_unix: float) -> list[tuple[float, float]]:
    """Per-interval CPU use in percent of one core, as (seconds since ``since_unix``, %)."""
    points = [(t, c) for t, c in samples if t >= since_unix - 1.0]
    out = []
    for (t0, c0), (t1, c1) in zip(points, points[1:]):
        if t1 - t0 > 0.2:
            out.append((t1 - since_unix, 100.0 * (c1 - c0) / (t1 - t0)))
    return out
