"""A worker of a distributed stage: Locust's ``WorkerRunner`` plus loadtest's messages.

It connects to the master, takes its share (the job, its sessions, its arrivals, its
part of the budget), answers clock probes, sets its stage clock's zero to the master's
(a Unix time) and runs its part exactly as the single-process generator runs a stage:
the same user, pacing and stop rules. It ships every raw record to the master in
batches and ends with a final report (counters, CPU, loop lag, how many records it
produced), then waits (bounded) for the master's quit.

Exit codes: 0 after a stage, 1 the share could not be taken (the reason is in the
worker's output), 4 no master answered within the connect timeout, 5 the master sent no
job or no start in time, or quit it before the start (the master says why).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

import gevent
import locust  # noqa: F401  (first: gevent monkey-patching must precede other imports)
from gevent.event import Event
from locust.env import Environment
from locust.rpc import Message
from locust.runners import WorkerRunner

from loadtest.analysis.records import RequestRecord, record_line
from loadtest.generator.bodies import FirstBodies
from loadtest.generator.context import RunContext
from loadtest.generator.exchange import resolve
from loadtest.generator.job import (
    CLOCK,
    EXIT_NO_MASTER,
    EXIT_NO_START,
    FINAL,
    FINAL_GRACE_S,
    JOB,
    READY,
    READY_TIMEOUT_S,
    RECORDS,
    START,
    STATUS,
    GeneratorJob,
    WorkerStatus,
)
from loadtest.generator.stage import LagProbe, cpu_seconds, drive_until_over, run_options, user_class
from loadtest.generator.user import OpenAIUser
from loadtest.workloads.base import WorkloadPlan

SHIP_INTERVAL_S = 0.25
SHIP_MAX_LINES = 500
QUIT_WAIT_S = 10.0


class RecordShipper:
    """``events.request`` listener sending each request's record (one JSON line) to the
    master, in batches. ``produced`` counts every record, shipped or not, so a batch
    lost on the way shows up as a mismatch at the master."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self.pending: list[str] = []
        self.produced = 0
        self._greenlet = gevent.spawn(self._loop)

    def on_request(self, context: dict | None = None, **_: object) -> None:
        record = (context or {}).get("loadtest_record")
        if isinstance(record, RequestRecord):
            self.pending.append(record_line(record))
            self.produced += 1
            if len(self.pending) >= SHIP_MAX_LINES:
                self.flush()

    def flush(self) -> None:
        if self.pending:
            lines, self.pending = self.pending, []
            self.runner.send_message(RECORDS, {"lines": lines})

    def _loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            self.flush()

    def close(self) -> None:
        self._greenlet.kill()
        self.flush()


class WorkerPart:
    """This worker's part of one stage, set up by the master's messages."""

    def __init__(self, runner: WorkerRunner, cls: type[OpenAIUser], realtime: bool | None = None) -> None:
        self.runner = runner
        self.cls = cls
        self.realtime = realtime
        self.job: GeneratorJob | None = None
        self.run: RunContext | None = None
        self.index = runner.worker_index
        self.started = Event()
        self.failure: str | None = None
        self.user_errors: list[str] = []
        self.shipper = RecordShipper(runner)
        env = runner.environment
        env.events.request.add_listener(self.shipper.on_request)
        env.events.user_error.add_listener(
            lambda user_instance, exception, tb: self.user_errors.append(f"{type(exception).__name__}: {exception}")
        )
        for kind, handler in ((JOB, self._job), (CLOCK, self._clock), (START, self._start)):
            runner.register_message(kind, handler)

    def _job(self, msg: Message, **_: object) -> None:
        try:
            self._take(msg.data)
        except Exception:  # a worker that cannot take its share ends at once, with the reason in its log
            self.failure = traceback.format_exc()
            return
        self.runner.send_message(READY, {})

    def _take(self, data: dict) -> None:
        job = GeneratorJob.model_validate_json(data["job"])
        config = job.config
        self.index = data["index"]
        self.run = RunContext(
            plan=WorkloadPlan.from_json(data["plan"]),  # its own requests only, drawn before the start
            arrivals=data["arrivals"],
            max_requests=data["max_requests"],
            load_duration_s=config.duration_s,
            stage=job.stage.index,
            slot=data["slot"],
            slots=data["slots"],
            **run_options(config, job.stage),
        )
        # Locust configures users through class attributes (set before any user spawns).
        self.cls.run_context = self.run
        self.cls.target = config.target
        self.cls.bodies = FirstBodies(self.run.plan, config.target)
        self.cls.addresses = resolve(config.target.url)
        self.cls.api_key = job.api_key
        self.cls.tenant_keys = job.tenant_keys
        self.cls.host = config.target.url
        self.job = job

    def _clock(self, msg: Message, **_: object) -> None:
        self.runner.send_message(CLOCK, {"sent": msg.data["sent"], "worker": time.time()})

    def _start(self, msg: Message, **_: object) -> None:
        assert self.run is not None
        self.run.start_at(msg.data["t0_unix"])
        self.started.set()

    def wait_for_start(self, timeout_s: float) -> bool:
        """Until the master starts the stage (``False``: it did not, or it quit us)."""
        deadline = time.monotonic() + timeout_s
        while not self.started.wait(0.1):
            if self.failure or time.monotonic() >= deadline or len(self.runner.greenlet) == 0:
                return False
        return True

    def serve(self) -> str:
        """Run this worker's part of the stage; returns why it stopped."""
        run, job = self.run, self.job
        assert run is not None and job is not None
        probe = LagProbe()
        cpu_at_start = cpu_seconds()
        reason = drive_until_over(run, self.runner, job.config, job.stage, tick=lambda: self._send(STATUS))
        lag = probe.stop()  # before stopping the users, which blocks the loop for a moment
        users = self.runner.user_count
        run.stop()
        self.runner.stop()  # users still in a request are cancelled (the hard stop), as in one process
        self.shipper.close()
        self._send(FINAL, users=users, cpu_seconds_load=cpu_seconds() - cpu_at_start, **lag.fields(),
                   stop_reason=reason, user_error_samples=tuple(self.user_errors[:5]))  # fmt: skip
        return reason

    def quit_wait_s(self) -> float:
        """How long to wait for the master's quit after the final report."""
        assert self.run is not None and self.job is not None
        return max(QUIT_WAIT_S, self.job.config.stage_time_limit_s - self.run.now() + FINAL_GRACE_S)

    def _send(self, kind: str, users: int | None = None, **final: object) -> None:
        run = self.run
        assert run is not None
        status = WorkerStatus(
            index=self.index,
            host=socket.gethostname(),
            pid=os.getpid(),
            t_unix=time.time(),
            issued=run.issued,
            completed=run.completed,
            in_flight=run.in_flight,
            users=self.runner.user_count if users is None else users,
            records=self.shipper.produced,
            cpu_seconds=cpu_seconds(),
            session_wraps=run.session_wraps,
            user_errors=len(self.user_errors),
            realtime=self.realtime,
            **final,
        )
        self.runner.send_message(kind, status.model_dump(mode="json", exclude_none=True))


def run_worker(master_host: str, master_port: int, *, connect_timeout_s: float, realtime: bool | None = None) -> int:
    """Serve one stage of the master at ``master_host:master_port`` (``realtime``: this
    process runs at real-time priority, as its reports say)."""
    cls = user_class()
    env = Environment(user_classes=[cls])
    try:
        with gevent.Timeout(connect_timeout_s):
            runner = env.create_worker_runner(master_host, master_port)
    except (gevent.Timeout, ConnectionError):
        print(f"no load-generator master answered at {master_host}:{master_port} "
              f"within {connect_timeout_s:g} s", file=sys.stderr)  # fmt: skip
        return EXIT_NO_MASTER
    part = WorkerPart(runner, cls, realtime)
    if not part.wait_for_start(connect_timeout_s + READY_TIMEOUT_S):  # the master's own two waits
        print(part.failure or f"the master at {master_host}:{master_port} started no stage", file=sys.stderr)
        runner.quit()
        return 1 if part.failure else EXIT_NO_START
    reason = part.serve()
    # Stay connected (heartbeating) until the master's quit: Locust takes a worker that
    # leaves early for lost and, a minute later, moves its users onto the others.
    runner.greenlet.join(timeout=part.quit_wait_s())
    print(f"worker {part.index}: {reason}", file=sys.stderr)
    return 0
