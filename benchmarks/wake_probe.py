"""The machine's own scheduling delay: how late a process that only sleeps wakes up.

A load generator cannot send a request earlier than the kernel runs it. Run beside a
benchmark (same priority), this probe sleeps ``--period`` at a time and records how
late each wake-up came, plus the CPU run-queue wait the kernel accounts to it
(``/proc/self/schedstat``). Its figures are the floor of any arrival lateness
measured in the same seconds: a generator late by as much as the probe was starved
by the machine, not by its own work.

    .venv/bin/python -m benchmarks.wake_probe OUT.json        (until SIGTERM)

:class:`benchmarks.common.wake_probe.WakeProbe` runs it as a child process and reads
its figures back.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path


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


if __name__ == "__main__":
    sys.exit(main())
