"""The usage store on a real SQLite file: rows add up across writers and reopenings; a
process SIGKILLed mid-batch leaves a sound file with whole batches only; the ledger loses
at most its last interval and its audit trail still verifies up to the cut."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from serving.config.tenancy import AuditSpec, UsageSpec
from serving.tenancy.audit_files import verify_path
from serving.tenancy.ledger import Ledger
from serving.tenancy.metering import UsageMetrics
from serving.tenancy.records import RequestRecord
from serving.tenancy.rollup import ReplicaTime, Usage, UsageRow, report
from serving.tenancy.usage_store import UsageStore
from tests.paths import REPO

CHILD = Path(__file__).with_name("usage_writer_child.py")


def test_rows_add_up_across_writers_and_reopening(tmp_path):
    path = tmp_path / "usage.sqlite"
    a, b = UsageStore(path), UsageStore(path)
    a.add([UsageRow(60, "k", "m", Usage(1, 0, 10, 2, 5, 0.5))], [ReplicaTime(60, "r1", "cpu", 1, 30)])
    b.add([UsageRow(60, "k", "m", Usage(2, 1, 20, 0, 7, 1.5)), UsageRow(120, "k", "m", Usage(requests=1))])
    a.close(), b.close()
    reader = UsageStore(path, read_only=True)
    rows = reader.rows(since=0)
    assert [(r.minute, r.usage) for r in rows] == [(60, Usage(3, 1, 30, 2, 12, 2.0)), (120, Usage(requests=1))]
    assert reader.rows(since=125)[0].minute == 120  # the minute holding `since` is in
    assert reader.replica_time(0) == [ReplicaTime(60, "r1", "cpu", 1, 30)]
    assert reader._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_ledger_writes_the_store_and_the_audit_trail_with_redacted_content(tmp_path):
    spec = UsageSpec(path=tmp_path / "u.sqlite", flush_interval_s=0.05)
    audit = AuditSpec(enabled=True, dir=tmp_path / "audit", content=True)
    ledger = Ledger(UsageMetrics(CollectorRegistry()), spec, audit, writer="w1", home=tmp_path, accelerators=1)

    class Chunk:
        def __init__(self, text):
            self.deltas = (type("D", (), {"index": 0, "text": text})(),)

    for i in range(50):
        ledger.record(RequestRecord(
            at=time.time(), key="clinic", model="m", endpoint="chat", status=200 if i else 429,
            prompt_tokens=8, cached_tokens=3, output_tokens=4, engine_s=0.1, request_id=f"r{i}",
            prompt_ids=[1, 2], decode=lambda ids: "call 0912345678", chunks=[Chunk("mail a@b.vn"), Chunk(" ok")]))
    ledger.close()
    lines = report(UsageStore(spec.path, read_only=True).rows(0), ("key",))
    assert lines[0].usage == Usage(50, 1, 400, 150, 200, lines[0].usage.engine_s)
    verdicts, broken = verify_path(audit.dir)
    assert broken is None and verdicts[0].records == 50
    text = verdicts and Path(verdicts[0].file).read_text()
    assert "0912345678" not in text and "a@b.vn" not in text
    assert '"prompt":"call [REDACTED:phone]"' in text and '"output":["mail [REDACTED:email] ok"]' in text


def test_without_content_no_text_is_recorded(tmp_path):
    audit = AuditSpec(enabled=True, dir=tmp_path / "audit")
    ledger = Ledger(UsageMetrics(CollectorRegistry()), UsageSpec(enabled=False), audit, writer="w", home=tmp_path)
    assert not ledger.content
    ledger.record(RequestRecord(at=time.time(), key="k", model="m", endpoint="chat", status=200,
                                prompt_ids=[1], decode=lambda ids: "secret"))
    ledger.close()
    text = next((tmp_path / "audit").glob("*.jsonl")).read_text()
    assert "secret" not in text and '"prompt"' not in text


def test_a_store_that_cannot_be_written_is_loud_and_serving_goes_on(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    metrics = UsageMetrics(CollectorRegistry())
    ledger = Ledger(metrics, UsageSpec(path=blocker / "u.sqlite", flush_interval_s=0.05), AuditSpec(),
                    writer="w", home=tmp_path)
    ledger.record(RequestRecord(at=time.time(), key="k", model="m", endpoint="chat", status=200))
    time.sleep(0.3)
    ledger.close()
    assert metrics.write_failures.labels("usage")._value.get() >= 1
    assert metrics.requests.labels("k", "m")._value.get() == 1  # the counters still count


def _child(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=env)


def test_a_writer_killed_mid_batch_leaves_whole_batches_in_a_sound_file(tmp_path):
    path = tmp_path / "usage.sqlite"
    child = _child("batches", str(path), "500")
    assert child.stdout.readline().strip() == "open"
    time.sleep(1.0)  # many 500-row transactions; the kill lands in one of them
    child.send_signal(signal.SIGKILL)
    child.wait()
    store = UsageStore(path)  # reopened for writing: the WAL is recovered
    assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    requests = sum(r.usage.requests for r in store.rows(0))
    assert requests > 0 and requests % 500 == 0  # never part of a batch
    store.add([UsageRow(0, "after", "m", Usage(requests=1))])
    assert sum(r.usage.requests for r in store.rows(0)) == requests + 1


def _flushed(path) -> bool:
    """The store holds rows (the child's first flush is done)."""
    try:
        return any(UsageStore(path, read_only=True).rows(0))
    except sqlite3.Error:
        return False


def test_a_ledger_killed_loses_at_most_its_last_interval(tmp_path):
    path, interval = tmp_path / "usage.sqlite", 0.2
    child = _child("ledger", str(path), str(interval))
    recorded = int(child.stdout.readline())  # the child is up (its imports can take seconds)
    started = time.monotonic()
    while time.monotonic() - started < 1.5 or not _flushed(path):  # at least one flush behind it
        recorded = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()
    stored = sum(r.usage.requests for r in UsageStore(path, read_only=True).rows(0))
    lost = recorded - stored
    # One record every ~5 ms (plus the child's own overhead): an interval holds at most ~40.
    print(f"recorded {recorded}, stored {stored}, lost {lost} (flush every {interval}s)")
    assert 0 <= lost <= interval / 0.005 + 5
    verdicts, broken = verify_path(tmp_path / "audit")
    audited = sum(v.records for v in verdicts)
    assert broken is None or (broken.truncated and broken.line == audited + 2)  # only a cut last line
    assert recorded - audited <= interval / 0.005 + 5
