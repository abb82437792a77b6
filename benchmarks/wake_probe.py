"""The machine's own scheduling delay: how late a process that only sleeps wakes up.

A load generator cannot send a request earlier than the kernel runs it. Run beside a
benchmark (same priority), this probe sleeps ``--period`` at a time and records how
late each wake-up came, plus the CPU run-queue wait the kernel accounts to it
(``/proc/self/schedstat``). Its figures are the floor of any arrival lateness
measured in the same seconds: a generator late by as much as the probe was starved
by the machine, not by its own work.

    .venv/bin/python -m benchmarks.wake_probe OUT.json        (until SIGTERM)

:class:`WakeProbe` runs it as a child process and reads its figures back.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def run_queue_wait_s() -> float | None:
    """Seconds this process has spent runnable but waiting for a CPU (None: unknown)."""
    try:
        return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--period", type=float, default=0.01)
    args = parser.parse_args()
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    wait_at_start = run_queue_wait_s()
    late: list[float] = []
    while not stop:
        before = time.perf_counter()
        time.sleep(args.period)
        late.append(time.perf_counter() - before - args.period)
    wait_at_end = run_queue_wait_s()
    waited = None if wait_at_start is None or wait_at_end is None else wait_at_end - wait_at_start
    args.out.write_text(json.dumps({"late_s": late, "run_queue_wait_s": waited}))
    return 0


@dataclass(frozen=True)
class ProbeFigures:
    """What the probe saw: wake-ups, their lateness p50/p99/max, the run-queue wait."""

    wakeups: int
    late_p50_s: float
    late_p99_s: float
    late_max_s: float
    run_queue_wait_s: float | None

    def line(self) -> str:
        wait = "-" if self.run_queue_wait_s is None else f"{self.run_queue_wait_s:.2f} s"
        return (f"a sleeping process beside it woke late by p50 {self.late_p50_s * 1e3:.2f} ms, p99 "
                f"{self.late_p99_s * 1e3:.1f} ms, max {self.late_max_s * 1e3:.0f} ms "
                f"({self.wakeups} wake-ups; waited for a CPU {wait} in all)")  # fmt: skip


class WakeProbe:
    """``with WakeProbe(path) as probe: ...`` then ``probe.figures`` (the probe's child
    process runs for the block)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.figures: ProbeFigures | None = None
        self._child: subprocess.Popen | None = None

    def __enter__(self) -> WakeProbe:
        repo = Path(__file__).resolve().parents[1]
        self._child = subprocess.Popen([sys.executable, "-m", "benchmarks.wake_probe", str(self.out)], cwd=repo)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._child is not None
        self._child.terminate()
        self._child.wait(timeout=30)
        data = json.loads(self.out.read_text())
        late = np.array(data["late_s"]) if data["late_s"] else np.zeros(1)
        self.figures = ProbeFigures(len(data["late_s"]), float(np.percentile(late, 50)),
                                    float(np.percentile(late, 99)), float(late.max()), data["run_queue_wait_s"])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
