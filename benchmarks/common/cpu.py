"""CPU time of processes, of a process tree and of the whole machine (psutil).

Readings are cumulative CPU seconds; a figure is the difference of two readings over
a window, taken by the caller (:func:`cpu_s`, :func:`machine_busy_s`) or by a
:class:`Sampler` thread when the window is only known afterwards (a child program's
load phase, told by its own report).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psutil

SAMPLE_PERIOD_S = 0.25


def cpu_s(processes: Iterable[psutil.Process]) -> float:
    """User + system CPU seconds of ``processes`` so far (a process gone is left out:
    its CPU is lost, not invented)."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def tree_cpu_s(process: psutil.Process) -> float:
    """CPU seconds of ``process`` and all its descendants (psutil.Error once it is gone)."""
    return cpu_s([process, *process.children(recursive=True)])


def busy_s(times: Any) -> float:
    """Busy seconds of a ``psutil.cpu_times()`` reading: all but idle and iowait (pure)."""
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, every core)."""
    return busy_s(psutil.cpu_times())


def percent_of_cores(busy_seconds: float, wall_s: float, cores: int | None = None) -> float:
    """Busy seconds over a window as % of all cores (default: this machine's) (pure)."""
    return 100.0 * busy_seconds / wall_s / (cores or os.cpu_count() or 1)


def between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """The growth of a cumulative reading between two instants, from its (time, value)
    samples: last minus first sample inside ``[start, end]``; 0 with fewer than two (pure)."""
    inside = [(t, v) for t, v in samples if start <= t <= end]
    return inside[-1][1] - inside[0][1] if len(inside) >= 2 else 0.0


class Sampler:
    """Samples ``read()`` every ``period_s`` in a thread, as (``time.time()``, value)
    pairs, until :meth:`stop` or until ``read`` raises ``psutil.Error``."""

    def __init__(self, read: Callable[[], float], period_s: float = SAMPLE_PERIOD_S) -> None:
        self.samples: list[tuple[float, float]] = []
        self._read, self._period = read, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @classmethod
    def of_tree(cls, pid: int) -> Sampler:
        """The CPU seconds of process ``pid`` and its descendants."""
        process = psutil.Process(pid)
        return cls(lambda: tree_cpu_s(process))

    @classmethod
    def of_machine(cls) -> Sampler:
        """The busy CPU seconds of the whole machine."""
        return cls(machine_busy_s)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self.samples.append((time.time(), self._read()))
            except psutil.Error:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between two wall-clock instants (nearest samples)."""
        return between(self.samples, start, end)
