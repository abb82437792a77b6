"""The durable usage store: one SQLite file, written by every replica process of a
machine, read by ``serving usage``.

WAL mode (readers never block the writers; each replica's batch is one short write
transaction; ``busy_timeout`` makes a writer wait its turn instead of failing) with
``synchronous=NORMAL``: a committed batch survives a crash of any process (SIGKILL);
only a crash of the machine itself can lose the last commits. A batch is one
transaction: it is in the file whole or not at all. Rows add up
(``INSERT ... ON CONFLICT DO UPDATE``), so several writers share a (minute, key, model)
row. Blocking calls: use it from the ledger's thread, never on an event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from serving.tenancy.rollup import ReplicaTime, Usage, UsageRow

BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    minute INTEGER NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, engine_s REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, key, model));
CREATE TABLE IF NOT EXISTS replica_time (
    minute INTEGER NOT NULL, writer TEXT NOT NULL, accelerator TEXT NOT NULL,
    accelerators REAL NOT NULL, seconds REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, writer));
"""

_ADD_USAGE = """
INSERT INTO usage (minute, key, model, requests, errors, prompt_tokens, cached_tokens, output_tokens, engine_s)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, key, model) DO UPDATE SET
    requests = requests + excluded.requests, errors = errors + excluded.errors,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens,
    cached_tokens = cached_tokens + excluded.cached_tokens,
    output_tokens = output_tokens + excluded.output_tokens, engine_s = engine_s + excluded.engine_s
"""

_ADD_TIME = """
INSERT INTO replica_time (minute, writer, accelerator, accelerators, seconds) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (minute, writer) DO UPDATE SET seconds = seconds + excluded.seconds,
    accelerator = excluded.accelerator, accelerators = excluded.accelerators
"""


class UsageStore:
    """One connection to the store (one thread uses it)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"no usage store at {self.path}")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def add(self, rows: Iterable[UsageRow], replica_time: Iterable[ReplicaTime] = ()) -> None:
        """Add ``rows`` and replica seconds in one transaction."""
        usage = [(r.minute, r.key, r.model, r.usage.requests, r.usage.errors, r.usage.prompt_tokens,
                  r.usage.cached_tokens, r.usage.output_tokens, r.usage.engine_s) for r in rows]
        times = [(t.minute, t.writer, t.accelerator, t.accelerators, t.seconds) for t in replica_time]
        if not usage and not times:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(_ADD_USAGE, usage)
            self._db.executemany(_ADD_TIME, times)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def rows(self, since: float) -> list[UsageRow]:
        """Rows of the minutes from ``since`` (unix time) on (the minute holding it included)."""
        cursor = self._db.execute(
            "SELECT minute, key, model, requests, errors, prompt_tokens, cached_tokens, output_tokens, engine_s "
            "FROM usage WHERE minute >= ? ORDER BY minute", (int(since // 60) * 60,))
        return [UsageRow(m, k, mo, Usage(*rest)) for m, k, mo, *rest in cursor]

    def replica_time(self, since: float) -> list[ReplicaTime]:
        cursor = self._db.execute(
            "SELECT minute, writer, accelerator, accelerators, seconds FROM replica_time WHERE minute >= ?",
            (int(since // 60) * 60,))
        return [ReplicaTime(*row) for row in cursor]

    def close(self) -> None:
        self._db.close()
