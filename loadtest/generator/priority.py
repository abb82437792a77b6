"""The load generator's CPU scheduling: real-time round-robin when the OS allows it
(standard library only: it runs before Locust, gevent or any thread starts).

Measured on a 2-core box whose vLLM CPU engine binds its OpenMP threads to both cores:
a 4-user test's generator used 2 % of one core yet waited 1605 ms for a CPU; its loop
lagged (p99 237 ms, an invalid measurement) and TTFT p95 read 1.2 s. Under
``chrt -r 1`` the same test was valid, TTFT p95 0.44 s. ``nice`` cannot help where
Linux's autogroup is on (it ranks processes only inside their session; ``nice -15``
still lagged 176 ms). So every generator process (single, master, each worker) asks for
``SCHED_RR`` at the lowest real-time priority, 1, at its very start: on Linux that is
the calling thread's policy, which threads started later inherit. Real-time throttling
(``/proc/sys/kernel/sched_rt_runtime_us``, 95 % by default) keeps a spinning generator
from locking a core, and a saturated generator is flagged invalid anyway. Without the
right (root or ``CAP_SYS_NICE`` on Linux; not in a container without a real-time
budget; not on other systems) the process stays normal and the run goes on.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

Priority = Literal["realtime", "normal"]
PRIORITIES: tuple[Priority, ...] = ("realtime", "normal")
RT_PRIORITY = 1  # the lowest real-time priority: above every normal process, below other real-time work
OPTION = "--priority"


def claim_priority(wanted: Priority) -> bool:
    """Whether this process now runs ``SCHED_RR`` (at priority 1 when claimed here).

    ``"realtime"`` asks for it and never fails: refused or unsupported, the process
    stays as it was. ``"normal"`` changes nothing (a process started under
    ``chrt -r`` keeps that policy and says so)."""
    if wanted == "realtime":
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(RT_PRIORITY))
            return True
        except (AttributeError, OSError):  # not Linux; no root or CAP_SYS_NICE (PermissionError); no RT budget
            pass
    return runs_realtime()


def runs_realtime() -> bool:
    """Whether the calling thread runs ``SCHED_RR`` (``False`` where that cannot be told)."""
    try:
        return os.sched_getscheduler(0) == os.SCHED_RR
    except (AttributeError, OSError):
        return False


def priority_from_argv(argv: Sequence[str]) -> Priority:
    """The ``--priority`` of a generator command line (``normal`` when absent), read
    before the imports that start threads, so before argparse sees it."""
    for i, arg in enumerate(argv):
        if arg == OPTION and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(OPTION + "="):
            value = arg.partition("=")[2]
        else:
            continue
        return "realtime" if value == "realtime" else "normal"
    return "normal"
