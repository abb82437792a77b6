"""The ``replay`` profile: a trace's requests sent at their recorded times.

``--profile replay:FILE,speed=2,start=10m,end=20m`` replays the requests of ``FILE``
(:mod:`loadtest.workloads.traces`) between ``start`` and ``end`` (trace time), ``speed``
times faster than recorded. The prompts come from the ``trace`` workload of the same
selection (the run's config fills it in); every arrival is bound to its own request, in
one process or dealt over distributed workers with its arrival, so the schedule is the
trace's exactly and each request's lateness is measured against its recorded time.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from loadtest.profiles.base import ReplayLoad, SingleStage
from loadtest.workloads.replay import ReplayPlan, TraceSelection, replay_plan


class ReplayProfile(SingleStage, TraceSelection):
    """Open loop: the requests of a trace file (Mooncake-style JSONL, BurstGPT or Azure
    CSV) at their recorded times from ``start`` to ``end``, ``speed`` times faster; each
    with its own prompt (lengths, shared prefixes, sessions: the ``trace`` workload)."""

    kind: Literal["replay"] = "replay"
    positional: ClassVar[str] = "path"
    max_error_rate: ClassVar[float | None] = None
    speed: float = Field(1.0, gt=0.0, le=1e6)
    max_concurrency: int = Field(256, ge=1, le=4096)

    def plan(self) -> ReplayPlan:
        """The requests and their arrivals (:func:`loadtest.workloads.replay.replay_plan`)."""
        return replay_plan(self.selection(), self.speed)

    def arrivals(self) -> np.ndarray:
        return self.plan().arrivals

    def _load(self) -> ReplayLoad:
        plan = self.plan()
        return ReplayLoad(requests=len(plan.requests), span_s=plan.span_s, max_concurrency=self.max_concurrency)

    def _label(self) -> str:
        plan = self.plan()
        speed = "" if self.speed == 1 else f", x{self.speed:g}"
        return f"replay {self.path.name} ({len(plan.requests)} requests, {plan.sessions} sessions{speed})"
