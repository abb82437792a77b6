"""Prompt workloads from JSONL: a user's file, or the prompt sets bundled with loadtest.

One JSON object per line: ``{"prompt": "..."}`` or ``{"turns": ["...", "..."]}``,
optionally with ``"system"``, ``"max_tokens"``, ``"think_time_s"`` (between turns) and
``"fanout"`` (an agent's parallel requests per turn: one number for the turns after the
first, or one per turn). Any other field is a request field sent with every turn of the
line as given (``tools``, ``response_format``, ``priority``, ``model`` for an adapter...);
one the load tester sets itself (``messages``, ``stream``...) is refused, naming the line.
Lines are shuffled with the run's seed and cycled, so a run with the same seed sends the
same prompts in the same order.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loadtest.client.body_fields import refused_fields
from loadtest.errors import UnknownNameError, WorkloadError
from loadtest.workloads.base import Session, Turn, WorkloadContext, WorkloadPlan


class PromptLine(BaseModel):
    """One line of a prompt file; fields it does not name are request fields (``extra``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    prompt: str | None = None
    turns: tuple[str, ...] | None = None
    system: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    think_time_s: float = Field(0.0, ge=0.0)
    fanout: int | tuple[int, ...] = 1

    @model_validator(mode="after")
    def _one_of(self) -> PromptLine:
        if (self.prompt is None) == (self.turns is None) or (self.turns is not None and not self.turns):
            raise ValueError('each line needs exactly one of "prompt" or a non-empty "turns"')
        fanouts = self.fanouts
        if len(fanouts) != len(self.messages) or min(fanouts) < 1 or max(fanouts) > 256:
            raise ValueError(f"fanout must be a number within 1..256 or one per turn ({len(self.messages)})")
        problems = refused_fields(self.extra, model_allowed=True)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def messages(self) -> tuple[str, ...]:
        return (self.prompt,) if self.prompt is not None else self.turns  # type: ignore[return-value]

    @property
    def fanouts(self) -> tuple[int, ...]:
        """Each turn's fan-out (a single number: every turn after the first)."""
        if isinstance(self.fanout, tuple):
            return self.fanout
        return (1,) + (self.fanout,) * (len(self.messages) - 1)

    @property
    def extra(self) -> dict:
        """The line's request fields (sent as given)."""
        return dict(self.model_extra or {})


def read_prompt_lines(text: str, source: str) -> list[PromptLine]:
    """Parse a JSONL prompt file's text; errors name the source and line."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            lines.append(PromptLine.model_validate_json(raw))
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            raise WorkloadError(f"{source}:{number}: {field + ': ' if field else ''}{message}") from None
    if not lines:
        raise WorkloadError(f"{source} holds no prompts")
    return lines


def plan_from_lines(lines: list[PromptLine], count: int, seed: int, default_max_tokens: int) -> WorkloadPlan:
    """``count`` sessions drawn from ``lines``: a seeded permutation, cycled."""
    rng = np.random.default_rng(seed)
    systems: dict[str, int] = {}
    sessions = []
    order: list[int] = []
    while len(order) < count:
        order.extend(rng.permutation(len(lines)).tolist())
    for i, index in enumerate(order[:count]):
        line = lines[index]
        system = None
        if line.system is not None:
            system = systems.setdefault(line.system, len(systems))
        turns = tuple(Turn(content=m, max_tokens=line.max_tokens or default_max_tokens, fanout=f)
                      for m, f in zip(line.messages, line.fanouts))
        sessions.append(Session(id=i, turns=turns, system=system, think_time_s=line.think_time_s,
                                extra_body=line.extra or None))
    return WorkloadPlan(systems=tuple(systems), sessions=tuple(sessions))


class JsonlWorkload(BaseModel):
    """Prompts from a JSONL file (``prompt`` or ``turns``, optional ``system``, ``max_tokens``,
    ``think_time_s``, ``fanout``; any other field is sent in the request body)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["jsonl"] = "jsonl"
    positional: ClassVar[str] = "path"
    needs_tokenizer: ClassVar[bool] = False
    path: Path
    output_len: int = Field(128, ge=1)

    @property
    def requests_per_session(self) -> int:
        lines = read_prompt_lines(self._text(), str(self.path))
        return max(1, round(sum(len(line.messages) for line in lines) / len(lines)))

    def _text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise WorkloadError(f"cannot read prompt file {self.path}: {exc.strerror}") from None

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        lines = read_prompt_lines(self._text(), str(self.path))
        return plan_from_lines(lines, count, ctx.seed, self.output_len)


BUNDLED = Path(__file__).resolve().parent.parent / "data" / "prompts"


def bundled_sets() -> tuple[str, ...]:
    """Names of the prompt sets shipped in ``loadtest/data/prompts``."""
    return tuple(sorted(p.name[: -len(".jsonl")] for p in BUNDLED.glob("*.jsonl")))


def bundled_text(name: str) -> str:
    if name not in bundled_sets():
        raise UnknownNameError("prompt set", name, bundled_sets())
    return (BUNDLED / f"{name}.jsonl").read_text(encoding="utf-8")


class BundledPrompts(BaseModel):
    """Prompt sets written for loadtest (English and Vietnamese questions, summaries and
    health-care administration requests); several sets are mixed: ``sets=a,b``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["prompts"] = "prompts"
    needs_tokenizer: ClassVar[bool] = False
    sets: tuple[str, ...] = ("en-questions",)
    output_len: int = Field(128, ge=1)

    @field_validator("sets", mode="before")
    @classmethod
    def _listify(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("sets")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        available = bundled_sets()
        if "all" in value:
            return available
        for name in value:
            if name not in available:
                raise ValueError(f"unknown prompt set {name!r}; valid: {', '.join(available)}, all")
        return value

    @property
    def requests_per_session(self) -> int:
        return 1

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        lines: list[PromptLine] = []
        for name in self.sets:
            lines.extend(read_prompt_lines(bundled_text(name), f"prompt set {name}"))
        return plan_from_lines(lines, count, ctx.seed, self.output_len)
