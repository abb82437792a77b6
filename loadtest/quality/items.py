"""The quality probe's items and their file (pure: parsing and validation, no I/O but
:func:`load_items`'s read).

One JSON object per line. Each item asks one question and says how its answer is graded,
by exactly one of:

- ``answers``: the reply, normalised (:func:`loadtest.quality.grading.normalise`), equals
  one of these;
- ``number``: the last number in the reply equals this one (numeric answers, graded as
  GSM8K graders do);
- ``fields``: the first JSON object in the reply has these fields with these values
  (strings compared normalised, numbers by value).

``system`` and ``shots`` (example ``[user, assistant]`` pairs sent before the question)
set the answer's form; ``source`` says where the item comes from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadtest.errors import ConfigError

BUNDLED_ITEMS = "quality-v1.jsonl"
"""The evaluation set shipped in ``loadtest/data/quality/``."""

Scalar = str | int | float | bool | None


class QualityItem(BaseModel):
    """One question of the evaluation set and how its answer is graded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    source: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    system: str | None = None
    shots: tuple[tuple[str, str], ...] = ()
    max_tokens: int | None = Field(None, ge=1, le=4096)
    answers: tuple[str, ...] | None = None
    number: int | float | None = None
    fields: dict[str, Scalar] | None = None

    @model_validator(mode="after")
    def _one_grading(self) -> QualityItem:
        given = [name for name in ("answers", "number", "fields") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError('exactly one of "answers", "number" or "fields" says how the answer is graded'
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.answers is not None and not any(a.strip() for a in self.answers):
            raise ValueError('"answers" needs at least one non-empty answer')
        if self.fields is not None and not self.fields:
            raise ValueError('"fields" needs at least one field')
        return self

    @property
    def grading(self) -> str:
        """``exact``, ``number`` or ``json``."""
        return "exact" if self.answers is not None else "number" if self.number is not None else "json"


def parse_items(lines: Iterable[str], origin: str = "items") -> tuple[QualityItem, ...]:
    """Items from JSONL lines (blank lines skipped); a bad line or a repeated id is a
    :class:`ConfigError` naming ``origin`` and the line."""
    items: list[QualityItem] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = QualityItem.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{origin}, line {number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'item'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"{origin}, line {number}: {problems}") from None
        if item.id in seen:
            raise ConfigError(f"{origin}, line {number}: id {item.id!r} already used on line {seen[item.id]}")
        seen[item.id] = number
        items.append(item)
    if not items:
        raise ConfigError(f"{origin}: no items")
    return tuple(items)


def load_items(path: Path | None = None) -> tuple[QualityItem, ...]:
    """The items of ``path``, or the bundled set when ``path`` is ``None``."""
    if path is None:
        try:
            text = resources.files("loadtest").joinpath("data", "quality", BUNDLED_ITEMS).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"the bundled {BUNDLED_ITEMS} is missing from this install ({exc})") from None
        return parse_items(text.splitlines(), BUNDLED_ITEMS)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"items file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read items file {path}: {exc}") from None
    return parse_items(text.splitlines(), str(path))


def select(items: tuple[QualityItem, ...], *, limit: int | None = None,
           categories: Iterable[str] | None = None) -> tuple[QualityItem, ...]:
    """The items of ``categories`` (all when ``None``; an unknown one is an error), then
    the first ``limit`` of them taken in turn from each category (a small subset keeps
    every category)."""
    if categories is not None:
        wanted = tuple(categories)
        known = {item.category for item in items}
        if unknown := sorted(set(wanted) - known):
            raise ConfigError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; "
                              f"valid: {', '.join(sorted(known))}")
        items = tuple(item for item in items if item.category in wanted)
    if limit is None or limit >= len(items):
        return items
    if limit < 1:
        raise ConfigError("--limit must be >= 1")
    by_category: dict[str, list[QualityItem]] = {}
    for item in items:
        by_category.setdefault(item.category, []).append(item)
    chosen: list[QualityItem] = []
    depth = 0
    while len(chosen) < limit:
        for group in by_category.values():
            if depth < len(group) and len(chosen) < limit:
                chosen.append(group[depth])
        depth += 1
    return tuple(chosen)
