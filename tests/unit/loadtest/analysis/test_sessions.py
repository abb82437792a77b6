"""Figures by session, turn and agent step, from records."""

from __future__ import annotations

import pytest

from loadtest.analysis.columns import RecordColumns
from loadtest.analysis.sessions import session_report
from tests.unit.loadtest.loadtest_factories import ok_record


def test_turns_think_times_sessions_and_agent_steps():
    records = [
        # session 0: turn 0 (0.0 -> 0.5), an agent step of 2 branches at 1.0 (ends 1.3 and 1.8), turn 2 at 2.0
        ok_record(0.0, 0.1, [0.2, 0.2], session=0, turn=0, session_seq=0),
        ok_record(1.0, 0.1, [0.1, 0.1], session=0, turn=1, session_seq=0, branch=0, fanout=2),
        ok_record(1.0, 0.2, [0.3, 0.3], session=0, turn=1, session_seq=0, branch=1, fanout=2),
        ok_record(2.0, 0.3, [0.1], session=0, turn=2, session_seq=0),
        # the same pool session sent again: another session as sent
        ok_record(5.0, 0.1, [0.1], session=0, turn=0, session_seq=7),
    ]
    report = session_report(RecordColumns.of_records(records))
    assert report.sessions == 2 and report.complete == 2
    assert report.duration.max == pytest.approx(2.4) and report.turns.max == 3
    turns = {t.turn: t for t in report.by_turn}
    assert turns[0].requests == 2 and turns[1].requests == 2 and turns[2].requests == 1
    assert turns[1].think.min == pytest.approx(0.5)  # 1.0 - 0.5
    assert turns[2].think.min == pytest.approx(0.2)  # 2.0 - the step's last branch (1.8)
    assert turns[2].ttft.p50 == pytest.approx(0.3)
    f = report.fanout
    assert f.steps == 1 and f.requests == 2 and f.complete == 1
    assert f.step_time.max == pytest.approx(0.8) and f.straggler.max == pytest.approx(0.5)


def test_single_request_sessions_have_no_session_figures():
    records = [ok_record(i, 0.1, [0.1], session=i, session_seq=i) for i in range(3)]
    assert session_report(RecordColumns.of_records(records)) is None
