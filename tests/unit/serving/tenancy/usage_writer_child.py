"""A child process for the crash tests: writes usage to a real SQLite file until killed.

``ledger PATH INTERVAL``: records one request every 5 ms through a :class:`Ledger`
(flushing every INTERVAL s) and prints the count recorded after each (flushed stdout).
``batches PATH N``: adds batches of N one-request rows in one transaction each, forever.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from serving.config.tenancy import AuditSpec, UsageSpec
from serving.tenancy.ledger import Ledger
from serving.tenancy.metering import UsageMetrics
from serving.tenancy.records import RequestRecord
from serving.tenancy.rollup import UsageRow, Usage
from serving.tenancy.usage_store import UsageStore


def main() -> None:
    mode, path, arg = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    if mode == "ledger":
        ledger = Ledger(UsageMetrics(CollectorRegistry()), UsageSpec(path=path, flush_interval_s=arg),
                        AuditSpec(enabled=True, dir=path.parent / "audit"), writer="child", home=path.parent)
        n = 0
        while True:
            ledger.record(RequestRecord(at=time.time(), key="k", model="m", endpoint="chat", status=200,
                                        prompt_tokens=3, output_tokens=2, engine_s=0.01, request_id=f"r{n}"))
            n += 1
            print(n, flush=True)
            time.sleep(0.005)
    store = UsageStore(path)
    print("open", flush=True)
    while True:
        store.add([UsageRow(60 * i, f"key{i % 7}", "m", Usage(requests=1, prompt_tokens=1)) for i in range(int(arg))])


if __name__ == "__main__":
    main()
