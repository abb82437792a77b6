"""A trace as the load tester replays it: which requests, when, in which sessions.

:func:`replay_plan` turns a trace file (:mod:`loadtest.workloads.traces`) and a
:class:`TraceSelection` into a :class:`ReplayPlan`: each request's arrival on the stage
clock (trace time from ``start``, divided by ``speed``), its lengths, block hashes,
session and turn. ``loadtest run --profile replay:...`` sends exactly this plan (the
``trace`` workload synthesises the prompts, the ``replay`` profile keeps the times), and
the simulator imports the same function, so both replay the same requests.

Sessions come from the trace (``chat_id``/``parent_chat_id`` or ``session_id``) or, with
``sessions=prefix``, are inferred from the block hashes: a request continues the session
of the latest earlier request whose blocks (all but its last, which may be partial) it
starts with, sharing at least two blocks (one shared block is typically a common system
prompt, as in Mooncake's traces). ``turn`` counts from 0, as in the records.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.errors import ConfigError
from loadtest.units import Seconds
from loadtest.workloads.traces import Trace, TraceFormat, TraceRow, parse_trace

MIN_SHARED_BLOCKS = 2


class SessionSource(enum.StrEnum):
    AUTO = "auto"  # the trace's own sessions when it has them, else none
    TRACE = "trace"  # the trace's own (an error when it has none)
    PREFIX = "prefix"  # inferred from shared block prefixes
    NONE = "none"  # every request its own session


class TraceSelection(BaseModel):
    """Which requests of a trace file are replayed: those with ``start <= t < end``
    (trace seconds since its first request; ``end`` None: to the last), their sessions
    (``sessions``) and the size of a hashed block in tokens (``block_size``; default: the
    format's, 512 for Mooncake, 16 for Qwen-Bailian)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    format: TraceFormat = TraceFormat.AUTO
    start: Seconds = Field(0.0, ge=0.0)
    end: Seconds | None = Field(None, gt=0.0)
    sessions: SessionSource = SessionSource.AUTO
    block_size: int | None = Field(None, ge=1, le=1 << 20)

    @model_validator(mode="after")
    def _window(self) -> TraceSelection:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end:g} s) must be after start ({self.start:g} s)")
        return self

    def selection(self) -> TraceSelection:
        """Only the selection's own fields (a profile or workload built on it has more)."""
        return TraceSelection(**{k: getattr(self, k) for k in TraceSelection.model_fields})


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One request to replay: lengths, block hashes, its session (numbered from 0 in
    order of first appearance) and its turn in that session (from 0)."""

    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    session: int
    turn: int


@dataclass(frozen=True)
class ReplayPlan:
    """The requests of a replay, in arrival order; ``arrivals[i]`` is request ``i``'s
    scheduled start (seconds on the stage clock)."""

    arrivals: np.ndarray
    requests: tuple[ReplayRequest, ...]
    block_size: int | None
    sessions: int
    source: str
    skipped: int = 0
    ignored_fields: tuple[str, ...] = ()

    @property
    def span_s(self) -> float:
        """The last arrival (the replay's load lasts at least this long)."""
        return float(self.arrivals[-1]) if len(self.arrivals) else 0.0

    @property
    def multi_turn(self) -> bool:
        return any(r.turn for r in self.requests)


@functools.lru_cache(maxsize=8)
def _read(path: str, fmt: TraceFormat, stamp: tuple[int, int]) -> Trace:
    del stamp  # part of the cache key only: a changed file is read again
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"trace {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    return parse_trace(text, path, fmt)


def read_trace(path: Path, fmt: TraceFormat = TraceFormat.AUTO) -> Trace:
    """The trace in ``path`` (read once while the file is unchanged)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ConfigError(f"trace {path}: cannot read it ({exc.strerror})") from None
    return _read(str(path), fmt, (stat.st_mtime_ns, stat.st_size))


def infer_sessions(rows: tuple[TraceRow, ...]) -> list[tuple[int, int]]:
    """(session, turn) of each row from shared block prefixes (see the module docstring)."""
    by_block: dict[int, int] = {}  # a block id -> the latest row ending (or ending but one) with it
    out: list[tuple[int, int]] = []
    sessions = 0
    for i, row in enumerate(rows):
        h, parent = row.hash_ids, None
        for k in range(len(h) - 1, MIN_SHARED_BLOCKS - 2, -1):  # h[: k + 1] shared, longest first
            j = by_block.get(h[k])
            if j is None:
                continue
            p = rows[j].hash_ids
            if k + 1 >= len(p) - 1 and h[: k + 1] == p[: k + 1]:
                parent = j
                break
        if parent is None:
            out.append((sessions, 0))
            sessions += 1
        else:
            out.append((out[parent][0], out[parent][1] + 1))
        for b in h[-2:]:
            by_block[b] = i
    return out


def _trace_sessions(rows: tuple[TraceRow, ...]) -> list[tuple[int, int]]:
    numbers: dict[str, int] = {}
    seen: dict[int, int] = {}
    out = []
    for row in rows:
        key = row.session if row.session is not None else f"\0row{len(out)}"
        session = numbers.setdefault(key, len(numbers))
        turn = row.turn - 1 if row.turn is not None else seen.get(session, 0)
        seen[session] = seen.get(session, 0) + 1
        out.append((session, turn))
    return out


def plan_of(trace: Trace, selection: TraceSelection, speed: float = 1.0) -> ReplayPlan:
    """The :class:`ReplayPlan` of an already read trace (pure)."""
    if speed <= 0:
        raise ConfigError(f"speed must be > 0, got {speed:g}")
    source = selection.sessions
    if source is SessionSource.TRACE and not trace.has_sessions:
        raise ConfigError(f"trace {selection.path} has no sessions (sessions=prefix infers them from block hashes)")
    if source is SessionSource.PREFIX and trace.block_size is None:
        raise ConfigError(f"trace {selection.path} has no block hashes to infer sessions from")
    if source is SessionSource.PREFIX:
        labels = infer_sessions(trace.rows)
    elif source is SessionSource.NONE or not trace.has_sessions:
        labels = [(i, 0) for i in range(len(trace.rows))]
    else:
        labels = _trace_sessions(trace.rows)
    end = np.inf if selection.end is None else selection.end
    picked = [i for i, r in enumerate(trace.rows) if selection.start <= r.t_s < end]
    if not picked:
        raise ConfigError(f"trace {selection.path}: no request between {selection.start:g} s and "
                          f"{'the end' if selection.end is None else f'{selection.end:g} s'} "
                          f"(it spans {trace.rows[-1].t_s:g} s)")  # fmt: skip
    renumber: dict[int, int] = {}
    requests = []
    for i in picked:
        r, (session, turn) = trace.rows[i], labels[i]
        requests.append(ReplayRequest(r.input_tokens, r.output_tokens, r.hash_ids,
                                      renumber.setdefault(session, len(renumber)), turn))  # fmt: skip
    arrivals = np.array([(trace.rows[i].t_s - selection.start) / speed for i in picked])
    block = selection.block_size or trace.block_size
    return ReplayPlan(arrivals, tuple(requests), block, len(renumber), str(selection.path), trace.skipped,
                      trace.ignored_fields)


def replay_plan(selection: TraceSelection, speed: float = 1.0) -> ReplayPlan:
    """The requests of a trace file to replay, with their arrivals (the simulator's entry)."""
    return plan_of(read_trace(selection.path, selection.format), selection, speed)
