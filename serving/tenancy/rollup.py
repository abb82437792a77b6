"""Usage arithmetic (pure): requests -> per-minute rows, rows -> a report with costs.

The store keeps one row per (minute, key, model): requests, errors, prompt tokens
(and how many of them the engine found cached), output tokens and engine seconds, the
sums of the requests that ended in that minute. A report sums the rows of a window by
any of key and model.

Cost: the deployment's cost over the window, shared out by engine time. Each replica
records the seconds it ran and the accelerators it holds (a CPU "accelerator" is one
core), so the deployment cost = replica-seconds x accelerators x the price per
accelerator-hour / 3600 (idle time included: it is paid for); a tenant pays its share
of the engine seconds of the window (a request's engine time runs from its hand-off to
the engine to its end; batched requests overlap, so the shares, not the seconds, are
what counts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from serving.tenancy.records import RequestRecord

DIMENSIONS = ("key", "model")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Usage:
    """Sums over some requests."""

    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    engine_s: float = 0.0

    def add(self, other: "Usage") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass
class UsageRow:
    """The usage of one key on one model in one minute (``minute``: its start, unix s)."""

    minute: int
    key: str
    model: str
    usage: Usage = field(default_factory=Usage)


def minute_of(at: float) -> int:
    return int(at // 60) * 60


def rollup(records: Iterable[RequestRecord]) -> list[UsageRow]:
    """One row per (minute, key, model) of ``records``."""
    rows: dict[tuple[int, str, str], UsageRow] = {}
    for r in records:
        key = (minute_of(r.at), r.key, r.model)
        row = rows.get(key)
        if row is None:
            row = rows[key] = UsageRow(*key)
        u = row.usage
        u.requests += 1
        u.errors += r.status != 200
        u.prompt_tokens += r.prompt_tokens
        u.cached_tokens += r.cached_tokens or 0
        u.output_tokens += r.output_tokens
        u.engine_s += r.engine_s
    return list(rows.values())


@dataclass(frozen=True)
class ReplicaTime:
    """Seconds one replica ran in one minute, and what it holds."""

    minute: int
    writer: str
    accelerator: str
    accelerators: float
    seconds: float


@dataclass
class ReportLine:
    group: tuple[str, ...]
    usage: Usage
    share: float = 0.0  # of the window's engine seconds
    cost: float | None = None


def parse_since(text: str) -> float:
    """``90s``, ``15m``, ``24h``, ``7d`` -> seconds; ValueError otherwise."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 15m, 24h, 7d)")
    return float(match[1]) * _UNIT_S[match[2]]


def parse_by(text: str) -> tuple[str, ...]:
    by = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [d for d in by if d not in DIMENSIONS]
    if unknown or not by or len(set(by)) != len(by):
        raise ValueError(f"--by takes {', '.join(DIMENSIONS)} (comma-separated), not {text!r}")
    return by


def deployment_cost(replica_time: Iterable[ReplicaTime], prices: dict[str, float]) -> float | None:
    """What the replicas cost over their recorded seconds; None when a replica's
    accelerator has no price, or nothing was recorded."""
    total, any_time = 0.0, False
    for t in replica_time:
        if t.accelerator not in prices:
            return None
        total += t.seconds * t.accelerators * prices[t.accelerator] / 3600.0
        any_time = True
    return total if any_time else None


def report(rows: Iterable[UsageRow], by: Sequence[str], cost: float | None = None) -> list[ReportLine]:
    """Sums by ``by``, each with its share of the engine seconds and, with the
    deployment's ``cost`` over the window, its part of it; largest share first."""
    groups: dict[tuple[str, ...], Usage] = {}
    for row in rows:
        group = tuple(getattr(row, d) for d in by)
        groups.setdefault(group, Usage()).add(row.usage)
    total_s = sum(u.engine_s for u in groups.values())
    lines = []
    for group, usage in groups.items():
        share = usage.engine_s / total_s if total_s > 0 else 0.0
        lines.append(ReportLine(group, usage, share, None if cost is None else cost * share))
    return sorted(lines, key=lambda line: (-line.share, -line.usage.requests, line.group))


def total(lines: Iterable[ReportLine]) -> Usage:
    summed = Usage()
    for line in lines:
        summed.add(line.usage)
    return summed
