"""Synthetic workloads of exact token lengths: random prompts, shared prefixes, multi-turn.

Input lengths count the tokens of the user message; the chat template's tokens come
on top and are recorded in ``expected_prompt_tokens`` (set ``include_template=true``
to make ``input_len`` the whole prompt instead). Output lengths are requested with
``max_tokens`` (plus ``ignore_eos`` when the target config asks for
exact output lengths).
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadtest.errors import WorkloadError
from loadtest.units import Seconds
from loadtest.workloads.base import Session, Turn, WorkloadContext, WorkloadPlan
from loadtest.workloads.lengths import LengthDistribution, LengthKind
from loadtest.workloads.tokens import PromptFactory, chat_overhead, count_tokens

COMPLETION_SEPARATOR = "\n\n"


class Spread(enum.StrEnum):
    UNIFORM = "uniform"
    NORMAL = "normal"


class _Synthetic(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    needs_tokenizer: ClassVar[bool] = True
    output_len: int = Field(128, ge=1)
    spread: float = Field(0.0, ge=0.0, lt=1.0)
    dist: Spread = Spread.UNIFORM

    @property
    def requests_per_session(self) -> int:
        return 1

    def _lengths(self, mean: int, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.spread == 0.0:
            dist = LengthDistribution(mean=mean)
        elif self.dist is Spread.UNIFORM:
            dist = LengthDistribution(kind=LengthKind.UNIFORM, mean=mean, range_ratio=self.spread)
        else:
            dist = LengthDistribution(kind=LengthKind.NORMAL, mean=mean, stddev=self.spread * mean)
        return dist.sample(rng, n)


def prompt_overhead(tokenizer: Any, *, chat: bool, system: str | None = None) -> int:
    """Tokens the server adds around the message content (template or special tokens)."""
    if chat:
        overhead = chat_overhead(tokenizer, system)
        if overhead is None:
            raise WorkloadError("the tokenizer has no chat template; use --endpoint completions")
        return overhead - (count_tokens(tokenizer, system) if system else 0)
    probe = "hello"
    specials = len(tokenizer.encode(probe, add_special_tokens=True)) - count_tokens(tokenizer, probe)
    if system is None:
        return specials
    joined = system + COMPLETION_SEPARATOR + probe
    return len(tokenizer.encode(joined, add_special_tokens=True)) - count_tokens(
        tokenizer, system
    ) - count_tokens(tokenizer, probe)


class RandomWorkload(_Synthetic):
    """Random-word prompts of exactly ``input_len`` tokens (``spread`` > 0 draws lengths
    uniformly within +-spread, or normally with stddev spread*len), ``output_len`` out."""

    kind: Literal["random"] = "random"
    input_len: int = Field(256, ge=1)
    include_template: bool = False

    def draw_lengths(self, count: int, seed: int, overhead: int) -> tuple[np.ndarray, np.ndarray]:
        """The message and output lengths of ``count`` requests (the draws of :meth:`build`,
        shared with the simulator's token-id plans); ``overhead``: the template's tokens."""
        rng = np.random.default_rng(seed)
        inputs = self._lengths(self.input_len, rng, count)
        outputs = self._lengths(self.output_len, rng, count)
        if self.include_template:
            inputs = inputs - overhead
            if (inputs < 1).any():
                raise WorkloadError(f"input_len must exceed the template's {overhead} tokens")
        return inputs, outputs

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        tokenizer = ctx.tokenizer()
        overhead = prompt_overhead(tokenizer, chat=ctx.chat)
        inputs, outputs = self.draw_lengths(count, ctx.seed, overhead)
        texts = PromptFactory(tokenizer, ctx.seed + 1).texts(inputs.tolist())
        sessions = tuple(
            Session(
                id=i,
                turns=(Turn(content=t, max_tokens=int(o), expected_prompt_tokens=int(n) + overhead),),
            )
            for i, (t, n, o) in enumerate(zip(texts, inputs, outputs))
        )
        return WorkloadPlan(sessions=sessions)


class SharedPrefixWorkload(_Synthetic):
    """``num_prefixes`` system prompts of ``prefix_len`` tokens shared by all requests
    (each picks one at random), plus a ``question_len``-token question: for prefix-cache
    studies."""

    kind: Literal["shared-prefix"] = "shared-prefix"
    num_prefixes: int = Field(8, ge=1, le=10_000)
    prefix_len: int = Field(512, ge=1)
    question_len: int = Field(32, ge=1)
    output_len: int = Field(64, ge=1)

    def draw_lengths(self, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each of ``count`` requests' prefix, question length and output length (the draws
        of :meth:`build`, shared with the simulator's token-id plans)."""
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, self.num_prefixes, size=count)
        return picks, self._lengths(self.question_len, rng, count), self._lengths(self.output_len, rng, count)

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        tokenizer = ctx.tokenizer()
        factory = PromptFactory(tokenizer, ctx.seed + 1)
        systems = factory.texts([self.prefix_len] * self.num_prefixes)
        overhead = prompt_overhead(tokenizer, chat=ctx.chat, system=systems[0])
        picks, questions, outputs = self.draw_lengths(count, ctx.seed)
        texts = factory.texts(questions.tolist())
        sessions = tuple(
            Session(
                id=i,
                system=int(p),
                turns=(
                    Turn(
                        content=t,
                        max_tokens=int(o),
                        expected_prompt_tokens=self.prefix_len + int(q) + overhead,
                    ),
                ),
            )
            for i, (t, p, q, o) in enumerate(zip(texts, picks, questions, outputs))
        )
        return WorkloadPlan(systems=tuple(systems), sessions=sessions)


class MultiTurnWorkload(_Synthetic):
    """Conversations of ``turns`` user messages of ``input_len`` tokens; each turn resends
    the whole history with the real previous answers, after ``think_time_s``; ``fanout``
    > 1 makes every turn after the first an agent step of that many parallel requests."""

    kind: Literal["multi-turn"] = "multi-turn"
    turns: int = Field(4, ge=1, le=64)
    input_len: int = Field(64, ge=1)
    output_len: int = Field(64, ge=1)
    system_len: int = Field(0, ge=0)
    think_time_s: Seconds = Field(0.0, ge=0.0)
    fanout: int = Field(1, ge=1, le=256)

    @property
    def requests_per_session(self) -> int:
        return 1 + (self.turns - 1) * self.fanout

    def draw_lengths(self, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The message and output lengths of every turn of ``count`` conversations, turn
        after turn (the draws of :meth:`build`, shared with the simulator's token-id plans)."""
        rng = np.random.default_rng(seed)
        n = count * self.turns
        return self._lengths(self.input_len, rng, n), self._lengths(self.output_len, rng, n)

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        tokenizer = ctx.tokenizer()
        factory = PromptFactory(tokenizer, ctx.seed + 1)
        systems = factory.texts([self.system_len]) if self.system_len else []
        system = systems[0] if systems else None
        overhead = prompt_overhead(tokenizer, chat=ctx.chat, system=system)
        inputs, outputs = self.draw_lengths(count, ctx.seed)
        texts = factory.texts(inputs.tolist())
        sessions = []
        for i in range(count):
            turns = []
            for j in range(self.turns):
                k = i * self.turns + j
                expected = int(inputs[k]) + self.system_len + overhead if j == 0 else None
                turns.append(Turn(content=texts[k], max_tokens=int(outputs[k]), expected_prompt_tokens=expected,
                                  fanout=self.fanout if j else 1))
            sessions.append(
                Session(
                    id=i,
                    turns=tuple(turns),
                    system=0 if system is not None else None,
                    think_time_s=self.think_time_s,
                )
            )
        return WorkloadPlan(systems=tuple(systems), sessions=tuple(sessions))
