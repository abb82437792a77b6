"""The contracts of the load generator (no gevent): the job file the orchestrator writes,
the status lines the generator writes back, and what a worker of a distributed stage
reports to its master (in Locust custom messages)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from loadtest.config import LoadTestConfig
from loadtest.profiles import StagePlan

# Locust custom messages of a distributed stage (master -> worker, then worker -> master).
JOB, CLOCK, START = "loadtest_job", "loadtest_clock", "loadtest_start"
READY, RECORDS, STATUS, FINAL = "loadtest_ready", "loadtest_records", "loadtest_status", "loadtest_final"
# Exit codes of a master (a distributed stage failed) and of a worker (no master; no start).
EXIT_STAGE_FAILED, EXIT_NO_MASTER, EXIT_NO_START = 3, 4, 5
READY_TIMEOUT_S = 60.0  # for the workers to take their shares, once connected
FINAL_GRACE_S = 15.0  # after the stage's hard limit, for the workers' final reports


class GeneratorJob(BaseModel):
    """One stage for one generator process (or, distributed, for the master).

    The generator reads the workload plan from ``plan_path``, appends one JSON line per
    request to ``records_path`` and one status line per second to ``status_path``.
    ``api_key`` and ``tenant_keys`` (tenant name -> its key) are the keys it sends: a
    results folder keeps the job :meth:`redacted`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: LoadTestConfig
    stage: StagePlan
    plan_path: Path
    records_path: Path
    status_path: Path
    api_key: str | None = None
    tenant_keys: dict[str, str] = {}

    def redacted(self) -> GeneratorJob:
        """The job without its keys (as a results folder keeps it)."""
        return self.model_copy(update={"api_key": None, "tenant_keys": {}})


class WorkerStatus(BaseModel):
    """A worker's counters (sent every second, and once more as its final report).

    ``index`` is Locust's worker index; ``t_unix`` the worker's wall clock when sent;
    ``cpu_seconds`` its process CPU so far; ``records`` the request records it has
    shipped to the master so far; ``realtime`` whether it runs at real-time priority
    (:mod:`loadtest.generator.priority`). The master adds the clock offset it measured
    (worker minus master, seconds) and that measurement's round trip."""

    model_config = ConfigDict(extra="ignore")

    index: int
    host: str = ""
    pid: int = 0
    t_unix: float
    issued: int = 0
    completed: int = 0
    in_flight: int = 0
    users: int = 0
    records: int = 0
    cpu_seconds: float = 0.0
    cpu_seconds_load: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    cpu_wait_s: float | None = None
    cpu_wait_at_lag_max_s: float | None = None
    session_wraps: int = 0
    user_errors: int = 0
    user_error_samples: tuple[str, ...] = ()
    stop_reason: str | None = None
    realtime: bool | None = None
    clock_offset_s: float | None = None
    clock_rtt_s: float | None = None


class GeneratorStatus(BaseModel):
    """One status line. ``phase`` is ``listening`` (a master, once, with its ``port``),
    ``started`` (once, at the stage clock's zero), ``running`` (every second) or
    ``final`` (once, at the end; ``error`` set when a distributed stage failed).
    A master's lines add up its workers' counters and list them in ``workers``.
    ``realtime``: the process ran at real-time priority (a master: it and every worker
    did; ``None``: not said)."""

    model_config = ConfigDict(extra="ignore")

    phase: str
    t: float
    t0_unix: float
    issued: int = 0
    completed: int = 0
    in_flight: int = 0
    users: int = 0
    cpu_seconds: float | None = None
    cpu_seconds_load: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    cpu_wait_s: float | None = None
    cpu_wait_at_lag_max_s: float | None = None
    session_wraps: int = 0
    user_errors: int = 0
    stop_reason: str | None = None
    realtime: bool | None = None
    port: int | None = None
    workers: tuple[WorkerStatus, ...] = ()
    error: str | None = None


class StatusTail:
    """Reads a generator's status lines as they are appended (the orchestrator's side)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[GeneratorStatus] = []
        self._tail_offset = 0

    def read(self) -> GeneratorStatus | None:
        try:
            with self.path.open("r", encoding="utf-8") as handle:
                handle.seek(self._tail_offset)
                chunk = handle.read()
        except FileNotFoundError:
            return None
        complete = chunk[: chunk.rfind("\n") + 1]
        self._tail_offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            if line.strip():
                self._lines.append(GeneratorStatus.model_validate_json(line))
        return self._lines[-1] if self._lines else None

    def port(self) -> int | None:
        """The port a master listens on, once it says so."""
        self.read()
        return next((s.port for s in self._lines if s.port is not None), None)

    def worker_samples(self, last: int | None = None) -> list[WorkerStatus]:
        """The workers' reports in the last ``last`` lines (default: all of them)."""
        lines = self._lines if last is None else self._lines[-last:]
        return [w for s in lines for w in s.workers]

    def first(self) -> GeneratorStatus | None:
        self.read()
        return next((s for s in self._lines if s.phase == "started"), None)

    def final(self) -> GeneratorStatus | None:
        self.read()
        return next((s for s in reversed(self._lines) if s.phase == "final"), None)
