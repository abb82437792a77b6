"""Prometheus text exposition format parser (pure).

Parses the version 0.0.4 text format (and the OpenMetrics subset servers commonly
emit): comments and ``# HELP``/``# TYPE`` lines are skipped, label values may contain
escaped quotes, backslashes and newlines, values may be ``NaN``/``+Inf``/``-Inf``, and
an optional timestamp is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from loadtest.errors import ParseError

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MetricSample:
    """One sample line: metric name, sorted labels, value."""

    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str | None:
        for name, value in self.labels:
            if name == key:
                return value
        return None


def parse_prometheus_text(text: str) -> list[MetricSample]:
    """All samples of an exposition; raises :class:`ParseError` naming the bad line."""
    samples = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            raise ParseError(f"line {number}: {exc}: {raw[:200]!r}") from None
    return samples


def _parse_line(line: str) -> MetricSample:
    brace = line.find("{")
    space = _first_space(line)
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        labels, end = _parse_labels(line, brace + 1)
        rest = line[end:]
    else:
        if space == -1:
            raise ValueError("sample without a value")
        name, rest = line[:space], line[space:]
        labels = ()
    if not _valid_name(name):
        raise ValueError(f"invalid metric name {name!r}")
    fields = rest.split()
    if not fields or len(fields) > 2:
        raise ValueError("expected a value and an optional timestamp")
    return MetricSample(name=name, labels=tuple(sorted(labels)), value=_parse_value(fields[0]))


def _first_space(line: str) -> int:
    positions = [p for p in (line.find(" "), line.find("\t")) if p != -1]
    return min(positions) if positions else -1


def _valid_name(name: str) -> bool:
    if not name or name[0].isdigit():
        return False
    return all(c.isalnum() or c in "_:" for c in name) and name.isascii()


def _parse_labels(line: str, pos: int) -> tuple[list[tuple[str, str]], int]:
    labels: list[tuple[str, str]] = []
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t,":
            pos += 1
        if pos >= n:
            raise ValueError("unterminated label set")
        if line[pos] == "}":
            return labels, pos + 1
        eq = line.index("=", pos)
        key = line[pos:eq].strip()
        if not key or not all(c.isalnum() or c == "_" for c in key):
            raise ValueError(f"invalid label name {key!r}")
        pos = eq + 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise ValueError(f"label {key!r} value is not quoted")
        value, pos = _parse_quoted(line, pos + 1)
        labels.append((key, value))


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_quoted(line: str, pos: int) -> tuple[str, int]:
    out: list[str] = []
    n = len(line)
    while pos < n:
        char = line[pos]
        if char == "\\" and pos + 1 < n:
            nxt = line[pos + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            pos += 2
        elif char == '"':
            return "".join(out), pos + 1
        else:
            out.append(char)
            pos += 1
    raise ValueError("unterminated label value")


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("nan",):
        return math.nan
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)


def select(
    samples: Iterable[MetricSample], name: str, **label_filter: str
) -> list[MetricSample]:
    """Samples named ``name`` whose labels include every ``label_filter`` pair."""
    return [
        s
        for s in samples
        if s.name == name and all(s.label(k) == v for k, v in label_filter.items())
    ]
