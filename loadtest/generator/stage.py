"""The parts of a stage that the single-process generator, the master and the workers
share (gevent side): the shape, the user class, the schedule, the lag probe and the loop
that decides when a process's part of the stage is over."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gevent
import locust  # noqa: F401  (first: gevent monkey-patching must precede other imports)
import numpy as np
from locust.runners import Runner
from locust.shape import LoadTestShape

from loadtest.analysis.arrivals import stage_arrivals
from loadtest.analysis.records import RequestRecord, record_line
from loadtest.analysis.stats import percentile
from loadtest.config import LoadTestConfig
from loadtest.generator.context import RunContext
from loadtest.generator.job import GeneratorStatus
from loadtest.generator.user import OpenAIUser
from loadtest.profiles import ClosedLoad, OpenLoad, ReplayLoad, ReplayProfile, StagePlan

FAST_SPAWN_RATE = 10_000.0
START_MARGIN_S = 0.5  # a fast spawn (and, distributed, the start message) comes this long before the zero
POLL_S = 0.1
LAG_PROBE_S = 0.05
USER_CLASS = "LoadtestUser"  # the same name on the master and every worker (Locust dispatches by name)
ALIVE_CHECK_AFTER_S = 5.0


class StageShape(LoadTestShape):
    """A constant user count (spawned at ``spawn_rate``) until ``stop_after_s``."""

    def __init__(self, users: int, spawn_rate: float, stop_after_s: float) -> None:
        super().__init__()
        self.users = users
        self.spawn_rate = spawn_rate
        self.stop_after_s = stop_after_s

    def tick(self) -> tuple[int, float] | None:
        if self.get_run_time() >= self.stop_after_s:
            return None
        return self.users, self.spawn_rate


class RecordWriter:
    """``events.request`` listener appending each request's record as one JSON line."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def on_request(self, context: dict | None = None, **_: object) -> None:
        record = (context or {}).get("loadtest_record")
        if isinstance(record, RequestRecord):
            self._file.write(record_line(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class StatusFile:
    """Appends :class:`GeneratorStatus` lines (flushed: the orchestrator tails them)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, status: GeneratorStatus) -> None:
        self._file.write(status.model_dump_json(exclude_none=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def cpu_wait_s() -> float | None:
    """Seconds this thread has been runnable but waiting for a CPU (Linux's
    ``/proc/thread-self/schedstat``; ``None`` elsewhere). A load generator kept off the
    CPU by other processes is late without being busy: this tells the two apart."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class LoopLag:
    """How late the event loop woke a sleeping greenlet (p99 and worst), how long the loop's
    thread waited for a CPU over the probe (``cpu_wait_s``) and within the probe interval
    (50 ms plus the lag) of the worst lag (``cpu_wait_at_lag_max_s``: as long as the lag,
    or longer, when the machine held the loop up rather than the generator's own work)."""

    p99_s: float | None = None
    max_s: float | None = None
    cpu_wait_s: float | None = None
    cpu_wait_at_lag_max_s: float | None = None

    def fields(self) -> dict[str, float | None]:
        """As status fields."""
        return {"loop_lag_p99_s": self.p99_s, "loop_lag_max_s": self.max_s, "cpu_wait_s": self.cpu_wait_s,
                "cpu_wait_at_lag_max_s": self.cpu_wait_at_lag_max_s}  # fmt: skip


class LagProbe:
    """Measures how late the gevent loop wakes a sleeping greenlet (generator overload),
    and how much of it was spent waiting for a CPU (machine contention)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.waits: list[float] = []
        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        while True:
            before, waited = time.perf_counter(), cpu_wait_s()
            gevent.sleep(LAG_PROBE_S)
            self.lags.append(max(time.perf_counter() - before - LAG_PROBE_S, 0.0))
            if waited is not None and (now := cpu_wait_s()) is not None:
                self.waits.append(now - waited)

    def stop(self) -> LoopLag:
        self._greenlet.kill()
        if not self.lags:
            return LoopLag()
        worst = max(range(len(self.lags)), key=self.lags.__getitem__)
        waits = self.waits if len(self.waits) >= len(self.lags) else None
        return LoopLag(percentile(sorted(self.lags), 99.0), self.lags[worst],
                       sum(waits) if waits else None, waits[worst] if waits else None)  # fmt: skip


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def stage_load(config: LoadTestConfig, stage: StagePlan) -> tuple[int, float, np.ndarray | None]:
    """The stage's user count (open loop: its concurrency cap), spawn rate and, open loop,
    its whole arrival schedule."""
    load = stage.load
    if isinstance(load, ReplayLoad):
        assert isinstance(config.profile, ReplayProfile)
        return load.max_concurrency, FAST_SPAWN_RATE, config.profile.arrivals()
    if isinstance(load, OpenLoad):
        arrivals = stage_arrivals(load, seed=stage.seed(config.seed), duration_s=config.duration_s,
                                  count=config.max_requests)
        return load.max_concurrency, FAST_SPAWN_RATE, arrivals
    assert isinstance(load, ClosedLoad)
    spawn_rate = load.users / load.ramp_up_s if load.ramp_up_s > 0 else FAST_SPAWN_RATE
    return load.users, spawn_rate, None


def run_options(config: LoadTestConfig, stage: StagePlan) -> dict[str, object]:
    """The :class:`RunContext` settings a stage's config decides (pairing, cancels, seed)."""
    cancel = config.cancel
    return {
        "paired": isinstance(stage.load, ReplayLoad),
        "cancel": None if cancel is None else (cancel.fraction, cancel.after_s),
        "seed": stage.seed(config.seed),
    }


def user_class(**attributes: object) -> type[OpenAIUser]:
    """The concrete user class; its pacing state and target are class attributes."""
    return type(USER_CLASS, (OpenAIUser,), {"abstract": False, **attributes})


def drive_until_over(
    run: RunContext, runner: Runner, config: LoadTestConfig, stage: StagePlan, tick: Callable[[], None]
) -> str:
    """Poll until this process's part of the stage is over; ``tick`` runs every second.
    Returns why it stopped."""
    ramp = stage.load.ramp_up_s if isinstance(stage.load, ClosedLoad) else 0.0
    limit = config.stage_time_limit_s
    drain_deadline: float | None = None
    next_tick = 1.0
    while True:
        gevent.sleep(POLL_S)
        now = run.now()
        if run.done():
            return "done"
        if not run.issuing() and drain_deadline is None:
            # Users may hold arrivals still to come (a replay's whole trace, taken at once):
            # the drain starts once the last of them is due.
            drain_deadline = max(now, run.last_arrival_s) + config.effective_drain_s
        if drain_deadline is not None and now >= drain_deadline:
            return "drain timeout"
        if now >= limit:
            return "time limit"
        if now > ramp + ALIVE_CHECK_AFTER_S and runner.user_count == 0 and run.issuing():
            return "no users alive (see the user errors above)"
        if now >= next_tick:
            tick()
            next_tick += 1.0
