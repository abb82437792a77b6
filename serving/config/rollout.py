"""A model name's traffic split between two versions, and a rollout's plan (pure
config): what the stack serves (:class:`TrafficSplit`, in the stack config) and what
``serving rollout start`` asks for (:class:`RolloutPlan`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from serving.config.model_spec import Strict

NAME_PATTERN = r"^[A-Za-z0-9._:-]+$"
DEFAULT_STEPS = (5.0, 25.0, 50.0, 100.0)


class TrafficSplit(Strict):
    """Requests naming ``name`` go to adapter ``stable``, or to adapter ``canary`` for
    ``canary_percent`` of the sticky keys (a session, else an API key, else the request).

    ``name`` is either ``stable`` itself (a rollout of that adapter's next version) or
    a public alias no adapter holds (what a promoted rollout leaves: the old adapter
    unloaded, the name pointing at the new one)."""

    name: str = Field(pattern=NAME_PATTERN, max_length=128, description="the model id requests name")
    stable: str = Field(pattern=NAME_PATTERN, max_length=128, description="the adapter serving it now")
    canary: str | None = Field(None, pattern=NAME_PATTERN, max_length=128,
                               description="the adapter on trial (None: stable takes everything)")
    canary_percent: float = Field(0.0, ge=0.0, le=100.0, description="share of sticky keys sent to canary")

    @model_validator(mode="after")
    def _versions(self) -> "TrafficSplit":
        if self.canary is not None and self.canary in (self.stable, self.name):
            raise ValueError(f"the canary of {self.name!r} must be another adapter than {self.canary!r}")
        if self.canary is None and self.canary_percent:
            raise ValueError(f"{self.name!r} has no canary to send {self.canary_percent:g}% to")
        return self

    @property
    def versions(self) -> tuple[str, ...]:
        return (self.stable,) if self.canary is None else (self.stable, self.canary)


def split_problems(splits: tuple[TrafficSplit, ...], adapters: tuple[str, ...], bases: tuple[str, ...]) -> list[str]:
    """What is wrong with the splits of a stack serving ``adapters`` on ``bases``."""
    problems, seen = [], set()
    for split in splits:
        if split.name in seen:
            problems.append(f"model {split.name!r} has two traffic splits")
        seen.add(split.name)
        if split.name in bases:
            problems.append(f"{split.name!r} is a base model: only an adapter's name can be split")
        if split.name in adapters and split.name != split.stable:
            problems.append(f"{split.name!r} is an adapter: its split's stable version must be itself")
        problems += [f"the split of {split.name!r} names {v!r}, which is not a served adapter"
                     for v in split.versions if v not in adapters]
    return problems


class JudgeSettings(Strict):
    """How a canary is judged at each step (tolerances above the stable version's
    confidence interval: noise inside the intervals is never a regression)."""

    min_requests: int = Field(20, ge=1, description="canary requests needed before a step is judged")
    step_timeout_s: float = Field(120.0, gt=0, description="a step with fewer canary requests by then is "
                                  "judged on what it has (with no traffic nothing regresses)")
    error_rate_margin: float = Field(0.02, ge=0, le=1, description="error rate allowed above stable's")
    latency_ratio: float = Field(1.5, ge=1, description="canary p95 allowed up to this times stable's")
    quality_margin: float = Field(0.05, ge=0, le=1, description="probe score allowed below stable's")


class QualitySettings(Strict):
    """The quality probe (``loadtest quality``) asked of both versions once, before the
    canary's first request; its scores weigh in every step's verdict."""

    enabled: bool = True
    items: Path | None = Field(None, description="a JSONL evaluation set (None: the probe's bundled set)")
    limit: int | None = Field(40, ge=1, description="items asked of each version")
    concurrency: int = Field(2, ge=1)


class RolloutPlan(Strict):
    """``serving rollout start``: adapter ``canary`` (from ``path``) beside the adapter
    serving ``model`` now, receiving ``steps`` percent of its traffic in turn."""

    model: str = Field(pattern=NAME_PATTERN, max_length=128, description="the public model name")
    canary: str = Field(pattern=NAME_PATTERN, max_length=128, description="the new version's adapter name")
    path: Path | None = Field(None, description="its PEFT folder (None: the base spec's recipe of that name)")
    rank: int | None = Field(None, ge=1)
    steps: tuple[float, ...] = Field(DEFAULT_STEPS, min_length=1, description="canary percent per step")
    auto_promote: bool = Field(True, description="False: stop before 100% and wait for `rollout promote`")
    drain_s: float = Field(30.0, ge=0, description="wait for the retired version's requests before unloading it")
    judge: JudgeSettings = JudgeSettings()
    quality: QualitySettings = QualitySettings()

    @model_validator(mode="after")
    def _steps(self) -> "RolloutPlan":
        if any(not 0 < s <= 100 for s in self.steps):
            raise ValueError(f"steps are percentages in (0, 100], got {list(self.steps)}")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
            raise ValueError(f"steps must increase, got {list(self.steps)}")
        if self.steps[-1] != 100:
            raise ValueError(f"the last step must send the canary 100%, got {self.steps[-1]:g}")
        if self.canary == self.model:
            raise ValueError("the canary needs a name of its own (the public name stays the model's)")
        return self
