"""Entry point of a load-generator process: ``python -m loadtest.generator JOB.json``.

Runs one stage with Locust's programmatic API (``Environment`` + local runner + our
``LoadTestShape``), writes request records and status lines, and exits by itself:
when the load is over and in-flight requests have drained, or at the hard time limit.
"""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching must precede other imports)

import json
import logging
import os
import sys
import time
from pathlib import Path

import gevent
from locust.env import Environment
from locust.shape import LoadTestShape

from loadtest.arrivals import schedule
from loadtest.generator.context import RunContext
from loadtest.generator.job import GeneratorJob, GeneratorStatus
from loadtest.generator.user import OpenAIUser
from loadtest.profiles import ClosedLoad, OpenLoad
from loadtest.records import RequestRecord, record_line
from loadtest.stats import percentile
from loadtest.workloads.base import WorkloadPlan

FAST_SPAWN_RATE = 10_000.0
POLL_S = 0.1
LAG_PROBE_S = 0.05


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


class LagProbe:
    """Measures how late the gevent loop wakes a sleeping greenlet (generator overload)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        while True:
            before = time.perf_counter()
            gevent.sleep(LAG_PROBE_S)
            self.lags.append(max(time.perf_counter() - before - LAG_PROBE_S, 0.0))

    def stop(self) -> tuple[float | None, float | None]:
        self._greenlet.kill()
        if not self.lags:
            return None, None
        data = sorted(self.lags)
        return percentile(data, 99.0), data[-1]


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def run_job(job: GeneratorJob) -> str:
    """Run one stage; returns why it stopped."""
    config, stage = job.config, job.stage
    plan = WorkloadPlan.model_validate_json(job.plan_path.read_text(encoding="utf-8"))
    load = stage.load
    arrivals = None
    if isinstance(load, OpenLoad):
        arrivals = schedule(
            start_rate=load.start_rate,
            end_rate=load.end_rate,
            burstiness=load.burstiness,
            seed=config.seed + 1000 * stage.index,
            duration_s=config.duration_s,
            count=config.max_requests,
        )
        users, spawn_rate = load.max_concurrency, FAST_SPAWN_RATE
    else:
        assert isinstance(load, ClosedLoad)
        users = load.users
        spawn_rate = users / load.ramp_up_s if load.ramp_up_s > 0 else FAST_SPAWN_RATE
    run = RunContext(
        plan=plan,
        arrivals=arrivals,
        max_requests=config.max_requests,
        load_duration_s=config.duration_s,
        stage=stage.index,
    )
    user_class = type(
        "LoadtestUser",
        (OpenAIUser,),
        {"abstract": False, "run_context": run, "target": config.target, "api_key": job.api_key, "host": config.target.url},
    )
    limit = config.stage_time_limit_s
    shape = StageShape(users, spawn_rate, stop_after_s=limit)
    env = Environment(user_classes=[user_class], shape_class=shape)
    writer = RecordWriter(job.records_path)
    env.events.request.add_listener(writer.on_request)
    user_errors: list[str] = []
    env.events.user_error.add_listener(
        lambda user_instance, exception, tb: user_errors.append(f"{type(exception).__name__}: {exception}")
    )
    status_file = job.status_path.open("a", encoding="utf-8")

    def status(phase: str, **extra: object) -> None:
        line = GeneratorStatus(
            phase=phase,
            t=run.now(),
            t0_unix=run.t0_unix,
            issued=run.issued,
            completed=run.completed,
            in_flight=run.in_flight,
            users=env.runner.user_count if env.runner else 0,
            session_wraps=run.session_wraps,
            user_errors=len(user_errors),
            **extra,
        )
        status_file.write(line.model_dump_json(exclude_none=True) + "\n")
        status_file.flush()

    runner = env.create_local_runner()
    probe = LagProbe()
    cpu_at_start = _cpu_seconds()
    run.start()
    status("started")
    runner.start_shape()
    drain_deadline: float | None = None
    reason = "limit"
    next_status = 1.0
    while True:
        gevent.sleep(POLL_S)
        now = run.now()
        if run.done():
            reason = "done"
            break
        if not run.issuing() and drain_deadline is None:
            drain_deadline = now + config.effective_drain_s
        if drain_deadline is not None and now >= drain_deadline:
            reason = "drain timeout"
            break
        if now >= limit:
            reason = "time limit"
            break
        if now > 5.0 and env.runner.user_count == 0 and run.issuing():
            reason = "no users alive (see the user errors above)"
            break
        if now >= next_status:
            status("running")
            next_status += 1.0
    run.stop()
    runner.quit()
    lag_p99, lag_max = probe.stop()
    cpu_at_end = _cpu_seconds()
    status(
        "final",
        cpu_seconds=cpu_at_end,
        cpu_seconds_load=cpu_at_end - cpu_at_start,
        loop_lag_p99_s=lag_p99,
        loop_lag_max_s=lag_max,
        stop_reason=reason,
    )
    for message in user_errors[:5]:
        print(f"user error: {message}", file=sys.stderr)
    writer.close()
    status_file.close()
    return reason


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m loadtest.generator JOB.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("locust.runners").setLevel(logging.ERROR)  # "spawn rate very high" is intended
    job = GeneratorJob.model_validate_json(Path(args[0]).read_text(encoding="utf-8"))
    reason = run_job(job)
    print(json.dumps({"stop_reason": reason}))
    return 0
