"""Entry point of a load-generator process.

    python -m loadtest.generator JOB.json                 one stage (single process or master)
    python -m loadtest.generator --worker HOST:PORT       a worker of a distributed stage
    ... --priority realtime                               claim real-time scheduling first

A single process runs the stage with Locust's programmatic API (``Environment`` + local
runner + our ``LoadTestShape``), writes request records and status lines, and exits by
itself: when the load is over and in-flight requests have drained, or at the hard time
limit. With ``config.generator.distributed`` the job's process is the master instead
(:mod:`loadtest.generator.master`) and the workers (:mod:`loadtest.generator.worker`)
send the requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import locust  # noqa: F401  (first: gevent monkey-patching must precede other imports)
from locust.env import Environment

from loadtest.config import parse_host_port
from loadtest.errors import ConfigError
from loadtest.generator.bodies import FirstBodies
from loadtest.generator.context import RunContext
from loadtest.generator.exchange import resolve
from loadtest.generator.job import GeneratorJob, GeneratorStatus
from loadtest.generator.priority import PRIORITIES, claim_priority
from loadtest.generator.stage import (
    FAST_SPAWN_RATE,
    START_MARGIN_S,
    LagProbe,
    RecordWriter,
    StageShape,
    StatusFile,
    cpu_seconds,
    drive_until_over,
    run_options,
    stage_load,
    user_class,
)
from loadtest.workloads.base import WorkloadPlan


def run_job(job: GeneratorJob, realtime: bool | None = None) -> str:
    """Run one stage in this process (``realtime``: at real-time priority); returns why it stopped."""
    config, stage = job.config, job.stage
    plan = WorkloadPlan.from_json(job.plan_path.read_text(encoding="utf-8"))  # drawn here, before the stage
    users, spawn_rate, arrivals = stage_load(config, stage)
    run = RunContext(
        plan=plan,
        arrivals=arrivals,
        max_requests=config.max_requests,
        load_duration_s=config.duration_s,
        stage=stage.index,
        **run_options(config, stage),
    )
    cls = user_class(run_context=run, target=config.target, bodies=FirstBodies(plan, config.target),
                     addresses=resolve(config.target.url), api_key=job.api_key, tenant_keys=job.tenant_keys,
                     host=config.target.url)  # fmt: skip
    # A fast spawn happens before the stage clock's zero, so no arrival waits for the users
    # to be created (hundreds of them take tens of milliseconds); a ramp starts at the zero.
    margin = START_MARGIN_S if spawn_rate >= FAST_SPAWN_RATE else 0.0
    shape = StageShape(users, spawn_rate, stop_after_s=config.stage_time_limit_s + margin)
    env = Environment(user_classes=[cls], shape_class=shape)
    writer = RecordWriter(job.records_path)
    env.events.request.add_listener(writer.on_request)
    user_errors: list[str] = []
    env.events.user_error.add_listener(
        lambda user_instance, exception, tb: user_errors.append(f"{type(exception).__name__}: {exception}")
    )
    status_file = StatusFile(job.status_path)

    def status(phase: str, **extra: object) -> None:
        status_file.write(
            GeneratorStatus(
                phase=phase,
                t=run.now(),
                t0_unix=run.t0_unix,
                issued=run.issued,
                completed=run.completed,
                in_flight=run.in_flight,
                users=env.runner.user_count if env.runner else 0,
                session_wraps=run.session_wraps,
                user_errors=len(user_errors),
                realtime=realtime,
                **extra,
            )
        )

    runner = env.create_local_runner()
    probe = LagProbe()
    cpu_at_start = cpu_seconds()
    run.start_at(time.time() + margin)
    status("started")
    runner.start_shape()
    reason = drive_until_over(run, runner, config, stage, tick=lambda: status("running"))
    lag = probe.stop()  # before stopping the users, which blocks the loop for a moment
    run.stop()
    runner.quit()
    cpu_at_end = cpu_seconds()
    status(
        "final",
        cpu_seconds=cpu_at_end,
        cpu_seconds_load=cpu_at_end - cpu_at_start,
        **lag.fields(),
        stop_reason=reason,
    )
    for message in user_errors[:5]:
        print(f"user error: {message}", file=sys.stderr)
    writer.close()
    status_file.close()
    return reason


def host_port(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.generator")
    parser.add_argument("job", nargs="?", type=Path, help="the stage's job file (JSON)")
    parser.add_argument("--worker", type=host_port, metavar="HOST:PORT", help="serve one stage of this master")
    parser.add_argument("--connect-timeout", type=float, default=60.0, help="seconds to wait for the master")
    parser.add_argument("--priority", choices=PRIORITIES, default="normal",
                        help="realtime: SCHED_RR 1 when the OS allows it (see loadtest.generator.priority)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if (args.job is None) == (args.worker is None):
        parser.error("give either JOB.json or --worker HOST:PORT")
    # `python -m loadtest.generator` claimed it before its imports; this says what it got
    realtime = claim_priority(args.priority)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("locust.runners").setLevel(logging.ERROR)  # "spawn rate very high" is intended
    if args.worker is not None:
        from loadtest.generator.worker import run_worker

        return run_worker(*args.worker, connect_timeout_s=args.connect_timeout, realtime=realtime)
    job = GeneratorJob.model_validate_json(args.job.read_text(encoding="utf-8"))
    if job.config.generator.distributed:
        from loadtest.generator.master import run_master

        return run_master(job, realtime)
    reason = run_job(job, realtime)
    print(json.dumps({"stop_reason": reason}))
    return 0
