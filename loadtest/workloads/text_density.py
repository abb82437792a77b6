"""How many tokens a language's text costs: tokens per character of the bundled prompt sets.

A cost per token hides the language: the same text is far more tokens in a language
the tokenizer saw little of. :func:`measure_text_density` counts, for some texts,
Unicode code points as written and the tokens the model's tokenizer makes of them
(without special tokens or the chat template, which add a fixed count per request, not
per character). The bundled prompt sets are named ``<language>-<topic>``, so their
densities are also pooled per language (:func:`language_densities`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from loadtest.workloads.base import Workload
from loadtest.workloads.files import BundledPrompts, bundled_sets, bundled_text, read_prompt_lines
from loadtest.workloads.tokenizer import load_tokenizer
from loadtest.workloads.tokens import TokenizerLike, count_tokens


class TextDensity(BaseModel):
    """Characters and tokens of some texts (a prompt set, or all sets of a language)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="prompt set, or the language when pooled")
    language: str
    prompts: NonNegativeInt
    characters: NonNegativeInt = Field(description="Unicode code points as written")
    tokens: NonNegativeInt = Field(description="without special tokens or chat template")

    @property
    def tokens_per_char(self) -> float | None:
        return None if self.characters == 0 else self.tokens / self.characters

    @property
    def chars_per_token(self) -> float | None:
        return None if self.tokens == 0 else self.characters / self.tokens


class TextDensities(BaseModel):
    """What turns a token cost into a character cost: the densities per language of the
    bundled prompt sets, and that of the run's workload (``None``: synthetic text)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokenizer: str = Field(description="the tokenizer's folder name")
    languages: tuple[TextDensity, ...] = ()
    workload: TextDensity | None = None

    def language(self, code: str) -> TextDensity | None:
        return next((d for d in self.languages if d.language == code), None)


def measure_text_density(texts: Iterable[str], tokenizer: TokenizerLike, *, name: str, language: str) -> TextDensity:
    """Characters and tokens of ``texts`` (pure: the tokenizer is passed in)."""
    texts = list(texts)
    return TextDensity(
        name=name, language=language, prompts=len(texts),
        characters=sum(len(t) for t in texts), tokens=sum(count_tokens(tokenizer, t) for t in texts),
    )  # fmt: skip


def pooled(densities: Sequence[TextDensity], *, name: str, language: str) -> TextDensity:
    """Several densities as one (sums of prompts, characters and tokens)."""
    return TextDensity(
        name=name, language=language, prompts=sum(d.prompts for d in densities),
        characters=sum(d.characters for d in densities), tokens=sum(d.tokens for d in densities),
    )  # fmt: skip


def language_of(prompt_set: str) -> str:
    """The language code a bundled set's name starts with (``vi-questions`` -> ``vi``)."""
    return prompt_set.split("-", 1)[0]


def language_densities(per_set: Sequence[TextDensity]) -> tuple[TextDensity, ...]:
    """``per_set`` pooled per language, in order of first appearance."""
    languages = dict.fromkeys(d.language for d in per_set)
    return tuple(
        pooled([d for d in per_set if d.language == lang], name=lang, language=lang) for lang in languages
    )


def prompt_set_texts(name: str) -> tuple[str, ...]:
    """Every user message of a bundled set, in file order."""
    lines = read_prompt_lines(bundled_text(name), f"prompt set {name}")
    return tuple(message for line in lines for message in line.messages)


def set_densities(tokenizer: TokenizerLike, sets: Sequence[str] | None = None) -> tuple[TextDensity, ...]:
    """The density of each bundled set (all of them by default)."""
    return tuple(
        measure_text_density(prompt_set_texts(s), tokenizer, name=s, language=language_of(s))
        for s in (bundled_sets() if sets is None else sets)
    )


def workload_density(workload: Workload | None, tokenizer: TokenizerLike) -> TextDensity | None:
    """The density of a workload's text: its bundled sets pooled; ``None`` for other
    workloads (synthetic token strings say nothing about a language)."""
    if not isinstance(workload, BundledPrompts):
        return None
    per_set = set_densities(tokenizer, workload.sets)
    languages = sorted({d.language for d in per_set})
    return pooled(per_set, name=",".join(workload.sets), language="+".join(languages))


def measure_densities(tokenizer_path: Path, workload: Workload | None = None) -> TextDensities:
    """Load the tokenizer in ``tokenizer_path`` and measure the bundled sets per language
    and ``workload`` (:class:`~loadtest.errors.WorkloadError` without a tokenizer there)."""
    tokenizer = load_tokenizer(tokenizer_path)
    return TextDensities(
        tokenizer=tokenizer_path.name,
        languages=language_densities(set_densities(tokenizer)),
        workload=workload_density(workload, tokenizer),
    )
