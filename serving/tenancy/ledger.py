"""One replica's ledger: counts each request, and writes the usage store and the audit
trail in a background thread.

On the event loop, :meth:`Ledger.record` costs O(1): the Prometheus counters and one
``deque.append``. A daemon thread wakes every ``usage.flush_interval_s``, takes what is
pending and writes it: the store's rows (one transaction,
:mod:`serving.tenancy.usage_store`) and the audit lines (one write and fsync,
:mod:`serving.tenancy.audit_files`), decoding and redacting recorded content there. So a
crash of the process loses at most the records of the last interval (those not yet
written). A write that fails is logged, counted (``serveout_usage_write_failures_total``)
and retried at the next wake-up; serving goes on. At most :data:`MAX_PENDING` records
wait: past that the oldest are dropped, and said so in the log.
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import threading
import time
from pathlib import Path

from serving.config.tenancy import AuditSpec, UsageSpec
from serving.tenancy.audit_files import AuditWriter
from serving.tenancy.metering import UsageMetrics
from serving.tenancy.records import RequestRecord, output_text
from serving.tenancy.redaction import Redactor
from serving.tenancy.rollup import ReplicaTime, minute_of, rollup
from serving.tenancy.usage_store import UsageStore

log = logging.getLogger("serveout.usage")

MAX_PENDING = 100_000
FAILURE_LOG_EVERY = 60
"""A write that keeps failing is logged at its first failure and every this many after."""
REPLICA_TIME_EVERY_S = 60.0
"""An idle replica records its running time this often (with traffic: at every write)."""


def audit_fields(r: RequestRecord, redact: Redactor | None) -> dict:
    """The audit line of ``r`` (without ``prev``): no content unless it was captured."""
    fields = {
        "time": datetime.datetime.fromtimestamp(r.at, datetime.UTC).isoformat(timespec="milliseconds"),
        "request_id": r.request_id, "key": r.key, "model": r.model, "endpoint": r.endpoint,
        "status": r.status, "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
        "output_tokens": r.output_tokens, "latency_s": round(r.latency_s, 4), "engine_s": round(r.engine_s, 4),
    }
    if redact is not None and r.prompt_ids is not None and r.decode is not None:
        fields["prompt"] = redact(r.decode(list(r.prompt_ids)))
    if redact is not None and r.chunks is not None:
        fields["output"] = [redact(text) for text in output_text(r.chunks)]
    return fields


class Ledger:
    """Counts every request; writes the store and the audit trail when they are on."""

    def __init__(self, metrics: UsageMetrics, usage: UsageSpec, audit: AuditSpec, *, writer: str,
                 home: Path, accelerator: str = "cpu", accelerators: float | None = None,
                 after: "Ledger | None" = None) -> None:
        """``accelerators``: what this process holds (an engine replica), for the cost of
        its running time; None (a gateway without an engine): its time is not recorded.
        ``after``: the ledger this one replaces (new settings); it writes nothing before
        that one has written its last records (one audit chain, one writer at a time)."""
        self._after = after._thread if after is not None else None
        self.metrics, self.writer = metrics, writer
        self.usage, self.audit = usage, audit
        self.store_path = (usage.path or home / "run" / "usage.sqlite") if usage.enabled else None
        self.audit_dir = (audit.dir or home / "run" / "audit") if audit.enabled else None
        self.content = audit.enabled and audit.content
        self._redact = Redactor(audit.redact) if self.content else None
        self._accelerator, self._accelerators = accelerator, accelerators
        self._pending: collections.deque[RequestRecord] = collections.deque()
        self._failures: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = None
        if self.store_path is not None or self.audit_dir is not None:
            self._thread = threading.Thread(target=self._run, name="serveout-ledger", daemon=True)
            self._thread.start()

    @property
    def writes(self) -> bool:
        return self._thread is not None

    def record(self, r: RequestRecord) -> None:
        """Count ``r`` and queue it for the store and the audit trail (O(1), any thread)."""
        self.metrics.count(r)
        if self._thread is not None:
            self._pending.append(r)

    def close(self, *, wait: bool = True) -> None:
        """Write what is pending and stop (``wait`` False: the thread finishes on its own)."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(timeout=30)

    # --- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        store: UsageStore | None = None
        audit: AuditWriter | None = None
        last_time = time.monotonic()
        unrecorded_s = 0.0
        to_store: list[RequestRecord] = []  # each output keeps what it has yet to write
        to_audit: list[RequestRecord] = []
        if self._after is not None:
            self._after.join()
        while True:
            stopping = self._stop.wait(self.usage.flush_interval_s)
            new = self._take()
            now = time.monotonic()
            unrecorded_s, last_time = unrecorded_s + now - last_time, now
            if self.store_path is not None:
                to_store = _bounded(to_store + new, "usage")
                if to_store or unrecorded_s >= REPLICA_TIME_EVERY_S or stopping:
                    try:
                        store = store or UsageStore(self.store_path)
                        ran = ReplicaTime(minute_of(time.time()), self.writer, self._accelerator,
                                          self._accelerators, unrecorded_s)
                        store.add(rollup(to_store), [ran] if self._accelerators is not None else [])
                        to_store, unrecorded_s = [], 0.0
                    except Exception as exc:  # sqlite3.Error, OSError: loud, then retried
                        store = self._failed("usage", self.store_path, exc, store)
            if self.audit_dir is not None:
                to_audit = _bounded(to_audit + new, "audit")
                if to_audit:
                    try:
                        audit = audit or AuditWriter(self.audit_dir, self.writer,
                                                     max_file_bytes=self.audit.max_file_bytes)
                        audit.write(audit_fields(r, self._redact) for r in to_audit)
                        to_audit = []
                    except Exception as exc:
                        audit = self._failed("audit", self.audit_dir, exc, audit)
            self.metrics.pending.set(max(len(to_store), len(to_audit)) + len(self._pending))
            if stopping:
                break
        for handle in (store, audit):
            if handle is not None:
                handle.close()

    def _take(self) -> list[RequestRecord]:
        batch = []
        pending = self._pending
        while pending:
            batch.append(pending.popleft())
        return batch

    def _failed(self, what: str, where: Path, exc: Exception, handle):
        self.metrics.write_failures.labels(what).inc()
        self._failures[what] = failures = self._failures.get(what, 0) + 1
        if failures == 1 or failures % FAILURE_LOG_EVERY == 0:  # loud, not a line every interval
            log.error(json.dumps({"event": f"{what}_write_failed", "path": str(where), "failures": failures,
                                  "error": f"{type(exc).__name__}: {exc}"}))
        if handle is not None:
            try:
                handle.close()
            except Exception:  # noqa: BLE001 - it is being dropped anyway
                pass
        return None


def _bounded(records: list[RequestRecord], what: str) -> list[RequestRecord]:
    if len(records) <= MAX_PENDING:
        return records
    log.error(json.dumps({"event": "usage_records_dropped", "store": what, "records": len(records) - MAX_PENDING}))
    return records[-MAX_PENDING:]
