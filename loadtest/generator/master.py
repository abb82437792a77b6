"""The master of a distributed stage: Locust's ``MasterRunner`` plus loadtest's messages.

It waits for the expected workers, hands each its share (Locust's own dispatcher says how
many users each gets; :func:`loadtest.generator.workers.plan_shares` the arrivals and
budget that go with them), measures each worker's clock offset, fixes one stage clock
zero a moment ahead (a Unix time) and starts the shape. Workers ship their raw records
in batches, written here to the one records file as they arrive, and a final report
that says how many they sent: every count must match, every worker must report, and a
worker that goes missing or joins mid-stage fails the stage (exit code 3, ``error`` in
the final status line). Never Locust's statistics.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import IO

import gevent
import locust  # noqa: F401  (first: gevent monkey-patching must precede other imports)
from locust.env import Environment
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner

from loadtest.generator.job import (
    CLOCK,
    EXIT_STAGE_FAILED,
    FINAL,
    FINAL_GRACE_S,
    JOB,
    READY,
    READY_TIMEOUT_S,
    RECORDS,
    START,
    STATUS,
    GeneratorJob,
    GeneratorStatus,
    WorkerStatus,
)
from loadtest.generator.stage import (
    FAST_SPAWN_RATE,
    POLL_S,
    START_MARGIN_S,
    StageShape,
    StatusFile,
    cpu_seconds,
    run_options,
    stage_load,
    user_class,
)
from loadtest.generator.workers import Share, combined_status, plan_part, plan_shares
from loadtest.workloads.base import WorkloadPlan

LOST_AFTER_S = 15.0  # missing heartbeats for this long: the worker is lost
CLOCK_PROBES = 3


class StageFailed(Exception):
    """The distributed stage cannot be trusted (a worker lost, late or extra)."""


class Fleet:
    """The master's view of the stage's workers, fed by their messages."""

    def __init__(self, runner: MasterRunner, records: IO[str], expected: int) -> None:
        self.runner = runner
        self.records = records
        self.expected = expected
        self.members: list[str] = []  # client ids, in Locust's worker-index order
        self.ready: set[str] = set()
        self.latest: dict[str, WorkerStatus] = {}
        self.finals: dict[str, WorkerStatus] = {}
        self.received: Counter[str] = Counter()
        self.clocks: dict[str, tuple[float, float]] = {}  # client id -> (offset, round trip)
        self.missing_since: dict[str, float] = {}
        self.problem: str | None = None
        self.closed = False
        for kind, handler in ((READY, self._ready), (CLOCK, self._clock), (RECORDS, self._records),
                              (STATUS, self._status), (FINAL, self._final)):  # fmt: skip
            runner.register_message(kind, handler)
        runner.environment.events.worker_connect.add_listener(self._connected)

    # messages (run in Locust's receiving greenlet, one at a time)
    def _ready(self, msg: Message, **_: object) -> None:
        self.ready.add(msg.node_id)

    def _clock(self, msg: Message, **_: object) -> None:
        now = time.time()
        rtt = now - msg.data["sent"]
        offset = msg.data["worker"] - (msg.data["sent"] + now) / 2
        best = self.clocks.get(msg.node_id)
        if best is None or rtt < best[1]:
            self.clocks[msg.node_id] = (offset, rtt)

    def _records(self, msg: Message, **_: object) -> None:
        lines = msg.data["lines"]
        self.records.write("".join(line + "\n" for line in lines))
        self.records.flush()
        self.received[msg.node_id] += len(lines)

    def _status(self, msg: Message, **_: object) -> None:
        self.latest[msg.node_id] = self._measured(WorkerStatus.model_validate(msg.data), msg.node_id)

    def _final(self, msg: Message, **_: object) -> None:
        self.finals[msg.node_id] = self._measured(WorkerStatus.model_validate(msg.data), msg.node_id)

    def _measured(self, status: WorkerStatus, client_id: str) -> WorkerStatus:
        offset, rtt = self.clocks.get(client_id, (None, None))
        return status.model_copy(update={"clock_offset_s": offset, "clock_rtt_s": rtt})

    def _connected(self, client_id: str, **_: object) -> None:
        if self.closed and client_id not in self.members and not self.over():
            self.problem = f"a worker ({client_id}) connected mid-stage; start exactly {self.expected} workers"

    # phases
    def gather(self, timeout_s: float) -> list[str]:
        """Wait for the expected workers; returns their client ids in index order."""
        clients = self.runner.clients
        if not wait_until(lambda: len(clients.ready) >= self.expected, timeout_s):
            raise StageFailed(f"{len(clients.ready)} of {self.expected} load-generator workers connected "
                              f"within {timeout_s:g} s")  # fmt: skip
        gevent.sleep(0.2)  # a straggler beyond the expected count shows up now rather than mid-stage
        if len(clients.ready) > self.expected:
            raise StageFailed(f"{len(clients.ready)} workers connected, {self.expected} expected")
        self.closed = True
        self.members = sorted((c.id for c in clients.ready), key=self.runner.get_worker_index)
        return self.members

    def hand_out(self, job: GeneratorJob, plan: WorkloadPlan, shares: list[Share]) -> None:
        """Send every worker its job and share, and wait until all are ready."""
        body = job.model_dump_json()
        for client_id, share in zip(self.members, shares):
            data = {
                "index": self.runner.get_worker_index(client_id),
                "job": body,
                "plan": plan_part(plan, share).model_dump_json(),
                "slot": share.slot,
                "slots": share.slots,
                "max_requests": share.max_requests,
                "arrivals": share.arrivals,
            }
            self.runner.send_message(JOB, data, client_id)
        if not wait_until(lambda: self.ready >= set(self.members), READY_TIMEOUT_S):
            raise StageFailed(f"workers {self.indexes(set(self.members) - self.ready)} did not take their share")

    def measure_clocks(self) -> None:
        """A few round trips per worker; the shortest one bounds the offset's error."""
        for _ in range(CLOCK_PROBES):
            for client_id in self.members:
                self.runner.send_message(CLOCK, {"sent": time.time()}, client_id)
            gevent.sleep(0.02)
        wait_until(lambda: len(self.clocks) >= len(self.members), 1.0)

    def over(self) -> bool:
        return len(self.finals) >= len(self.members) > 0

    def check(self) -> None:
        """Raise when the stage can no longer be trusted."""
        if self.problem is not None:
            raise StageFailed(self.problem)
        now = time.monotonic()
        for client_id in self.members:
            if client_id in self.finals:
                continue
            client = self.runner.clients.get(client_id)
            if client is None:
                raise StageFailed(f"worker {self.indexes([client_id])} quit before its final report")
            if client.state != STATE_MISSING:
                self.missing_since.pop(client_id, None)
            elif now - self.missing_since.setdefault(client_id, now) > LOST_AFTER_S:
                raise StageFailed(f"worker {self.indexes([client_id])} sent no heartbeat for {LOST_AFTER_S:g} s")

    def verify(self) -> None:
        """Every record a worker says it sent was received, exactly once."""
        for client_id, final in self.finals.items():
            if final.records != self.received[client_id]:
                raise StageFailed(f"worker {final.index} sent {final.records} records, the master received "
                                  f"{self.received[client_id]}")  # fmt: skip

    def statuses(self, finals: bool = False) -> list[WorkerStatus]:
        source = self.finals if finals else {**self.latest, **self.finals}
        return [source[c] for c in self.members if c in source]

    def indexes(self, client_ids: Iterable[str]) -> str:
        return ", ".join(str(i) for i in sorted(self.runner.get_worker_index(c) for c in client_ids))


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        gevent.sleep(0.05)
    return True


def dispatched_users(env: Environment, members: list[str], users: int) -> list[int]:
    """How many users Locust's own dispatcher will give each worker (``members`` order):
    the same dispatcher class, the same workers, the final step of the same dispatch."""
    runner = env.runner
    assert isinstance(runner, MasterRunner)
    dispatcher = env.dispatcher_class(worker_nodes=[runner.clients[c] for c in members], user_classes=env.user_classes)
    dispatcher.new_dispatch(target_user_count=users, spawn_rate=float(users))  # one step: no waiting
    final: dict[str, dict[str, int]] = {}
    for final in dispatcher:
        pass
    return [sum(final.get(c, {}).values()) for c in members]


def run_master(job: GeneratorJob, realtime: bool | None = None) -> int:
    """Run one distributed stage as its master (``realtime``: at real-time priority); 0,
    or 3 when the stage failed."""
    config, stage, gen = job.config, job.stage, job.config.generator
    plan = WorkloadPlan.from_json(job.plan_path.read_text(encoding="utf-8"), draw_text=False)  # workers draw their own
    users, spawn_rate, arrivals = stage_load(config, stage)
    limit = config.stage_time_limit_s
    shape = StageShape(users, spawn_rate, stop_after_s=math.inf)  # the master ends the stage, not the shape
    env = Environment(user_classes=[user_class()], shape_class=shape)
    runner = env.create_master_runner(gen.master_host, gen.master_port)
    status = StatusFile(job.status_path)
    cpu_at_start = cpu_seconds()
    t0_unix = time.time()
    error = None
    with job.records_path.open("a", encoding="utf-8") as records:
        fleet = Fleet(runner, records, gen.total_workers)
        status.write(GeneratorStatus(phase="listening", t=0.0, t0_unix=t0_unix, port=runner.server.port))
        try:
            members = fleet.gather(gen.connect_timeout_s)
            shares = plan_shares(dispatched_users(env, members, users), arrivals=arrivals,
                                 max_requests=config.max_requests, sessions=len(plan.sessions),
                                 paired=bool(run_options(config, stage)["paired"]))  # fmt: skip
            fleet.hand_out(job, plan, shares)
            fleet.measure_clocks()
            t0_unix = time.time() + START_MARGIN_S
            runner.send_message(START, {"t0_unix": t0_unix})
            status.write(combined_status("started", t=0.0, t0_unix=t0_unix, workers=()))
            if spawn_rate < FAST_SPAWN_RATE:  # a ramp starts at the zero; a fast spawn just before it
                gevent.sleep(max(0.0, t0_unix - time.time()))
            runner.start_shape()
            deadline = t0_unix + limit + FINAL_GRACE_S
            next_tick = t0_unix + 1.0
            while not fleet.over():
                gevent.sleep(POLL_S)
                fleet.check()
                if time.time() >= deadline:
                    late = fleet.indexes(c for c in members if c not in fleet.finals)
                    raise StageFailed(f"workers {late} sent no final report by the stage's hard limit")
                if time.time() >= next_tick:
                    status.write(combined_status("running", t=time.time() - t0_unix, t0_unix=t0_unix,
                                                 workers=fleet.statuses(), own_realtime=realtime))  # fmt: skip
                    next_tick += 1.0
            fleet.verify()
        except StageFailed as exc:
            error = str(exc)
        finally:
            fleet.closed = True
            runner.quit()
    cpu = cpu_seconds()
    status.write(combined_status("final", t=time.time() - t0_unix, t0_unix=t0_unix, workers=fleet.statuses(finals=True),
                                 own_cpu=(cpu, cpu - cpu_at_start), own_realtime=realtime, error=error))  # fmt: skip
    status.close()
    for final in fleet.statuses(finals=True):
        for message in final.user_error_samples:
            print(f"worker {final.index} user error: {message}", file=sys.stderr)
    if error is not None:
        print(f"distributed stage failed: {error}", file=sys.stderr)
    return 0 if error is None else EXIT_STAGE_FAILED
