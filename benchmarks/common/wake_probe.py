"""A process that only sleeps, run beside a benchmark: how late this machine wakes anything
up (``python -m benchmarks.wake_probe``, as a child for the block of a ``with``)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common.servers import start, stop
from serving.cluster.netns import python_argv


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
        self._child = start(python_argv("benchmarks.wake_probe", [str(self.out)]), log=None)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._child is not None
        stop(self._child)
        data = json.loads(self.out.read_text())
        late = np.array(data["late_s"]) if data["late_s"] else np.zeros(1)
        self.figures = ProbeFigures(len(data["late_s"]), float(np.percentile(late, 50)),
                                    float(np.percentile(late, 99)), float(late.max()), data["run_queue_wait_s"])  # fmt: skip
