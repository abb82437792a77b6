"""Grading one reply against its item (pure): normalisation, exact match, the last
number, JSON field match."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass

from loadtest.quality.items import QualityItem, Scalar

_ARTICLES = frozenset({"a", "an", "the"})
_MARKUP = frozenset("`*_~^|")  # markdown, beside Unicode punctuation
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)


@dataclass(frozen=True)
class Grade:
    """Whether a reply is right, and what was compared (``got``) when it is not."""

    correct: bool
    got: str


def normalise(text: str) -> str:
    """SQuAD's answer normalisation, Unicode-aware: NFC, case-folded, punctuation and
    the articles a/an/the removed, whitespace collapsed: ``'**The Paris.**'`` -> ``'paris'``."""
    text = unicodedata.normalize("NFC", text).casefold()
    text = "".join(char for char in text if not (unicodedata.category(char).startswith("P") or char in _MARKUP))
    return " ".join(word for word in text.split() if word not in _ARTICLES)


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands commas allowed), or ``None``."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def first_json_object(text: str) -> dict | None:
    """The first JSON object in ``text`` (code fences ignored), or ``None``."""
    text = _FENCE.sub("", text)
    decoder = json.JSONDecoder()
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def same_value(expected: Scalar, got: object) -> bool:
    """A JSON field's value against the expected one: numbers by value (a number written
    as a string counts), anything else as normalised text."""
    if isinstance(expected, bool) or isinstance(got, bool) or expected is None or got is None:
        return expected == got
    if isinstance(expected, (int, float)):
        number = got if isinstance(got, (int, float)) else _number(got) if isinstance(got, str) else None
        return number is not None and math.isclose(float(number), float(expected), rel_tol=1e-9)
    if isinstance(got, (dict, list)):
        return False
    return normalise(str(expected)) == normalise(_plain(got) if isinstance(got, float) else str(got))


def _number(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", ""))
    except ValueError:
        return None


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def grade(item: QualityItem, reply: str) -> Grade:
    """Grade ``reply`` by the item's rule (:attr:`QualityItem.grading`)."""
    if item.answers is not None:
        got = normalise(reply)
        return Grade(got in {normalise(a) for a in item.answers}, got)
    if item.number is not None:
        number = last_number(reply)
        correct = number is not None and math.isclose(number, float(item.number), rel_tol=1e-9)
        return Grade(correct, "no number" if number is None else _plain(number))
    assert item.fields is not None
    found = first_json_object(reply)
    if found is None:
        return Grade(False, "no JSON object")
    wrong = [key for key, value in item.fields.items() if key not in found or not same_value(value, found[key])]
    if wrong:
        return Grade(False, ", ".join(f"{key}={json.dumps(found.get(key), ensure_ascii=False)}" for key in wrong))
    return Grade(True, json.dumps({key: found[key] for key in item.fields}, ensure_ascii=False))
