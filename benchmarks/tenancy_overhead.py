"""What per-tenant accounting costs a request: the event loop's share and the writer's.

In one process, alternating rounds, best round of each:
  - loop, counters only: one :class:`RequestRecord` and the usage counters
    (``usage.enabled: false``, audit off);
  - loop, store + audit on: the same plus the queueing, with the ledger's thread
    writing the SQLite store and the audit trail meanwhile (so its share of the GIL is
    in the figure);
  - headers: OpenAI's rate-limit headers of a key with rpm and tpm;
  - writer, per record: the thread's work for a batch (rollup + one SQLite transaction;
    audit lines, hashes, one write and fsync), timed directly on batches of
    ``--batch`` records.

    .venv/bin/python -m benchmarks.tenancy_overhead [--requests 20000] [--rounds 5] [--batch 200]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from serving.admission.api_keys import Caller
from serving.admission.key_limits import KeyRateLimiter
from serving.admission.rate_headers import rate_limit_headers
from serving.config.gateway import KeyLimits
from serving.config.tenancy import AuditSpec, UsageSpec
from serving.tenancy.audit_files import AuditWriter
from serving.tenancy.ledger import Ledger, audit_fields
from serving.tenancy.metering import UsageMetrics
from serving.tenancy.records import RequestRecord
from serving.tenancy.rollup import rollup
from serving.tenancy.usage_store import UsageStore

RESULTS = Path("results") / "tenancy_overhead.json"


def record(i: int) -> RequestRecord:
    return RequestRecord(at=time.time(), key=f"tenant-{i % 4}", model="m", endpoint="chat", status=200,
                         prompt_tokens=512, cached_tokens=128, output_tokens=128, engine_s=1.2, latency_s=1.3,
                         request_id=f"req-{i}")


def loop_us(folder: Path, requests: int, *, writes: bool, tag: str) -> float:
    usage = UsageSpec(path=folder / "usage.sqlite", flush_interval_s=0.2) if writes else UsageSpec(enabled=False)
    audit = AuditSpec(enabled=True, dir=folder / "audit") if writes else AuditSpec()
    ledger = Ledger(UsageMetrics(CollectorRegistry()), usage, audit, writer=tag, home=folder, accelerators=1)
    started = time.perf_counter()
    for i in range(requests):
        ledger.record(record(i))
        if i % 50 == 0:
            time.sleep(0)  # let the writer thread in, as an event loop would between requests
    elapsed = time.perf_counter() - started
    ledger.close()
    return elapsed / requests * 1e6


def headers_us(requests: int) -> float:
    limiter, caller = KeyRateLimiter(), Caller("alice", KeyLimits(rpm=600, tpm=100_000))
    started = time.perf_counter()
    for _ in range(requests):
        rate_limit_headers(limiter, caller)
    return (time.perf_counter() - started) / requests * 1e6


def writer_us(folder: Path, batch: int, tag: str) -> tuple[float, float]:
    records = [record(i) for i in range(batch)]
    store = UsageStore(folder / "writer.sqlite")
    started = time.perf_counter()
    store.add(rollup(records))
    store_s = time.perf_counter() - started
    audit = AuditWriter(folder / "writer-audit", tag, max_file_bytes=64 << 20)
    started = time.perf_counter()
    audit.write(audit_fields(r, None) for r in records)
    audit_s = time.perf_counter() - started
    store.close(), audit.close()
    return store_s / batch * 1e6, audit_s / batch * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            folder = Path(tmp) / f"round{n}"
            figures = {
                "loop_counters_only_us": loop_us(folder, args.requests, writes=False, tag=f"c{n}"),
                "loop_store_and_audit_us": loop_us(folder, args.requests, writes=True, tag=f"w{n}"),
                "rate_limit_headers_us": headers_us(args.requests),
            }
            figures["writer_store_us_per_record"], figures["writer_audit_us_per_record"] = writer_us(
                folder, args.batch, f"b{n}")
            for name, value in figures.items():
                best[name] = min(best.get(name, value), value)
    for name, value in best.items():
        print(f"{name:32s} {value:8.2f}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"best_of_rounds": args.rounds, "requests": args.requests,
                                   "batch": args.batch, **best}, indent=2))


if __name__ == "__main__":
    main()
