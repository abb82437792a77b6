"""Redaction of recorded content: configured patterns become ``[REDACTED:name]`` (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from serving.config.tenancy import RedactionPattern


class Redactor:
    """Applies the patterns in order (one compiled alternation: one pass over the text)."""

    def __init__(self, patterns: Iterable[RedactionPattern]) -> None:
        patterns = tuple(patterns)
        self._names = [p.name for p in patterns]
        self._regex = (re.compile("|".join(f"(?P<p{i}>(?:{p.regex}))" for i, p in enumerate(patterns)))
                       if patterns else None)

    def __call__(self, text: str) -> str:
        if self._regex is None or not text:
            return text
        return self._regex.sub(self._replace, text)

    def _replace(self, match: re.Match) -> str:
        for i, name in enumerate(self._names):  # a pattern may hold groups of its own
            if match.group(f"p{i}") is not None:
                return f"[REDACTED:{name}]"
        return "[REDACTED]"
