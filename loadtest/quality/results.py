"""Graded items -> the score, its Wilson interval, per category; the table and the JSON
(pure)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from rich.table import Table

from loadtest.quality.wilson import wilson_interval

SCHEMA_VERSION = 1


class ItemResult(BaseModel):
    """One item's reply and grade; ``got`` is what was compared, ``error`` says why the
    request failed (then the item is graded wrong)."""

    model_config = ConfigDict(frozen=True)

    id: str
    category: str
    correct: bool
    reply: str
    got: str
    error: str | None = None


class Score(BaseModel):
    """Right answers out of items, with the 95% Wilson interval of the proportion."""

    model_config = ConfigDict(frozen=True)

    correct: int
    items: int
    score: float
    low: float
    high: float

    @classmethod
    def of(cls, correct: int, items: int) -> Score:
        interval = wilson_interval(correct, items)
        return cls(correct=correct, items=items, score=interval.score, low=interval.low, high=interval.high)

    def describe(self) -> str:
        return f"{self.score:.1%} ({self.correct}/{self.items}), 95% CI [{self.low:.1%}, {self.high:.1%}]"


class QualityReport(BaseModel):
    """What ``loadtest quality`` measured (``--json``; schema version 1)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    target: str
    model: str
    items_file: str
    max_tokens: int
    overall: Score
    categories: dict[str, Score]
    errors: int
    min_score: float | None = None
    passed: bool | None = None
    results: tuple[ItemResult, ...]


def score_results(results: Sequence[ItemResult], *, target: str, model: str, items_file: str, max_tokens: int,
                  min_score: float | None = None) -> QualityReport:
    """The report of graded items; ``passed`` says whether the interval's lower bound
    reaches ``min_score`` (``None`` without one)."""
    by_category: dict[str, list[ItemResult]] = {}
    for result in results:
        by_category.setdefault(result.category, []).append(result)
    overall = Score.of(sum(r.correct for r in results), len(results))
    return QualityReport(
        target=target, model=model, items_file=items_file, max_tokens=max_tokens, overall=overall,
        categories={name: Score.of(sum(r.correct for r in group), len(group))
                    for name, group in sorted(by_category.items())},
        errors=sum(r.error is not None for r in results),
        min_score=min_score, passed=None if min_score is None else overall.low >= min_score,
        results=tuple(results),
    )


def score_table(report: QualityReport) -> Table:
    """The score and its interval, overall and per category."""
    table = Table(title=f"quality: {report.model} at {report.target}", title_justify="left")
    for column in ("category", "right", "items", "score", "95% CI (Wilson)"):
        table.add_column(column, justify="left" if column == "category" else "right")
    rows = [(name, score) for name, score in report.categories.items()] + [("all", report.overall)]
    for name, score in rows:
        style = "bold" if name == "all" else None
        table.add_row(name, str(score.correct), str(score.items), f"{score.score:.1%}",
                      f"{score.low:.1%} - {score.high:.1%}", style=style)
    return table


def wrong_answers(report: QualityReport, limit: int = 10) -> list[str]:
    """One line per wrong item (the first ``limit``): its id, what was compared, its reply."""
    lines = []
    for outcome in (r for r in report.results if not r.correct):
        detail = outcome.error or f"got {outcome.got!r}"
        reply = " ".join(outcome.reply.split())
        lines.append(f"{outcome.id}: {detail}" + (f"; reply {reply[:80]!r}" if reply and not outcome.error else ""))
    return lines[:limit] + ([f"... and {len(lines) - limit} more (--json FILE has them all)"]
                            if len(lines) > limit else [])
