"""Figures by session, turn and agent step (pure).

A session is the requests sent as one conversation: grouped by ``session_seq`` (the
session as sent, unique in the stage) where known, else by ``session``. Per session:
its time (first request's start to last request's end) and turns; per turn: TTFT,
E2E and the think time before it (its start minus the end of the session's previous
turn, the last of its branches for an agent step); per agent step (a turn of
``fanout`` > 1 parallel requests): its width, its time (first start to last end) and
its straggler gap (last end minus first end: what waiting for every branch costs).
Only stages whose sessions have more than one request, or have agent steps, get them.
"""

from __future__ import annotations

import numpy as np

from loadtest.analysis.columns import NONE, RecordColumns
from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import FanoutFigures, SessionReport, TurnFigures

MAX_TURNS = 16  # turns past this one are pooled into it ("16+")


def session_keys(c: RecordColumns) -> np.ndarray:
    """Each record's session as sent (``session_seq``, else ``session``)."""
    assert c.session is not None and c.session_seq is not None
    return np.where(c.session_seq != NONE, c.session_seq, c.session)


def _groups(keys: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(keys, kind="stable")
    cuts = np.flatnonzero(np.diff(keys[order])) + 1
    return np.split(order, cuts)


def session_report(c: RecordColumns) -> SessionReport | None:
    """The session figures of some records (``None`` without session columns, or when
    every session is one request and none is an agent step)."""
    if c.session is None or c.turn is None or c.session_seq is None or not len(c):
        return None
    keys, turn, fanout = session_keys(c), c.turn, c.fanout if c.fanout is not None else np.full(len(c), NONE)
    steps = fanout != NONE
    groups = _groups(keys)
    if all(len(g) == 1 for g in groups) and not steps.any():
        return None
    ends = c.end_s
    durations, turn_counts, complete = [], [], 0
    think = np.full(len(c), np.nan)
    step_keys: dict[tuple[int, int], list[int]] = {}
    for rows in groups:
        durations.append(float(ends[rows].max() - c.start_s[rows].min()))
        turns = turn[rows]
        turn_counts.append(len(np.unique(turns)))
        complete += bool(c.ok[rows].all())
        last_end: dict[int, float] = {}
        for i in rows.tolist():
            last_end[int(turn[i])] = max(last_end.get(int(turn[i]), -np.inf), float(ends[i]))
            if steps[i]:
                step_keys.setdefault((int(keys[i]), int(turn[i])), []).append(i)
        for i in rows.tolist():
            previous = last_end.get(int(turn[i]) - 1)
            if previous is not None:
                think[i] = c.start_s[i] - previous
    by_turn = []
    pooled = np.minimum(turn, MAX_TURNS)
    ttft_ok = c.ok & ~np.isnan(c.ttft_s)
    for t in np.unique(pooled).tolist():
        mine = pooled == t
        ok = mine & c.ok
        by_turn.append(TurnFigures(
            turn=int(t), pooled=t == MAX_TURNS and bool((turn[mine] > MAX_TURNS).any()),
            requests=int(mine.sum()), ok=int(ok.sum()),
            ttft=Distribution.of(c.ttft_s[mine & ttft_ok]), e2e=Distribution.of(c.e2e_s[ok]),
            think=Distribution.of(think[mine & ~np.isnan(think)]),
        ))  # fmt: skip
    return SessionReport(
        sessions=len(groups),
        complete=complete,
        turns=Distribution.of(turn_counts),
        duration=Distribution.of(durations),
        think=Distribution.of(think[~np.isnan(think)]),
        by_turn=tuple(by_turn),
        fanout=_fanout(c, list(step_keys.values())),
    )


def _fanout(c: RecordColumns, steps: list[list[int]]) -> FanoutFigures | None:
    if not steps:
        return None
    ends, starts = c.end_s, c.start_s
    widths = [len(s) for s in steps]
    return FanoutFigures(
        steps=len(steps),
        requests=sum(widths),
        width=Distribution.of(widths),
        complete=sum(bool(c.ok[s].all()) for s in steps),
        step_time=Distribution.of(float(ends[s].max() - starts[s].min()) for s in steps),
        straggler=Distribution.of(float(ends[s].max() - ends[s].min()) for s in steps),
    )
