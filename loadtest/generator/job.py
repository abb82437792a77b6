"""The file contract between the orchestrator and a load-generator process (no gevent)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from loadtest.config import LoadTestConfig
from loadtest.profiles import StagePlan


class GeneratorJob(BaseModel):
    """One stage for one generator process.

    The generator reads the workload plan from ``plan_path``, appends one JSON line per
    request to ``records_path`` and one status line per second to ``status_path``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: LoadTestConfig
    stage: StagePlan
    plan_path: Path
    records_path: Path
    status_path: Path
    api_key: str | None = None


class GeneratorStatus(BaseModel):
    """One status line. ``phase`` is ``started`` (once, at the stage clock's zero),
    ``running`` (every second) or ``final`` (once, at the end)."""

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
    session_wraps: int = 0
    user_errors: int = 0
    stop_reason: str | None = None
